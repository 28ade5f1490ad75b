"""V-trace off-policy targets (Espeholt et al., 2018, section 4.1), on time-major tensors.

All inputs are `[T, B]` (time-major) except `bootstrap_value`, which is `[B]`, and the
policy logits, which are `[T, B, A]`. Nothing here builds a graph: the returns are
targets, so they are computed under `torch.no_grad()`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


class VTraceReturns(NamedTuple):
    vs: torch.Tensor  # [T, B] V-trace value targets v_s
    pg_advantages: torch.Tensor  # [T, B] rho_s * (r_s + gamma_s * v_{s+1} - V(x_s))


class VTraceFromLogitsReturns(NamedTuple):
    vs: torch.Tensor  # [T, B]
    pg_advantages: torch.Tensor  # [T, B]
    log_rhos: torch.Tensor  # [T, B] log pi(a|x) - log mu(a|x)
    behavior_action_log_probs: torch.Tensor  # [T, B]
    target_action_log_probs: torch.Tensor  # [T, B]


def _check_rank(name: str, tensor: torch.Tensor, rank: int) -> None:
    if tensor.dim() != rank:
        raise ValueError(
            f"vtrace: {name} must have rank {rank} (time-major), got shape {tuple(tensor.shape)}"
        )


def action_log_probs(policy_logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Log-probability of `actions` [T, B] under `policy_logits` [T, B, A]; returns [T, B]."""
    log_probs = F.log_softmax(policy_logits, dim=-1)
    return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def from_importance_weights(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
) -> VTraceReturns:
    """V-trace targets from log importance weights.

    Args:
      log_rhos: [T, B] log(pi(a_s|x_s) / mu(a_s|x_s)).
      discounts: [T, B] gamma_s, zero where the episode ended after step s.
      rewards: [T, B] r_s.
      values: [T, B] V(x_s) from the learner's network.
      bootstrap_value: [B] V(x_T).
      clip_rho_threshold: rho-bar; None disables clipping.
      clip_pg_rho_threshold: rho-bar used in the policy-gradient advantage; None disables.

    Solves the backward recursion (in closed form, `_discounted_sums`)
      v_s - V(x_s) = delta_s + gamma_s * c_s * (v_{s+1} - V(x_{s+1})),
      delta_s = rho_s * (r_s + gamma_s * V(x_{s+1}) - V(x_s)),  c_s = min(1, rho_s).
    """
    for name, tensor in (("log_rhos", log_rhos), ("discounts", discounts),
                         ("rewards", rewards), ("values", values)):
        _check_rank(name, tensor, 2)
    _check_rank("bootstrap_value", bootstrap_value, 1)
    if not (log_rhos.shape == discounts.shape == rewards.shape == values.shape):
        raise ValueError(
            "vtrace: log_rhos, discounts, rewards and values must share one [T, B] shape, got "
            f"{tuple(log_rhos.shape)}, {tuple(discounts.shape)}, {tuple(rewards.shape)}, "
            f"{tuple(values.shape)}"
        )
    if bootstrap_value.shape[0] != values.shape[1]:
        raise ValueError(
            f"vtrace: bootstrap_value must be [B={values.shape[1]}], "
            f"got {tuple(bootstrap_value.shape)}"
        )

    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
    cs = rhos.clamp(max=1.0)
    values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

    vs = _discounted_sums(deltas, discounts * cs) + values

    vs_t_plus_1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_rhos = rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def _discounted_sums(deltas: torch.Tensor, decays: torch.Tensor) -> torch.Tensor:
    """acc_t = deltas_t + decays_t * acc_{t+1}, acc_T = 0, for every t: [T, B] -> [T, B].

    Solved in closed form, acc_t = sum_{s >= t} (prod_{t <= k < s} decays_k) deltas_s, as a
    [T, T, B] product table and one batched matrix product. The recursion took ~8 tensor
    operations per step, and on a GPU each is a kernel launch whose CPU cost far exceeds its
    arithmetic: 160 of a Pong update's ~650 operations at T = 20. Products only, no
    division, so a zero decay (an episode's end) is exact.
    """
    T = deltas.shape[0]
    later = torch.ones(T, T, dtype=torch.bool, device=deltas.device).triu(1)  # [t, s]: s > t
    # factors[t, s] = decays_{s-1} where s > t, else 1; their running product along s is
    # prod_{t <= k < s} decays_k for s >= t.
    shifted = torch.cat([torch.ones_like(decays[:1]), decays[:-1]])  # [T, B]: decays_{s-1}
    factors = torch.where(later.unsqueeze(-1), shifted.unsqueeze(0), 1.0)  # [T, T, B]
    weights = factors.cumprod(dim=1) * (~later.T).unsqueeze(-1)  # zero where s < t
    return torch.einsum("tsb,sb->tb", weights, deltas)


@torch.no_grad()
def from_logits(
    behavior_policy_logits: torch.Tensor,
    target_policy_logits: torch.Tensor,
    actions: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
) -> VTraceFromLogitsReturns:
    """V-trace targets from behaviour (mu) and target (pi) logits [T, B, A] and actions [T, B]."""
    _check_rank("behavior_policy_logits", behavior_policy_logits, 3)
    _check_rank("target_policy_logits", target_policy_logits, 3)
    _check_rank("actions", actions, 2)
    if behavior_policy_logits.shape != target_policy_logits.shape:
        raise ValueError(
            "vtrace: behaviour and target logits differ in shape: "
            f"{tuple(behavior_policy_logits.shape)} vs {tuple(target_policy_logits.shape)}"
        )
    target_log_probs = action_log_probs(target_policy_logits, actions)
    behavior_log_probs = action_log_probs(behavior_policy_logits, actions)
    log_rhos = target_log_probs - behavior_log_probs
    returns = from_importance_weights(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
    )
    return VTraceFromLogitsReturns(
        vs=returns.vs,
        pg_advantages=returns.pg_advantages,
        log_rhos=log_rhos,
        behavior_action_log_probs=behavior_log_probs,
        target_action_log_probs=target_log_probs,
    )
