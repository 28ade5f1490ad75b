"""The plan, tested on what it returns (no host is touched): who runs where, with which
command, and what the preflight and the key copies will reach."""

from __future__ import annotations

import shlex
import sys

from impala.config import Config
from impala.launcher.cluster import read_cluster_csv
from impala.launcher.options import FrontendOptions
from impala.launcher.plan import (
    PROJECT_ROOT,
    ClusterRecord,
    build_plan,
    key_copies,
    preflight_checks,
)
from impala.presets import config_of

HEADER = "job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password,workdir\n"
CSV = (HEADER
       + "learner,127.0.0.1,8001,0,,,,\n"
       + "learner,10.0.0.2,8001,,,alice,,/srv/impala\n"
       + "actor,127.0.0.1,9001,,,,,\n"
       + "actor,10.0.0.3,9001,,2222,bob,,\n"
       + "actor,10.0.0.3,9002,,,carol,s3cret-pw,\n")


def plan_of(tmp_path, **flags):
    path = tmp_path / "hosts.csv"
    path.write_text(CSV)
    cfg = config_of({"level_name": "CartPole-v1", "agent_name": "MLPAgent", "logdir": "runs",
                     **flags})
    opts = FrontendOptions(workers_csv_path=str(path), ssh_config=str(tmp_path / "none"))
    (tmp_path / "none").write_text("")
    workers = read_cluster_csv(path)
    return cfg, opts, workers, build_plan(cfg, opts, workers)


def test_learners_are_one_mpirun_and_each_actor_serves_learner_i_mod_l(tmp_path):
    _, _, _, plan = plan_of(tmp_path)
    assert plan.run_dir == PROJECT_ROOT / "runs" / "CartPole-v1_MLPAgent"
    assert plan.learners.name == "learners" and plan.learners.local
    mpi = plan.learners.command[plan.learners.command.index("--") + 1:]
    assert mpi[0] == "mpirun" and "127.0.0.1:1,10.0.0.2:1" in mpi
    assert "/srv/impala" in mpi  # the second learner's checkout, from the CSV
    assert [a.name for a in plan.actors] == ["actor-0", "actor-1", "actor-2"]
    assert [a.title.rsplit(" ", 1)[1] for a in plan.actors] == ["0", "1", "0"]
    assert plan.processes == [plan.learners, *plan.actors]


def test_a_local_actor_runs_directly_and_a_remote_one_over_its_own_login(tmp_path):
    _, _, _, plan = plan_of(tmp_path)
    local, keyed, password = plan.actors
    assert local.local and local.command[:3] == [sys.executable, "-m", "impala.launcher.logged"]
    assert "--learner_host=127.0.0.1:8001" in local.command
    assert not keyed.local and "bob@10.0.0.3" in keyed.command
    assert keyed.command[keyed.command.index("-p") + 1] == "2222"
    assert keyed.ssh["username"] == "bob" and "password" not in keyed.ssh
    # The password login goes through the relay, which reads the CSV: no password anywhere.
    assert "impala.launcher.relay" in password.command and password.ssh_password_in_csv
    assert "s3cret-pw" not in shlex.join(password.command) + repr(password) + repr(plan)


def test_preflight_checks_every_distinct_login_and_keys_go_to_every_remote_host(tmp_path):
    cfg, opts, workers, plan = plan_of(tmp_path)
    checks = preflight_checks(plan)
    assert sorted((c.access.label, c.lines, c.needs_mpi) for c in checks) == [
        ("alice@10.0.0.2:22", (3,), True),
        ("bob@10.0.0.3:2222", (5,), False),
        ("carol@10.0.0.3:22", (6,), False),
    ]
    copies = key_copies(plan)
    assert sorted((c.where.label, c.path) for c in copies) == [
        ("alice@10.0.0.2:22", "/srv/impala/runs/CartPole-v1_MLPAgent/keys/run.keys"),
        ("bob@10.0.0.3:2222", f"{PROJECT_ROOT}/runs/CartPole-v1_MLPAgent/keys/run.keys"),
        ("carol@10.0.0.3:22", f"{PROJECT_ROOT}/runs/CartPole-v1_MLPAgent/keys/run.keys"),
    ]


def test_training_flags_reach_every_process_and_per_process_flags_are_set_per_process(
        tmp_path):
    _, _, _, plan = plan_of(tmp_path, batch_size=4, entropy_cost=0.02)
    for process in plan.processes:
        command = shlex.join(process.command)
        assert "--batch_size=4" in command and "--entropy_cost=0.02" in command
    assert all(f"--task={i}" in shlex.join(a.command) for i, a in enumerate(plan.actors))


def test_every_row_is_placed_once_with_its_checkout_interpreter_and_run_directory(tmp_path):
    _, _, _, plan = plan_of(tmp_path, run_name="r")
    by_line = {p.line: p for p in plan.placements}
    assert sorted(by_line) == [2, 3, 4, 5, 6]
    here = by_line[2]
    assert here.local and here.access is None and here.python == sys.executable
    assert here.run_dir == f"{PROJECT_ROOT}/runs/r" and here.learner_host
    alice = by_line[3]
    assert (alice.workdir, alice.python, alice.run_dir) == (
        "/srv/impala", "/srv/impala/.venv/bin/python", "/srv/impala/runs/r")
    assert alice.access.label == "alice@10.0.0.2:22" and alice.learner_host
    # bob and carol share a host but not a login; neither runs a learner.
    assert {by_line[5].access.label, by_line[6].access.label} == {
        "bob@10.0.0.3:2222", "carol@10.0.0.3:22"}
    assert not by_line[5].learner_host and not by_line[6].learner_host


def test_the_cluster_record_reads_back_what_was_written_and_never_a_password(tmp_path):
    _, opts, _, plan = plan_of(tmp_path)
    record = ClusterRecord(tmux_session="impala", started="now",
                           workers_csv_path=opts.workers_csv_path, ssh_config="",
                           ssh_options="", panes=[["%1", "actors-0"]],
                           processes=plan.processes)
    record.save(tmp_path)
    assert ClusterRecord.load(tmp_path) == record
    assert "s3cret-pw" not in (tmp_path / ClusterRecord.FILE).read_text()
    (tmp_path / ClusterRecord.FILE).write_text('{"processes": [{"name": 1}]}')
    assert ClusterRecord.load(tmp_path) is None  # damaged: refused, not half-read
    assert ClusterRecord.load(tmp_path / "elsewhere") is None


def test_each_actor_knows_its_environments_among_the_runs_for_apex_epsilons(tmp_path):
    path = tmp_path / "hosts.csv"
    path.write_text("job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password,"
                    "num_envs\n"
                    "learner,127.0.0.1,8001,,,,,\n"
                    "actor,127.0.0.1,9001,,,,,4\n"
                    "actor,127.0.0.1,9002,,,,,\n"
                    "actor,127.0.0.1,9003,,,,,2\n")
    (tmp_path / "none").write_text("")
    cfg = Config(level_name="CartPole-v1", agent_name="MLPAgent", algorithm="apex",
                 num_envs=8)
    opts = FrontendOptions(workers_csv_path=str(path), ssh_config=str(tmp_path / "none"))
    plan = build_plan(cfg, opts, read_cluster_csv(path))
    firsts = [next(a for a in actor.command if a.startswith("--first_env=")) for actor in
              plan.actors]
    assert firsts == ["--first_env=0", "--first_env=4", "--first_env=12"]
    assert all("--total_envs=14" in actor.command for actor in plan.actors)
    assert all(sum(a.startswith("--first_env") for a in actor.command) == 1
               for actor in plan.actors)  # not also passed through from the Config
