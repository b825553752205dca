"""Advantage and return estimators, time-major `[T, ...]` with any trailing batch shape.

Conventions (docs/semantics.md §1 and §3 to §5): transition t goes from s_t to s_{t+1}
with reward r_t. `terminated[t]` says s_{t+1} is a true terminal state (no
bootstrap); `done[t]` says the episode ended at t for any reason (the trace is
cut). `next_values[t]` is V of the true next state: values[t + 1] inside an
episode, V(final observation) at a time limit, and the bootstrap value at
t = T - 1. Masks are multiplications, as in CleanRL, SB3, torch-ac and ARENA,
so a NaN in a masked value still propagates (rlplay's select semantics live in
`compat.rlplay`). Recursions are reverse `lax.scan`s; everything is jittable
and vmappable, and `gamma` / `lambda` may be scalars or per-step arrays of
shape [T] or [T, ...]. They compute and return float32 (float64 for float64
inputs): bfloat16 and float16 inputs are promoted, since a discount rounded to
half precision (0.999 is 1.0 in bfloat16) and a recursion carried in it are
wrong by whole percents.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks
from jaxrl_rollout.types import Trajectory

__all__ = [
    "discounted_returns",
    "ends_to_starts",
    "gae",
    "lambda_returns",
    "n_step_returns",
    "normalize_advantages",
    "starts_to_ends",
    "trajectory_gae",
    "vtrace",
]

Scalar = float | jax.Array


def _check_same_shape(**arrays) -> tuple[int, ...]:
    """All arrays share one shape of rank >= 1; returns it or raises naming the culprit."""
    names = list(arrays)
    shape = jnp.shape(arrays[names[0]])
    if len(shape) < 1:
        raise ValueError(f"{names[0]} must be time-major [T, ...] with rank >= 1, got a scalar.")
    if shape[0] == 0:
        raise ValueError(f"{names[0]} has no steps (T = 0, shape {tuple(shape)}); the estimators need T >= 1.")
    for name in names[1:]:
        if jnp.shape(arrays[name]) != shape:
            raise ValueError(
                f"{name} must have the shape of {names[0]} {tuple(shape)} (time-major [T, ...]), "
                f"got {tuple(jnp.shape(arrays[name]))}."
            )
    return tuple(shape)


def _per_step(x: Scalar, name: str, shape: tuple[int, ...], dtype) -> jax.Array:
    """Broadcasts a scalar, [T] or [T, ...] coefficient in [0, 1] to `shape`, or raises naming it."""
    _checks.check_coefficient(x, name)
    x = jnp.asarray(x, dtype=dtype)
    if x.ndim == 0 or x.shape == shape:
        return jnp.broadcast_to(x, shape)
    if x.shape == shape[:1]:
        return jnp.broadcast_to(x.reshape(shape[:1] + (1,) * (len(shape) - 1)), shape)
    raise ValueError(
        f"{name} must be a scalar or a per-step array of shape [T]={shape[:1]} or {shape}, "
        f"got shape {x.shape}."
    )


def _mask(flag: jax.Array, dtype) -> jax.Array:
    """1 - flag as a float multiplier."""
    return 1.0 - jnp.asarray(flag).astype(dtype)


# Steps of the reverse recursion per loop trip on an accelerator. Each step is one multiply-add, so a plain
# scan is a loop whose trips do almost nothing, and on a GPU every trip costs kernel launches and a trip-count
# check: 16 steps per trip made PPO's CartPole train 11% faster on an H100 (BENCHMARKS.md section 6). On the
# CPU a trip costs little and the unrolled body only lengthens the compile, so the CPU keeps the plain loop.
# Unrolling does not reorder the arithmetic (the same recursion, step by step): results are unchanged.
_UNROLL = 16


def _reverse_accumulate(deltas: jax.Array, coefs: jax.Array, init: jax.Array) -> jax.Array:
    """x_t = deltas_t + coefs_t * x_{t+1}, with x_T = init, by a reverse scan (`_UNROLL` steps a trip off the CPU)."""

    def step(carry, inputs):
        delta, coef = inputs
        carry = delta + coef * carry
        return carry, carry

    def accumulate(unroll):
        return lambda: jax.lax.scan(step, init, (deltas, coefs), reverse=True, unroll=unroll)[1]

    unrolled = min(_UNROLL, max(deltas.shape[0], 1))
    if unrolled == 1:
        return accumulate(1)()
    return jax.lax.platform_dependent(cpu=accumulate(1), default=accumulate(unrolled))


def gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: Scalar,
    gae_lambda: Scalar,
) -> tuple[jax.Array, jax.Array]:
    """Generalized advantage estimation (Schulman et al. 2016, arXiv:1506.02438).

        delta_t = r_t + gamma_t * (1 - terminated_t) * next_values_t - values_t
        A_t     = delta_t + gamma_t * lambda_t * (1 - done_t) * A_{t+1},   A_T = 0
        R_t     = A_t + values_t

    With `terminated = done` and next_values[t] = values[t + 1] (bootstrap at
    T - 1) this is CleanRL's, SB3's, torch-ac's and ARENA's loop; with separate
    flags it is TorchRL's `generalized_advantage_estimate`, which bootstraps a
    truncated episode from V(final observation) and then cuts the trace.

    Args:
      rewards: [T, ...] r_t.
      values: [T, ...] V(s_t).
      next_values: [T, ...] V of the true next state of transition t.
      terminated: [T, ...] bool or {0, 1}, s_{t+1} is terminal.
      done: [T, ...] bool or {0, 1}, the episode ended at t (terminated or
        truncated).
      gamma: discount, scalar or per-step [T] / [T, ...].
      gae_lambda: GAE lambda, scalar or per-step [T] / [T, ...].

    Returns:
      (advantages, returns), each [T, ...].
    """
    shape = _check_same_shape(
        rewards=rewards, values=values, next_values=next_values, terminated=terminated, done=done
    )
    _checks.check_flags(terminated=terminated, done=done)
    dtype = _checks.float_dtype(rewards, values, next_values)
    gamma = _per_step(gamma, "gamma", shape, dtype)
    gae_lambda = _per_step(gae_lambda, "gae_lambda", shape, dtype)
    rewards, values, next_values = (jnp.asarray(x, dtype) for x in (rewards, values, next_values))
    deltas = rewards + gamma * next_values * _mask(terminated, dtype) - values
    coefs = gamma * gae_lambda * _mask(done, dtype)
    advantages = _reverse_accumulate(deltas, coefs, jnp.zeros(shape[1:], dtype))
    return advantages, advantages + values


def trajectory_gae(traj: Trajectory, gamma: Scalar, gae_lambda: Scalar) -> tuple[jax.Array, jax.Array]:
    """`gae` on a `Trajectory`: truncated episodes bootstrap from V(final observation).

    The trajectory must come from `rollout(..., bootstrap_truncated=True)`
    (the default). With False its `next_value` at a time limit is V of the
    next episode's first observation, which this would bootstrap from (ARENA's
    quirk, `compat.arena`); for the convention such a rollout is for, a time
    limit as termination, use `gae(traj.reward, traj.value, traj.next_value,
    traj.done, traj.done, gamma, gae_lambda)`.

    Returns:
      (advantages, returns), each [T, B].
    """
    missing = [f for f in ("reward", "value", "next_value", "terminated", "done") if not hasattr(traj, f)]
    if missing:  # a dict was "'dict' object has no attribute 'reward'"
        raise TypeError(f"traj must be a Trajectory (rollout's), got {type(traj).__name__} without "
                        f"{', '.join(missing)}.")
    return gae(traj.reward, traj.value, traj.next_value, traj.terminated, traj.done, gamma, gae_lambda)


def discounted_returns(
    rewards: jax.Array, done: jax.Array, bootstrap_value: jax.Array, gamma: Scalar
) -> jax.Array:
    """Discounted returns cut at episode ends, bootstrapped after the last step.

        R_t = r_t + gamma_t * (1 - done_t) * R_{t+1},   R_T = bootstrap_value

    This is baselines' `discount_with_dones` with the A2C runner's bootstrap
    rule (the bootstrap is dropped when done_{T-1}), ilpyt's `compute_target`
    and rlplay's returns.

    Args:
      rewards: [T, ...] r_t.
      done: [T, ...] end flags (the episode ended at t).
      bootstrap_value: [...] V(s_T), the value after the last step.
      gamma: discount, scalar or per-step.

    Returns:
      [T, ...] returns.
    """
    shape = _check_same_shape(rewards=rewards, done=done)
    _checks.check_flags(done=done)
    _checks.check_batch_shape("bootstrap_value", bootstrap_value, "rewards", shape[1:])
    dtype = _checks.float_dtype(rewards, bootstrap_value)
    coefs = _per_step(gamma, "gamma", shape, dtype) * _mask(done, dtype)
    return _reverse_accumulate(jnp.asarray(rewards, dtype), coefs, jnp.asarray(bootstrap_value, dtype))


def lambda_returns(
    rewards: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: Scalar,
    lambda_: Scalar,
) -> jax.Array:
    """TD(lambda) returns (Sutton and Barto 2018, section 12.1; rlax `lambda_returns`).

        G_t = r_t + gamma_t (1 - terminated_t) [next_values_t
              + lambda_t (1 - done_t) (G_{t+1} - next_values_t)]

    so G_t = r_t + gamma (1 - lambda) V_{t+1} + gamma lambda G_{t+1} inside an
    episode, and the one-step target at an episode end or at t = T - 1 (where
    G_T is not needed). Equals `gae(...)[1]` when next_values[t] = values[t+1]
    wherever done_t is False.

    Args:
      rewards: [T, ...] r_t.
      next_values: [T, ...] V of the true next state of transition t.
      terminated: [T, ...] s_{t+1} is terminal.
      done: [T, ...] the episode ended at t.
      gamma: discount, scalar or per-step.
      lambda_: mixing parameter, scalar or per-step.

    Returns:
      [T, ...] lambda-returns.
    """
    shape = _check_same_shape(rewards=rewards, next_values=next_values, terminated=terminated, done=done)
    _checks.check_flags(terminated=terminated, done=done)
    dtype = _checks.float_dtype(rewards, next_values)
    gamma = _per_step(gamma, "gamma", shape, dtype)
    lambda_ = _per_step(lambda_, "lambda_", shape, dtype)
    rewards, next_values = jnp.asarray(rewards, dtype), jnp.asarray(next_values, dtype)
    discount = gamma * _mask(terminated, dtype)
    trace = lambda_ * _mask(done, dtype)
    # G_t - next_values_t ... written on the accumulator x_t = G_t:
    # G_t = r_t + discount_t (1 - trace_t) nv_t + discount_t trace_t G_{t+1}.
    deltas = rewards + discount * (1.0 - trace) * next_values
    # At t = T - 1 the trace is cut: the bootstrap is next_values[T - 1] itself.
    deltas = deltas.at[-1].set(rewards[-1] + discount[-1] * next_values[-1])
    coefs = (discount * trace).at[-1].set(0.0)
    return _reverse_accumulate(deltas, coefs, jnp.zeros(shape[1:], dtype))


def n_step_returns(
    rewards: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: Scalar,
    n: int,
) -> jax.Array:
    """n-step bootstrapped returns (Sutton and Barto 2018, section 7.1).

        G^(n)_t = sum_{k<m} gamma^k r_{t+k} + gamma^m V(s_{t+m})

    with the window m <= n cut at an episode end (bootstrapping from
    next_values there unless terminated) and at the end of the rollout
    (bootstrapping from next_values[T - 1]). n = 1 is the TD(0) target; n >= T
    gives the discounted return with a bootstrap at the end.

    Args:
      rewards: [T, ...] r_t.
      next_values: [T, ...] V of the true next state of transition t.
      terminated: [T, ...] s_{t+1} is terminal.
      done: [T, ...] the episode ended at t.
      gamma: discount, scalar or per-step.
      n: window length, a positive Python int.

    Returns:
      [T, ...] n-step returns.
    """
    if not _checks.is_int(n) or n < 1:
        raise ValueError(f"n must be a positive Python int, got {n!r}.")
    n = int(n)
    shape = _check_same_shape(rewards=rewards, next_values=next_values, terminated=terminated, done=done)
    _checks.check_flags(terminated=terminated, done=done)
    dtype = _checks.float_dtype(rewards, next_values)
    discount = _per_step(gamma, "gamma", shape, dtype) * _mask(terminated, dtype)
    # The window may continue from t to t + 1 only inside an episode and the rollout.
    continues = _mask(done, dtype).at[-1].set(0.0)
    rewards = jnp.asarray(rewards, dtype)
    next_values = jnp.asarray(next_values, dtype)

    def widen(_, g):
        following = jnp.concatenate([g[1:], jnp.zeros_like(g[:1])])
        return rewards + discount * (continues * following + (1.0 - continues) * next_values)

    one_step = rewards + discount * next_values
    return jax.lax.fori_loop(1, n, widen, one_step)


def vtrace(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    rhos: jax.Array,
    gamma: Scalar,
    lambda_: Scalar = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_c_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018, arXiv:1802.01561).

        rho_bar_t = min(clip_rho_threshold, rho_t),  c_t = lambda_t min(clip_c_threshold, rho_t)
        delta_t   = rho_bar_t (r_t + gamma_t (1 - terminated_t) next_values_t - values_t)
        vs_t - values_t = delta_t + gamma_t (1 - done_t) c_t (vs_{t+1} - values_{t+1})
        pg_adv_t  = min(clip_pg_rho_threshold, rho_t)
                    (r_t + gamma_t (1 - terminated_t) vs'_{t+1} - values_t)

    where vs'_{t+1} is vs_{t+1} inside an episode and next_values_t at an
    episode end or at t = T - 1. With rho = 1 (on-policy) vs - values equals
    `gae` with the same lambda.

    Args:
      rewards, values, next_values, terminated, done: [T, ...] as in `gae`.
      rhos: [T, ...] importance ratios pi(a_t | s_t) / mu(a_t | s_t).
      gamma: discount, scalar or per-step.
      lambda_: trace coefficient, scalar or per-step.
      clip_rho_threshold: rho-bar, clips the ratios in the value target.
      clip_c_threshold: c-bar, clips the trace-cutting ratios.
      clip_pg_rho_threshold: clips the ratios in the policy-gradient advantage.

    Returns:
      (vs, pg_advantages), each [T, ...]; both are gradient-stopped.
    """
    shape = _check_same_shape(
        rewards=rewards, values=values, next_values=next_values, terminated=terminated, done=done, rhos=rhos
    )
    _checks.check_flags(terminated=terminated, done=done)
    _checks.check_coefficient(rhos, "rhos", high=None)  # importance ratios are >= 0 (where concrete)
    for name, threshold in (("clip_rho_threshold", clip_rho_threshold), ("clip_c_threshold", clip_c_threshold),
                            ("clip_pg_rho_threshold", clip_pg_rho_threshold)):
        _checks.check_coefficient(threshold, name, high=None)
    dtype = _checks.float_dtype(rewards, values, next_values)
    gamma = _per_step(gamma, "gamma", shape, dtype)
    lambda_ = _per_step(lambda_, "lambda_", shape, dtype)
    rewards, values, next_values, rhos = (
        jnp.asarray(x, dtype) for x in (rewards, values, next_values, rhos)
    )
    discount = gamma * _mask(terminated, dtype)
    rho_bar = jnp.minimum(clip_rho_threshold, rhos)
    cs = lambda_ * jnp.minimum(clip_c_threshold, rhos)
    deltas = rho_bar * (rewards + discount * next_values - values)
    corrections = _reverse_accumulate(deltas, gamma * _mask(done, dtype) * cs, jnp.zeros(shape[1:], dtype))
    vs = values + corrections
    continues = _mask(done, dtype).at[-1].set(0.0)
    following = jnp.concatenate([vs[1:], jnp.zeros_like(vs[:1])])
    vs_next = continues * following + (1.0 - continues) * next_values
    pg_advantages = jnp.minimum(clip_pg_rho_threshold, rhos) * (rewards + discount * vs_next - values)
    return jax.lax.stop_gradient(vs), jax.lax.stop_gradient(pg_advantages)


def normalize_advantages(advantages: jax.Array, ddof: int = 1, eps: float = 1e-8) -> jax.Array:
    """(A - mean(A)) / (std(A, ddof) + eps) over every element.

    ddof=1 is torch's unbiased `std` (CleanRL, SB3); ddof=0 is `jnp.std`'s
    default. With ddof=1 and one element the std is NaN, as in torch.
    """
    if not _checks.is_int(ddof) or ddof < 0:  # a NumPy int too, as the other sizes and counts take
        raise ValueError(f"ddof must be a non-negative int (1: torch's unbiased std), got {ddof!r}.")
    advantages = jnp.asarray(advantages)
    return (advantages - advantages.mean()) / (jnp.std(advantages, ddof=int(ddof)) + eps)


def starts_to_ends(starts: jax.Array, next_start: jax.Array) -> jax.Array:
    """Start flags (CleanRL `dones`, SB3 `episode_starts`) to end flags.

    e_t = s_{t+1} for t < T - 1 and e_{T-1} = next_start (CleanRL's
    `next_done`, ARENA's `next_terminated`).

    Args:
      starts: [T, ...] s_t, obs[t] begins an episode.
      next_start: [...] the start flag of the observation after the last step.

    Returns:
      [T, ...] end flags, dtype of `starts`.
    """
    return _starts_to_ends(starts, next_start)


def _starts_to_ends(starts: jax.Array, next_start: jax.Array, names: tuple[str, str] = ("starts", "next_start")):
    """`starts_to_ends`, its errors naming the arguments `names` (a compat recipe's: CleanRL's dones)."""
    starts = jnp.asarray(starts)
    _check_same_shape(**{names[0]: starts})
    _checks.check_flags(**{names[0]: starts, names[1]: next_start})
    _checks.check_batch_shape(names[1], next_start, names[0], starts.shape[1:])
    return jnp.concatenate([starts[1:], jnp.asarray(next_start, starts.dtype)[None]])


def ends_to_starts(ends: jax.Array, first_start: jax.Array) -> jax.Array:
    """End flags to start flags: s_0 = first_start and s_t = e_{t-1}.

    Args:
      ends: [T, ...] e_t, transition t ended the episode.
      first_start: [...] whether obs[0] begins an episode.

    Returns:
      [T, ...] start flags, dtype of `ends`.
    """
    return _ends_to_starts(ends, first_start)


def _ends_to_starts(ends: jax.Array, first_start: jax.Array, names: tuple[str, str] = ("ends", "first_start")):
    """`ends_to_starts`, its errors naming the arguments `names`."""
    ends = jnp.asarray(ends)
    _check_same_shape(**{names[0]: ends})
    _checks.check_flags(**{names[0]: ends, names[1]: first_start})
    _checks.check_batch_shape(names[1], first_start, names[0], ends.shape[1:])
    return jnp.concatenate([jnp.asarray(first_start, ends.dtype)[None], ends[:-1]])
