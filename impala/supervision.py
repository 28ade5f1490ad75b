"""When a supervised process that exited is started again: the one restart rule that every
supervisor of the project follows (an actor's, on any host; the learner group's).

Pure: it starts nothing. A supervisor asks `after_exit` what to do each time its process
ends, and gets either a delay before the next start or the reason to leave it down.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
# A supervisor that left its process down exits with this status, so a supervisor above it
# (the local end of an ssh or srun) leaves it down too instead of starting it again.
LEFT_DOWN_STATUS = 86
# An actor is left down after this many restarts within this many seconds.
ACTOR_RESTART_LIMIT = 5
ACTOR_RESTART_WINDOW_S = 600.0


@dataclass(frozen=True)
class Decision:
    restart: bool
    delay_s: float = 0.0
    reason: str = ""  # why it is left down, when restart is False


@dataclass
class RestartPolicy:
    """Restart on exit, waiting longer after each exit in a row (`BACKOFF_S`), and leave
    the process down after `limit` restarts within `window_s` seconds (math.inf: within
    the whole run, as torchrun's --max-restarts counts).

    `restart_on_success`: an actor is started again whatever its status (only a stop
    request ends it); a learner group that exits 0 has finished its run.
    """

    limit: int
    window_s: float = math.inf
    restart_on_success: bool = True
    backoff_s: tuple[float, ...] = BACKOFF_S
    _exits: deque[float] = field(default_factory=deque, init=False, repr=False)
    restarts: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.limit < 0:
            raise ValueError(f"a restart limit must be >= 0, got {self.limit}")
        if not self.window_s > 0:
            raise ValueError(f"a restart window must be > 0 seconds, got {self.window_s}")

    def after_exit(self, status: int, now: float) -> Decision:
        """What to do about a process that exited with `status` at time `now` (seconds)."""
        if status == 0 and not self.restart_on_success:
            return Decision(False, reason="finished")
        if status == LEFT_DOWN_STATUS:
            return Decision(False, reason="left down by the supervisor where it ran")
        self._exits.append(now)
        while self._exits and now - self._exits[0] > self.window_s:
            self._exits.popleft()
        if len(self._exits) > self.limit:
            within = ("" if math.isinf(self.window_s)
                      else f" within {self.window_s:g} s")
            return Decision(False, reason=f"exited {len(self._exits)} times{within} "
                                          f"(last status {status}); restart limit {self.limit}")
        delay = self.backoff_s[min(len(self._exits) - 1, len(self.backoff_s) - 1)]
        self.restarts += 1
        return Decision(True, delay_s=delay)
