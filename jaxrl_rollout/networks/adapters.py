"""Policy adapters: rollout policies from networks, `feedforward_policy`, `recurrent_policy` and `unroll`.

A network here is a flax linen module (its `apply` is used) or a plain
function `apply_fn(params, obs) -> (dist, value)` (recurrent:
`apply_fn(params, carry, obs) -> (new_carry, (dist, value))`); see the
`jaxrl_rollout.networks` package docstring for bringing your own.

- `feedforward_policy(module)` -> `policy_fn(params, obs, key) -> PolicyOutput`
- `recurrent_policy(module)` -> `policy_fn(params, obs, key, carry) ->
  (PolicyOutput, new_carry)`
- `unroll(module, params, initial_carry, obs, first)` replays a recurrent
  module over a `[T, B, ...]` trajectory to recompute log-probs and values,
  resetting the carry by the rollout's own rule (`jaxrl_rollout.reset_carry`).

These need a network that returns a distribution; for one that returns
logits, `jaxrl_rollout.categorical_policy` (jaxrl_rollout/policies.py) builds
the policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks
from jaxrl_rollout.stepping import reset_carry
from jaxrl_rollout.types import PolicyOutput, PyTree

__all__ = ["feedforward_policy", "recurrent_policy", "unroll"]


def _as_apply_fn(module: Any) -> Callable:
    if isinstance(module, nn.Module):
        return module.apply
    if callable(module):
        return module
    raise TypeError(
        "module must be a flax linen Module or a callable apply_fn(params, ...), got "
        f"{type(module).__name__}."
    )


def _check_dist(dist: Any, where: str) -> None:
    missing = [m for m in ("sample", "mode", "log_prob") if not callable(getattr(dist, m, None))]
    if missing:
        raise TypeError(
            f"{where} must return a distribution with sample(key), mode() and log_prob(action) "
            f"(e.g. distributions.categorical_from_logits(logits)); got {type(dist).__name__} "
            f"without {missing}. For a network returning (logits, value) use "
            "jaxrl_rollout.categorical_policy."
        )


def _split_output(out: Any, where: str) -> tuple[Any, jax.Array]:
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"{where} must return (dist, value), got {type(out).__name__}.")
    dist, value = out
    _check_dist(dist, where)
    return dist, value


def _act(dist: Any, value: jax.Array, key: jax.Array, deterministic: bool, where: str) -> PolicyOutput:
    action = dist.mode() if deterministic else dist.sample(key)
    log_prob = dist.log_prob(action)
    if jnp.shape(value) != jnp.shape(log_prob):
        raise ValueError(
            f"{where} must return a value of the distribution's batch shape "
            f"{jnp.shape(log_prob)} ([B]), got {jnp.shape(value)}; squeeze a critic output [B, 1]."
        )
    return PolicyOutput(action=action, log_prob=log_prob, value=value)


def _check_deterministic(deterministic: Any) -> None:
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {deterministic!r}.")


def feedforward_policy(
    module: Any, deterministic: bool = False
) -> Callable[[PyTree, PyTree, jax.Array], PolicyOutput]:
    """A rollout policy from a module returning `(dist, value)`.

    Args:
      module: a flax linen module with `__call__(obs) -> (dist, value)` (e.g.
        `ActorCriticMLP`, `ActorCriticCNN`), or any function
        `apply_fn(params, obs) -> (dist, value)`.
      deterministic: act with `dist.mode()` (argmax, or the mean) instead of
        sampling; `log_prob` is then that of the mode.

    Returns:
      `policy_fn(params, obs [B, ...], key) -> PolicyOutput(action, log_prob [B],
      value [B])`. For continuous actions the action is the raw, unclipped
      sample and `log_prob` is its density (CleanRL); clip only when sending it
      to the env.
    """
    _check_deterministic(deterministic)
    apply_fn = _as_apply_fn(module)

    def policy_fn(params: PyTree, obs: PyTree, key: jax.Array) -> PolicyOutput:
        dist, value = _split_output(apply_fn(params, obs), "apply_fn(params, obs)")
        return _act(dist, value, key, deterministic, "apply_fn(params, obs)")

    return policy_fn


def _split_recurrent(out: Any, where: str) -> tuple[PyTree, Any, jax.Array]:
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"{where} must return (new_carry, (dist, value)), got {type(out).__name__}.")
    new_carry, dist_value = out
    dist, value = _split_output(dist_value, where)
    return new_carry, dist, value


def recurrent_policy(
    module: Any, deterministic: bool = False
) -> Callable[[PyTree, PyTree, jax.Array, PyTree], tuple[PolicyOutput, PyTree]]:
    """A recurrent rollout policy from a module stepping `(carry, obs)`.

    Args:
      module: a flax linen module with `__call__(carry, obs) -> (new_carry,
        (dist, value))` (e.g. `ActorCriticGRU`), or any function
        `apply_fn(params, carry, obs) -> (new_carry, (dist, value))`.
      deterministic: act with `dist.mode()` instead of sampling.

    Returns:
      `policy_fn(params, obs [B, ...], key, carry) -> (PolicyOutput, new_carry)`,
      the rollout's recurrent signature. The carry it receives has already been
      reset by the rollout where an episode starts.
    """
    _check_deterministic(deterministic)
    apply_fn = _as_apply_fn(module)
    where = "apply_fn(params, carry, obs)"

    def policy_fn(params: PyTree, obs: PyTree, key: jax.Array, carry: PyTree) -> tuple[PolicyOutput, PyTree]:
        new_carry, dist, value = _split_recurrent(apply_fn(params, carry, obs), where)
        return _act(dist, value, key, deterministic, where), new_carry

    return policy_fn


def unroll(
    module: Any,
    params: PyTree,
    initial_carry: PyTree,
    obs: PyTree,
    first: jax.Array,
) -> tuple[Any, jax.Array]:
    """Replays a recurrent module over a time-major sequence, as the rollout ran it.

    Before step t the carry is `reset_carry(carry, first[t])`, exactly the
    rollout's rule, so with `initial_carry = jax.tree.map(lambda c: c[0],
    traj.carry)` (the raw carry at the start of the rollout), `obs =
    traj.obs` and `first = traj.first`,
    `dist.log_prob(traj.action)` and `value` reproduce `traj.log_prob` and
    `traj.value` (torch-ac's recurrent `evaluate` with `memory * mask`).

    Args:
      module: a recurrent linen module or `apply_fn(params, carry, obs) ->
        (new_carry, (dist, value))`, as in `recurrent_policy`.
      params: the module's parameters.
      initial_carry: pytree of [B, ...] arrays, the carry before the reset for
        `first[0]`.
      obs: pytree of [T, B, ...] observations.
      first: [T, B] bool, obs[t] starts an episode.

    Returns:
      `(dist, value)`: the distributions stacked over time (batch shape
      [T, B], e.g. logits [T, B, A]) and values [T, B].
    """
    apply_fn = _as_apply_fn(module)
    _checks.check_flags(first=first)  # inside the scan they are traced: a 0.5 reset every step
    first = jnp.asarray(first)
    if first.ndim != 2:
        raise ValueError(f"first must have shape [T, B], got {first.shape}.")
    num_steps, batch_size = first.shape
    for path, leaf in jax.tree_util.tree_leaves_with_path(obs):
        if jnp.shape(leaf)[:2] != (num_steps, batch_size):
            raise ValueError(
                f"obs{jax.tree_util.keystr(path)} must have shape [T, B, ...] with "
                f"[T, B]={first.shape} from first, got {jnp.shape(leaf)}."
            )
    for path, leaf in jax.tree_util.tree_leaves_with_path(initial_carry):
        if jnp.shape(leaf)[:1] != (batch_size,):
            raise ValueError(
                f"initial_carry{jax.tree_util.keystr(path)} must have shape [B, ...] with "
                f"B={batch_size} from first, got {jnp.shape(leaf)}."
            )
    where = "apply_fn(params, carry, obs)"

    def step(carry, inputs):
        obs_t, first_t = inputs
        new_carry, dist, value = _split_recurrent(apply_fn(params, reset_carry(carry, first_t), obs_t), where)
        return new_carry, (dist, value)

    _, (dist, value) = jax.lax.scan(step, initial_carry, (obs, first))
    return dist, value
