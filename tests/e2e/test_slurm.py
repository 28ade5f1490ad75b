"""--slurm on a real Slurm cluster (munged, slurmctld, three slurmd, each node in a network
namespace of its own): the example batch script trains CartPole to its budget with two
learners in sync and two actors, every host taken from the allocation; scancel stops a run
cleanly, with its checkpoint saved and nothing left running, and the same command submitted
again resumes it; a requeued job, and one warned of its time limit, stops with its
checkpoint, comes back by itself and finishes."""

from __future__ import annotations

import subprocess

import pytest

from tests.frontend import CARTPOLE, processes_mentioning, tmux_has
from tests.helpers import CARTPOLE_RUN, ROOT, assert_ranks_in_sync, last_value, read_csv, wait_for
from tests.slurm_cluster import SlurmCluster, unavailable_reason

SKIP = unavailable_reason()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(SKIP is not None, reason=f"needs Slurm: {SKIP}")]
SBATCH = str(ROOT / "sandbox" / "slurm.sbatch")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=3, cpus=2) as slurm:
        yield slurm


def sbatch(cluster: SlurmCluster, tmp_path, session: str, frames: int,
           wait: bool) -> subprocess.CompletedProcess:
    """The example script on 3 nodes with 2 learners, CartPole for `frames`, submitted from
    the checkout as its comment says; output in tmp_path/job.out, runs in tmp_path/runs."""
    return subprocess.run(
        ["sbatch", *(["--wait"] if wait else []), "--parsable", "-N", "3",
         f"--output={tmp_path / 'job.out'}", SBATCH, "--num_learners=2",
         f"--tmux_sess={session}", f"--logdir={tmp_path / 'runs'}",
         f"--total_environment_frames={frames}", "--summary_interval_s=2", *CARTPOLE],
        cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=300)


def jobs_in_queue(cluster: SlurmCluster) -> str:
    return subprocess.run(["squeue", "-h"], env=cluster.env, capture_output=True, text=True,
                          timeout=30).stdout.strip()


def test_sbatch_trains_with_two_learners_in_sync_on_the_allocation(cluster, tmp_path):
    session = "impala-test-slurm"
    output = tmp_path / "job.out"
    done = sbatch(cluster, tmp_path, session, 40_000, wait=True)
    log = output.read_text() if output.exists() else ""
    assert done.returncode == 0, done.stdout + done.stderr + log[-3000:]
    # Hosts, addresses and cores came from scontrol: the namespaces' addresses are in no
    # DNS, and each node has 2 CPUs, a learner node keeping both for its learner.
    a, b, c = (host.address for host in cluster.network.hosts)
    assert (f"node1 ({a}, 2 CPUs): learner; node2 ({b}, 2 CPUs): learner; "
            f"node3 ({c}, 2 CPUs): 2 actor(s)") in log
    run_dir = tmp_path / "runs" / CARTPOLE_RUN
    # The learners' supervisor stops the actors as the learners end, or the frontend does.
    stopped_by = log + (run_dir / "mpirun.log").read_text()
    assert "learners ended" in log and "actor-1 on node3: stopped" in stopped_by
    assert f"listening on tcp://{a}:8001" in (run_dir / "learner-0.log").read_text()
    assert f"listening on tcp://{b}:8001" in (run_dir / "learner-1.log").read_text()
    assert last_value(run_dir / "logs.csv", "frames") >= 40_000
    assert assert_ranks_in_sync(run_dir)["updates"].iloc[-1] > 20
    assert not tmux_has(session)
    assert not processes_mentioning(str(tmp_path))
    assert not jobs_in_queue(cluster)


def test_scancel_stops_the_whole_run_with_its_checkpoint_and_submitting_again_resumes(
        cluster, tmp_path):
    """scancel ends a job as its hard time limit does (SIGTERM, then SIGKILL after
    KillWait): the run stops cleanly with its checkpoint and nothing left running, and the
    same command, submitted again by hand, resumes from that checkpoint to its budget."""
    session = "impala-test-slurm-cancel"
    output = tmp_path / "job.out"
    budget = 100_000
    submitted = sbatch(cluster, tmp_path, session, budget, wait=False)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    run_dir = tmp_path / "runs" / CARTPOLE_RUN
    try:
        wait_for(lambda: last_value(run_dir / "logs.csv", "frames") > 20_000, 120,
                 "training under Slurm")
    finally:
        subprocess.run(["scancel", job], env=cluster.env, check=True, timeout=30)
    wait_for(lambda: not jobs_in_queue(cluster), 120, "the cancelled job to leave the queue")
    log = (run_dir / "learner-0.log").read_text()
    assert "checkpoint saved" in log.split(": stopping")[-1], log[-2000:]
    # The learner left by itself, though mpirun, signalled too, no longer ends MPI cleanly.
    assert "learner exit status: stopped" in log, log[-2000:]
    assert (run_dir / "checkpoint.pt").exists()
    assert "interrupted: stopping the whole run" in output.read_text()
    wait_for(lambda: not processes_mentioning(str(tmp_path)), 30, "no process of the run left")
    assert not tmux_has(session)
    stopped_at = last_value(run_dir / "logs.csv", "frames")
    assert stopped_at < budget, "the budget was reached before scancel: nothing to resume"

    again = sbatch(cluster, tmp_path, session, budget, wait=True)
    assert again.returncode == 0, again.stdout + again.stderr + output.read_text()[-3000:]
    assert f"resumed from {run_dir / 'checkpoint.pt'}" in (run_dir / "learner-0.log").read_text()
    assert_resumed_to_the_budget(tmp_path, budget)
    assert not jobs_in_queue(cluster)


def job_state(cluster: SlurmCluster, job: str) -> str:
    """The job's state and restart count as scontrol shows them ("" once it has gone)."""
    shown = subprocess.run(["scontrol", "show", "job", job], env=cluster.env,
                           capture_output=True, text=True, timeout=30).stdout
    fields = dict(part.split("=", 1) for part in shown.split() if "=" in part)
    return f"{fields.get('JobState', '')} restarts={fields.get('Restarts', '')}"


def assert_resumed_to_the_budget(tmp_path, budget: int) -> None:
    """The run resumed from a checkpoint once or more, its frames never went back, it
    reached its budget, and nothing of it is left."""
    run_dir = tmp_path / "runs" / CARTPOLE_RUN
    learner_log = (run_dir / "learner-0.log").read_text()
    assert "resumed from" in learner_log, learner_log[-2000:]
    logs = read_csv(run_dir / "logs.csv")
    assert logs["frames"].is_monotonic_increasing and logs["frames"].iloc[-1] >= budget
    assert_ranks_in_sync(run_dir, same_rows=False)
    wait_for(lambda: not processes_mentioning(str(tmp_path)), 30, "no process of the run left")


def interrupted_job(cluster: SlurmCluster, tmp_path, session: str, budget: int,
                    interrupt: list[str]) -> tuple[str, str]:
    """Submit the example script, run `interrupt` + the job id once it trains, and wait for
    the job to leave the queue by itself; (job id, the job's output)."""
    submitted = sbatch(cluster, tmp_path, session, budget, wait=False)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    run_dir = tmp_path / "runs" / CARTPOLE_RUN
    try:
        wait_for(lambda: last_value(run_dir / "logs.csv", "frames") > 30_000, 180,
                 "training under Slurm")
        subprocess.run([*interrupt, job], env=cluster.env, check=True, timeout=30)
        wait_for(lambda: not jobs_in_queue(cluster), 600, "the requeued job to finish")
    finally:
        subprocess.run(["scancel", job], env=cluster.env, timeout=30)
    return job, (tmp_path / "job.out").read_text()


def test_a_requeued_job_stops_with_its_checkpoint_and_resumes_by_itself(cluster, tmp_path):
    """`scontrol requeue` mid-run (what a preemption or a failed node does): the run stops
    with its checkpoint, the job comes back by itself and trains on from the checkpoint to
    its budget."""
    job, output = interrupted_job(cluster, tmp_path, "impala-test-slurm-requeue", 150_000,
                                  ["scontrol", "requeue"])
    assert f"job {job}, start 2" in output, output[-3000:]
    assert "learners ended (finished (status 0)" in output, output[-3000:]
    assert_resumed_to_the_budget(tmp_path, 150_000)


def test_the_warning_before_the_time_limit_checkpoints_requeues_and_resumes(cluster, tmp_path):
    """The example script asks Slurm for USR1 two minutes before the time limit. Sent here
    mid-run the way Slurm sends it (to the batch shell only), it stops the run with its
    checkpoint; the job requeues itself, comes back and finishes the run. (Slurm's own
    timer sends it up to a minute early, which a test cannot place mid-run.)"""
    script = (ROOT / "sandbox" / "slurm.sbatch").read_text()
    assert "#SBATCH --requeue" in script and "#SBATCH --signal=B:USR1@120" in script
    job, output = interrupted_job(cluster, tmp_path, "impala-test-slurm-limit", 150_000,
                                  ["scancel", "--batch", "--signal=USR1"])
    first_start = output.split(f"job {job}, start 2")[0]
    assert "stopped before the time limit with a checkpoint; requeued" in first_start, \
        output[-3000:]
    run_dir = tmp_path / "runs" / CARTPOLE_RUN
    assert "checkpoint saved" in (run_dir / "learner-0.log").read_text()
    assert "learners ended (finished (status 0)" in output, output[-3000:]
    assert_resumed_to_the_budget(tmp_path, 150_000)
