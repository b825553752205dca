"""torch-ac `BaseAlgo.collect_experiences` (https://github.com/lcswillems/torch-ac), as pure JAX.

torch-ac keeps `mask = 1 - done` (start flags as masks: masks[i] = 1 - s_i),
calls a recurrent model with `memory * mask`, stores the unmasked memory,
optionally reshapes rewards from the post-step observation, runs the CleanRL
GAE recurrence in float32 and flattens every field env-major ([T, P] ->
[P, T] -> [P * T]). Time limits count as terminations (docs/semantics.md
§15.1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import _checks
from jaxrl_rollout.advantages import gae
from jaxrl_rollout.batching import flatten_env_major
from jaxrl_rollout.collect import rollout, rollout_init
from jaxrl_rollout.types import RolloutState

__all__ = ["Experiences", "LogInputs", "TorchAcLogger", "collect_experiences", "compute_gae", "init_state"]


class Experiences(NamedTuple):
    """torch-ac's `exps`: every field flattened env-major, row k = p * T + t.

    memory is None for feedforward policies; mask is [P * T, 1] as in torch-ac.
    """

    obs: Any
    memory: Any | None
    mask: jax.Array
    action: Any
    value: jax.Array
    reward: jax.Array
    advantage: jax.Array
    returnn: jax.Array
    log_prob: jax.Array


class LogInputs(NamedTuple):
    """Per-step data [T, P] that `TorchAcLogger.update` turns into torch-ac's logs."""

    reward: jax.Array
    reshaped_reward: jax.Array
    done: jax.Array


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    masks: jax.Array,
    next_value: jax.Array,
    next_mask: jax.Array,
    discount: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """torch-ac's advantage loop.

    next_mask_i = masks[i + 1] (next_mask at the last step);
    delta = r_i + discount V_{i+1} next_mask_i - V_i;
    A_i = delta + discount lambda A_{i+1} next_mask_i; returnn = V + A.

    Args:
      rewards, values: [T, P].
      masks: [T, P] float 1 - start flag.
      next_value: [P] V(obs after the last step).
      next_mask: [P] 1 - done of the last step.
      discount, gae_lambda: floats.

    Returns:
      (advantages, returnn), each [T, P] (time-major; flatten env-major for exps).
    """
    _checks.check_last_step("torch_ac.compute_gae", "values", values, next_value=next_value, next_mask=next_mask)
    _checks.check_flags(masks=masks, next_mask=next_mask)  # by their own names, before they become end flags
    masks = jnp.asarray(masks)
    ends = 1.0 - jnp.concatenate([masks[1:], jnp.asarray(next_mask, masks.dtype)[None]])
    values = jnp.asarray(values)
    next_values = jnp.concatenate([values[1:], jnp.asarray(next_value, values.dtype)[None]])
    return gae(rewards, values, next_values, ends, ends, discount, gae_lambda)


def init_state(
    key: jax.Array, env: Any, env_params: Any, num_procs: int, initial_memory: Any | None = None
) -> RolloutState:
    """The state torch-ac's `BaseAlgo.__init__` starts from.

    torch-ac initialises `mask` to ones although the first observations are
    fresh resets, so its first `exps.mask` rows are 1, not 0; with its zero
    initial memory this changes no other number. This state reproduces that:
    `rollout_init` with every `first` flag cleared.

    Args:
      key, env, env_params, num_procs: as `rollout_init`'s key, env,
        env_params and num_envs.
      initial_memory: for recurrent models, zeros of shape [P, memory_size]
        (torch-ac's `self.memory`); None otherwise.
    """
    state = rollout_init(key, env, env_params, num_procs, initial_carry=initial_memory)
    return state._replace(first=jnp.zeros_like(state.first))


def collect_experiences(
    env: Any,
    env_params: Any,
    policy_fn: Any,
    params: Any,
    state: RolloutState,
    num_frames_per_proc: int,
    discount: float,
    gae_lambda: float,
    reshape_reward: Callable[[Any, Any, jax.Array, jax.Array], jax.Array] | None = None,
) -> tuple[RolloutState, Experiences, LogInputs]:
    """torch-ac's `collect_experiences` for P = num_envs processes.

    The policy is a `rollout` policy; a recurrent one (state.carry not None)
    plays torch-ac's `acmodel(obs, memory * mask)`, and `exps.memory` holds the
    unmasked memories. Time limits count as terminations (torch-ac masks on
    done), so the value after a done is V of the reset observation, masked.

    Args:
      env, env_params, policy_fn, params: as in `rollout`.
      state: from `init_state` (torch-ac's start) or a previous call.
      num_frames_per_proc: T.
      discount, gae_lambda: floats.
      reshape_reward: optional `f(obs, action, reward, done) -> reward` for ONE
        env (vmapped here), called with the post-step observation (already the
        reset observation after a done), as torch-ac does.

    Returns:
      (state, exps, log_inputs): `exps` env-major; feed `log_inputs` to a
      `TorchAcLogger` on the host for torch-ac's `logs`.
    """
    state, traj = rollout(
        env, env_params, policy_fn, params, state, num_frames_per_proc, bootstrap_truncated=False
    )
    reward = traj.reward
    if reshape_reward is not None:
        post_obs = jax.tree.map(lambda seq, last: jnp.concatenate([seq[1:], last[None]]), traj.obs, state.obs)
        reshape = jax.vmap(jax.vmap(reshape_reward))
        reward = jnp.asarray(reshape(post_obs, traj.action, traj.reward, traj.done), traj.reward.dtype)
    masks = 1.0 - traj.first.astype(jnp.float32)
    advantage, returnn = compute_gae(
        reward, traj.value, masks, traj.next_value[-1], 1.0 - traj.done[-1].astype(jnp.float32),
        discount, gae_lambda,
    )
    flat = flatten_env_major(
        {"obs": traj.obs, "mask": masks, "action": traj.action, "value": traj.value, "reward": reward,
         "advantage": advantage, "returnn": returnn, "log_prob": traj.log_prob}
    )
    exps = Experiences(
        obs=flat["obs"],
        memory=None if traj.carry is None else flatten_env_major(traj.carry),
        mask=flat["mask"][:, None],
        action=flat["action"],
        value=flat["value"],
        reward=flat["reward"],
        advantage=flat["advantage"],
        returnn=flat["returnn"],
        log_prob=flat["log_prob"],
    )
    return state, exps, LogInputs(reward=traj.reward, reshaped_reward=reward, done=traj.done)


class TorchAcLogger:
    """Host-side replica of torch-ac's episode logs, quirks included.

    Per-env float32 accumulators are appended to lists when an env is done and
    then multiplied by the mask; the lists start with P zeros; each update
    reports the last max(#done, P) entries and truncates the lists to P, so a
    report may hold zero or stale padding, exactly as torch-ac's does.
    """

    def __init__(self, num_procs: int):
        self.num_procs = num_procs
        self._episode_return = np.zeros(num_procs, np.float32)
        self._episode_reshaped_return = np.zeros(num_procs, np.float32)
        self._episode_num_frames = np.zeros(num_procs, np.float32)
        self._return = [0.0] * num_procs
        self._reshaped_return = [0.0] * num_procs
        self._num_frames = [0.0] * num_procs

    def update(self, inputs: LogInputs) -> dict:
        """Consumes one `collect_experiences` call's `LogInputs`; returns torch-ac's logs dict."""
        reward = np.asarray(inputs.reward, np.float32)
        reshaped = np.asarray(inputs.reshaped_reward, np.float32)
        done = np.asarray(inputs.done, bool)
        if reward.ndim != 2 or reward.shape[1] != self.num_procs:
            raise ValueError(f"expected [T, {self.num_procs}] log inputs, got {reward.shape}.")
        done_counter = 0
        for t in range(reward.shape[0]):
            self._episode_return += reward[t]
            self._episode_reshaped_return += reshaped[t]
            self._episode_num_frames += np.float32(1.0)
            for p in np.flatnonzero(done[t]):
                done_counter += 1
                self._return.append(float(self._episode_return[p]))
                self._reshaped_return.append(float(self._episode_reshaped_return[p]))
                self._num_frames.append(float(self._episode_num_frames[p]))
            mask = (1.0 - done[t]).astype(np.float32)
            self._episode_return *= mask
            self._episode_reshaped_return *= mask
            self._episode_num_frames *= mask
        keep = max(done_counter, self.num_procs)
        logs = {
            "return_per_episode": self._return[-keep:],
            "reshaped_return_per_episode": self._reshaped_return[-keep:],
            "num_frames_per_episode": self._num_frames[-keep:],
            "num_frames": int(reward.shape[0] * self.num_procs),
        }
        self._return = self._return[-self.num_procs:]
        self._reshaped_return = self._reshaped_return[-self.num_procs:]
        self._num_frames = self._num_frames[-self.num_procs:]
        return logs
