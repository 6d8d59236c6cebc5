#!/usr/bin/env bash
# One-shot, idempotent set-up of clusterbench's Python environment.
#
#   tools/setup.sh            create/refresh .venv with torch, snakemake & co., and horovod
#                             where the config has a Horovod run
#
#   HOROVOD=1 / HOROVOD=0     build Horovod / skip it, whatever the config says
#   CONFIG="a.yaml b.yaml"    the config files whose runs decide (default config/config.yaml)
#
# Horovod is built by tools/build-horovod.sh (patched sdist, wheel cached across set-ups).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
# Versions come from their one declaration, pyproject.toml's dependencies (tools/deps.py).
TORCH_VERSION=$("$PYTHON" tools/deps.py pin torch)
HOROVOD_VERSION=$("$PYTHON" tools/deps.py pin horovod)
HOROVOD=${HOROVOD:-}
CONFIG=${CONFIG:-config/config.yaml}
CACHE=${CLUSTERBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clusterbench}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtual environment $VENV ($($PYTHON --version))"
    "$PYTHON" -m venv "$VENV"
else
    say "virtual environment $VENV exists"
fi
py="$VENV/bin/python"
pip() { "$py" -m pip --disable-pip-version-check "$@"; }

# torch and torchvision: PyPI's builds, a pair (torchvision's C++ operators are built against
# that very torch). PyPI's Linux x86_64 torch is a CUDA build, which also trains on the CPU; a
# CPU-only torch from a local wheel house or a pip configuration cannot load PyPI's torchvision
# ("operator torchvision::nms does not exist"), so pip runs --isolated: PyPI's index alone.
TORCHVISION_VERSION=$("$PYTHON" tools/deps.py pin torchvision)
have_pair() {
    "$py" - "$TORCH_VERSION" "$TORCHVISION_VERSION" <<'PY' 2>/dev/null
import sys
import torch, torchvision
want_torch, want_vision = sys.argv[1:]
ok = (
    torch.__version__.split("+")[0] == want_torch
    and torchvision.__version__.split("+")[0] == want_vision
)
torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)  # its C++ operators load
sys.exit(not ok)
PY
}
# The pair's CUDA build takes about 6 GB in the venv, after pip has downloaded its wheels (about
# 3 GB) to its temporary folder: refused up front, naming the folders and their free space,
# rather than left half-installed by "No space left on device". --no-cache-dir: pip keeps no
# second copy of the wheels in its cache.
free_gb() { df -P -k "$1" | awk 'NR==2 {print int($4 / 1048576), $6}'; }
check_space() {
    local tmp=${TMPDIR:-/tmp} venv_gb venv_fs tmp_gb tmp_fs left
    read -r venv_gb venv_fs < <(free_gb "$VENV")
    read -r tmp_gb tmp_fs < <(free_gb "$tmp")
    left=$tmp_gb
    [ "$venv_fs" = "$tmp_fs" ] && left=$((tmp_gb - 6))   # one filesystem holds both
    [ "$venv_gb" -ge 6 ] && [ "$left" -ge 3 ] && return 0
    echo "set-up: torch $TORCH_VERSION + torchvision $TORCHVISION_VERSION need about 6 GB free" \
         "for the venv ($VENV, on $venv_fs: $venv_gb GB free) and 3 GB more for pip's downloads" \
         "(TMPDIR=$tmp, on $tmp_fs: $tmp_gb GB free)" >&2
    return 1
}
if ! have_pair; then
    check_space || exit 1
    say "installing PyPI's torch==$TORCH_VERSION and torchvision==$TORCHVISION_VERSION (a few GB)"
    pip uninstall -q -y torch torchvision 2>/dev/null || true   # e.g. a +cpu build of the same version
    pip install -q --isolated --no-cache-dir "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
    have_pair || { echo "set-up: torch $TORCH_VERSION + torchvision $TORCHVISION_VERSION do not load" >&2; exit 1; }
else
    say "torch $TORCH_VERSION and torchvision $TORCHVISION_VERSION already installed"
fi
has_gpu=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    has_gpu=1
fi

# The package with every dependency of pyproject.toml but horovod (torch is already
# satisfied), the ranges' releases from tools/constraints.txt: skipped when neither file has
# changed since the last set-up.
stamp="$VENV/.clusterbench-requirements"
want=$(cat pyproject.toml tools/constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing clusterbench (editable) and its dependencies from pyproject.toml"
    pip install -q --no-build-isolation -e ".[dev]" -c tools/constraints.txt
    echo "$want" > "$stamp"
else
    say "dependencies and clusterbench already installed"
fi

# ---------------------------------------------------------------------------------------------
# horovod (patched sdist build, cached wheel): where a run of the config trains with it
want_horovod=$(PYTHON="$py" HOROVOD="$HOROVOD" CONFIG="$CONFIG" tools/horovod-wanted.sh)
if [ -n "$want_horovod" ]; then
    say "horovod: $want_horovod"
    PYTHON="$py" HOROVOD_VERSION="$HOROVOD_VERSION" CLUSTERBENCH_CACHE="$CACHE" tools/build-horovod.sh
elif "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("horovod") is None)'; then
    say "horovod: not needed by $CONFIG (HOROVOD=${HOROVOD:-unset}); the one installed stays"
else
    say "horovod: skipped (no run of $CONFIG uses it, HOROVOD=${HOROVOD:-unset}): DDP runs only;" \
        "make setup HOROVOD=1 adds it"
fi

# ---------------------------------------------------------------------------------------------
# named profiles: `snakemake --profile slurm` looks in ~/.config/snakemake/<name>
profile_home="${XDG_CONFIG_HOME:-$HOME/.config}/snakemake"
mkdir -p "$profile_home"
for name in local slurm sge ssh; do
    target="$here/profiles/$name"
    link="$profile_home/$name"
    if [ -L "$link" ] && [ "$(readlink "$link")" = "$target" ]; then
        continue
    elif [ -e "$link" ] || [ -L "$link" ]; then
        say "WARNING: $link exists and is not ours; '--profile $name' will use it (use --profile profiles/$name)"
    else
        ln -s "$target" "$link"
        say "installed profile '$name' -> $link"
    fi
done

if [ -n "$has_gpu" ]; then
    "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' || {
        echo "set-up: this machine has an NVIDIA GPU but torch.cuda.is_available() is False" \
             "(torch $("$py" -c 'import torch; print(torch.__version__)'), driver: $(nvidia-smi \
             --query-gpu=driver_version --format=csv,noheader | head -1))" >&2
        exit 1
    }
    say "GPU set-up: torch sees $("$py" -c 'import torch; print(torch.cuda.device_count())') CUDA device(s)"
fi
say "done: activate with 'source $VENV/bin/activate'"
