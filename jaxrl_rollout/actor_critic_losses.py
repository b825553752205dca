"""SAC and TD3 update math as pure functions on batches (docs/semantics.md §21).

Everything here is jittable and vmappable and takes network outputs, not
networks: the learner evaluates its actor and critics and passes the arrays
in. Shapes: B is the batch, A the action dimension. Critic values are [B]
(squeeze a [B, 1] head before calling: the per-sample inputs of each function
must share one shape, else a ValueError names them). Losses return `(loss, parts)` like
`jaxrl_rollout.losses`.

Public references reproduced (docs/semantics.md §20, §21):

- CleanRL `sac_continuous_action.py` and `td3_continuous_action.py`,
  https://github.com/vwxyzjn/cleanrl
- Stable-Baselines3 `SAC.train` and `TD3.train` with `ReplayBuffer(handle_timeout_termination=True)`,
  https://github.com/DLR-RM/stable-baselines3
- T. Haarnoja et al., *Soft Actor-Critic Algorithms and Applications*, 2018,
  https://arxiv.org/abs/1812.05905; S. Fujimoto et al., *Addressing Function
  Approximation Error in Actor-Critic Methods* (TD3), 2018,
  https://arxiv.org/abs/1802.09477

Sampling takes the standard-normal draws as an argument (`noise`), so a
caller draws them with `jax.random.normal` and a golden test passes torch's.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_rollout import _checks

__all__ = [
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "SB3_LOG_STD_MIN",
    "SQUASH_EPS",
    "TanhGaussianSample",
    "action_scale_and_bias",
    "bootstrap_done",
    "clip_log_std",
    "delayed_update_due",
    "hard_update",
    "polyak_update",
    "sac_actor_loss",
    "sac_critic_target",
    "sac_temperature_loss",
    "tanh_gaussian_mode",
    "tanh_gaussian_sample",
    "tanh_squash_log_std",
    "td3_actor_loss",
    "td3_critic_target",
    "td3_target_actions",
    "twin_critic_loss",
]

# CleanRL's bounds for the tanh-rescaled log-std (docs/semantics.md §21.1).
LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0
# SB3's lower clamp (its upper one is also 2).
SB3_LOG_STD_MIN = -20.0
# The epsilon inside log(scale * (1 - y^2) + eps), CleanRL's and SB3's.
SQUASH_EPS = 1e-6


# A Python float, as in torch's Normal.log_prob (docs/semantics.md §13.3).
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


class TanhGaussianSample(NamedTuple):
    """A reparameterised sample of a tanh-squashed Gaussian policy.

    Attributes:
      action: [B, A] y * action_scale + action_bias with y = tanh(mean + std * noise).
      log_prob: [B] log-density of `action` (tanh correction included), summed over A.
      mean_action: [B, A] tanh(mean) * action_scale + action_bias, the evaluation action.
    """

    action: jax.Array
    log_prob: jax.Array
    mean_action: jax.Array


def action_scale_and_bias(low, high) -> tuple[jax.Array, jax.Array]:
    """CleanRL's `action_scale = (high - low) / 2`, `action_bias = (high + low) / 2` as float32 [A]."""
    low = jnp.asarray(low, jnp.float32)
    high = jnp.asarray(high, jnp.float32)
    return (high - low) / 2.0, (high + low) / 2.0


def tanh_squash_log_std(raw: jax.Array, low: float = LOG_STD_MIN, high: float = LOG_STD_MAX) -> jax.Array:
    """CleanRL's `log_std = LOG_STD_MIN + 0.5 (LOG_STD_MAX - LOG_STD_MIN) (tanh(raw) + 1)`: [..., A] in [low, high].

    Written in CleanRL's operation order (the Python constant 0.5 (high - low)
    is folded first), so it differs from torch only through the last bit of
    tanh (docs/semantics.md §21.1).
    """
    return low + 0.5 * (high - low) * (jnp.tanh(raw) + 1)


def clip_log_std(raw: jax.Array, low: float = SB3_LOG_STD_MIN, high: float = LOG_STD_MAX) -> jax.Array:
    """SB3's `th.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)` with its bounds [-20, 2]: [..., A].

    Written with `where` so the gradient is torch's: 1 on [low, high] with
    the bounds included, 0 outside (`jnp.clip` gives 1/2 at a bound).
    """
    return jnp.where(raw < low, low, jnp.where(raw > high, high, raw)).astype(jnp.result_type(raw))


def tanh_gaussian_sample(
    mean: jax.Array,
    log_std: jax.Array,
    noise: jax.Array,
    action_scale: jax.Array | float = 1.0,
    action_bias: jax.Array | float = 0.0,
    *,
    sum_correction_separately: bool = False,
) -> TanhGaussianSample:
    """Sample a tanh-squashed Gaussian and its log-prob, CleanRL's `Actor.get_action` (docs/semantics.md §21.1).

        x = mean + exp(log_std) * noise                          (torch's rsample)
        y = tanh(x);  action = y * action_scale + action_bias
        log_prob = sum_A [ log N(x; mean, std) - log(action_scale (1 - y^2) + 1e-6) ]

    With `sum_correction_separately=True` the two sums are taken apart and
    subtracted, SB3's `SquashedDiagGaussianDistribution.log_prob`
    (sum log N - sum log(1 - y^2 + 1e-6)); SB3 squashes to [-1, 1], so pass
    the default scale 1 and bias 0 for it. The two forms differ only by float
    rounding.

    Args:
      mean: [B, A] the Gaussian's mean (the actor's `fc_mean` output).
      log_std: [B, A] log sigma, already bounded (`tanh_squash_log_std` or `clip_log_std`); a
        state-independent [A] broadcasts.
      noise: [B, A] standard-normal draws.
      action_scale, action_bias: [A] or scalars (`action_scale_and_bias`).
      sum_correction_separately: SB3's reduction order instead of CleanRL's.

    Returns:
      A `TanhGaussianSample` (action [B, A], log_prob [B], mean_action [B, A]).
    """
    mean = jnp.asarray(mean)
    log_std = jnp.asarray(log_std)
    if jnp.shape(noise) != mean.shape:
        raise ValueError(f"noise must have the shape of mean {mean.shape}, got {jnp.shape(noise)}.")
    try:
        log_std = jnp.broadcast_to(log_std, mean.shape)
    except ValueError:
        raise ValueError(f"log_std must broadcast to the shape of mean {mean.shape}, got {log_std.shape}.") from None
    std = jnp.exp(log_std)
    x = mean + noise * std  # torch's rsample: loc + eps * scale
    y = jnp.tanh(x)
    action = y * action_scale + action_bias
    # torch's Normal.log_prob term by term, per action dimension (docs/semantics.md §13.3)
    gaussian = -((x - mean) ** 2) / (2 * std**2) - log_std - _LOG_SQRT_2PI
    correction = jnp.log(action_scale * (1 - y**2) + SQUASH_EPS)
    if sum_correction_separately:
        log_prob = jnp.sum(gaussian, axis=-1) - jnp.sum(correction, axis=-1)
    else:
        log_prob = jnp.sum(gaussian - correction, axis=-1)
    return TanhGaussianSample(action=action, log_prob=log_prob, mean_action=tanh_gaussian_mode(mean, action_scale, action_bias))


def tanh_gaussian_mode(mean: jax.Array, action_scale: jax.Array | float = 1.0, action_bias: jax.Array | float = 0.0) -> jax.Array:
    """The deterministic (evaluation) action tanh(mean) * action_scale + action_bias: [B, A]."""
    return jnp.tanh(mean) * action_scale + action_bias


def bootstrap_done(terminated: jax.Array, truncated: jax.Array, *, bootstrap_on_truncation: bool = True) -> jax.Array:
    """The float32 `done` that stops a one-step target (docs/semantics.md §4, §21.2).

    `bootstrap_on_truncation=True` gives `terminated`: a time limit bootstraps
    from the true final observation (SB3's `handle_timeout_termination=True`,
    and CleanRL's current scripts, which store `terminations`).
    `False` gives `terminated | truncated`: a time limit ends the bootstrap
    (SB3 with `handle_timeout_termination=False` and a buffer fed gymnasium's
    `done`, and most JAX ports; not CleanRL before its gymnasium port, whose
    SB3 buffer cleared the `dones` of time limits).

    Args:
      terminated, truncated: [B] bool (or 0/1 floats).
    """
    _checks.check_flags(terminated=terminated, truncated=truncated)  # where concrete: a 0.5 was cast to True
    terminated = jnp.asarray(terminated).astype(bool)
    if bootstrap_on_truncation:
        return terminated.astype(jnp.float32)
    return (terminated | jnp.asarray(truncated).astype(bool)).astype(jnp.float32)


def _one_step_target(rewards, done, gamma, next_value):
    # CleanRL and SB3: r + (1 - done) * gamma * next_value, in this order.
    return rewards + (1 - done) * gamma * next_value


def sac_critic_target(
    next_q1: jax.Array,
    next_q2: jax.Array,
    next_log_prob: jax.Array,
    rewards: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    gamma: float | jax.Array,
    alpha: float | jax.Array,
    *,
    bootstrap_on_truncation: bool = True,
) -> jax.Array:
    """SAC's soft one-step target, CleanRL's `next_q_value` and SB3's `target_q_values` (docs/semantics.md §21.2).

        y = r + (1 - done) * gamma * (min(Q1'(s', a'), Q2'(s', a')) - alpha * log pi(a' | s'))

    with a' ~ pi(. | s') from the current actor and Q' the target critics.
    The result is wrapped in `stop_gradient`.

    Args:
      next_q1, next_q2: [B] target critics at (next_obs, a').
      next_log_prob: [B] log pi(a' | s').
      rewards: [B]. terminated, truncated: [B] flags (`bootstrap_done`).
      gamma: discount. alpha: entropy coefficient (exp(log_alpha) when tuned).
      bootstrap_on_truncation: see `bootstrap_done`.

    Returns:
      [B] float32 targets.
    """
    _checks.check_same_shapes("sac_critic_target", next_q1=next_q1, next_q2=next_q2, next_log_prob=next_log_prob,
                              rewards=rewards, terminated=terminated, truncated=truncated)
    _checks.check_coefficient(gamma, "gamma")
    _checks.check_coefficient(alpha, "alpha", high=None)
    done = bootstrap_done(terminated, truncated, bootstrap_on_truncation=bootstrap_on_truncation)
    soft_next = jnp.minimum(next_q1, next_q2) - alpha * next_log_prob
    return jax.lax.stop_gradient(_one_step_target(rewards, done, gamma, soft_next))


def twin_critic_loss(q1: jax.Array, q2: jax.Array, target: jax.Array, *, scale: float = 1.0) -> tuple[jax.Array, dict]:
    """scale * (mean((Q1 - y)^2) + mean((Q2 - y)^2)) (docs/semantics.md §21.3).

    scale = 1 is CleanRL's `qf1_loss + qf2_loss` (SAC and TD3) and SB3's TD3
    `sum(F.mse_loss(q, y) for q in ...)`; scale = 0.5 is SB3's SAC, which
    halves that sum.

    Args:
      q1, q2: [B] online critics at (obs, action) from the batch.
      target: [B] one-step targets (no gradient flows into them).

    Returns:
      (loss, parts) with qf1_loss, qf2_loss, qf1_values, qf2_values (means).
    """
    _checks.check_same_shapes("twin_critic_loss", q1=q1, q2=q2, target=target)
    target = jax.lax.stop_gradient(target)
    qf1_loss = jnp.mean((q1 - target) ** 2)
    qf2_loss = jnp.mean((q2 - target) ** 2)
    loss = scale * (qf1_loss + qf2_loss)
    return loss, {"qf1_loss": qf1_loss, "qf2_loss": qf2_loss, "qf1_values": jnp.mean(q1), "qf2_values": jnp.mean(q2)}


def sac_actor_loss(log_prob: jax.Array, q1_pi: jax.Array, q2_pi: jax.Array, alpha: float | jax.Array) -> tuple[jax.Array, dict]:
    """SAC's policy loss mean(alpha * log pi(a|s) - min(Q1(s, a), Q2(s, a))), a ~ pi(.|s) reparameterised (§21.4).

    CleanRL's `((alpha * log_pi) - min_qf_pi).mean()` and SB3's
    `(ent_coef * log_prob - min_qf_pi).mean()`. `alpha` gets no gradient.

    Args:
      log_prob: [B] log pi of the reparameterised sample (differentiable in the actor).
      q1_pi, q2_pi: [B] online critics at (obs, sample).
      alpha: entropy coefficient.

    Returns:
      (loss, parts) with actor_loss and entropy (-mean log_prob).
    """
    _checks.check_same_shapes("sac_actor_loss", log_prob=log_prob, q1_pi=q1_pi, q2_pi=q2_pi)
    alpha = jax.lax.stop_gradient(alpha)
    loss = jnp.mean(alpha * log_prob - jnp.minimum(q1_pi, q2_pi))
    return loss, {"actor_loss": loss, "entropy": -jnp.mean(jax.lax.stop_gradient(log_prob))}


def sac_temperature_loss(
    log_alpha: jax.Array, log_prob: jax.Array, target_entropy: float, *, form: str = "cleanrl"
) -> tuple[jax.Array, dict]:
    """The automatic entropy-temperature loss, differentiated w.r.t. `log_alpha` (docs/semantics.md §21.5).

        form="cleanrl": mean(-exp(log_alpha) * (log_pi + target_entropy))   gradient -alpha * mean(log_pi + H)
        form="sb3":     -mean(log_alpha * (log_pi + target_entropy))        gradient -mean(log_pi + H)

    `log_prob` is detached in both. The minimiser is the same (alpha grows
    when the entropy -log_pi is below the target), but the step sizes
    differ; under Adam only through the moments' eps.

    Args:
      log_alpha: [] or [1] the trainable log-temperature (CleanRL and SB3 both keep shape [1]).
      log_prob: [B] log pi(a | s) of fresh samples.
      target_entropy: usually -A (`-prod(action_shape)`).
      form: "cleanrl" or "sb3".

    Returns:
      (loss, parts) with alpha_loss and alpha (exp(log_alpha), no gradient).
    """
    log_prob = jax.lax.stop_gradient(log_prob)
    if form == "cleanrl":
        loss = jnp.mean(-jnp.exp(log_alpha) * (log_prob + target_entropy))
    elif form == "sb3":
        loss = -jnp.mean(log_alpha * (log_prob + target_entropy))
    else:
        raise ValueError(f"form must be 'cleanrl' or 'sb3', got {form!r}.")
    return loss, {"alpha_loss": loss, "alpha": jax.lax.stop_gradient(jnp.exp(jnp.reshape(log_alpha, (-1,))[0]))}


def td3_target_actions(
    next_actions: jax.Array,
    noise: jax.Array,
    action_scale: jax.Array | float,
    policy_noise: float,
    noise_clip: float,
    low: jax.Array | float,
    high: jax.Array | float,
) -> jax.Array:
    """TD3's target-policy smoothing, CleanRL's `next_state_actions` (docs/semantics.md §21.6).

        eps = clip(noise * policy_noise, -noise_clip, noise_clip) * action_scale
        a'  = clip(mu'(s') + eps, low, high)

    The noise is clipped in units of the [-1, 1] squashed action and then
    scaled by `action_scale`, as CleanRL does (Fujimoto et al.'s code clips
    `noise_clip * max_action` on the unscaled noise; equal for symmetric
    bounds). CleanRL clamps to the scalars `low[0]`, `high[0]`; pass those
    for its behaviour or per-dimension [A] bounds. SB3's TD3 acts in its
    scaled space [-1, 1]: pass `action_scale=1.0, low=-1.0, high=1.0` (its
    `normal_(0, policy_noise)` draw is `noise * policy_noise`).

    Args:
      next_actions: [B, A] target actor mu'(s').
      noise: [B, A] standard-normal draws.
      action_scale: [A] or scalar. policy_noise, noise_clip: CleanRL's 0.2 and 0.5.
      low, high: action bounds (scalars or [A]).

    Returns:
      [B, A] smoothed target actions (no gradient).
    """
    if jnp.shape(noise) != jnp.shape(next_actions):  # one row of noise broadcast to every sample otherwise
        raise ValueError(f"noise must have the shape of next_actions {jnp.shape(next_actions)}, got {jnp.shape(noise)}.")
    _checks.check_coefficient(policy_noise, "policy_noise", high=None)
    _checks.check_coefficient(noise_clip, "noise_clip", high=None)
    clipped = jnp.clip(noise * policy_noise, -noise_clip, noise_clip) * action_scale
    return jax.lax.stop_gradient(jnp.clip(next_actions + clipped, low, high))


def td3_critic_target(
    next_q1: jax.Array,
    next_q2: jax.Array,
    rewards: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    gamma: float | jax.Array,
    *,
    bootstrap_on_truncation: bool = True,
) -> jax.Array:
    """TD3's clipped double-Q target r + (1 - done) * gamma * min(Q1'(s', a'), Q2'(s', a')) (§21.6).

    Args:
      next_q1, next_q2: [B] target critics at (next_obs, `td3_target_actions`).
      rewards: [B]. terminated, truncated: [B] flags. gamma: discount.
      bootstrap_on_truncation: see `bootstrap_done`.

    Returns:
      [B] float32 targets (no gradient).
    """
    _checks.check_same_shapes("td3_critic_target", next_q1=next_q1, next_q2=next_q2, rewards=rewards,
                              terminated=terminated, truncated=truncated)
    done = bootstrap_done(terminated, truncated, bootstrap_on_truncation=bootstrap_on_truncation)
    return jax.lax.stop_gradient(_one_step_target(rewards, done, gamma, jnp.minimum(next_q1, next_q2)))


def td3_actor_loss(q1_pi: jax.Array) -> tuple[jax.Array, dict]:
    """TD3's deterministic policy loss -mean(Q1(s, mu(s))), CleanRL's `actor_loss` (§21.6).

    Args:
      q1_pi: [B] the first online critic at (obs, actor(obs)).

    Returns:
      (loss, parts) with actor_loss.
    """
    loss = -jnp.mean(q1_pi)
    return loss, {"actor_loss": loss}


def delayed_update_due(step: jax.Array | int, frequency: jax.Array | int) -> jax.Array:
    """CleanRL's `global_step % policy_frequency == 0`: whether the delayed update runs at `step` (§21.7).

    TD3 updates the actor and all targets when this holds; CleanRL's SAC runs
    `policy_frequency` actor (and temperature) steps when it holds, and its
    target update uses the same predicate with `target_network_frequency`.
    `step` is the counter the caller's reference uses (CleanRL: the env step
    `global_step`; SB3's TD3: `_n_updates`, which it increments before the
    check, so its first critic update is step 1 and the actor first moves at
    step `policy_delay`).

    Returns:
      [] bool, traceable.
    """
    return jnp.mod(step, frequency) == 0


def polyak_update(params: optax.Params, target_params: optax.Params, tau: float | jax.Array) -> optax.Params:
    """Soft target update tau * p + (1 - tau) * p_target, via `optax.incremental_update` (§21.8).

    With a Python float tau this is CleanRL's `tau * param + (1 - tau) * target_param`
    bit for bit (both round float32(tau) * p and float32(1 - tau) * p_target);
    SB3's in-place `mul_(1 - tau)` then `add(alpha=tau)` rounds in another
    order: it agrees within about 1 ulp of the operands (more ulps of the
    result where p and p_target nearly cancel).
    """
    _checks.check_coefficient(tau, "tau")
    return optax.incremental_update(params, target_params, tau)


def hard_update(params: optax.Params, target_params: optax.Params, step: jax.Array | int, period: jax.Array | int) -> optax.Params:
    """Copy `params` into the target when `step % period == 0`, via `optax.periodic_update` (§21.8).

    CleanRL's DQN `load_state_dict` every `target_network_frequency` steps.
    """
    return optax.periodic_update(params, target_params, step, period)
