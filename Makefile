# Two commands on a fresh machine: `make train` and `make test` (both run `make setup` first).
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest

# The default local run: Pong, one learner and local actor processes (see README "Speed").
# NUM_ACTORS, AGENT, NUM_ENVS and FRAMES are passed only when set, so the machine and the
# level's preset fill them in: `make train LEVEL=CartPole-v1` gets MLPAgent and 300K frames,
# and as many actors as the cores take (2 on 2 cores, 14 on 16; the learner says).
LEVEL      ?= PongNoFrameskip-v4
AGENT      ?=
NUM_ACTORS ?=
NUM_ENVS   ?=
FRAMES     ?=
TRAIN_FLAGS ?=

# `make docker`: the project's image (docker/README.md); BASE picks the base image.
BASE  ?= python:3.11-slim-bookworm
IMAGE ?= impala-cpu
DOCKER_TORCH ?= cpu

.PHONY: setup train test test-fast lint bench results docker clean-runs

setup:
	bash scripts/setup.sh

train: setup
	$(PY) experiment.py --job_name=local --level_name=$(LEVEL) \
	  $(if $(NUM_ACTORS),--num_actors=$(NUM_ACTORS)) \
	  $(if $(AGENT),--agent_name=$(AGENT)) $(if $(NUM_ENVS),--num_envs=$(NUM_ENVS)) \
	  $(if $(FRAMES),--total_environment_frames=$(FRAMES)) $(TRAIN_FLAGS)

# Everything: unit, integration and end-to-end (learning, mpirun, tmux, sshd in netns, and
# the real engines: Docker, Slurm, which --test-engines installs).
test: setup
	bash scripts/setup.sh --test-engines
	$(VENV)/bin/ruff check .
	$(PYTEST) -q -ra --timeout=900 --durations=25

# Quick iteration: everything but the runs marked slow.
test-fast: setup
	$(PYTEST) -q -ra -m "not slow" --timeout=300

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) bench/env.py && $(PY) bench/learner.py && $(PY) bench/inference.py

docker:
	BASE=$(BASE) IMAGE=$(IMAGE) DOCKER_TORCH=$(DOCKER_TORCH) bash scripts/docker-build.sh

# Redraw results/figures, results/SUMMARY.md and its per-algorithm pages from results/runs.csv.
results: setup
	$(PY) results/redraw.py
