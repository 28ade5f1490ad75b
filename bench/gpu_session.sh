#!/usr/bin/env bash
# Issue 38's GPU figures in a few calls of at most ~9 minutes each, on a GPU machine whose
# `python3` already has a CUDA torch and that may have no network (docs/gpu.md, "Measuring on
# a GPU machine"). Packages torch's image lacks travel as wheels in `.whl/` beside this
# checkout (gymnasium, ale-py, pyzmq, farama-notifications: python 3.12, manylinux x86_64);
# they are installed into /tmp/site first. Everything it prints also goes to $OUT (default
# bench/results/gpu), with each Pong run's logs.csv, episodes and curve.
#
#   bench/gpu_session.sh checks [quick]           # CUDA tests, learner, inference, ingest benches (~6 min; quick ~2)
#   bench/gpu_session.sh pong SEED [ALGO] [MIN] [-- FLAGS]   # Pong, the machine's defaults
#   bench/gpu_session.sh ab MIN ALGO ACTORS "FLAGS A" "FLAGS B"   # seeds 1, 2 of each, at once
#   bench/gpu_session.sh suite MIN "SUITE ARGS" ["SUITE ARGS" ...]  # bench/suite.py, each at once
#   bench/gpu_session.sh unpack DIR [RESULTS]     # here, after `suite`: its results into results/
#
# DEVICE=cpu PYTHON=.venv/bin/python runs the same steps on a CPU machine (a dry run); the
# runs go to $RUNS (default /tmp/gpu_session).
# `pong` stops at +18 or after MIN minutes (default 8): the table it prints has the frames and
# the wall minutes at each row, so the time to +18 reads off it (goal: 2.5 min on 2 seeds).
# A run longer than a session's device minutes (R2D2's 16M frames take ~21): with PIECES=1,
# `pong` also writes its checkpoint, meta.json, logs and episodes to $OUT as pieces of one
# tar under 16 MiB (pong-ALGO-SEED.tgz.00, .01, ...); put them in .ckpt/ (ignored, carried)
# and the same `pong` next session resumes from them, its replay empty.
set -euo pipefail

unpack() {
  # Here, on the machine that keeps the results: lay what `suite` brought back (DIR holds
  # suite.tgz.00, .01, ... and suite-removed.txt) into RESULTS, default results/, and drop
  # the saved states of the runs that finished there (their rows replace them).
  local from=$1 into=${2:-$(dirname "$0")/../results}
  local pieces=("$from"/suite.tgz.*)
  [ -e "${pieces[0]}" ] || { echo "unpack: no suite.tgz.* in $from" >&2; exit 1; }
  cat "${pieces[@]}" | tar xzf - -C "$into"
  local removed
  while IFS= read -r removed; do
    case "$removed" in suite-state/?*) rm -rf "${into:?}/$removed" ;; esac
  done < "$from/suite-removed.txt"
  echo "unpacked ${#pieces[@]} pieces into $into; now: results/redraw.py, then commit"
}
case "${1:-} ${2:-}" in
  checks*|"pong "[0-9]*|"ab "[0-9]*|"suite "[0-9]*) ;;
  "unpack "?*) unpack "${@:2}"; exit ;;
  *) sed -n 2,22p "$0"; exit 2 ;;
esac
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
RESULTS=${OUT:-bench/results/gpu}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1

if ! "$PY" -c "import gymnasium, ale_py, zmq" 2> /dev/null && compgen -G ".whl/*.whl" > /dev/null
then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

machine() {
  nvidia-smi -L 2> /dev/null || echo "nvidia-smi: none"
  echo "cores: $(nproc)"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
}

checks() {
  local quick=${1:-}  # "quick": the short form (~2 min), for a session's 15 device minutes
  machine
  # The CUDA-only checks run here: pinned batches, the snapshot copied from the GPU, the
  # gather on the GPU against the CPU's, the learner's device by default.
  "$PY" -m pytest -q -ra -p no:cacheprovider tests/unit/test_device_path.py \
    tests/integration/test_machine_defaults.py || echo "the CUDA checks failed (exit $?): read them first"
  local algorithms="impala apex r2d2" seconds=10 batches="8 16 32" publish="0 100"
  [ "$quick" = quick ] && algorithms=impala seconds=4 batches="8 32" publish=100
  "$PY" bench/learner.py --algorithms $algorithms --device="$DEVICE" --threads 1 \
    --seconds $seconds --profile
  # The other memory layout than the device's default (channels-last: on for a CPU, off for
  # a GPU until measured there), for the learner and for an actor.
  local other=on; [ "$DEVICE" = cpu ] && other=off
  "$PY" bench/learner.py --algorithms impala --device="$DEVICE" --threads 1 \
    --seconds $seconds --flags=--channels_last=$other
  "$PY" bench/inference.py --device="$DEVICE" --batches $batches --channels_last auto $other
  # float32 throughout (--tf32=off) against torch's TF32 convolutions: what exactness costs.
  [ "$DEVICE" = cpu ] || "$PY" bench/learner.py --algorithms impala --device="$DEVICE" \
    --threads 1 --seconds $seconds --flags=--tf32=off
  [ "$DEVICE" = cpu ] || "$PY" bench/inference.py --device=cpu --batches $batches
  # The learner's socket side with as many senders as make train starts actors, weights
  # served at 100 versions/s: what one I/O thread and the receiver thread can take.
  # The batch holds what a learner on $DEVICE holds: frames on a GPU (--stack_frames=auto).
  local senders=$(( $(nproc) > 4 ? $(nproc) - 2 : 2 )) stacks=host
  [ "$DEVICE" = cpu ] || stacks=device
  "$PY" bench/ingest.py --senders=$senders --seconds=$seconds --auth curve \
    --publish_hz $publish --io_threads 1 2 --stack_frames $stacks
  # Beside a thread of small torch operations (a launch-bound training thread's stand-in):
  # with cores to spare, its probe_speed is what the receiver's share of Python's lock costs.
  "$PY" bench/ingest.py --senders=$senders --seconds=$seconds --auth curve --publish_hz 100 \
    --io_threads 2 --stack_frames $stacks --launch_probe
}

checkpoint_frames() {  # the frames a checkpoint was trained on; 0 if there is none
  "$PY" -c 'import sys, torch
try: print(torch.load(sys.argv[1], weights_only=True)["counters"]["frames"])
except FileNotFoundError: print(0)' "$1"
}

pong() {
  local seed=$1 algorithm=${2:-impala} minutes=${3:-8}
  shift $(( $# < 3 ? $# : 3 ))
  [ "${1:-}" = "--" ] && shift
  machine
  local logdir=${RUNS:-/tmp/gpu_session}
  local run_dir=$logdir/pong-$algorithm-$seed
  local pieces=(.ckpt/"pong-$algorithm-$seed".tgz.*)
  if [ -e "${pieces[0]}" ]; then
    # Unpacked aside first: on a machine still warm from an earlier call, the run folder
    # may hold a newer checkpoint than the pieces, which must not replace it.
    local unpacked=$logdir/.pieces-$algorithm-$seed
    rm -rf "$unpacked" && mkdir -p "$unpacked" "$run_dir"
    cat "${pieces[@]}" | tar xzf - -C "$unpacked"
    local have from
    have=$(checkpoint_frames "$run_dir/checkpoint.pt")
    from=$(checkpoint_frames "$unpacked/checkpoint.pt")
    if [ "$have" -ge "$from" ]; then
      echo "keeping $run_dir (checkpoint at $have frames; the pieces in .ckpt/ are at $from)"
    else
      cp "$unpacked"/* "$run_dir"/
      echo "resuming $run_dir from ${#pieces[@]} pieces in .ckpt/ (at $from frames)"
    fi
    rm -rf "$unpacked"
  fi
  # Mid-run, each thread's share of a core: the learner's (is its training thread the
  # bound, or waiting for the CPU and Python's lock?) and one actor's. Into the log, since a
  # call brings back at most 8 files.
  local delay seconds
  delay=$(awk -v m="$minutes" 'BEGIN { d = m * 60 * 0.4; print (d > 60 ? 60 : d) }')
  seconds=$(awk -v m="$minutes" 'BEGIN { d = m * 60 * 0.2; print (d > 10 ? 10 : d) }')
  ( sleep "$delay"
    for label in "rank 0" "started actor 0"; do
      ( table=$("$PY" bench/threads.py --pid_from "$run_dir/learner-0.log" --label "$label" \
          --seconds "$seconds" 2>&1) || true
        printf '%s: %s\n' "$label" "$table" ) &  # in one write, not between the run's lines
    done
    wait ) &
  local sampler=$!
  # --num_actors=0 and --num_envs as the machine's defaults (pong_curve.py pins the 2-core
  # split otherwise); the learner says what it chose. A row every 10 s: the goal is minutes.
  "$PY" bench/pong_curve.py --minutes="$minutes" --logdir=$logdir \
    --run_name="pong-$algorithm-$seed" -- --num_actors=0 --algorithm="$algorithm" \
    --learner_device="$DEVICE" --seed="$seed" --target_return=18 \
    --target_return_episodes=30 --log_interval_s=10 "$@"
  wait "$sampler" || true
  grep -E "actors|device|stack|reached|done" "$run_dir/learner-0.log" | head -20 || true
  for name in logs.csv episodes-0.csv curve.png; do
    if [ -f "$run_dir/$name" ]; then cp "$run_dir/$name" "$RESULTS/$algorithm-$seed-$name"; fi
  done
  if [ "${PIECES:-0}" = 1 ]; then
    ( cd "$run_dir" && tar czf - checkpoint.pt meta.json logs.csv episodes-*.csv ) \
      | split -b 15M -d - "$RESULTS/pong-$algorithm-$seed.tgz."
  fi
}

ab() {
  # Two settings side by side in the same minutes, seeds 1 and 2 of each: four runs at once,
  # each its learner (one torch thread; all four share the GPU) and ACTORS actors, with the
  # algorithm's preset. Both settings share the machine's load alike; each run's log and
  # table go to $RESULTS/ab-SEED-{a,b}.log, and its logs.csv and episodes into ab.tar.gz.
  local minutes=$1 algorithm=$2 actors=$3 logdir=${RUNS:-/tmp/gpu_session}
  local -A settings=([a]=$4 [b]=$5)
  machine
  local port=18800 seed label
  for label in a b; do
    "$PY" bench/learner.py --algorithms "$algorithm" --device="$DEVICE" --threads 1 \
      --seconds 4 --flags="${settings[$label]}"
  done
  for seed in 1 2; do
    for label in a b; do
      port=$((port + 1))
      echo "ab-$seed-$label: --seed=$seed ${settings[$label]}"
      # shellcheck disable=SC2086  # a setting is several flags
      "$PY" bench/pong_curve.py --minutes="$minutes" --logdir="$logdir" \
        --run_name="ab-$seed-$label" -- --num_actors="$actors" --algorithm="$algorithm" \
        --preset=auto --learner_device="$DEVICE" --seed="$seed" --learner_threads=1 \
        --learner_host=127.0.0.1:$port --target_return=18 --target_return_episodes=30 \
        --log_interval_s=10 ${settings[$label]} > "$RESULTS/ab-$seed-$label.log" 2>&1 &
    done
  done
  wait
  tail -n 25 "$RESULTS"/ab-*.log
  ( cd "$logdir" && tar czf "$RESULTS/ab.tar.gz" ab-*/logs.csv ab-*/episodes-*.csv \
      ab-*/learner-0.log ab-*/meta.json )
}

saved_states() {  # the run folders under RESULTS/suite-state, sorted
  ( cd "$1" && find suite-state -mindepth 1 -maxdepth 1 -type d 2> /dev/null | sort )
}

suite() {
  # Each argument after MIN is one bench/suite.py command line (its games, seed, trial, the
  # flags after --), all started at once on their own ports and stopped at MIN minutes (each
  # learner checkpoints, each suite saves its state). What they changed in the results folder
  # (rows, episodes, saved states with their checkpoints) comes back as suite.tgz in pieces
  # under 16 MiB, with the states that finished runs removed; `unpack` lays them in here.
  local minutes=$1 logdir=${RUNS:-/tmp/gpu_session}/suite into=${SUITE_RESULTS:-results}
  shift
  machine
  mkdir -p "$logdir"
  local before=$logdir/.before-$$ port=18300 line pids=()
  touch "$before"
  saved_states "$into" > "$before.states"
  for line in "$@"; do
    port=$((port + 1))
    echo "suite on port $port: $line"
    # shellcheck disable=SC2086  # a line is several arguments
    timeout --signal=TERM --kill-after=120 "${minutes}m" "$PY" bench/suite.py \
      --logdir="$logdir" --results="$into" --port="$port" $line \
      > "$RESULTS/suite-$port.log" 2>&1 &
    pids+=("$!")
  done
  local pid status=0
  for pid in "${pids[@]}"; do  # 124: cut at its minutes, as planned
    wait "$pid" || { local code=$?; [ "$code" = 124 ] || status=$code; }
  done
  tail -n 5 "$RESULTS"/suite-*.log
  rm -f "$RESULTS"/suite.tgz.*  # an earlier call's pieces would join this call's tar
  ( cd "$into" && find . -type f -newer "$before" ! -name '*.lock' ! -name '*.tmp' -print0 \
      | tar czf - --null -T - ) | split -b 15M -d - "$RESULTS/suite.tgz."
  saved_states "$into" | comm -23 "$before.states" - > "$RESULTS/suite-removed.txt"
  ls -l "$RESULTS"/suite.tgz.* "$RESULTS/suite-removed.txt"
  return "$status"
}

case "${1:-}" in
  suite) shift; suite "$@" 2>&1 | tee "$RESULTS/suite.log" ;;
  ab) shift; ab "$@" 2>&1 | tee "$RESULTS/ab.log" ;;
  checks) checks "${2:-}" 2>&1 | tee "$RESULTS/checks.log" ;;
  pong) shift; pong "$@" 2>&1 | tee "$RESULTS/pong-${2:-impala}-$1.log" ;;
esac
