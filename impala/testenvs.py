"""Small image environments that check an Atari-style learner end to end in minutes.

`impala/DelayedCue-v0` is built so that a learner solves it only if the whole Atari data
path is right:
- Each trial is three steps. The first screen shows a cue (a block on the left or on the
  right); the second is blank; the third shows a "go" bar and nothing else. Only the
  action taken on the "go" screen is rewarded: +1 if it points to the side of the cue, -1
  otherwise. So the right action can only be read from the stacked frames (the cue is two
  frames back), never from the newest frame alone.
- The reward arrives on the step after the rewarded action, as in Atari; a learner that
  pairs rewards with the wrong step learns nothing here.
- An episode is `trials` trials; the cue of each trial is random.
A random policy scores 0 on average; a perfect one scores `trials`.

`impala/DelayedCueLong-v0` pays the reward `delay` = 25 steps after the answer, more than
an unroll's 20 steps, as a Pong point is paid long after the paddle's move. Meanwhile the
screen shows whether the answer was right (a bar at the top, or at the bottom), as Pong's
ball shows where it is going. The answer is then learned only through the value of those
waiting screens, i.e. through the bootstrap value at unroll ends: a learner that mishandles
the bootstrap or the return across unroll boundaries learns nothing here.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

CUE, BLANK, GO, WAIT = 0, 1, 2, 3  # the phases of one trial
LEFT, RIGHT = 0, 1  # the actions that answer (a third action, 2, never does)


def blank_frame(size: int) -> np.ndarray:
    return np.full((size, size), 40, np.uint8)


def draw_cue(frame: np.ndarray, cue: int) -> None:
    """A block in the left or right half of a square frame."""
    size = len(frame)
    quarter = size // 4
    left = quarter // 2 if cue == LEFT else size // 2 + quarter // 2
    frame[quarter: 3 * quarter, left: left + quarter] = 220


def draw_go(frame: np.ndarray) -> None:
    """A bar across the bottom, the same whatever the cue."""
    frame[-(len(frame) // 4) // 2:, :] = 160


class CueTrialsEnv(gym.Env):
    """What the cue tasks share: grey frames `[size, size]` uint8 and episodes of `trials`
    trials, each with a random cue (LEFT or RIGHT). Subclasses draw `_frame()` and set a
    trial's own state up in `_start_trial()`."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, size: int, trials: int, num_actions: int,
                 render_mode: str | None = None):
        self.size, self.trials = size, trials
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, (size, size), np.uint8)
        self.action_space = gym.spaces.Discrete(num_actions)
        self._trial = 0
        self._cue = LEFT

    def _frame(self) -> np.ndarray:
        raise NotImplementedError

    def _start_trial(self) -> None:
        raise NotImplementedError

    def _new_trial(self) -> None:
        self._start_trial()
        self._cue = int(self.np_random.integers(2))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._trial = 0
        self._new_trial()
        return self._frame(), {}

    def render(self) -> np.ndarray:
        return np.repeat(self._frame()[:, :, None], 3, axis=2)


class DelayedCueEnv(CueTrialsEnv):
    """3 actions (left, right, no-op)."""

    def __init__(self, size: int = 36, trials: int = 10, delay: int = 0,
                 render_mode: str | None = None):
        super().__init__(size, trials, 3, render_mode)
        self.delay = delay  # steps between the answer and its reward
        self._phase = CUE
        self._waited = 0
        self._right = False  # whether the answer being waited on was right

    def _frame(self) -> np.ndarray:
        frame = blank_frame(self.size)
        quarter = self.size // 4
        if self._phase == CUE:
            draw_cue(frame, self._cue)
        elif self._phase == GO:
            draw_go(frame)
        elif self._phase == WAIT:  # the outcome to come: a block at the top or the bottom
            rows = slice(0, quarter) if self._right else slice(-quarter, None)
            frame[rows, quarter: 3 * quarter] = 100
        return frame

    def _start_trial(self) -> None:
        self._phase = CUE

    def step(self, action: int):
        if self._phase == GO:  # the answer; paid once `delay` more steps have passed
            self._right = int(action) == self._cue
            self._phase, self._waited = WAIT, 0
        elif self._phase == WAIT:
            self._waited += 1
        else:
            self._phase += 1
        reward = 0.0
        if self._phase == WAIT and self._waited >= self.delay:
            reward = 1.0 if self._right else -1.0
            self._trial += 1
            self._new_trial()
        terminated = self._trial >= self.trials
        return self._frame(), reward, terminated, False, {}


class RecallEnv(CueTrialsEnv):
    """`impala/Recall-v0`: a memory task that only a recurrent agent solves.

    Each trial shows a cue (a block on the left or the right) on its first screen only, then
    `gap` blank screens, then a "go" bar; the action on the "go" screen earns +1 if it
    points to the cue's side, else -1 (paid on the next step, as in Atari). With gap = 6 the
    cue is 7 steps back at "go", beyond a 4-frame stack, which then shows only blanks and
    the bar: a feed-forward agent can only guess (expected return 0), while one that
    remembers the cue scores `trials`, the spec's reward_threshold. Grey frames
    `[size, size]` uint8; 2 actions (left, right).

    An agent that sees its own last action can carry the cue in it (answer the cue at once,
    repeat that action through the blanks): a feed-forward value-based agent did, 3.9 of 5
    at 60K frames, which is why an agent can be built without those inputs.
    `impala/RecallShort-v0` (gap = 2: the cue is still in a 4-frame stack at "go") is the
    control a feed-forward agent does solve."""

    def __init__(self, size: int = 36, trials: int = 5, gap: int = 6,
                 render_mode: str | None = None):
        super().__init__(size, trials, 2, render_mode)
        self.gap = gap
        self._step_in_trial = 0  # 0: cue, 1..gap: blank, gap + 1: go

    def _frame(self) -> np.ndarray:
        frame = blank_frame(self.size)
        if self._step_in_trial == 0:
            draw_cue(frame, self._cue)
        elif self._step_in_trial == self.gap + 1:
            draw_go(frame)
        return frame

    def _start_trial(self) -> None:
        self._step_in_trial = 0

    def step(self, action: int):
        reward = 0.0
        if self._step_in_trial == self.gap + 1:  # the answer
            reward = 1.0 if int(action) == self._cue else -1.0
            self._trial += 1
            self._new_trial()
        else:
            self._step_in_trial += 1
        terminated = self._trial >= self.trials
        return self._frame(), reward, terminated, False, {}


def register() -> None:
    if "impala/DelayedCue-v0" not in gym.registry:
        gym.register("impala/DelayedCue-v0", entry_point=DelayedCueEnv, max_episode_steps=400)
    if "impala/DelayedCueLong-v0" not in gym.registry:
        gym.register("impala/DelayedCueLong-v0", entry_point=DelayedCueEnv,
                     kwargs={"trials": 5, "delay": 25}, max_episode_steps=400)
    if "impala/Recall-v0" not in gym.registry:
        gym.register("impala/Recall-v0", entry_point=RecallEnv, max_episode_steps=400,
                     reward_threshold=5.0)
    if "impala/RecallShort-v0" not in gym.registry:
        gym.register("impala/RecallShort-v0", entry_point=RecallEnv, kwargs={"gap": 2},
                     max_episode_steps=400, reward_threshold=5.0)
