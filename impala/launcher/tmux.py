"""The run's tmux session (libtmux): a `learners` window with the mpirun pane, and actor
windows of up to ACTORS_PER_WINDOW panes, each titled with role, host and port."""

from __future__ import annotations

from dataclasses import dataclass

import libtmux

ACTORS_PER_WINDOW = 4


class TmuxSessionExists(RuntimeError):
    pass


@dataclass(frozen=True)
class PaneSpec:
    title: str  # e.g. "actor-3 10.0.0.2:9001"
    command: str  # one shell line
    cwd: str


def _fresh_server_session(name: str, force: bool) -> libtmux.Server:
    server = libtmux.Server()
    if server.has_session(name):
        if not force:
            raise TmuxSessionExists(
                f"tmux session {name!r} exists already: attach with `tmux attach -t {name}`, "
                f"stop that run with --stop, or pass --force to replace the session")
        server.kill_session(name)
    return server


def _prepare_window(window: libtmux.Window) -> None:
    """Keep an exited pane on screen with its last lines; show pane titles on borders."""
    for option, value in (("remain-on-exit", "on"), ("pane-border-status", "top"),
                          ("pane-border-format", " #{pane_index}: #{pane_title} ")):
        window.cmd("set-option", "-w", option, value)


def _title(pane: libtmux.Pane, title: str, panes: dict[str, str]) -> None:
    pane.cmd("select-pane", "-T", title)
    panes[title] = pane.pane_id


def start_panes(session_name: str, learners: PaneSpec, actors: list[PaneSpec],
                force: bool = False) -> dict[str, str]:
    """Create the session and run every command; returns {title: pane id}."""
    server = _fresh_server_session(session_name, force)
    session = server.new_session(session_name=session_name, window_name="learners",
                                 start_directory=learners.cwd, window_command=learners.command,
                                 x=220, y=50)
    panes: dict[str, str] = {}
    learners_window = session.windows[0]
    _prepare_window(learners_window)
    _title(learners_window.panes[0], learners.title, panes)
    for start in range(0, len(actors), ACTORS_PER_WINDOW):
        chunk = actors[start:start + ACTORS_PER_WINDOW]
        window = session.new_window(window_name=f"actors-{start // ACTORS_PER_WINDOW}",
                                    start_directory=chunk[0].cwd, window_shell=chunk[0].command)
        _prepare_window(window)
        _title(window.panes[0], chunk[0].title, panes)
        for spec in chunk[1:]:
            _title(window.split(start_directory=spec.cwd, shell=spec.command), spec.title, panes)
            window.select_layout("tiled")
    learners_window.select()
    return panes


def kill_session(name: str) -> bool:
    server = libtmux.Server()
    if server.has_session(name):
        server.kill_session(name)
        return True
    return False
