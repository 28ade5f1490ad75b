# Two commands on a fresh machine: `make train` and `make test` (both run `make setup` first).
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest

# The default local run: Pong, one learner and local actor processes (see README "Speed").
LEVEL      ?= PongNoFrameskip-v4
AGENT      ?= SimpleConvNetAgent
NUM_ACTORS ?= 2
NUM_ENVS   ?= 8
FRAMES     ?= 200000000
TRAIN_FLAGS ?=

.PHONY: setup train test test-fast lint bench clean-runs

setup:
	bash scripts/setup.sh

train: setup
	$(PY) experiment.py --job_name=local --level_name=$(LEVEL) --agent_name=$(AGENT) \
	  --num_actors=$(NUM_ACTORS) --num_envs=$(NUM_ENVS) \
	  --total_environment_frames=$(FRAMES) $(TRAIN_FLAGS)

# Everything: unit, integration and end-to-end (learning, mpirun, tmux, sshd in netns).
test: setup
	$(VENV)/bin/ruff check .
	$(PYTEST) -q -ra --timeout=900

# Quick iteration: everything but the runs marked slow.
test-fast: setup
	$(PYTEST) -q -ra -m "not slow" --timeout=300

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) bench/env.py && $(PY) bench/learner.py && $(PY) bench/inference.py
