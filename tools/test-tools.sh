#!/usr/bin/env bash
# What make test needs beside the venv: Debian's poppler-utils (the PDF text checks), chromium
# (the HTML report opened in a browser) and the test clusters' packages (Slurm, SGE, the ssh
# hosts' sshd). As root: each installed where missing. As another user: nothing is installed,
# and each tier that would need root says so here, in one line (its tests are then skipped,
# each with the reason: tests/conftest.py).
set -euo pipefail

say() { printf '\033[1m[test]\033[0m %s\n' "$*"; }

if [ "$(id -u)" -eq 0 ]; then
    command -v pdftotext >/dev/null || { say "installing poppler-utils (PDF checks)"; \
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q poppler-utils; }
    command -v chromium >/dev/null || { say "installing chromium (the HTML report in a browser)"; \
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
    python -m tests.clusters install
    exit 0
fi
command -v pdftotext >/dev/null ||
    say "not root: skipping the PDF text checks: poppler-utils is not installed (apt-get needs root)"
command -v chromium >/dev/null ||
    say "not root: skipping the HTML report in a browser: chromium is not installed (apt-get needs root)"
say "not root: skipping the tiers slurm, sge and ssh: the test clusters' daemons are installed" \
    "and started as root"
