"""The A2C agent: `discount_with_dones`, n-step returns with the bootstrap rule, the loss.

The agent is `a2c_agent.py` of TianhongDai's reinforcement-learning-algorithms
(https://github.com/TianhongDai/reinforcement-learning-algorithms); its runner
follows OpenAI baselines' A2C runner and uses baselines' `discount_with_dones`
(https://github.com/openai/baselines). See docs/semantics.md §6.1 and §9.2.

The runner's `mb_dones[:, 1:]` are end flags of the same index. Per env row
(env-major [N, T] after `swapaxes`): if the last step did not end the episode,
returns are `discount(rewards + [V_T], dones + [0])[:-1]`, else
`discount(rewards, dones)`; V_T is never read in the second case.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks, losses
from jaxrl_rollout.advantages import discounted_returns
from jaxrl_rollout.distributions import categorical_from_probs

__all__ = ["a2c_loss", "discount_with_dones", "runner_returns"]


def discount_with_dones(rewards: jax.Array, dones: jax.Array, gamma: float) -> jax.Array:
    """R_t = r_t + gamma R_{t+1} (1 - done_t), R after the last step = 0; time on axis 0."""
    rewards = jnp.asarray(rewards)
    return discounted_returns(rewards, dones, jnp.zeros(rewards.shape[1:], rewards.dtype), gamma)


def runner_returns(rewards: jax.Array, dones: jax.Array, last_values: jax.Array, gamma: float) -> jax.Array:
    """The runner's n-step returns, env-major as it computes them.

    Args:
      rewards: [N, T] `mb_rewards` after `swapaxes`.
      dones: [N, T] `mb_dones[:, 1:]` (end flags).
      last_values: [N] V(obs after the last step).
      gamma: float.

    Returns:
      [N, T] returns (flatten for the update).
    """
    _checks.check_flags(dones=dones)  # a 0.5 was cast to True
    rewards, dones = jnp.asarray(rewards), jnp.asarray(dones, bool)
    if rewards.ndim != 2 or dones.shape != rewards.shape or jnp.shape(last_values) != rewards.shape[:1]:
        raise ValueError(
            "runner_returns expects rewards and dones [N, T] and last_values [N], got "
            f"{rewards.shape}, {dones.shape} and {jnp.shape(last_values)}."
        )
    # Select, not multiply: V_T is not read at all when the last step is done.
    bootstrap = jnp.where(dones[:, -1], 0.0, jnp.asarray(last_values, rewards.dtype))
    return discounted_returns(rewards.T, dones.T, bootstrap, gamma).T


def a2c_loss(
    values: jax.Array,
    probs: jax.Array,
    actions: jax.Array,
    returns: jax.Array,
    value_loss_coef: float,
    entropy_coef: float,
) -> tuple[jax.Array, dict]:
    """`_update_network`'s loss: Categorical from softmax probabilities (torch's probs path).

    advantages = returns - values; value_loss = mean(advantages^2) (no 1/2);
    action_loss = -mean(stop_gradient(advantages) log pi(a));
    total = action_loss + value_loss_coef value_loss - entropy_coef mean(entropy).

    Args:
      values: [N] critic outputs.
      probs: [N, A] policy probabilities (the network's softmax output).
      actions: [N] int actions.
      returns: [N] targets from `runner_returns`, flattened.
      value_loss_coef, entropy_coef: floats.

    Returns:
      (total_loss, {"value_loss", "action_loss", "entropy"}).
    """
    dist = categorical_from_probs(probs)
    total, parts = losses.a2c_loss(
        dist.log_prob(actions), values, returns, dist.entropy(), value_loss_coef, entropy_coef
    )
    return total, {"value_loss": parts["value_loss"], "action_loss": parts["policy_loss"], "entropy": parts["entropy"]}
