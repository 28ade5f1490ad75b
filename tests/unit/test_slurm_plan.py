"""--slurm without a cluster: reading scontrol's records, placing learners and actors on an
allocation's nodes, and the commands that start them through Slurm (the real cluster runs
in tests/e2e/test_slurm.py)."""

from __future__ import annotations

import os

import pytest

from impala.launcher.options import FrontendOptions
from impala.launcher.plan import build_plan, key_copies, preflight_checks
from impala.launcher.slurm import (
    SlurmError,
    SlurmNode,
    allocation_nodes,
    count_ids,
    fields,
    gpu_indices,
    job_resources,
    slurm_env,
    slurm_workers,
)
from impala.presets import config_of

# As `scontrol -o show job -d` and `scontrol -o show node` print them (Slurm 22.05), the
# first two from the test cluster, the GPU ones in the format Slurm documents.
JOB_DETAIL = ("JobId=4 JobName=impala UserId=root(0) NodeList=node[1-3] BatchHost=node1 "
              "NumNodes=3 NumCPUs=6 JOB_GRES=(null)   Nodes=node[1-3] CPU_IDs=0-1 Mem=0 GRES= "
              "MinCPUsNode=1 Features=(null)")
GPU_JOB_DETAIL = ("JobId=9 NodeList=gpu[01-02],cpu07 JOB_GRES=gpu:a100:6 "
                  "  Nodes=gpu[01-02] CPU_IDs=0-15,32-47 Mem=0 GRES=gpu:a100:4(IDX:0-3) "
                  "  Nodes=cpu07 CPU_IDs=0-63 Mem=0 GRES= MinCPUsNode=1")
NODE_RECORD = ("NodeName=node2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUTot=2 "
               "Gres=(null) NodeAddr=10.213.77.2 NodeHostName=node2 Version=22.05.8 "
               "OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1 State=MIXED")


def test_scontrol_records_are_read_field_by_field():
    record = fields(NODE_RECORD)
    assert record["NodeName"] == "node2" and record["NodeAddr"] == "10.213.77.2"
    assert record["OS"] == "Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0"
    assert record["State"] == "MIXED"


def test_cpus_and_gpus_per_node_come_from_the_jobs_own_record():
    assert count_ids("0-1") == 2 and count_ids("0-15,32-47") == 32 and count_ids("3") == 1
    assert gpu_indices("gpu:a100:4(IDX:0-3)") == ("0", "1", "2", "3")
    assert gpu_indices("gpu:2(IDX:1,3)") == ("1", "3") and gpu_indices("") == ()
    assert job_resources(JOB_DETAIL) == [("node[1-3]", 2, ())]
    assert job_resources(GPU_JOB_DETAIL) == [("gpu[01-02]", 32, ("0", "1", "2", "3")),
                                             ("cpu07", 64, ())]


def test_outside_an_allocation_is_a_clear_error():
    with pytest.raises(SlurmError, match="inside a Slurm allocation .* SLURM_JOB_ID"):
        allocation_nodes(env={})


NODES = [SlurmNode("gpu01", "10.1.0.1", 8, ("0", "1")), SlurmNode("gpu02", "10.1.0.2", 8),
         SlurmNode("cpu07", "10.1.0.7", 4)]


def test_learners_take_the_first_nodes_and_every_core_left_runs_an_actor():
    workers, node_of = slurm_workers(NODES, num_learners=2)
    learners = [w for w in workers if w.job == "learner"]
    assert [(w.ip, w.port, w.cuda_visible_devices) for w in learners] == [
        ("10.1.0.1", 8001, "0,1"), ("10.1.0.2", 8001, "")]
    actors = [node_of[w.line].name for w in workers if w.job == "actor"]
    assert actors == ["gpu01"] * 6 + ["gpu02"] * 6 + ["cpu07"] * 4
    assert len({w.line for w in workers}) == len(workers)


@pytest.mark.parametrize("nodes, learners, message", [
    (NODES, 4, "--num_learners=4, but the allocation has 3 node"),
    ([SlurmNode("a", "10.0.0.1", 2)], 1, "no cores left for actors .* a: 2"),
])
def test_an_allocation_that_cannot_hold_the_run_is_refused(nodes, learners, message):
    with pytest.raises(SlurmError, match=message):
        slurm_workers(nodes, learners)


def test_the_frontend_needs_a_csv_or_slurm_but_not_both():
    with pytest.raises(ValueError, match="--workers_csv_path=FILE or --slurm"):
        FrontendOptions()
    with pytest.raises(ValueError, match="--workers_csv_path=FILE or --slurm"):
        FrontendOptions(workers_csv_path="hosts.csv", slurm=True)


def test_the_plan_starts_actors_by_srun_and_learners_by_an_mpirun_inside_the_job(monkeypatch):
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[01-02],cpu07")
    cfg = config_of({"level_name": "CartPole-v1", "agent_name": "MLPAgent", "logdir": "runs"})
    workers, node_of = slurm_workers(NODES, num_learners=2)
    plan = build_plan(cfg, FrontendOptions(slurm=True, num_learners=2), workers, node_of)
    mpi = plan.learners.command[plan.learners.command.index("--") + 1:]
    # The allocation's variables reach mpirun even from a tmux server started before it.
    assert mpi[0] == "env" and "SLURM_JOB_ID=9" in mpi and slurm_env() == [
        "SLURM_JOB_ID=9", "SLURM_JOB_NODELIST=gpu[01-02],cpu07"]
    mpirun = mpi[mpi.index("mpirun"):]
    assert mpirun[mpirun.index("-H") + 1] == "gpu01:1,gpu02:1"  # Slurm's names
    assert "plm_rsh_agent" not in mpirun and "plm_slurm_args" in mpirun
    assert "--learner_host=10.1.0.1:8001" in mpirun  # NodeAddr, not a name to resolve
    assert "-x" in mpirun and "CUDA_VISIBLE_DEVICES=0,1" in mpirun
    assert len(plan.actors) == 16
    last = plan.actors[-1]
    srun = last.command[last.command.index("srun"):]
    assert "--nodelist=cpu07" in srun and "--overlap" in srun
    assert "--learner_host=10.1.0.2:8001" in srun  # actor 15 serves learner 15 mod 2
    assert last.local and last.via == "srun" and last.host == "cpu07"
    assert preflight_checks(plan) == []  # no ssh
    copies = key_copies(plan)
    assert sorted(c.where.name for c in copies) == ["cpu07", "gpu01", "gpu02"]
    assert all(isinstance(c.where, SlurmNode) for c in copies)  # none by ssh
