"""The frontend runs a cluster: from the original CSV on this host, and over real sshd hosts
in network namespaces (preflight, tmux, mpirun, stop). What it refuses before anything starts
is `test_frontend_input.py`."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import libtmux
import pytest

from tests.frontend import (
    CARTPOLE,
    FRONTEND,
    HEADER,
    ORIGINAL_CSV,
    frontend,
    processes_mentioning,
    tmux_has,
)
from tests.helpers import (
    CARTPOLE_RUN,
    ROOT,
    assert_ranks_in_sync,
    dealer_to,
    last_value,
    read_csv,
    wait_for,
    weights_answered,
)
from tests.netns import BRIDGE_ADDRESS, SUBNET, NamespaceNetwork, unavailable_reason

NETNS_SKIP = unavailable_reason()



@pytest.mark.slow
def test_local_cluster_from_the_original_csv(tmp_path):
    """2 learners, 3 actors on this host: panes, training, checkpoint, status, stop."""
    session = "impala-test-local"
    run_dir = tmp_path / CARTPOLE_RUN
    flags = [f"--workers_csv_path={ORIGINAL_CSV}", f"--tmux_sess={session}",
             f"--logdir={tmp_path}", "--total_environment_frames=100000000",
             "--checkpoint_interval_s=2", *CARTPOLE]
    started = frontend(*flags, "--detach", "--force")
    assert started.returncode == 0, started.stderr
    assert f"tmux attach -t {session}" in started.stdout
    try:
        titles = {pane.pane_title for pane in libtmux.Server().sessions.get(
            session_name=session).panes}
        assert titles == {"learners x2 (mpirun)", "actor-0 localhost:9001 -> learner 0",
                          "actor-1 localhost:9002 -> learner 1",
                          "actor-2 localhost:9003 -> learner 0"}
        wait_for(lambda: last_value(run_dir / "logs.csv", "frames") > 30_000, 120, "training")
        wait_for(lambda: (run_dir / "checkpoint.pt").exists(), 30, "a checkpoint")
        for name in ("mpirun.log", "actor-0.log", "actor-1.log", "actor-2.log",
                     "learner-0.log", "learner-1.log"):
            assert (run_dir / name).stat().st_size > 0, name
        status = frontend(*flags, "--status")
        assert status.stdout.count(" alive ") == 4, status.stdout
        again = frontend(*flags, "--detach")  # the session exists: an error without --force
        assert again.returncode == 1 and "exists already" in again.stderr
    finally:
        stopped = frontend(*flags, "--stop", timeout=200)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not tmux_has(session)
    wait_for(lambda: not processes_mentioning(str(tmp_path)), 10, "no process of the run left")
    assert "received SIGUSR1" in (run_dir / "learner-0.log").read_text()
    assert "checkpoint saved" in (run_dir / "learner-0.log").read_text()


@pytest.mark.slow
def test_foreground_run_ends_by_itself_at_the_budget(tmp_path):
    """R2D2 from the original CSV (2 learners, 3 actors): the run ends at its budget, and
    the two learners, each replaying its own actors' sequences with their priorities and
    copying their target networks every 3,200 frames (5 updates of 2 x 8 x 40), stayed
    bit-identical."""
    session = "impala-test-fg"
    result = frontend(f"--workers_csv_path={ORIGINAL_CSV}", f"--tmux_sess={session}",
                      f"--logdir={tmp_path}", "--total_environment_frames=20000",
                      "--summary_interval_s=2", "--force", *CARTPOLE, "--algorithm=r2d2",
                      "--agent_name=MLPLSTMAgent", "--replay_ratio=1",
                      "--target_update_frames=3200", timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "actors alive 3/3" in result.stdout
    assert "learners ended" in result.stdout
    assert not tmux_has(session)
    assert not processes_mentioning(str(tmp_path))
    run_dir = tmp_path / "CartPole-v1_MLPLSTMAgent"
    assert last_value(run_dir / "logs.csv", "frames") >= 20_000
    assert last_value(run_dir / "logs.csv", "replay_fill") > 0
    assert read_csv(run_dir / "logs.csv")["td_error"].notna().all()
    assert assert_ranks_in_sync(run_dir)["updates"].iloc[-1] > 20  # several target copies


@pytest.mark.slow
def test_ctrl_c_in_a_foreground_run_stops_the_whole_run(tmp_path):
    session = "impala-test-ctrl-c"
    run_dir = tmp_path / CARTPOLE_RUN
    out_path = tmp_path / "frontend.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, FRONTEND, f"--workers_csv_path={ORIGINAL_CSV}",
             f"--tmux_sess={session}", f"--logdir={tmp_path}", "--force",
             "--total_environment_frames=100000000", "--summary_interval_s=1", *CARTPOLE],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
            start_new_session=True)
    try:
        wait_for(lambda: last_value(run_dir / "logs.csv", "frames") > 20_000, 120, "training")
        # What a terminal does on Ctrl-C: SIGINT to the foreground process group.
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=200) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    output = out_path.read_text()
    assert "interrupted: stopping the whole run" in output, output[-2000:]
    assert not tmux_has(session)
    wait_for(lambda: not processes_mentioning(str(tmp_path)), 10, "no process of the run left")
    learner_log = (run_dir / "learner-0.log").read_text()
    assert "received SIGUSR1" in learner_log and "checkpoint saved" in learner_log


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    if NETNS_SKIP:
        pytest.skip(f"multi-host tests need network namespaces: {NETNS_SKIP}")
    with NamespaceNetwork(tmp_path_factory.mktemp("net"), 3, password_hosts=(2,),
                          private_dir=tmp_path_factory.mktemp("each-host")) as net:
        yield net


def test_preflight_reports_unreachable_hosts_and_wrong_passwords(tmp_path, network):
    wrong_password = "not-the-password-123"
    path = tmp_path / "hosts.csv"
    path.write_text(HEADER + "learner,127.0.0.1,8001,,,,\n"
                    f"actor,{SUBNET}.9,9001,,,,\n"  # no host has this address
                    # Two rows on one host: each row's own password is tried.
                    f"actor,{SUBNET}.3,9003,,,root,{network.password}\n"
                    f"actor,{SUBNET}.3,9002,,,root,{wrong_password}\n")
    session = "impala-test-preflight"
    result = frontend(f"--workers_csv_path={path}", f"--tmux_sess={session}",
                      f"--logdir={tmp_path / 'runs'}", f"--ssh_config={network.ssh_config}",
                      *CARTPOLE, timeout=120)
    assert result.returncode == 1
    assert f"root@{SUBNET}.9:22: unreachable" in result.stderr
    assert "(CSV line 3)" in result.stderr and "(CSV line 5)" in result.stderr
    assert f"root@{SUBNET}.3:22: authentication with password failed (CSV line 5)" \
        in result.stderr
    assert "line 4" not in result.stderr
    assert "nothing was started" in result.stderr
    assert wrong_password not in result.stdout + result.stderr
    assert network.password not in result.stdout + result.stderr
    assert not tmux_has(session) and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_multi_host_cluster_over_ssh(tmp_path, network):
    """Ape-X on two learners on two namespace hosts under one mpirun, two actors on a third,
    all started over SSH: the ranks, each replaying its own actors' unrolls and copying its
    target network every 640 frames (5 updates of 2 x 8 x 8), stay bit-identical; --stop
    leaves nothing in any host. The run directory's path is a directory of its own on each
    host, as on separate machines: the key file reaches each by SSH, and each learner's
    files stay on its host."""
    hosts = network.hosts
    a, b, c = (h.address for h in hosts)
    path = tmp_path / "hosts.csv"
    path.write_text(HEADER + f"learner,{a},8001,,,,\nlearner,{b},8001,,,,\n"
                    f"actor,{c},9001,,,,\nactor,{c},9002,,,,\n")
    session = "impala-test-multihost"
    logdir = network.private_dir / tmp_path.name
    run_dir = logdir / CARTPOLE_RUN  # here; each host has its own copy of it
    flags = [f"--workers_csv_path={path}", f"--tmux_sess={session}", f"--logdir={logdir}",
             f"--ssh_config={network.ssh_config}", f"--mpi_iface={SUBNET}.0/24",
             "--total_environment_frames=100000000", *CARTPOLE, "--algorithm=apex",
             "--target_update_frames=640"]
    started = frontend(*flags, "--detach", "--force", timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "checking 3 remote host(s)" in started.stdout
    rank_dirs = [hosts[0].local_path(run_dir), hosts[1].local_path(run_dir)]
    try:
        wait_for(lambda: last_value(rank_dirs[1] / "learner-1.csv", "frames") > 20_000, 180,
                 "training on both learners")
        # Each learner ran in its own host's namespace, each actor in the third.
        pids = {h.name: h.pids() for h in network.hosts}
        assert all(len(p) > 1 for p in pids.values()), pids
        assert "listening on tcp://" + a in (rank_dirs[0] / "learner-0.log").read_text()
        assert "listening on tcp://" + b in (rank_dirs[1] / "learner-1.log").read_text()
        assert not (run_dir / "learner-0.csv").exists()  # each learner's files on its host
        status = frontend(*flags, "--status")
        assert status.stdout.count(" alive ") == 3, status.stdout
        # The keys went to each host over SSH, each to a file of its own; a peer without
        # them gets nothing from a learner in another namespace, the key file gets weights.
        assert "copied to 3 remote host(s)" in started.stdout
        local_keys = run_dir / "keys" / "run.keys"
        for host in hosts:
            copy = host.local_path(local_keys)
            assert copy.read_bytes() == local_keys.read_bytes(), host.name
            assert stat.S_IMODE(copy.stat().st_mode) == 0o600
            assert not copy.samefile(local_keys)
        for keys, expected in ((None, False), (run_dir, True)):
            sock = dealer_to(8001, keys, linger_ms=0, host=a)
            assert weights_answered(sock, timeout_ms=5000) == expected
            sock.close()
    finally:
        stopped = frontend(*flags, "--stop", timeout=200)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    wait_for(lambda: not any(network.stray_pids().values()), 30,
             "no process of the run left in any namespace")
    assert not tmux_has(session)
    time.sleep(0.5)
    assert not processes_mentioning(str(logdir))
    # Each actor's epsilons came from its place among all 8 environments of the run.
    assert "environments 4-7 of 8" in (run_dir / "actor-1.log").read_text()
    logs = read_csv(rank_dirs[0] / "logs.csv")
    assert logs["td_error"].notna().all() and logs["replay_fill"].iloc[-1] > 0
    synced = assert_ranks_in_sync(rank_dirs[0], same_rows=False, rank_dirs=rank_dirs)
    assert synced["updates"].iloc[-1] > 20


@pytest.mark.slow
def test_password_login_actor_is_started_and_stopped_through_the_relay(tmp_path, network):
    """An actor host that takes a password from the CSV: its actor starts through the
    paramiko relay and feeds a learner on this host; the password is on no command line and
    in nothing the run writes; --status and --stop reach it over the same login."""
    host = network.hosts[2]
    path = tmp_path / "hosts.csv"
    path.write_text(HEADER + f"learner,{BRIDGE_ADDRESS},8001,,,,\n"
                    f"actor,{host.address},9001,,,root,{network.password}\n")
    session = "impala-test-password"
    run_dir = tmp_path / "runs" / CARTPOLE_RUN
    flags = [f"--workers_csv_path={path}", f"--tmux_sess={session}",
             f"--logdir={tmp_path / 'runs'}", f"--ssh_config={network.ssh_config}",
             "--total_environment_frames=100000000", *CARTPOLE, "--algorithm=apex",
             "--target_update_frames=640"]
    started = frontend(*flags, "--detach", "--force", timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        wait_for(lambda: last_value(run_dir / "logs.csv", "frames") > 20_000, 180,
                 "training fed by the password host's actor")
        assert network.stray_pids()[host.name], "the actor runs in the password host"
        assert any("impala.launcher.relay" in line
                   for line in processes_mentioning(str(path)))
        assert not processes_mentioning(network.password)
        # The CSV is edited while the run goes on (a row inserted above the password host's):
        # --status and --stop use the login recorded at start, not the line number.
        path.write_text(HEADER + f"learner,{BRIDGE_ADDRESS},8001,,,,\n"
                        f"actor,{SUBNET}.9,9005,,,,\n"
                        f"actor,{host.address},9001,,,root,{network.password}\n")
        status = frontend(*flags, "--status")
        assert status.stdout.count(" alive ") == 2, status.stdout + status.stderr
    finally:
        stopped = frontend(*flags, "--stop", timeout=200)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    wait_for(lambda: not network.stray_pids()[host.name], 30,
             "no process of the run left in the password host")
    assert not tmux_has(session)
    wait_for(lambda: not processes_mentioning(str(tmp_path)), 10, "no process of the run left")
    said = started.stdout + started.stderr + status.stdout + stopped.stdout + stopped.stderr
    written = [p.read_bytes() for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert network.password not in said
    assert not any(network.password.encode() in content for content in written)
