#!/usr/bin/env bash
# One-shot, idempotent set-up of clusterbench's Python environment.
#
#   tools/setup.sh            create/refresh .venv with torch, horovod, snakemake & co.
#
# Horovod 0.28.1 (newest release) does not build against torch >= 2.1 as shipped: both of its
# CMakeLists.txt pin CMAKE_CXX_STANDARD 14 while torch's headers need C++17. We patch that in a
# copy of the sdist and build a wheel once; the wheel is cached outside the venv, keyed by the
# horovod, torch and python versions (and NCCL or not), so the next set-up takes seconds.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}
CACHE=${CLUSTERBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clusterbench}
WHEELS="$CACHE/wheels"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtual environment $VENV ($($PYTHON --version))"
    "$PYTHON" -m venv "$VENV"
else
    say "virtual environment $VENV exists"
fi
py="$VENV/bin/python"
pip() { "$py" -m pip --disable-pip-version-check "$@"; }

if ! "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    say "installing torch==$TORCH_VERSION"
    pip install -q "torch==$TORCH_VERSION"
else
    say "torch $TORCH_VERSION already installed"
fi

# Requirements and the editable package: skipped when nothing changed since the last set-up.
stamp="$VENV/.clusterbench-requirements"
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing pinned requirements (snakemake, executor plugins, pandas, seaborn, ...)"
    pip install -q -r requirements.txt
    say "installing clusterbench (editable, source root workflow/)"
    pip install -q --no-deps --no-build-isolation -e .
    echo "$want" > "$stamp"
else
    say "requirements and clusterbench already installed"
fi

# ---------------------------------------------------------------------------------------------
# horovod
pyver=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
torch_cuda=$("$py" -c 'import torch; print(torch.version.cuda or "")')
gpu_ops=""
if command -v nvcc >/dev/null 2>&1; then
    if [ -n "$torch_cuda" ]; then
        gpu_ops=NCCL
        say "nvcc found and torch is built for CUDA $torch_cuda: horovod gets NCCL"
    else
        say "nvcc found but torch is a CPU build: building horovod without NCCL"
    fi
fi
key="horovod-$HOROVOD_VERSION-torch$TORCH_VERSION-$pyver${gpu_ops:+-$(echo "$gpu_ops" | tr A-Z a-z)}"
wheel_dir="$WHEELS/$key"

if "$py" -c "import horovod, sys; sys.exit(horovod.__version__ != '$HOROVOD_VERSION')" 2>/dev/null \
    && "$VENV/bin/horovodrun" --check-build 2>/dev/null | grep -q '\[X\] PyTorch'; then
    say "horovod $HOROVOD_VERSION with PyTorch already installed"
else
    if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
        say "building horovod $HOROVOD_VERSION from its sdist (C++17 patch, Gloo${gpu_ops:+, $gpu_ops}); takes ~6 min on 2 cores"
        build=$(mktemp -d)
        trap 'rm -rf "$build"' EXIT
        pip download -q --no-deps --no-binary :all: -d "$build" "horovod==$HOROVOD_VERSION"
        tar -xzf "$build"/horovod-"$HOROVOD_VERSION".tar.gz -C "$build"
        src="$build/horovod-$HOROVOD_VERSION"
        for f in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
            grep -q 'CMAKE_CXX_STANDARD 14' "$f" || { echo "unexpected $f: no C++14 pin to patch" >&2; exit 1; }
            sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "$f"
        done
        pip install -q "cloudpickle" "psutil" "pyyaml" "packaging" "wheel" "setuptools<81"
        env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
            HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
            ${gpu_ops:+HOROVOD_GPU_OPERATIONS=$gpu_ops} \
            MAKEFLAGS="-j$(nproc)" \
            "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$build/dist" "$src"
        mkdir -p "$wheel_dir"
        whl=$(basename "$build"/dist/horovod-*.whl)
        cp "$build/dist/$whl" "$wheel_dir/.$whl.part"     # publish atomically
        mv "$wheel_dir/.$whl.part" "$wheel_dir/$whl"
        say "cached $(ls "$wheel_dir")"
    else
        say "using cached wheel $(ls "$wheel_dir"/horovod-*.whl)"
    fi
    pip install -q --no-deps --force-reinstall "$wheel_dir"/horovod-*.whl
fi

check=$("$VENV/bin/horovodrun" --check-build)
echo "$check" | sed 's/^/    /'
for fw in PyTorch Gloo; do
    echo "$check" | grep -q "\[X\] $fw" || { echo "horovod was built without $fw" >&2; exit 1; }
done
# ---------------------------------------------------------------------------------------------
# named profiles: `snakemake --profile slurm` looks in ~/.config/snakemake/<name>
profile_home="${XDG_CONFIG_HOME:-$HOME/.config}/snakemake"
mkdir -p "$profile_home"
for name in local slurm sge; do
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

say "done: activate with 'source $VENV/bin/activate'"
