"""Value-based targets for Ape-X and R2D2, as pure functions of time-major tensors.

An unroll holds steps 0..T (unroll/layout.py's T+1 convention): step t has the observation x_t,
the reward r_t that arrived with it, `done_t` (x_t starts a new episode: the one before
ended between t-1 and t) and the action a_t taken on it. The transition of step t is
(x_t, a_t) -> r_{t+1}, x_{t+1}, with no bootstrap past an episode end.

n-step double-Q target of step t (Hasselt 2016; Horgan et al. 2018, Ape-X, eq. 1), with
the horizon m = min(n, T - t) cut at the unroll's last step:
    G_t = sum_{k<m} gamma^k r_{t+1+k} c_{t,k} + gamma^m c_{t,m} h^-1(Q'(x_{t+m}, a*)),
    a* = argmax_a Q(x_{t+m}, a),  y_t = h(G_t),
where c_{t,k} is 1 while no episode ended in steps t+1..t+k (else 0), Q the online and Q'
the target network, and h the value rescaling of Kapturowski et al. 2019 (R2D2; the
identity for Ape-X). Nothing here builds a graph: targets are computed under no_grad.
"""

from __future__ import annotations

import torch

from impala.algorithms.value import QLossConfig
from impala.rewards import clip_rewards

RESCALE_EPSILON = 1e-3  # R2D2's epsilon in h(x)


def dueling_q(values: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Q = V + A - mean_a A (Wang et al. 2016): values [T, B], advantages [T, B, A] ->
    [T, B, A]. The agents' baseline head is V and their action head is A."""
    return values.unsqueeze(-1) + advantages - advantages.mean(dim=-1, keepdim=True)


def rescale(x: torch.Tensor, eps: float = RESCALE_EPSILON) -> torch.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def unrescale(x: torch.Tensor, eps: float = RESCALE_EPSILON) -> torch.Tensor:
    """h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root**2 - 1.0)


@torch.no_grad()
def n_step_double_q_targets(rewards: torch.Tensor, done: torch.Tensor,
                            online_q: torch.Tensor, target_q: torch.Tensor,
                            discounting: float, n: int, rescaled: bool) -> torch.Tensor:
    """Targets y_t for t = 0..T-1 (see the module docstring).

    Args:
      rewards, done: [T+1, B] as the unroll holds them (reward and done of step t arrive
        with x_t; already clipped as the loss wants).
      online_q, target_q: [T+1, B, A] Q(x_t, .) of the online and the target network.
      discounting: gamma; n: the largest horizon; rescaled: apply h and h^-1.
    Returns: [T, B].
    """
    if n < 1:
        raise ValueError(f"n-step horizon must be >= 1, got {n}")
    steps = rewards.shape[0] - 1  # T
    best = online_q.argmax(dim=-1, keepdim=True)  # a* at every step [T+1, B, 1]
    bootstrap = target_q.gather(-1, best).squeeze(-1)  # Q'(x_s, a*_s) [T+1, B]
    if rescaled:
        bootstrap = unrescale(bootstrap)
    starts = torch.arange(steps, device=rewards.device)  # t = 0..T-1
    total = torch.zeros(steps, *rewards.shape[1:], dtype=torch.float32, device=rewards.device)
    scale = torch.ones_like(total)  # gamma^k c_{t,k}
    horizon = torch.zeros(steps, dtype=torch.long, device=rewards.device)  # m per t
    for k in range(n):
        index = starts + 1 + k  # the step that brings r_{t+1+k}
        valid = index <= steps
        index = index.clamp(max=steps)
        shaped = valid.view(-1, *([1] * (total.dim() - 1)))
        total += torch.where(shaped, scale * rewards[index].float(), 0.0)
        scale = torch.where(shaped, scale * discounting * (1.0 - done[index].float()), scale)
        horizon += valid.long()
    total += scale * bootstrap[starts + horizon]
    return rescale(total) if rescaled else total


def td_errors(q_taken_from: torch.Tensor, online_q: torch.Tensor, target_q: torch.Tensor,
              rewards: torch.Tensor, done: torch.Tensor, actions: torch.Tensor,
              config: QLossConfig, trained: tuple[int, int]) -> torch.Tensor:
    """delta_t = y_t - Q(x_t, a_t) over the trained steps [first, end): [T', B].

    `q_taken_from` [T+1, B, A] gives Q(x_t, a_t) (it may carry the gradient); `online_q`
    picks the bootstrap action and `target_q` values it, both [T+1, B, A]; rewards, done,
    actions [T+1, B] as the unroll holds them (rewards raw: clipped here as `config`
    says)."""
    targets = n_step_double_q_targets(
        clip_rewards(rewards.float(), config.reward_clipping), done, online_q, target_q,
        config.discounting, config.n_step, config.rescaled)
    first, end = trained
    taken = q_taken_from[first:end].gather(-1, actions[first:end].long().unsqueeze(-1))
    return targets[first:end] - taken.squeeze(-1)


def epsilon_greedy(q: torch.Tensor, epsilons: torch.Tensor) -> torch.Tensor:
    """Greedy actions in Q [N, A], except a uniformly random one with each row's epsilon
    ([N]): [N] int64."""
    greedy = q.argmax(dim=-1)
    explore = torch.rand(len(greedy)) < epsilons
    return torch.where(explore, torch.randint(q.shape[-1], (len(greedy),)), greedy)


def trained_steps(unroll_length: int, burn_in: int, overlap: int) -> tuple[int, int]:
    """The steps [first, end) whose transitions an unroll trains on.

    Unrolls of one environment overlap by `overlap` steps (the next starts at step
    T + 1 - overlap), so with a burn-in of b steps the range [b, T + 1 - overlap + b) trains
    every transition of the stream exactly once; the last one keeps `overlap - b` steps of
    look-ahead (fewer than n cut the horizon at step T)."""
    first, end = burn_in, unroll_length + 1 - overlap + burn_in
    if not 0 <= first < end <= unroll_length:
        raise ValueError(f"no trainable steps: unroll_length {unroll_length}, burn_in "
                         f"{burn_in}, overlap {overlap} give steps [{first}, {end})")
    return first, end


def sequence_priorities(td_errors: torch.Tensor, eta: float) -> torch.Tensor:
    """eta max_t |delta_t| + (1 - eta) mean_t |delta_t| per column: td_errors [T', B] ->
    [B] (R2D2 uses eta = 0.9; eta = 0 is the mean, proportional to the sum over a fixed
    number of transitions)."""
    magnitude = td_errors.abs()
    return eta * magnitude.max(dim=0).values + (1.0 - eta) * magnitude.mean(dim=0)


def exploration_epsilons(first: int, count: int, total: int, base: float = 0.4,
                         alpha: float = 7.0) -> torch.Tensor:
    """Ape-X's per-environment epsilon eps_i = base^(1 + alpha i / (N - 1)) for environments
    first..first+count-1 of the N = `total` of a run ([count]); one environment gets base."""
    if not (0 <= first and first + count <= total):
        raise ValueError(f"environments {first}..{first + count - 1} are not among the "
                         f"{total} of the run")
    index = torch.arange(first, first + count, dtype=torch.float64)
    exponent = 1.0 + alpha * index / max(total - 1, 1)
    return (base**exponent).float()
