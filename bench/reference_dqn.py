"""A minimal single-process double DQN, written from the papers, to tell Ape-X's algorithm
from its plumbing: the toolkit's environment wrappers (impala.envs.create_env), and nothing
else of it: no actors, no wire, no unroll replay, no Horovod, no dueling, no priorities.

- Mnih et al. 2015 (Nature DQN): the conv net (32x8/4, 64x4/2, 64x3/1, 512), an
  epsilon-greedy agent annealed linearly, a replay of single transitions sampled uniformly,
  a Huber loss, rewards clipped to their sign, a target network copied periodically.
- van Hasselt et al. 2016 (double DQN): the online network picks the bootstrap action, the
  target network values it.
- n-step returns (Hessel et al. 2018, Rainbow): y = sum_{k<n} g^k r_{t+k} + g^n Q'(s_{t+n}, a*),
  cut at an episode end. Rainbow's Atari settings are the defaults here: Adam 6.25e-5
  (epsilon 1.5e-4), n = 3, batch 32 every 4 agent steps, learning from 80K frames, epsilon
  from 1 to 0.01 over 250K frames, a target copy every 32K frames.

A lost life ends the learner's episode (no bootstrap past it), as the toolkit's actors
report it. One CSV row per episode (frames, raw return) goes to --episodes_csv, and a line
with the mean of the last 30 every --print_every episodes.

  .venv/bin/python bench/reference_dqn.py --level_name=PongNoFrameskip-v4 --frames=3000000
  .venv/bin/python bench/reference_dqn.py --level_name=impala/DelayedCueLong-v0 \\
      --frames=100000 --learning_starts=2000 --epsilon_frames=20000 --target_update_frames=2880
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from collections import deque
from pathlib import Path

import common  # noqa: F401 - puts the project on sys.path
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from impala.envs import EnvConfig, create_env, env_info


def q_network(observation_shape: tuple[int, ...], num_actions: int) -> nn.Module:
    """Nature DQN's network for stacked frames [C, H, W] (uint8, scaled here); two tanh
    layers of 64 for vectors."""
    if len(observation_shape) == 1:
        return nn.Sequential(nn.Linear(observation_shape[0], 64), nn.Tanh(),
                             nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, num_actions))
    convs = nn.Sequential(
        nn.Conv2d(observation_shape[0], 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())
    with torch.no_grad():
        flat = convs(torch.zeros(1, *observation_shape)).shape[-1]
    return nn.Sequential(convs, nn.Linear(flat, 512), nn.ReLU(), nn.Linear(512, num_actions))


def as_input(observations: np.ndarray) -> torch.Tensor:
    """[N, *obs] as the network takes it: frames scaled to [0, 1]."""
    x = torch.from_numpy(observations)
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()


class TransitionReplay:
    """The last `capacity` steps of one environment, in order: step t holds s_t, a_t, the
    clipped reward r_t that followed and whether the learner's episode ended after it.
    n-step transitions are read off consecutive steps when sampled."""

    def __init__(self, capacity: int, observation: np.ndarray, seed: int) -> None:
        self.capacity = capacity
        self.observations = np.zeros((capacity, *observation.shape), observation.dtype)
        self.actions = np.zeros(capacity, np.int64)
        self.rewards = np.zeros(capacity, np.float32)
        self.ends = np.zeros(capacity, bool)
        self.steps = 0  # steps stored so far; step t lives in slot t % capacity
        self.rng = np.random.default_rng(seed)

    def add(self, observation: np.ndarray, action: int, reward: float, end: bool) -> None:
        slot = self.steps % self.capacity
        self.observations[slot] = observation
        self.actions[slot], self.rewards[slot], self.ends[slot] = action, reward, end
        self.steps += 1

    def sample(self, batch: int, n: int, gamma: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(s_t, a_t, n-step return, gamma^m or 0 where an episode ended first, s_{t+m})
        for `batch` steps t drawn uniformly among those whose next n steps are stored."""
        oldest = max(0, self.steps - self.capacity)
        t = self.rng.integers(oldest, self.steps - n, size=batch)
        returns = np.zeros(batch, np.float32)
        discount = np.ones(batch, np.float32)
        for k in range(n):
            slot = (t + k) % self.capacity
            returns += discount * self.rewards[slot]
            discount *= np.where(self.ends[slot], 0.0, gamma).astype(np.float32)
        slots = t % self.capacity
        return (self.observations[slots], self.actions[slots], returns, discount,
                self.observations[(t + n) % self.capacity])


def epsilon_at(frames: int, epsilon_frames: int, final: float = 0.01) -> float:
    return max(final, 1.0 - (1.0 - final) * frames / max(epsilon_frames, 1))


def train(args: argparse.Namespace) -> list[tuple[int, float]]:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    settings = EnvConfig(args.level_name)
    env = create_env(settings, seed=args.seed)
    info = env_info(env, settings)
    repeat = info.frames_per_step
    online = q_network(info.observation_shape, info.num_actions)
    target = q_network(info.observation_shape, info.num_actions)
    target.load_state_dict(online.state_dict())
    optimizer = torch.optim.Adam(online.parameters(), lr=args.learning_rate, eps=1.5e-4)
    observation, _ = env.reset()
    observation = np.asarray(observation)
    replay = TransitionReplay(args.replay_size, observation, args.seed)
    rng = np.random.default_rng(args.seed)
    episodes: list[tuple[int, float]] = []
    recent: deque[float] = deque(maxlen=30)
    frames, started = 0, time.time()
    while frames < args.frames:
        if rng.random() < epsilon_at(frames, args.epsilon_frames):
            action = int(rng.integers(info.num_actions))
        else:
            with torch.no_grad():
                action = int(online(as_input(observation[None])).argmax())
        next_observation, reward, terminated, truncated, step_info = env.step(action)
        game_over = terminated or truncated
        end = game_over or bool(step_info.get("life_lost", False))
        replay.add(observation, action, float(np.sign(reward)), end)
        frames += repeat
        if game_over:
            episode_return = float(step_info["episode"]["r"])
            episodes.append((frames, episode_return))
            recent.append(episode_return)
            if len(episodes) % args.print_every == 0:
                print(f"frames {frames:>9,}  episodes {len(episodes):>5}  last-30 mean "
                      f"{np.mean(recent):+6.2f}  eps {epsilon_at(frames, args.epsilon_frames):.3f}"
                      f"  {frames / (time.time() - started):,.0f} frames/s", flush=True)
            next_observation, _ = env.reset()
        observation = np.asarray(next_observation)
        steps = frames // repeat
        if frames >= args.learning_starts and steps % args.update_every == 0:
            learn(online, target, optimizer, replay, args)
        if frames // args.target_update_frames > (frames - repeat) // args.target_update_frames:
            target.load_state_dict(online.state_dict())
    env.close()
    return episodes


def learn(online: nn.Module, target: nn.Module, optimizer: torch.optim.Optimizer,
          replay: TransitionReplay, args: argparse.Namespace) -> None:
    """One double-DQN step on a uniform batch of n-step transitions (Huber loss)."""
    states, actions, returns, discounts, last_states = replay.sample(
        args.batch_size, args.n_step, args.discounting)
    with torch.no_grad():
        last = as_input(last_states)
        best = online(last).argmax(dim=1, keepdim=True)
        bootstrap = target(last).gather(1, best).squeeze(1)
        targets = torch.from_numpy(returns) + torch.from_numpy(discounts) * bootstrap
    taken = online(as_input(states)).gather(1, torch.from_numpy(actions)[:, None]).squeeze(1)
    loss = F.smooth_l1_loss(taken, targets)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(online.parameters(), 10.0)
    optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--level_name", default="PongNoFrameskip-v4")
    parser.add_argument("--frames", type=int, default=3_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--learning_rate", type=float, default=6.25e-5)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--update_every", type=int, default=4, help="agent steps per update")
    parser.add_argument("--n_step", type=int, default=3)
    parser.add_argument("--discounting", type=float, default=0.99)
    parser.add_argument("--replay_size", type=int, default=100_000, help="transitions")
    parser.add_argument("--learning_starts", type=int, default=80_000, help="frames")
    parser.add_argument("--epsilon_frames", type=int, default=250_000)
    parser.add_argument("--target_update_frames", type=int, default=32_000)
    parser.add_argument("--print_every", type=int, default=10, help="episodes")
    parser.add_argument("--episodes_csv", type=Path, default=None)
    args = parser.parse_args()
    if args.n_step < 1 or args.target_update_frames < 1 or args.frames < 1:
        parser.error("--n_step, --target_update_frames and --frames must be >= 1")
    episodes = train(args)
    if args.episodes_csv is not None:
        with args.episodes_csv.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["frames", "episode_return"])
            writer.writerows(episodes)
    last = [r for _, r in episodes[-30:]]
    print(f"done: {len(episodes)} episodes, last-30 mean "
          f"{np.mean(last) if last else math.nan:+.2f}")


if __name__ == "__main__":
    main()
