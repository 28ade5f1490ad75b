"""Run one remote command over paramiko and relay its output: the pane command for actor
hosts that log in with a password (OpenSSH cannot take one non-interactively).

  python -m impala.launcher.relay --csv hosts.csv --line 5 [--ssh_config F] -- command...

The password is read from the CSV here, so it is on no command line and in no environment.
The remote command gets a pseudo-terminal, so closing the channel (SIGTERM/SIGINT/SIGHUP
here) hangs it up and the remote process ends.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading

from impala.launcher.cluster import read_cluster_csv
from impala.launcher.ssh import SshOptions, connect, host_access
from impala.signals import act_on_signals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m impala.launcher.relay")
    parser.add_argument("--csv", required=True)
    parser.add_argument("--line", type=int, required=True)
    parser.add_argument("--ssh_config", default="")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    workers = {w.line: w for w in read_cluster_csv(args.csv)}
    if args.line not in workers:
        parser.error(f"{args.csv} has no worker on line {args.line}")
    access = host_access(workers[args.line], SshOptions(config_file=args.ssh_config))
    client = connect(access)
    channel = client.get_transport().open_session()
    channel.get_pty()
    channel.exec_command(shlex.join(command))
    stopping = threading.Event()

    def hang_up(_signum: int) -> None:
        stopping.set()
        channel.close()

    act_on_signals((signal.SIGTERM, signal.SIGINT, signal.SIGHUP), hang_up)
    while not stopping.is_set():
        data = channel.recv(65536)
        if not data:
            break
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    status = channel.recv_exit_status() if not stopping.is_set() else 143
    client.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
