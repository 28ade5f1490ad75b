"""The frontend before anything starts: a bad CSV or option is refused with its line,
column or flag named, and a dry run prints the plan and every command. A cluster it starts
and stops is `test_frontend.py`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.frontend import CARTPOLE, FRONTEND, HEADER, ORIGINAL_CSV, frontend, tmux_has
from tests.helpers import ROOT

BAD_CSVS = {
    "empty": ("", "the file is empty"),
    "header only": (HEADER, "no rows after the header"),
    "missing port column": ("job,ip\nlearner,localhost\n", "missing column(s): tf_port"),
    "unknown column": (HEADER.strip() + ",gpu_model\nlearner,localhost,8001,,,,,a100\n",
                       "line 1: unknown column(s): gpu_model"),
    "unknown job": (HEADER + "learner,localhost,8001,,,,\nworker,localhost,9001,,,,\n",
                    "line 3, column job: expected learner or actor, got 'worker'"),
    "no learner": (HEADER + "actor,localhost,9001,,,,\n", "no learner"),
    "non-integer port": (HEADER + "learner,localhost,80a1,,,,\n",
                         "line 2, column tf_port: expected an integer in 1..65535, got '80a1'"),
    "port out of range": (HEADER + "learner,localhost,70000,,,,\n",
                          "line 2, column tf_port: 70000 is out of range 1..65535"),
    "ssh port": (HEADER + "learner,localhost,8001,,0,,\n",
                 "line 2, column ssh_port: 0 is out of range"),
    "same ip:port twice": (HEADER + "learner,localhost,8001,,,,\nactor,localhost,8001,,,,\n",
                           "line 3, columns ip/tf_port: localhost:8001 is already used on "
                           "line 2"),
    "empty ip": (HEADER + "learner,localhost,8001,,,,\nactor,,9001,,,,\n",
                 "line 3, column ip: expected a host name or IP address, got ''"),
    "trailing comma": (HEADER + "learner,localhost,8001,,,,\nactor,localhost,9001,,,,,\n",
                       "line 3, column 8: 8 fields, but the header has 7 columns"),
    # pandas would take the first column as the index and shift every value.
    "trailing comma on every row": (HEADER + "learner,localhost,8001,,,,,\n"
                                    "actor,localhost,9001,,,,,\n",
                                    "line 2, column 8: 8 fields, but the header has 7"),
    "trailing comma in the header": (HEADER.strip() + ",\nlearner,localhost,8001,,,,\n",
                                     "line 1, column 8: empty column name"),
    "comma in ip": (HEADER + "learner,10.0.0.1,10.0.0.2,8001,,,,\n",
                    "line 2, column 8: 8 fields"),
    "not a host name": (HEADER + "learner,localhost,8001,,,,\nactor,my host!,9001,,,,\n",
                        "line 3, column ip: expected a host name or IP address, got 'my host!'"),
    "user name read as an ssh option": (
        HEADER + "learner,localhost,8001,,,,\nactor,10.0.0.7,9001,,,-oProxyCommand=x,\n",
        "line 3, column ssh_username: expected a user name"),
    "password on a learner row": (HEADER + "learner,10.0.0.7,8001,,,root,hunter2-pw\n",
                                  "line 2, column ssh_password: learners are started by "
                                  "mpirun"),
    "workdir on a local row": (HEADER.strip() + ",workdir\nlearner,localhost,8001,,,,,\n"
                               "actor,127.0.0.1,9001,,,,,/srv/other-checkout\n",
                               "line 3, column workdir: 127.0.0.1 is this host"),
}


@pytest.mark.parametrize("case", sorted(BAD_CSVS))
def test_bad_csv_is_reported_and_nothing_starts(tmp_path, case):
    content, message = BAD_CSVS[case]
    path = tmp_path / "hosts.csv"
    path.write_text(content)
    session = f"impala-test-{abs(hash(case)) % 10**6}"
    result = frontend(f"--workers_csv_path={path}", f"--logdir={tmp_path / 'runs'}",
                      f"--tmux_sess={session}", *CARTPOLE)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and str(path) in result.stderr
    assert "Traceback" not in result.stderr and "hunter2-pw" not in result.stderr
    assert not tmux_has(session) and not (tmp_path / "runs").exists()


def test_every_problem_is_reported_at_once(tmp_path):
    path = tmp_path / "hosts.csv"
    path.write_text(HEADER + "learner,localhost,abc,,,,\nboss,,9001,,,,\n")
    result = frontend(f"--workers_csv_path={path}", *CARTPOLE)
    assert result.returncode == 2
    for message in ("line 2, column tf_port", "line 3, column job", "line 3, column ip"):
        assert message in result.stderr


def test_missing_csv_file(tmp_path):
    result = frontend(f"--workers_csv_path={tmp_path / 'nope.csv'}")
    assert result.returncode == 2 and "file not found" in result.stderr


def test_port_column_is_accepted_and_more_learners_than_actors_warns(tmp_path):
    path = tmp_path / "hosts.csv"
    path.write_text("job,ip,port\nlearner,127.0.0.1,8001\nlearner,127.0.0.1,8002\n"
                    "actor,127.0.0.1,9001\n")
    result = frontend(f"--workers_csv_path={path}", "--dry_run", *CARTPOLE)
    assert result.returncode == 0, result.stderr
    assert "2 learners but only 1 actors" in result.stderr


def test_dry_run_prints_the_plan_and_every_command(tmp_path):
    session = "impala-test-dry"
    result = frontend(f"--workers_csv_path={ORIGINAL_CSV}", "--dry_run",
                      f"--tmux_sess={session}", f"--logdir={tmp_path}", *CARTPOLE)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "learner 0 at localhost:8001 (CSV line 2): actors localhost:9001, localhost:9003" \
        in out
    assert "learner 1 at localhost:8002 (CSV line 3): actors localhost:9002" in out
    assert out.count("-- mpirun ") == 1  # one mpirun for all learners
    assert "-np 1 -host localhost:2" in out and " : -np 1 " in out
    assert "--job_name=actor --task=2 --learner_host=localhost:8001" in out
    assert not tmux_has(session) and not any(tmp_path.iterdir())


@pytest.mark.parametrize("flag,expected", [
    ("--horovod_cycle_time_ms=0", "--horovod_cycle_time_ms must be a number > 0, got 0.0"),
    ("--summary_interval_s=nan", "--summary_interval_s must be a number > 0, got nan"),
    ("--master_port=70000", "--master_port must be a port (1-65535), got 70000"),
])
def test_bad_frontend_option_is_a_clear_error(tmp_path, flag, expected):
    result = frontend(f"--workers_csv_path={ORIGINAL_CSV}", "--dry_run", flag,
                      f"--logdir={tmp_path}", *CARTPOLE)
    assert result.returncode == 2 and expected in result.stderr, result.stderr


def test_slurm_outside_an_allocation_and_a_csv_with_slurm_are_clear_errors(tmp_path):
    outside = subprocess.run(
        [sys.executable, FRONTEND, "--slurm", "--dry_run", f"--logdir={tmp_path}", *CARTPOLE],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")})
    assert outside.returncode == 2
    assert "--slurm runs inside a Slurm allocation (sbatch or salloc)" in outside.stderr
    both = frontend(f"--workers_csv_path={ORIGINAL_CSV}", "--slurm", "--dry_run", *CARTPOLE)
    assert both.returncode == 2 and "--workers_csv_path=FILE or --slurm" in both.stderr


def test_the_horovod_cycle_time_reaches_every_rank(tmp_path):
    result = frontend(f"--workers_csv_path={ORIGINAL_CSV}", "--dry_run",
                      "--horovod_cycle_time_ms=2", f"--logdir={tmp_path}", *CARTPOLE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("-x HOROVOD_CYCLE_TIME=2 ") == 2  # both learners' blocks


def test_the_original_readme_command_line_is_accepted(tmp_path):
    result = frontend(f"--workers_csv_path={ORIGINAL_CSV}", "--dry_run",
                      "--level_name=BreakoutNoFrameskip-v4", "--agent_name=SimpleConvNetAgent",
                      "--num_action_repeats=1", "--batch_size=32", "--unroll_length=20",
                      "--entropy_cost=0.01", "--learning_rate=0.0006",
                      "--total_environment_frames=200000000", "--reward_clipping=abs_one",
                      "--gradients_clipping=40.0", f"--logdir={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert "--num_action_repeats=1" in result.stdout
