"""A real Docker engine for the tests: `dockerd` started here where none runs (and stopped
again by whoever started it), a Debian base image made with debootstrap from Debian's mirror
(no registry is needed), and containers on a network of their own, each removed again by
the test that made it. Nothing that was there before a test is touched."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BASE_IMAGE = "impala-test-base:bookworm"
# Debian bookworm, as the official python:3.11-slim-bookworm: Python 3.11 with venv.
DEBOOTSTRAP = ["debootstrap", "--variant=minbase", "--include=python3-minimal,python3-venv",
               "bookworm"]
MIRROR = "http://deb.debian.org/debian"


def docker(*args: str, check: bool = True, timeout: float = 120,
           **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check,
                          timeout=timeout, **kwargs)


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "starting dockerd and debootstrap need root"
    for tool in ("docker", "dockerd", "debootstrap"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup.sh --test-engines installs it)"
    return None


def engine_answers() -> bool:
    return docker("info", check=False, timeout=20).returncode == 0


class DockerEngine:
    """The running engine, or one started here (and stopped on exit) where none runs."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> DockerEngine:
        if engine_answers():
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / "dockerd.log", "w") as log:  # dockerd keeps its own copy
            self.process = subprocess.Popen(
                ["dockerd", "--exec-root", str(self.workdir / "exec"),
                 "--pidfile", str(self.workdir / "dockerd.pid")],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while not engine_answers():
            if self.process.poll() is not None or time.time() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("dockerd did not start: "
                                   + (self.workdir / "dockerd.log").read_text()[-2000:])
            time.sleep(0.5)
        return self

    def __exit__(self, *exc) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)  # dockerd stops its containerd too
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def image_exists(name: str) -> bool:
    return docker("image", "inspect", name, check=False).returncode == 0


def make_base_image(workdir: Path) -> str:
    """BASE_IMAGE from Debian's mirror (~1 min), unless an earlier run left it."""
    if image_exists(BASE_IMAGE):
        return BASE_IMAGE
    root = workdir / "rootfs"
    subprocess.run([*DEBOOTSTRAP, str(root), MIRROR], check=True, capture_output=True,
                   timeout=600)
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    docker("import", "-", BASE_IMAGE, stdin=tar.stdout, timeout=300)
    tar.wait()
    shutil.rmtree(root)
    return BASE_IMAGE


class ContainerNetwork:
    """Containers of `image` at SUBNET.11, .12, ... on a Docker network of their own, each
    running the image's sshd with `public_key` authorised for root, and seeing a directory
    of its own at `private_dir` (as separate machines would)."""

    SUBNET = "10.213.88"

    def __init__(self, name: str, image: str, count: int, public_key: Path,
                 private_dir: Path, workdir: Path):
        self.name, self.image, self.count = name, image, count
        self.public_key, self.private_dir, self.workdir = public_key, private_dir, workdir
        self.containers: list[str] = []

    def address(self, index: int) -> str:
        return f"{self.SUBNET}.{11 + index}"

    def local_path(self, index: int, path: Path) -> Path:
        """Where this machine sees container `index`'s file at `path` (under private_dir)."""
        return self.workdir / f"private-{index}" / Path(path).relative_to(self.private_dir)

    def __enter__(self) -> ContainerNetwork:
        try:
            docker("network", "create", "--subnet", f"{self.SUBNET}.0/24", self.name)
            for index in range(self.count):
                copy = self.workdir / f"private-{index}"
                copy.mkdir(parents=True)
                container = f"{self.name}-{index}"
                docker("run", "-d", "--name", container, "--network", self.name,
                       "--ip", self.address(index),
                       "-v", f"{self.public_key}:/root/.ssh/authorized_keys:ro",
                       "-v", f"{copy}:{self.private_dir}", self.image)
                self.containers.append(container)
            for index in range(self.count):
                self._wait_for_sshd(index)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_for_sshd(self, index: int, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while True:
            try:
                with socket.create_connection((self.address(index), 22), timeout=2) as conn:
                    if conn.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if time.time() > deadline:
                logs = docker("logs", self.containers[index], check=False)
                raise RuntimeError(f"sshd in {self.containers[index]} did not come up: "
                                   + (logs.stdout + logs.stderr)[-2000:])
            time.sleep(0.3)

    def processes(self, index: int) -> list[str]:
        """Command lines of the processes in container `index`."""
        out = docker("top", self.containers[index], "-o", "pid,args").stdout.splitlines()
        return [line.split(None, 1)[1] for line in out[1:]]

    def __exit__(self, *exc) -> None:
        if self.containers:
            docker("rm", "-f", *self.containers, check=False)
        docker("network", "rm", self.name, check=False)
