#!/usr/bin/env bash
# Install horovod into the environment of $PYTHON (default: python3 on PATH), with PyTorch + Gloo,
# and NCCL when this machine has an NVIDIA GPU, nvcc, and torch is a CUDA build. (torch is
# PyPI's CUDA build everywhere, the CPU-only machines included: torchvision needs it. Without a
# GPU horovod is built for the CPU: Gloo only.)
#
# Horovod 0.28.1 (newest release) does not build against torch >= 2.1 as shipped: both of its
# CMakeLists.txt pin CMAKE_CXX_STANDARD 14 while torch's headers need C++17. And its process
# sets' Gloo contexts (the global process set's included: every collective runs on one) ignore
# HOROVOD_GLOO_IFACE: GlooContext::InitializeForProcessSet makes its device from the new
# context's own, empty, interface name, so Gloo binds to whatever the host's name resolves to
# (127.0.1.1 on a Debian host whose /etc/hosts says so): ranks on two machines then cannot reach
# each other, or talk over another network than the one chosen. We patch both in a copy of the
# sdist and build a wheel once; the wheel is cached outside any environment, keyed by the
# horovod, torch and python versions, the patches (PATCH_LEVEL) and NCCL or not, so the next
# set-up takes seconds.
# Used by tools/setup.sh (the venv) and workflow/envs/clusterbench.post-deploy.sh (conda).
set -euo pipefail

py=${PYTHON:-python3}
HOROVOD_VERSION=${HOROVOD_VERSION:-$("$py" "$(dirname "${BASH_SOURCE[0]}")/deps.py" pin horovod)}
# 1: C++17 (and the CPU-only build's CUDA test); 2: + the process sets' Gloo interface
PATCH_LEVEL=2
CACHE=${CLUSTERBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clusterbench}
WHEELS="$CACHE/wheels"
bindir=$(dirname "$("$py" -c 'import sys; print(sys.executable)')")

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
pip() { "$py" -m pip --disable-pip-version-check "$@"; }

TORCH_VERSION=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')
pyver=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
torch_cuda=$("$py" -c 'import torch; print(torch.version.cuda or "")')
gpu_ops=""
has_gpu=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    has_gpu=1
fi
if [ -n "$has_gpu" ] && command -v nvcc >/dev/null 2>&1; then
    if [ -n "$torch_cuda" ]; then
        gpu_ops=NCCL
        say "a GPU, nvcc, and torch built for CUDA $torch_cuda: horovod gets NCCL"
        # Horovod's CUDA kernels, by default, for every architecture this nvcc knows (from
        # sm_75 to sm_121 with CUDA 13: many minutes of nvcc): for this machine's GPUs alone
        # unless HOROVOD_BUILD_CUDA_CC_LIST names others ("80,90": A100s and H100s).
        if [ -z "${HOROVOD_BUILD_CUDA_CC_LIST:-}" ]; then
            HOROVOD_BUILD_CUDA_CC_LIST=$("$py" -c 'import torch
print(",".join(sorted({"%d%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})))')
        fi
        export HOROVOD_BUILD_CUDA_CC_LIST
        say "CUDA kernels for compute capability $HOROVOD_BUILD_CUDA_CC_LIST"
    else
        say "a GPU and nvcc, but torch is a CPU build: building horovod without NCCL"
    fi
fi
# the build of torch too (2.13.0+cpu and 2.13.0+cu130 are other libraries to link against)
torch_build=$("$py" -c 'import torch; print(torch.__version__.replace("+", "-"))')
key="horovod-$HOROVOD_VERSION-p$PATCH_LEVEL-torch$torch_build-$pyver${gpu_ops:+-$(echo "$gpu_ops" | tr A-Z a-z)-sm${HOROVOD_BUILD_CUDA_CC_LIST//,/-}}"
wheel_dir="$WHEELS/$key"

# installed, built against this very torch (horovod/metadata.json records the torch it was
# built with: a horovod built for 2.13.0+cpu must not stay beside 2.13.0+cu130) and with these
# patches (clusterbench-patch, written beside it when the wheel is installed)
if "$py" - "$HOROVOD_VERSION" "$PATCH_LEVEL" <<'PY' 2>/dev/null
import json, os, sys
import horovod, horovod.torch, torch
here = os.path.dirname(horovod.__file__)
with open(os.path.join(here, "metadata.json")) as fh:
    built_for = json.load(fh).get("pytorch")
with open(os.path.join(here, "clusterbench-patch")) as fh:
    patched = fh.read().strip()
sys.exit(horovod.__version__ != sys.argv[1] or built_for != torch.__version__ or patched != sys.argv[2])
PY
then
    say "horovod $HOROVOD_VERSION with PyTorch already installed"
else
    if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
        say "building horovod $HOROVOD_VERSION from its sdist (C++17 patch, Gloo${gpu_ops:+, $gpu_ops}); takes ~6 min on 2 cores"
        build=$(mktemp -d)
        trap 'rm -rf "$build"' EXIT
        if [ -n "${HOROVOD_SDIST:-}" ]; then
            # a build node without a package index: the sdist fetched elsewhere
            # (pip download --no-deps --no-binary :all: horovod==$HOROVOD_VERSION)
            [ "$(basename "$HOROVOD_SDIST")" = "horovod-$HOROVOD_VERSION.tar.gz" ] \
                || { echo "HOROVOD_SDIST=$HOROVOD_SDIST: expected horovod-$HOROVOD_VERSION.tar.gz" >&2; exit 1; }
            cp "$HOROVOD_SDIST" "$build/"
        else
            pip download -q --no-deps --no-binary :all: -d "$build" "horovod==$HOROVOD_VERSION"
        fi
        tar -xzf "$build"/horovod-"$HOROVOD_VERSION".tar.gz -C "$build"
        src="$build/horovod-$HOROVOD_VERSION"
        for f in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
            grep -q 'CMAKE_CXX_STANDARD 14' "$f" || { echo "unexpected $f: no C++14 pin to patch" >&2; exit 1; }
            sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "$f"
        done
        f="$src/horovod/common/gloo/gloo_context.cc"
        sed -i '/^void GlooContext::InitializeForProcessSet/,/device_attr.iface = gloo_iface_;/ s/^  device_attr.iface = gloo_iface_;/  gloo_iface_ = global_context.gloo_iface_;\n  device_attr.iface = gloo_iface_;/' "$f"
        [ "$(grep -c 'gloo_iface_ = global_context.gloo_iface_;' "$f")" = 1 ] \
            || { echo "unexpected $f: no process-set Gloo device to patch" >&2; exit 1; }
        if [ -z "$gpu_ops" ]; then
            # Without a GPU: PyTorch's CUDA build would make horovod compile its CUDA ops (it asks
            # torch.version.cuda and finds nvcc); a CPU build of horovod is what is wanted.
            f="$src/cmake/Modules/FindPytorch.cmake"
            grep -q '(torch.version.cuda is not None) and (CUDA_HOME is not None)' "$f" \
                || { echo "unexpected $f: no CUDA test to patch" >&2; exit 1; }
            sed -i 's/(torch.version.cuda is not None) and (CUDA_HOME is not None)/False/' "$f"
        fi
        pip install -q "cloudpickle" "psutil" "pyyaml" "packaging" "wheel" "setuptools<81"
        nccl_env=()
        if [ -n "$gpu_ops" ]; then
            # NCCL from the nvidia-nccl wheel that CUDA torch depends on (include/ + lib/);
            # it ships libnccl.so.2 only, so the linker gets a libnccl.so beside it.
            nccl_home=$("$py" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
            if [ -n "$nccl_home" ] && [ -f "$nccl_home/include/nccl.h" ]; then
                mkdir -p "$build/nccl-lib"
                ln -sf "$nccl_home"/lib/libnccl.so.2 "$build/nccl-lib/libnccl.so"
                nccl_env=(HOROVOD_NCCL_INCLUDE="$nccl_home/include" HOROVOD_NCCL_LIB="$build/nccl-lib"
                          HOROVOD_NCCL_LINK=SHARED)
                export LD_LIBRARY_PATH="$nccl_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                say "NCCL from $nccl_home"
            fi
            nccl_env+=(HOROVOD_CUDA_HOME="$(dirname "$(dirname "$(command -v nvcc)")")")
        fi
        # CMAKE_POLICY_VERSION_MINIMUM: CMake 4 refuses the cmake_minimum_required(< 3.5) of
        # horovod's bundled third_party (gloo's) unless told which policies to assume
        # CXXFLAGS: GCC 13's headers no longer pull in <string>, <stdexcept> and <cstdint>
        # where horovod's (group_table.h, common.h) rely on it
        env "${nccl_env[@]}" CMAKE_POLICY_VERSION_MINIMUM=3.5 \
            CXXFLAGS="${CXXFLAGS:-} -include string -include stdexcept -include cstdint" \
            HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
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
    pip install -q "cloudpickle" "psutil" "pyyaml" "packaging"   # horovod's own dependencies
    pip install -q --no-deps --force-reinstall "$wheel_dir"/horovod-*.whl
    echo "$PATCH_LEVEL" >"$("$py" -c 'import horovod, os; print(os.path.dirname(horovod.__file__))')/clusterbench-patch"
fi

check=$("$bindir/horovodrun" --check-build)
echo "$check" | sed 's/^/    /'
for fw in PyTorch Gloo; do
    echo "$check" | grep -q "\[X\] $fw" || { echo "horovod was built without $fw" >&2; exit 1; }
done
if [ -n "$gpu_ops" ]; then
    echo "$check" | grep -q "\[X\] NCCL" || { echo "horovod was built without NCCL" >&2; exit 1; }
fi
