"""IMPALA's loss terms and reward clipping, as pure functions of time-major tensors.

`impala_loss` turns one learner forward pass over a batch of unrolls into the scalar
loss that is minimised, following the T+1 convention: step 0 of every unroll repeats the
last step of the previous one, so agent outputs use steps [0, T) and environment outputs
(rewards, done flags) steps [1, T].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from impala.algorithms.impala import vtrace
from impala.rewards import clip_rewards


@dataclass(frozen=True)
class ImpalaLossConfig:
    discounting: float = 0.99
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    reward_clipping: str = "abs_one"
    # LASER's trust region: a replayed step whose KL(pi || mu) exceeds this (nats) is left
    # out of the policy-gradient and baseline losses; 0 turns the mask off.
    trust_region_threshold: float = 0.0
    # The entropy bonus applies only to batches whose fresh steps' mean entropy is below
    # this fraction of the uniform policy's (log A nats); 0: it always applies. The
    # learner sets it per update from `schedules.FloorSchedule`.
    entropy_floor: float = 0.0


def sample_actions(policy_logits: torch.Tensor) -> torch.Tensor:
    """One action per step drawn from softmax(logits): [T, B, A] -> [T, B] int64."""
    probabilities = F.softmax(policy_logits.flatten(0, -2), dim=-1)
    return torch.multinomial(probabilities, num_samples=1).view(policy_logits.shape[:-1])


def policy_gradient_loss(
    policy_logits: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor
) -> torch.Tensor:
    """-sum(log pi(a_t|x_t) * A_t) over [T, B]; logits [T, B, A], actions and advantages [T, B]."""
    cross_entropy = F.cross_entropy(
        policy_logits.flatten(0, 1), actions.flatten(0, 1).long(), reduction="none"
    ).view_as(advantages)
    return torch.sum(cross_entropy * advantages.detach())


def baseline_loss(advantages: torch.Tensor) -> torch.Tensor:
    """0.5 * sum((v_s - V(x_s))^2); advantages [T, B] = vs - values."""
    return 0.5 * torch.sum(advantages**2)


def entropy_loss(policy_logits: torch.Tensor,
                 column_weights: torch.Tensor | None = None) -> torch.Tensor:
    """Negative entropy summed over [T, B] (each column weighted by `column_weights` [B]
    where given): minimising it raises the policy's entropy."""
    log_policy = F.log_softmax(policy_logits, dim=-1)
    per_step = torch.sum(log_policy.exp() * log_policy, dim=-1)
    if column_weights is not None:
        per_step = per_step * column_weights
    return torch.sum(per_step)


def column_mean(values: torch.Tensor, column_weights: torch.Tensor) -> torch.Tensor:
    """The mean of `values` [T, B] over the steps of the columns weighted 1 in
    `column_weights` [B] (0 or 1 each), as a 0-dim tensor; 0 when no column is."""
    steps = column_weights.sum() * values.shape[0]
    return (values * column_weights).sum() / steps.clamp(min=1)


class LossStats(NamedTuple):
    """The loss and what is logged of it. The logged values are 0-dim tensors on the loss's
    device, read to the host once per update (update.Update): a read here would stop a GPU
    learner's queue mid-update, before its backward pass is even launched."""

    total_loss: torch.Tensor  # scalar, with gradient
    pg_loss: torch.Tensor
    baseline_loss: torch.Tensor
    entropy: torch.Tensor  # mean policy entropy per fresh step (nats), for logging
    entropy_bonus_on: torch.Tensor  # 1.0 where the bonus applied to this batch, else 0.0
    # How far the learner's policy has moved from the one that acted: large values mean
    # V-trace cuts most traces and the update learns little from the batch.
    policy_kl: torch.Tensor  # mean KL(behaviour || target) per fresh step (nats)
    rho_clipped: torch.Tensor  # share of fresh steps whose importance weight was clipped at 1
    trust_region_masked: torch.Tensor  # share of replayed steps left out by the trust region
    unroll_errors: torch.Tensor  # [B] mean |v_s - V(x_s)| over each unroll's T steps
    # [2] the mean of the value targets v_s and of their squares: what PopArt tracks
    target_moments: torch.Tensor


def impala_loss(
    target_logits: torch.Tensor,
    baseline: torch.Tensor,
    behavior_logits: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    done: torch.Tensor,
    config: ImpalaLossConfig,
    column_weights: torch.Tensor | None = None,
    replayed: torch.Tensor | None = None,
    value_scale: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> LossStats:
    """The IMPALA loss over a batch of T+1-step unrolls, fresh and (LASER) replayed.

    Args:
      target_logits: [T+1, B, A] learner policy logits.
      baseline: [T+1, B] learner value estimates.
      behavior_logits: [T+1, B, A] the actors' logits when they acted.
      actions: [T+1, B] actions taken at each step.
      rewards: [T+1, B] reward received on arriving at each step (raw; clipped here).
      done: [T+1, B] True where the step begins a new episode (the previous one ended).
      column_weights: [B] importance weights of prioritized replay (1 for fresh unrolls);
        they scale each unroll's policy-gradient and baseline terms.
      replayed: [B] True for unrolls that came from replay. Their steps outside the trust
        region are masked, and they add nothing to the entropy bonus or to the logged
        entropy, KL and clipping shares, which describe the fresh data as without replay.
        The bonus is weighted by B / (fresh unrolls) so that it keeps its on-policy
        strength against the policy gradient, which sums over all B columns.
      value_scale: PopArt's (mu, sigma), 0-dim: `baseline` is then the normalized output
        n(x), the value is sigma * n(x) + mu, and the baseline loss and the advantages are
        measured in units of sigma (impala/popart.py).
    """
    normalized = baseline
    if value_scale is not None:
        mean, sigma = value_scale
        baseline = sigma * baseline + mean
    bootstrap_value = baseline[-1]
    target_logits, baseline = target_logits[:-1], baseline[:-1]
    behavior_logits, actions = behavior_logits[:-1], actions[:-1]
    rewards = clip_rewards(rewards[1:].float(), config.reward_clipping)
    discounts = (~done[1:].bool()).float() * config.discounting

    returns = vtrace.from_logits(
        behavior_policy_logits=behavior_logits,
        target_policy_logits=target_logits,
        actions=actions,
        discounts=discounts,
        rewards=rewards,
        values=baseline,
        bootstrap_value=bootstrap_value,
    )
    step_weights = torch.ones_like(baseline)
    if column_weights is not None:
        step_weights = step_weights * column_weights.to(step_weights.dtype)
    # [B] 1 for fresh columns, 0 for replayed ones: a weight, not a boolean index, so that
    # nothing here waits for the device to say how many columns are fresh.
    fresh = torch.ones_like(baseline[0])
    masked_share = torch.zeros((), device=baseline.device)
    if replayed is not None:
        replayed = replayed.bool()
        fresh = (~replayed).to(baseline.dtype)
        if config.trust_region_threshold > 0:
            inside = trust_region_mask(target_logits.detach(), behavior_logits,
                                       config.trust_region_threshold)
            outside = ~inside & replayed
            step_weights = step_weights * (~outside).to(step_weights.dtype)
            replayed_steps = replayed.sum() * len(actions)
            masked_share = outside.sum() / replayed_steps.clamp(min=1)
    errors = returns.vs - baseline
    advantages, scaled_errors = returns.pg_advantages, errors
    if value_scale is not None:
        advantages = advantages / sigma
        scaled_errors = (returns.vs - mean) / sigma - normalized[:-1]
    pg = policy_gradient_loss(target_logits, actions, advantages * step_weights)
    value = baseline_loss(scaled_errors * step_weights.sqrt())
    neg_entropy = entropy_loss(target_logits, fresh)
    fresh_steps = fresh.sum() * len(actions)
    # The fresh steps' entropy stands for every step's: summed over fresh steps only, the
    # bonus would shrink to 1 / (1 + r) of its weight against the policy gradient at
    # replay ratio r (Pong at r = 4: entropy ~1.3 against ~1.6 without replay).
    entropy_weight = actions.numel() / fresh_steps
    mean_entropy = -neg_entropy.detach() / fresh_steps
    bonus_on = entropy_bonus_on(mean_entropy, target_logits.shape[-1], config.entropy_floor)
    total = (pg + config.baseline_cost * value
             + config.entropy_cost * entropy_weight * bonus_on * neg_entropy)
    return LossStats(
        total_loss=total,
        pg_loss=pg.detach(),
        baseline_loss=value.detach(),
        entropy=mean_entropy,
        entropy_bonus_on=bonus_on,
        policy_kl=mean_kl(behavior_logits, target_logits.detach(), fresh),
        rho_clipped=column_mean((returns.log_rhos > 0).to(fresh.dtype), fresh),
        trust_region_masked=masked_share,
        unroll_errors=errors.detach().abs().mean(dim=0),
        target_moments=torch.stack([returns.vs.mean(), returns.vs.square().mean()]).detach(),
    )


def entropy_bonus_on(mean_entropy: torch.Tensor, num_actions: int,
                     floor: float) -> torch.Tensor:
    """1.0 where the entropy bonus applies to a batch whose fresh steps' mean entropy is
    `mean_entropy` (0-dim, nats), else 0.0, as a 0-dim tensor (no read to the host).

    With a `floor` (a fraction of log `num_actions`, the uniform policy's entropy) the bonus
    holds the policy's entropy up near the floor but no higher: one weight then keeps a game
    whose clipped returns barely separate its actions from staying near uniform, and a game
    whose returns separate them well from collapsing. 0 (no floor): always 1.0.
    """
    if floor <= 0:
        return torch.ones_like(mean_entropy)
    return (mean_entropy < floor * math.log(num_actions)).to(mean_entropy.dtype)


def trust_region_mask(target_logits: torch.Tensor, behavior_logits: torch.Tensor,
                      threshold: float) -> torch.Tensor:
    """LASER's trust region: True for the steps whose KL(pi || mu) <= `threshold` nats.

    pi (target) and mu (behaviour) are softmax distributions of logits [T, B, A]; the KL is
    computed from their log-softmax, never from the raw logits. Returns [T, B] bool.
    """
    log_pi = F.log_softmax(target_logits.float(), dim=-1)
    log_mu = F.log_softmax(behavior_logits.float(), dim=-1)
    kl = torch.sum(log_pi.exp() * (log_pi - log_mu), dim=-1)
    return kl <= threshold


def mean_kl(behavior_logits: torch.Tensor, target_logits: torch.Tensor,
            column_weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean KL(mu || pi) per step from logits [T, B, A], over the columns weighted 1 in
    `column_weights` [B] (all where not given), as a 0-dim tensor (nats per step)."""
    log_mu = F.log_softmax(behavior_logits.float(), dim=-1)
    log_pi = F.log_softmax(target_logits.float(), dim=-1)
    kl = torch.sum(log_mu.exp() * (log_mu - log_pi), dim=-1)
    if column_weights is None:
        return kl.mean()
    return column_mean(kl, column_weights.to(kl.dtype))
