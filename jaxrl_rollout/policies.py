"""Ready-made policy functions for `rollout` and `evaluate`.

A policy is a plain callable `policy_fn(params, obs, key) -> PolicyOutput`; the
rollout never imports a network library. These helpers turn an `apply_fn` (any
function of `(params, obs)`, a flax `Module.apply` for example) into one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxrl_rollout import _checks
from jaxrl_rollout.types import PolicyOutput

__all__ = ["categorical_policy", "uniform_random_policy"]


def categorical_policy(
    apply_fn: Callable[[Any, Any], tuple[jax.Array, jax.Array]],
    deterministic: bool = False,
) -> Callable[[Any, Any, jax.Array], PolicyOutput]:
    """A policy over a Discrete action space from `apply_fn(params, obs) -> (logits, value)`.

    Args:
      apply_fn: returns logits [B, A] and values [B].
      deterministic: act with the mode (argmax of the logits) instead of
        sampling; `log_prob` is then that of the mode.

    Returns:
      `policy_fn(params, obs, key) -> PolicyOutput` with int32 actions [B].

    Raises:
      ValueError: at trace time, when the rollout, `evaluate` or a video calls
        the policy on an env whose action space is Discrete(n) and A != n
        (actions the env does not have, or actions never taken). A choice
        of another size inside a policy of your own (an option, a sub-action)
        is sampled with `distributions.categorical_from_logits` instead.
    """

    def policy_fn(params, obs, key):
        out = apply_fn(params, obs)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):  # a 1-tuple: "not enough values to unpack"
            raise TypeError(f"apply_fn must return (logits [B, A], value [B]), got {type(out).__name__}"
                            + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "") + ".")
        logits, value = out
        if jnp.ndim(logits) != 2:
            raise ValueError(
                f"apply_fn must return logits of shape [B, A], got shape {jnp.shape(logits)}."
            )
        if not jnp.issubdtype(jnp.result_type(logits), jnp.floating):  # ints failed inside jax.random.gumbel
            raise TypeError(f"apply_fn must return floating logits, got {jnp.result_type(logits)}.")
        _checks.check_logits_fit_space(logits, "categorical_policy's apply_fn")
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        if deterministic:
            action = jnp.argmax(logits, axis=-1)
        else:
            action = jax.random.categorical(key, logits, axis=-1)
        action = action.astype(jnp.int32)
        log_prob = jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
        return PolicyOutput(action=action, log_prob=log_prob, value=value)

    return policy_fn


def uniform_random_policy(action_space: Any) -> Callable[[Any, Any, jax.Array], PolicyOutput]:
    """A policy that samples uniformly from a Discrete or bounded Box space.

    Its value is 0 and its `log_prob` the exact log-density of the uniform
    distribution. `params` are ignored (pass None).
    """
    if isinstance(action_space, spaces.Discrete):
        log_density = -jnp.log(jnp.float32(action_space.n))
    elif isinstance(action_space, spaces.Box):
        low, high = (_checks.concrete(b) for b in (action_space.low, action_space.high))
        if low is not None and high is not None and not (np.isfinite(low).all() and np.isfinite(high).all()
                                                         and (np.asarray(high) > np.asarray(low)).all()):
            raise ValueError(f"uniform_random_policy needs a bounded Box, finite low < high, got low {low} and "
                             f"high {high}: no uniform distribution covers it.")
        width = jnp.broadcast_to(
            jnp.asarray(action_space.high, jnp.float32) - jnp.asarray(action_space.low, jnp.float32),
            action_space.shape,
        )
        log_density = -jnp.sum(jnp.log(width))
    else:
        raise TypeError(
            "uniform_random_policy supports Discrete and Box action spaces, got "
            f"{type(action_space).__name__}."
        )

    def policy_fn(params, obs, key):
        del params
        batch_size = jax.tree_util.tree_leaves(obs)[0].shape[0]
        action = jax.vmap(action_space.sample)(jax.random.split(key, batch_size))
        log_prob = jnp.full((batch_size,), log_density, dtype=jnp.float32)
        return PolicyOutput(action, log_prob, jnp.zeros((batch_size,), jnp.float32))

    return policy_fn
