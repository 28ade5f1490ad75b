"""impala.cli: how an actor's process ends."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

ACTOR_END = """
import atexit, logging
from impala.cli import exit_now
from impala.logs import setup_logging
setup_logging(None, "actor-0")
atexit.register(lambda: print("interpreter teardown ran", flush=True))
logging.getLogger("experiment").info("the last line an actor logs")
exit_now()
"""


def test_an_actor_ends_without_the_interpreters_teardown_and_keeps_its_last_log_line():
    """A stopped actor skips the teardown (a final garbage collection that can outlast the
    supervisor's grace on a loaded machine) and exits 0, its log written."""
    ended = subprocess.run([sys.executable, "-c", ACTOR_END], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert ended.returncode == 0, ended.stderr
    assert "the last line an actor logs" in ended.stdout + ended.stderr
    assert "interpreter teardown ran" not in ended.stdout
