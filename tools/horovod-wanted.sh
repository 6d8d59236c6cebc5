#!/usr/bin/env bash
# Whether make setup builds Horovod: prints why it does, in one line, or nothing when it does not.
#
#   HOROVOD=1          build it
#   HOROVOD=0          do not
#   HOROVOD unset      build it when a run of the config trains with Horovod (the default
#                      backend): `python -m clusterbench.config --backends $CONFIG`
#   CONFIG             the config files that decide (default config/config.yaml)
#   PYTHON             the venv's python, clusterbench installed in it
#
# Exits 1, saying why, on a config it cannot read or another HOROVOD.
set -euo pipefail
py=${PYTHON:-python3}
config=${CONFIG:-config/config.yaml}
case "${HOROVOD:-}" in
    1) echo "HOROVOD=1" ;;
    0) ;;
    "")
        # shellcheck disable=SC2086 # CONFIG is a list of files
        backends=$("$py" -m clusterbench.config --backends $config) || {
            echo "set-up: cannot tell from $config whether a run needs Horovod (above);" \
                 "fix the config, or say HOROVOD=1 or HOROVOD=0" >&2
            exit 1
        }
        if grep -qx horovod <<< "$backends"; then echo "a run of $config trains with it"; fi
        ;;
    *) echo "set-up: HOROVOD=$HOROVOD: expected 1 (build it) or 0 (skip it)" >&2; exit 1 ;;
esac
