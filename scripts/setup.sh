#!/usr/bin/env bash
# One idempotent set-up: Debian packages, .venv with the pinned torch (a CUDA build where an
# NVIDIA driver lists a GPU, the CPU build elsewhere), the project with its dev extras, and
# Horovod (PyTorch + MPI + Gloo) built from a patched sdist.
# A second run finds everything in place and takes seconds. Used by `make setup`, which
# `make train` and `make test` call first, by .ci/run and by the Docker images.
#   scripts/setup.sh --torch-build   prints the torch build it would install (cpu or cuda)
#   scripts/setup.sh --system        Debian packages only (the Docker image's first layer)
#   scripts/setup.sh --no-system     everything but the Debian packages
#   scripts/setup.sh --test-engines  the engines the test suite runs for real: Docker, Slurm
#   scripts/setup.sh --horovod-wheel prints the path of this machine's Horovod wheel in the
#                                    cache, building it first where it is missing
# TORCH_BUILD=cpu|cuda overrides the choice; TORCH_CUDA_INDEX is where CUDA builds come from.
# IMPALA_EXTRAS are the project's extras to install (default dev,wandb).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-.venv}
TORCH_VERSION=2.13.0          # a local CPU wheel on these machines; anything else pulls CUDA
TORCH_CUDA_INDEX=${TORCH_CUDA_INDEX:-https://download.pytorch.org/whl/cu128}
HOROVOD_VERSION=0.28.1        # newest release (June 2023); see README "Why Horovod is patched"
CACHE=${IMPALA_CACHE:-$HOME/.cache/impala-mlma}
EXTRAS=${IMPALA_EXTRAS:-dev,wandb}
APT_PACKAGES=(openmpi-bin tmux openssh-client openssh-server iproute2 openssl)
# The real engines of tests/e2e/test_docker.py and test_slurm.py (a base image is made
# with debootstrap from Debian's mirror: no image registry is needed).
TEST_ENGINE_PACKAGES=(docker.io debootstrap slurm-wlm munge)
BUILD_PACKAGES=(libopenmpi-dev g++ make cmake)  # only where Horovod must be compiled

log() { printf '[setup] %s\n' "$*"; }

torch_build() {
  # cuda where an NVIDIA driver lists a GPU (nvidia-smi -L: "GPU 0: ..."), cpu elsewhere.
  if [ -n "${TORCH_BUILD:-}" ]; then
    echo "$TORCH_BUILD"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo cuda
  else
    echo cpu
  fi
}

install_apt_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

install_torch() {
  local build=$1
  local check="import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION'"
  if [ "$build" = cuda ]; then
    check="$check or torch.version.cuda is None)"
  else
    check="$check)"
  fi
  "$VENV/bin/python" -c "$check" 2>/dev/null && return 0
  if [ "$build" = cuda ]; then
    log "installing torch==$TORCH_VERSION (CUDA build, from $TORCH_CUDA_INDEX): nvidia-smi lists a GPU"
    "$VENV/bin/pip" install -q --force-reinstall --extra-index-url "$TORCH_CUDA_INDEX" \
      "torch==$TORCH_VERSION"
    "$VENV/bin/python" -c "$check" || {
      echo "[setup] torch==$TORCH_VERSION from $TORCH_CUDA_INDEX is not a CUDA build;" \
           "set TORCH_CUDA_INDEX to an index that has one, or TORCH_BUILD=cpu" >&2; exit 1; }
  else
    log "installing torch==$TORCH_VERSION (CPU)"
    "$VENV/bin/pip" install -q "torch==$TORCH_VERSION"
  fi
}

make_venv() {
  [ -x "$VENV/bin/python" ] || { log "creating $VENV with $PYTHON"; "$PYTHON" -m venv "$VENV"; }
  install_torch "$(torch_build)"
  # Re-install the project only when its metadata changed.
  local stamp="$VENV/.impala-installed" want
  want="$(sha256sum pyproject.toml | cut -d' ' -f1) $EXTRAS"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing the project and its extras ($EXTRAS)"
    "$VENV/bin/pip" install -q -e ".[$EXTRAS]" "torch==$TORCH_VERSION"
    echo "$want" > "$stamp"
  fi
}

build_horovod_wheel() {
  # Horovod 0.28.1's CMake files force C++14, but torch 2.x headers need C++17; upstream
  # fixed it after the last release. Fetch the sdist, switch both lines to 17, build a wheel.
  local work
  work=$(mktemp -d)
  install_apt_packages "${BUILD_PACKAGES[@]}"
  log "building Horovod $HOROVOD_VERSION (PyTorch, MPI, Gloo); about 2 minutes on 2 cores"
  "$VENV/bin/pip" download -q --no-deps --no-binary :all: -d "$work" "horovod==$HOROVOD_VERSION"
  tar -xzf "$work"/horovod-"$HOROVOD_VERSION".tar.gz -C "$work"
  local src="$work/horovod-$HOROVOD_VERSION"
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
    "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
  grep -q "CMAKE_CXX_STANDARD 17" "$src/horovod/torch/CMakeLists.txt" \
    || { echo "[setup] could not patch Horovod's C++ standard" >&2; exit 1; }
  "$VENV/bin/pip" install -q setuptools wheel cloudpickle psutil pyyaml packaging
  mkdir -p "$CACHE/wheels"
  # The system cmake 3.25 accepts gloo's old cmake_minimum_required; the policy variable
  # covers a newer cmake found first on PATH.
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI \
  CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS="-j$(nproc)" \
    "$VENV/bin/pip" wheel -q --no-build-isolation --no-deps -w "$CACHE/wheels" "$src"
  rm -rf "$work"
}

cached_horovod_wheel() {
  ls "$CACHE"/wheels/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n1 || true
}

install_horovod() {
  if "$VENV/bin/python" -c "import horovod.torch" 2>/dev/null; then return 0; fi
  local wheel
  wheel=$(cached_horovod_wheel)
  if [ -n "$wheel" ]; then
    log "installing $wheel"
    "$VENV/bin/pip" install -q "$wheel"
    if ! "$VENV/bin/python" -c "import horovod.torch" 2>/dev/null; then
      # A wheel built on another machine (a newer C library, another MPI) does not load
      # here: build one for this machine instead.
      log "the cached $(basename "$wheel") does not load here; building Horovod for this machine"
      mv "$wheel" "$wheel.unusable"
      wheel=""
    fi
  fi
  if [ -z "$wheel" ]; then
    build_horovod_wheel
    wheel=$(cached_horovod_wheel)
    log "installing $wheel"
    "$VENV/bin/pip" install -q --force-reinstall "$wheel"
  fi
  "$VENV/bin/horovodrun" --check-build
}

horovod_wheel_path() {
  # `make docker` copies this wheel into the image's build context, whatever cache `make
  # setup` used before (or none, after the cache was cleaned).
  local wheel
  wheel=$(cached_horovod_wheel)
  if [ -z "$wheel" ]; then
    build_horovod_wheel >&2
    wheel=$(cached_horovod_wheel)
  fi
  if [ -z "$wheel" ]; then
    echo "[setup] no Horovod $HOROVOD_VERSION wheel in $CACHE/wheels, and building one" \
         "failed (see above)" >&2
    exit 1
  fi
  echo "$wheel"
}

if [ "${1:-}" = "--torch-build" ]; then
  torch_build
  exit 0
fi
case "${1:-}" in
  --system) install_apt_packages "${APT_PACKAGES[@]}"; exit 0 ;;
  --test-engines) install_apt_packages "${TEST_ENGINE_PACKAGES[@]}"; exit 0 ;;
  --horovod-wheel) make_venv >&2; log() { printf '[setup] %s\n' "$*" >&2; }
                   horovod_wheel_path; exit 0 ;;
  --no-system) ;;
  "") install_apt_packages "${APT_PACKAGES[@]}" ;;
  *) echo "[setup] unknown option: $1 (see the top of $0)" >&2; exit 2 ;;
esac
make_venv
install_horovod
log "ready: $VENV ($("$VENV/bin/python" -c 'import torch, horovod; print("torch", torch.__version__, "horovod", horovod.__version__)'))"
