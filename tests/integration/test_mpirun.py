"""The one mpirun command that starts every learner: its command line, and what a real
mpirun hands each rank. How the ranks then keep in sync is `test_multilearner.py`."""

from __future__ import annotations

import subprocess
import sys

from impala.launcher.mpi import LearnerLaunch, MpiOptions, mpirun_command
from tests.helpers import ROOT, with_program


def test_mpirun_command_for_learners_on_different_hosts():
    learners = [
        LearnerLaunch("10.9.0.1", 8001, "/venv/bin/python", "/srv/impala", "0"),
        LearnerLaunch("10.9.0.1", 8002, "/venv/bin/python", "/srv/impala", "1"),
        LearnerLaunch("10.9.0.2", 8001, "/opt/py", "/home/u/impala", ""),
    ]
    options = MpiOptions(as_root=True, iface="10.9.0.0/24", ssh_command="ssh -F /tmp/cfg",
                         master_port=29511, horovod_cycle_time_ms=2.5)
    command = mpirun_command(learners, ["--level_name=Pong", "--batch_size=32"], options)

    def block(host, wdir, cuda, python, rank, port):
        return ["-np", "1", "-host", host, "-wdir", wdir,
                "-x", "PYTHONUNBUFFERED=1", "-x", "MASTER_ADDR=10.9.0.1",
                "-x", "MASTER_PORT=29511", "-x", f"CUDA_VISIBLE_DEVICES={cuda}",
                "-x", "HOROVOD_CYCLE_TIME=2.5",
                python, "experiment.py", "--job_name=learner", f"--task={rank}",
                f"--learner_host={port}", "--level_name=Pong", "--batch_size=32"]

    assert command == [
        "mpirun", "--allow-run-as-root", "-H", "10.9.0.1:2,10.9.0.2:1",
        "-bind-to", "none", "-map-by", "slot", "-mca", "mpi_yield_when_idle", "1",
        "-mca", "odls_base_sigkill_timeout", "10", "-mca", "plm_rsh_agent", "ssh -F /tmp/cfg",
        "-mca", "oob_tcp_if_include", "10.9.0.0/24", "-mca", "btl_tcp_if_include",
        "10.9.0.0/24",
        *block("10.9.0.1:2", "/srv/impala", "0", "/venv/bin/python", 0, "10.9.0.1:8001"), ":",
        *block("10.9.0.1:2", "/srv/impala", "1", "/venv/bin/python", 1, "10.9.0.1:8002"), ":",
        *block("10.9.0.2:1", "/home/u/impala", "", "/opt/py", 2, "10.9.0.2:8001"),
    ]


def test_every_rank_gets_the_variables(tmp_path):
    """Under a real mpirun: -x reaches every MPMD block, not just the first."""
    learners = [LearnerLaunch("127.0.0.1", 1, sys.executable, str(ROOT), "7"),
                LearnerLaunch("127.0.0.1", 2, sys.executable, str(ROOT), "")]
    command = mpirun_command(learners, [], MpiOptions(master_port=31999))
    # Each rank writes what it sees to a file: mpirun can lose the output of ranks that
    # exit at once (this test failed now and then when it read their stdout).
    probe = ("import os, sys; e = os.environ; open(sys.argv[1] + '/rank-' + "
             "e['OMPI_COMM_WORLD_RANK'], 'w').write(f\"{e.get('MASTER_PORT')} "
             "{e.get('CUDA_VISIBLE_DEVICES')!r} {e.get('HOROVOD_CYCLE_TIME')}\")")
    subprocess.run(with_program(command, ["-c", probe, str(tmp_path)]), capture_output=True,
                   text=True, timeout=60, check=True)
    assert (tmp_path / "rank-0").read_text() == "31999 '7' 5"
    assert (tmp_path / "rank-1").read_text() == "31999 '' 5"


def test_no_root_flag_for_other_users():
    command = mpirun_command([LearnerLaunch("a", 1, "p", "/w")], [], MpiOptions(as_root=False))
    assert "--allow-run-as-root" not in command
    assert "plm_rsh_agent" not in command and "oob_tcp_if_include" not in command
