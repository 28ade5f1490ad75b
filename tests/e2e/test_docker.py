"""The project's image, built by `make docker` with a real Docker engine from a base made with
debootstrap, and a cluster of its containers started by the frontend from a CSV: two learners
under one mpirun and two actors, training CartPole to its budget with the learners in sync,
through an actor killed inside its container and started again there."""

from __future__ import annotations

import subprocess

import pytest

from tests.docker_engine import (
    ContainerNetwork,
    DockerEngine,
    docker,
    make_base_image,
    unavailable_reason,
)
from tests.faults import foreground_run, pid_in, text_of
from tests.frontend import CARTPOLE, tmux_has
from tests.helpers import CARTPOLE_RUN, ROOT, assert_ranks_in_sync, last_value, wait_for

# The test's own name, so `make docker` here never replaces a user's `impala-cpu` image.
IMAGE = "impala-test-cpu"
SKIP = unavailable_reason()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(SKIP is not None, reason=f"needs a Docker engine: {SKIP}")]


def image_id(name: str) -> str:
    """The image's id, or '' where there is none of that name."""
    return docker("image", "inspect", "-f", "{{.Id}}", name, check=False).stdout.strip()


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """`make docker BASE=<a debootstrapped bookworm> IMAGE=<the test's name>`, as a user with
    no registry would."""
    workdir = tmp_path_factory.mktemp("docker")
    with DockerEngine(workdir / "engine"):
        base = make_base_image(workdir)
        users_image = image_id("impala-cpu")
        built = subprocess.run(["make", "docker", f"BASE={base}", f"IMAGE={IMAGE}"], cwd=ROOT,
                               text=True, capture_output=True, timeout=900)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        assert f"built {IMAGE}" in built.stdout
        assert image_id("impala-cpu") == users_image  # a user's image of the default name
        yield IMAGE


def test_the_image_runs_the_project_from_its_working_directory(image):
    shown = docker("run", "--rm", image, "sh", "-c",
                   "pwd && command -v python && python -c 'import impala.cli, horovod.torch'"
                   " && ls /etc/ssh/ssh_host_ed25519_key")
    assert shown.stdout.split()[:2] == ["/opt/impala", "/opt/impala/.venv/bin/python"]
    # No two containers share host keys: each makes its own at its first start.
    keys = [docker("run", "--rm", image, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
            for _ in range(2)]
    assert keys[0] != keys[1]


def test_a_cluster_of_containers_trains_with_two_learners_in_sync(image, tmp_path):
    """Container 0 and 1 run a learner each (one mpirun, launched here over SSH), container 2
    two actors; the frontend runs here, as on a login machine that reaches the network."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    logdir = tmp_path / "runs"  # each container sees a directory of its own at this path
    with ContainerNetwork("impala-test-net", image, 3, key.with_suffix(".pub"), logdir,
                          tmp_path / "containers") as net:
        ssh_config = tmp_path / "ssh_config"
        ssh_config.write_text(
            f"Host {net.SUBNET}.*\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
        hosts = tmp_path / "hosts.csv"
        hosts.write_text(  # the columns and values docker/README.md gives
            "job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password,workdir\n"
            f"learner,{net.address(0)},8001,,22,root,,/opt/impala\n"
            f"learner,{net.address(1)},8001,,22,root,,/opt/impala\n"
            f"actor,{net.address(2)},9001,,22,root,,/opt/impala\n"
            f"actor,{net.address(2)},9002,,22,root,,/opt/impala\n")
        session = "impala-test-docker"
        flags = [f"--workers_csv_path={hosts}", f"--tmux_sess={session}", f"--logdir={logdir}",
                 f"--ssh_config={ssh_config}", f"--mpi_iface={net.SUBNET}.0/24",
                 "--total_environment_frames=80000", "--summary_interval_s=2", "--force",
                 *CARTPOLE]
        run_dir = logdir / CARTPOLE_RUN
        rank_dirs = [net.local_path(0, run_dir), net.local_path(1, run_dir)]
        actor_pidfile = net.local_path(2, run_dir / "pids" / "actor-0.pid")
        out = tmp_path / "frontend.out"
        with foreground_run(out, flags) as proc:
            wait_for(lambda: last_value(rank_dirs[0] / "logs.csv", "frames") > 20_000, 240,
                     "training in the containers")
            # Killed inside its container: its supervisor there starts it again.
            first = pid_in(actor_pidfile)
            docker("exec", net.containers[2], "kill", "-9", str(first))
            wait_for(lambda: pid_in(actor_pidfile) != first, 60, "actor-0 started again")
            assert proc.wait(timeout=300) == 0, text_of(out)[-3000:]
        output = text_of(out)
        assert "checking 3 remote host(s)" in output
        assert "learners ended" in output
        assert "restart 1 in" in text_of(run_dir / "actor-0.log")
        assert not tmux_has(session)
        for index in range(3):  # the run left nothing behind but each container's sshd
            assert all("sshd" in p for p in net.processes(index)), net.processes(index)
        assert last_value(rank_dirs[0] / "logs.csv", "frames") >= 80_000
        assert (rank_dirs[0] / "checkpoint.pt").exists()
        assert assert_ranks_in_sync(run_dir, rank_dirs=rank_dirs)["updates"].iloc[-1] > 20
