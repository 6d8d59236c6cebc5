#!/usr/bin/env bash
# Run by Snakemake inside the freshly created conda environment: build and install horovod
# with the same patched, cached build as tools/setup.sh. CLUSTERBENCH_HOME is set by
# rules/common.smk to the workflow's directory.
set -euo pipefail
PYTHON=python "${CLUSTERBENCH_HOME:?set by rules/common.smk}/tools/build-horovod.sh"
