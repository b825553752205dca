"""ilpyt `Runner` and `Experiences` (https://github.com/mitre/ilpyt), as pure JAX with fixed shapes and masks.

Inside jit everything is a fixed-shape array plus masks; small host helpers
turn them into the Python lists ilpyt returns (`IlpytEpisodeStats.infos`,
`episodes_to_lists`, `episode_rewards_list`).

Quirks reproduced (docs/semantics.md §15.2):
- `generate_batch`: next_states[t] is the reset observation on done; actions
  are stored as float32 even for discrete spaces; episode infos carry the
  env's cumulative episode count and a float64 return, and the statistics
  persist across calls until `reset`.
- `generate_episodes`: the envs are reset but the stale observation is the
  first policy input; a finished env is reset a second time and that reset's
  observation comes next; episodes are ordered by completion (step, then env
  index); collection stops once `num_episodes` have completed and partial
  episodes are dropped (biased towards short episodes).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import _checks, stepping
from jaxrl_rollout.advantages import discounted_returns
from jaxrl_rollout.collect import rollout
from jaxrl_rollout.types import RolloutState

__all__ = [
    "EpisodeBatch",
    "IlpytEpisodeStats",
    "compute_target",
    "episode_rewards_list",
    "episodes_to_lists",
    "generate_batch",
    "generate_episodes",
    "get_episode_rewards",
]


def compute_target(rewards: jax.Array, dones: jax.Array, next_value: jax.Array, gamma: float) -> jax.Array:
    """ilpyt's `compute_target`: G = V(next_states[-1]); G_i = r_i + gamma G (1 - done_i), reversed.

    Args:
      rewards: [T, B]; dones: [T, B] end flags; next_value: [B]; gamma: float.

    Returns:
      [T, B] targets (time-major, as `flatten_batch` expects).
    """
    _checks.check_last_step("ilpyt.compute_target", "rewards", rewards, next_value=next_value)
    return discounted_returns(rewards, dones, next_value, gamma)


def generate_batch(
    env: Any, env_params: Any, policy_fn: Any, params: Any, state: RolloutState, rollout_steps: int
) -> tuple[RolloutState, dict]:
    """`Runner.generate_batch`: a time-major batch [T, B, ...].

    Returns:
      (state, batch) with batch keys states, next_states, actions (float32),
      rewards, dones (float32 end flags). Pass rewards and dones to an
      `IlpytEpisodeStats` on the host for ilpyt's `infos`.
    """
    state, traj = rollout(env, env_params, policy_fn, params, state, rollout_steps, bootstrap_truncated=False)
    next_states = jax.tree.map(lambda seq, last: jnp.concatenate([seq[1:], last[None]]), traj.obs, state.obs)
    batch = {
        "states": traj.obs,
        "next_states": next_states,
        "actions": jax.tree.map(lambda a: a.astype(jnp.float32), traj.action),
        "rewards": traj.reward,
        "dones": traj.done.astype(jnp.float32),
    }
    return state, batch


class IlpytEpisodeStats:
    """Host replica of `Runner.episode_stats` and the `infos` it appends (float64 sums)."""

    def __init__(self, num_envs: int):
        self.num_envs = num_envs
        self.reset()

    def reset(self) -> None:
        """`Runner.reset()` clears the statistics."""
        self.reward = np.zeros(self.num_envs)
        self.length = np.zeros(self.num_envs)
        self.count = np.zeros(self.num_envs)

    def infos(self, rewards: Any, dones: Any) -> list:
        """The `batch['infos']` list for one batch: [count_i, {'reward/i': R, 'length/i': L}], step then env order."""
        rewards, dones = np.asarray(rewards, np.float32), np.asarray(dones).astype(bool)
        out = []
        for t in range(rewards.shape[0]):
            self.reward += rewards[t]
            self.length += 1.0
            self.count += dones[t]
            for i in np.flatnonzero(dones[t]):
                out.append([self.count[i], {f"reward/{i}": self.reward[i], f"length/{i}": self.length[i]}])
                self.reward[i] = 0
                self.length[i] = 0
        return out


class EpisodeBatch(NamedTuple):
    """`generate_episodes` output as fixed-shape arrays [max_steps, B, ...].

    Attributes:
      states, actions, rewards, dones: what ilpyt records per env step.
      order: int32 completion ordinal of the episode each step belongs to, or
        -1 where the step is not part of the first `num_episodes` completed
        episodes (dropped partial episodes, steps after the stop).
      num_completed: int32, episodes completed when collection stopped (at most
        `num_episodes`; fewer means `max_steps` was too small).
    """

    states: Any
    actions: Any
    rewards: jax.Array
    dones: jax.Array
    order: jax.Array
    num_completed: jax.Array


def generate_episodes(
    env: Any,
    env_params: Any,
    policy_fn: Any,
    params: Any,
    key: jax.Array,
    state: RolloutState,
    num_episodes: int,
    max_steps: int,
) -> tuple[RolloutState, EpisodeBatch]:
    """`Runner.generate_episodes` with its quirks, bounded by `max_steps` env steps.

    Args:
      env, env_params, policy_fn, params: as in `rollout` (feedforward policy).
      key: PRNG key for the resets and actions.
      state: the runner's state; its `obs` is the stale first policy input.
      num_episodes: episodes to collect, a positive int.
      max_steps: scan length, a positive int; must be enough for
        `num_episodes` to complete (check `num_completed`).

    Returns:
      (state, EpisodeBatch): the state where ilpyt's loop stopped, and the
      steps with masks; `episodes_to_lists` builds ilpyt's `Experiences`.
    """
    _checks.check_function_key(key, "ilpyt.generate_episodes", "batches")
    num_episodes = _checks.check_positive_int("num_episodes", num_episodes)
    max_steps = _checks.check_positive_int("max_steps", max_steps)
    if state.carry is not None:
        raise ValueError("generate_episodes supports feedforward policies (state.carry must be None).")
    env_params = stepping.resolve_params(env, env_params)
    if stepping.is_vectorized(env):
        raise ValueError(
            f"generate_episodes resets single envs outside their step (ilpyt's second reset), which a "
            f"vectorized host env ({type(env).__name__}) cannot do; use a JAX env."
        )
    batch_size = jnp.shape(state.first)[0]
    space = env.action_space(env_params)
    reset = jax.vmap(env.reset, in_axes=(0, None))
    reset_key, key = jax.random.split(key)
    _, env_state = reset(jax.random.split(reset_key, batch_size), env_params)  # the stale obs is kept

    def step(carry, _):
        env_state, obs, count, key = carry
        key, policy_key, env_key, reset_key = jax.random.split(key, 4)
        out, _ = stepping.act(policy_fn, params, obs, policy_key, None, None, batch_size, space)
        next_obs, next_env_state, reward, terminated, truncated, _ = stepping.env_step(
            env, env_params, jax.random.split(env_key, batch_size), env_state, out.action, batch_size
        )
        done = terminated | truncated
        # The env loop breaks once the count reaches num_episodes: env i is reset
        # a second time only if the count before it was still below.
        before_i = count + jnp.cumsum(done) - done
        second = done & (before_i < num_episodes)
        reset_obs, reset_state = reset(jax.random.split(reset_key, batch_size), env_params)
        next_obs = stepping.batch_where(second, reset_obs, next_obs)
        next_env_state = stepping.batch_where(second, reset_state, next_env_state)
        running = count < num_episodes
        new = (next_env_state, next_obs, count + jnp.sum(done, dtype=jnp.int32), key)
        old = (env_state, obs, count, key)
        carry = jax.tree.map(lambda n, o: jnp.where(running, n, o), new, old)
        return carry, (obs, out.action, reward, done)

    init = (env_state, state.obs, jnp.int32(0), key)
    (env_state, obs, count, _), (states, actions, rewards, dones) = jax.lax.scan(
        step, init, None, length=max_steps
    )
    # Completion ordinal of the episode ending at (t, i): dones in earlier rows,
    # then in this row at lower env indices.
    flat = dones.reshape(-1).astype(jnp.int32)
    end_ordinal = (jnp.cumsum(flat) - flat).reshape(dones.shape)

    def owner(following, inputs):
        done, ordinal = inputs
        current = jnp.where(done, ordinal, following)
        return current, current

    _, order = jax.lax.scan(owner, jnp.full((batch_size,), -1, jnp.int32), (dones, end_ordinal), reverse=True)
    order = jnp.where(order < num_episodes, order, -1)
    new_state = state._replace(env_state=env_state, obs=obs)
    batch = EpisodeBatch(states, actions, rewards, dones, order, jnp.minimum(count, num_episodes))
    return new_state, batch


def episodes_to_lists(batch: EpisodeBatch, num_episodes: int) -> dict:
    """Host: ilpyt's `Experiences` after `to_torch()`, as NumPy arrays in completion order.

    Raises:
      ValueError: fewer than `num_episodes` episodes completed within max_steps.
    """
    completed = int(batch.num_completed)
    if completed < num_episodes:
        raise ValueError(
            f"only {completed} of num_episodes={num_episodes} episodes completed; raise max_steps."
        )
    order = np.asarray(batch.order)
    steps = [(o, t, i) for (t, i), o in np.ndenumerate(order) if o >= 0]
    steps.sort()
    pick = lambda x: np.stack([np.asarray(x)[t, i] for _, t, i in steps])  # noqa: E731
    return {
        "states": jax.tree.map(pick, batch.states),
        "actions": jax.tree.map(pick, batch.actions),
        "rewards": pick(batch.rewards),
        "dones": pick(batch.dones),
    }


def get_episode_rewards(rewards: jax.Array, dones: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`Experiences.get_episode_rewards` with fixed shapes.

    Segments end after each done; each is summed in float32; a trailing
    segment without a done is ignored.

    Args:
      rewards: [N] flat rewards; dones: [N] flags.

    Returns:
      (returns [N], count): returns[:count] are the episode returns, the rest 0.
    """
    _checks.check_flags(dones=dones)  # a 0.5 was cast to 0: no episode ended there
    rewards, dones = jnp.asarray(rewards, jnp.float32), jnp.asarray(dones).astype(jnp.int32)
    if rewards.ndim != 1 or dones.shape != rewards.shape:
        raise ValueError(f"rewards and dones must be flat [N] arrays, got {rewards.shape} and {dones.shape}.")
    segment = jnp.cumsum(dones) - dones
    count = jnp.sum(dones)
    n = rewards.shape[0]
    kept = jnp.where(segment < count, rewards, 0.0)
    returns = jax.ops.segment_sum(kept, jnp.minimum(segment, n - 1), num_segments=n)
    return returns, count


def episode_rewards_list(rewards: Any, dones: Any) -> list:
    """Host: the Python list `get_episode_rewards` returns."""
    returns, count = get_episode_rewards(rewards, dones)
    return [float(r) for r in np.asarray(returns)[: int(count)]]
