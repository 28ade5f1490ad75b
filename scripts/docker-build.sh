#!/usr/bin/env bash
# Build the project's image (`make docker`): one image for learners and actors alike, since
# both run the same code and the CSV gives each container its role.
#   BASE   the base image (default python:3.11-slim-bookworm, the official Python image);
#          any Debian bookworm image whose python3 is 3.11 with venv works
#   IMAGE  the image's name (default impala-cpu)
#   DOCKER_TORCH cpu (default) or cuda: the CUDA build of torch, from its index, for GPU
#          learners (docker/README.md, "GPU learners")
#   DOCKER_PYTHON the base image's Python 3.11 (default python3)
# The image gets no network access to PyPI: every wheel it installs is gathered here first,
# into build/docker/cache/wheels (torch, the dependencies at the versions of this machine's
# tested .venv, and the Horovod wheel `make setup` built), so the build takes a minute or
# two and installs exactly what the test suite ran against. Debian packages come from the
# base image's own apt sources.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${BASE:-python:3.11-slim-bookworm}
IMAGE=${IMAGE:-impala-cpu}
VENV=${VENV:-.venv}
WHEELS=build/docker/cache/wheels
TORCH_VERSION=$(sed -n 's/^TORCH_VERSION=\([0-9.]*\).*/\1/p' scripts/setup.sh)
HOROVOD_VERSION=$(sed -n 's/^HOROVOD_VERSION=\([0-9.]*\).*/\1/p' scripts/setup.sh)

log() { printf '[docker] %s\n' "$*"; }

command -v docker >/dev/null || { echo "[docker] docker is not installed" >&2; exit 1; }
docker info >/dev/null 2>&1 || {
  echo "[docker] cannot reach a Docker engine (is dockerd running? docker info says:" \
       "$(docker info 2>&1 | tail -n1))" >&2; exit 1; }

bash scripts/setup.sh

gather_wheels() {
  # The versions of the tested .venv pin what the image gets; Horovod comes as the wheel
  # built by setup.sh, so it is left out of the pins.
  mkdir -p "$WHEELS"
  local pins=build/docker/pins.txt
  "$VENV/bin/pip" freeze --exclude-editable | grep -v -i '^horovod' > "$pins"
  local horovod
  horovod=$(bash scripts/setup.sh --horovod-wheel) || {
    echo "[docker] no Horovod wheel to put in the image (scripts/setup.sh --horovod-wheel" \
         "failed above)" >&2; exit 1; }
  cp -u "$horovod" "$WHEELS/"
  log "gathering wheels into $WHEELS (the pins of $VENV)"
  "$VENV/bin/pip" download -q -d "$WHEELS" --only-binary=:all: -c "$pins" \
    "torch==$TORCH_VERSION" ".[wandb]" "$horovod" setuptools wheel
  # Where the Horovod wheel cannot load in the image (a base with an older C library than
  # this machine's), setup.sh rebuilds it there from this source.
  "$VENV/bin/pip" download -q -d "$WHEELS" --no-deps --no-binary :all: \
    "horovod==$HOROVOD_VERSION"
  rm -f "$WHEELS"/impala_mlma-*
}

gather_wheels
log "building $IMAGE from $BASE"
docker build --build-arg "BASE=$BASE" --build-arg "TORCH_BUILD=${DOCKER_TORCH:-cpu}" \
  --build-arg "PYTHON=${DOCKER_PYTHON:-python3}" -f docker/Dockerfile -t "$IMAGE" .
log "built $IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec) "\
"(docker run --rm $IMAGE python -c 'import impala')"
