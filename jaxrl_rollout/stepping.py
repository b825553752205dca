"""The step kit: the pieces every collector is built from.

`jaxrl_rollout.collect` (`rollout`, `evaluate`), the reference collectors in
`jaxrl_rollout.compat` and any new algorithm's own loop use the same few
operations on a batch of B envs; they live here, each with its contract:

- `resolve_params(env, env_params)`: check the gymnax protocol, fill in the
  default params.
- `is_vectorized(env)`: does the env step its B copies in one call?
- `check_env(env, env_params, key, num_envs)`: trace one reset and step to
  check the step protocol before a loop is built on it;
  `check_env_and_fused_keys` also says whether the env takes fused keys.
- `env_reset(env, keys, env_params)` and `env_step(...)`: reset or step all
  B envs, vmapped or, for a vectorized env, in one call.
- `step_keys(key, batch_size)`: one step's next key, policy key and env keys.
- `act(policy_fn, params, obs, key, carry, first, batch_size, space)`: call a
  feedforward or recurrent policy and check its output.
- `reset_carry(carry, first)` and `batch_where(mask, on_true, on_false)`:
  per-env selects on [B, ...] pytrees.

The env protocol is gymnax 1.0's `Environment`: `reset(key, params)` and
`step(key, state, action, params) -> (obs, state, reward, terminated,
truncated, info)` with same-step auto-reset and the pre-reset observation in
`info["final_observation"]`. An env that steps all B copies at once (a host
env such as `jaxrl_rollout.envs.gymnasium`'s) says so with a class attribute
`vectorized = True` and then gets keys [B], the batched state and the actions
[B] directly.

All functions are pure and traceable (`jit`, `vmap`, `lax.scan`); `env`,
`policy_fn`, `batch_size` and `space` are static Python objects.
"""

from __future__ import annotations

import collections
import inspect
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks, prng
from jaxrl_rollout.types import PolicyOutput, PyTree

__all__ = [
    "EnvStep",
    "act",
    "batch_where",
    "check_env",
    "env_reset",
    "env_step",
    "is_vectorized",
    "reset_carry",
    "resolve_params",
    "step_keys",
]


class EnvStep(NamedTuple):
    """One step of B envs, as `env_step` returns it (unpacks like a 6-tuple).

    Attributes:
      obs: the next observations [B, ...] (reset observations where done).
      env_state: the next env state, leaves [B, ...].
      reward: [B] float32.
      terminated: [B] bool.
      truncated: [B] bool, as the env reports it (it may also be set where
        `terminated` is).
      final_obs: `info["final_observation"]` [B, ...], the observation before
        the auto-reset.
    """

    obs: PyTree
    env_state: PyTree
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: PyTree


def batch_where(mask: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    """Selects env by env between two batched pytrees.

    Args:
      mask: [B] bool.
      on_true, on_false: pytrees of the same structure with leaves [B, ...].

    Returns:
      A pytree whose leaf rows b are `on_true`'s where `mask[b]`, else
      `on_false`'s.

    The mask may carry leading axes the leaves share ([T, B] against leaves [T, B, ...], a trajectory's).

    Raises:
      ValueError: `mask` is a scalar, or its shape does not begin every leaf's (a [1] mask zeroed every row, a
        [B, B] one mixed rows).
    """
    mask = jnp.asarray(mask)
    if mask.ndim < 1:
        raise ValueError("mask must be one flag per env, shape [B] (or [T, B]), got a scalar.")
    _check_rows("on_true", on_true, "mask", mask.shape)
    _check_rows("on_false", on_false, "mask", mask.shape)

    def select(x, y):
        m = jnp.reshape(mask, mask.shape + (1,) * (jnp.ndim(x) - mask.ndim))
        return jnp.where(m, x, y)

    return jax.tree.map(select, on_true, on_false)


def _check_rows(name: str, tree: PyTree, of: str, shape: tuple[int, ...]) -> None:
    """A ValueError naming the leaf of `tree` (an argument `name`) whose shape does not begin with `of`'s `shape`
    (its [B], or [T, B])."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if jnp.ndim(leaf) >= 1 and tuple(jnp.shape(leaf)[:len(shape)]) != tuple(shape):
            raise ValueError(f"{name}{jax.tree_util.keystr(path)} has shape {jnp.shape(leaf)}, which does not begin "
                             f"with {of}'s shape {tuple(shape)} ([B, ...] with its B).")


def reset_carry(carry: PyTree, first: jax.Array) -> PyTree:
    """Zeroes a recurrent carry where an episode starts.

    This is torch-ac's `memory * mask` and rlplay's `hx` reset, written as a
    select so that a NaN in a stale carry cannot leak into the new episode.
    Learners replaying `Trajectory.carry` use the same rule.

    Args:
      carry: pytree of [B, ...] arrays.
      first: [B] bool (or [T, B] against a trajectory's carry [T, B, ...]), the observation about to be
        processed starts an episode.

    Returns:
      The carry with every leaf zeroed at rows where `first` is True.
    """
    _checks.check_flags(first=first)  # where concrete: a 0.5 was cast to True
    first = jnp.asarray(first, dtype=bool)
    if first.ndim < 1:
        raise ValueError("first must be one flag per env, shape [B] (or [T, B]), got a scalar.")
    _check_rows("carry", carry, "first", first.shape)
    return batch_where(first, jax.tree.map(jnp.zeros_like, carry), carry)


def resolve_params(env: Any, env_params: Any) -> Any:
    """Checks that `env` follows the gymnax protocol and fills in its params.

    Args:
      env: the environment (static).
      env_params: its params, or None for `env.default_params`.

    Returns:
      `env_params`, or `env.default_params` when it is None.

    Raises:
      TypeError: `env` lacks a callable `reset`, `step` or `action_space`, or
        `env_params` is None and `env` has no `default_params`.
    """
    for method in ("reset", "step", "action_space"):
        if not callable(getattr(env, method, None)):
            raise TypeError(
                f"env must follow the gymnax>=1.0.1 Environment protocol; "
                f"{type(env).__name__} has no callable `{method}`."
            )
    if env_params is None:
        if not hasattr(env, "default_params"):
            raise TypeError(
                f"env_params is None and {type(env).__name__} has no default_params; "
                "pass the env's params."
            )
        return env.default_params
    return env_params


def is_vectorized(env: Any) -> bool:
    """Whether `env` resets and steps its B copies in one call.

    Args:
      env: the environment.

    Returns:
      True only for an env with the attribute `vectorized = True` (a host env);
      such an env gets keys [B] and batched states and actions, and is never
      vmapped.
    """
    return getattr(env, "vectorized", False) is True


def env_reset(env: Any, keys: jax.Array, env_params: Any) -> tuple[PyTree, PyTree]:
    """Resets B envs, env i with `keys[i]`.

    Under a trace (`jit`, `vmap`, `scan`: where every trainer calls it) the
    reset is traced into the caller's program. Called eagerly, on concrete
    keys and params, it runs as one compiled program cached per env: run op
    by op, each operation of a vmapped reset compiled on its own, and
    `rollout_init` took 12 s on brax's inverted_pendulum that way against 2 s
    compiled, on craftax 10-14 s against 3-5 s (2 cores). An env that cannot
    be hashed (the cache's key) resets op by op. The two paths agree up to
    float rounding (at most 6e-8 on brax's and craftax's reset states).

    Args:
      env: the environment (static).
      keys: [B] PRNG keys.
      env_params: the env's params (shared by the B envs, not batched).

    Returns:
      `(obs, env_state)`, leaves [B, ...].
    """
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((keys, env_params))):
        return _reset_batch(env, keys, env_params)
    try:
        hash(env)
    except TypeError:
        return _reset_batch(env, keys, env_params)
    return _compiled_reset(env, keys, env_params)


def _reset_batch(env: Any, keys: jax.Array, env_params: Any) -> tuple[PyTree, PyTree]:
    """`env_reset`'s reset itself: B copies vmapped, or a vectorized env's own batched reset."""
    if is_vectorized(env):
        return env.reset(keys, env_params)
    return jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)


_compiled_reset = jax.jit(_reset_batch, static_argnums=0)


def env_step(
    env: Any, env_params: Any, keys: jax.Array, env_state: PyTree, action: PyTree, batch_size: int,
    *, reset_done: bool = True,
) -> EnvStep:
    """Steps every env once, env i with `keys[i]` and `action[i]`.

    `jax.vmap(env.step)`, or a vectorized env's own `step`; for an adapter
    that asks for it (`SameStepEnv.resets_only_done`: craftax's, whose reset
    generates a world), the same step with only the done envs' resets
    computed (`_step_resetting_done`).

    `reset_done=False` is for a caller that discards whatever an env does
    after its episode ends (`evaluate`, `video.record_episodes`): an adapter
    built on `SameStepEnv` (with the base's `step`) is then stepped without its
    auto-reset, `step_until_reset` vmapped, so no reset is computed or
    compiled into the step (craftax's evaluation compiled in 7.4 s against
    10.3 s with its finished envs' resets, on 2 CPU cores;
    `benchmarks/evaluate_resets.py`). Every output of an env whose episode goes on
    is the same computation with the same step key; a done env keeps its final
    state and observation. (The same up to XLA's rounding: another program
    may round a float32 step differently by an ulp, as the vmapped evaluation
    of 8 CartPole policies did from the first step, and a deterministic
    policy can make another episode of that; the episodes are otherwise the
    same, and the same program gives the same results every time.) A gymnax
    `Environment` with gymnax's own `step`
    is stepped the same way (its `step_env` and `is_truncated`, without the
    reset), and so is either one inside `envs.ClipAction` (the action
    clipped). Other envs reset themselves as usual (`keeps_final_state`).

    Args:
      env: the environment (static).
      env_params: the env's params (shared by the B envs).
      keys: [B] PRNG keys.
      env_state: the env state, leaves [B, ...].
      action: the actions, leaves [B, ...].
      batch_size: B, a Python int.

    Returns:
      An `EnvStep`: (obs, env_state, reward f32 [B], terminated bool [B],
      truncated bool [B], final_obs).

    Raises:
      TypeError: the step's result is not the 6-tuple of the protocol, or its
        info has no "final_observation".
      ValueError: its reward, terminated or truncated is not one scalar per
        env, or its final observation is not shaped like its obs.
    """
    if is_vectorized(env):
        result = env.step(keys, env_state, action, env_params)
    elif not reset_done and (step := _step_without_reset(env)) is not None:
        params = env.default_params if env_params is None else env_params
        result = jax.vmap(step, in_axes=(0, 0, 0, None))(keys, env_state, action, params)
    elif _resets_only_done(env):
        result = _step_resetting_done(env, env_params, keys, env_state, action, batch_size)
    else:
        result = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, env_state, action, env_params)
    obs, env_state, reward, terminated, truncated, info = _checks.unpack_step(result, env, batched=True)
    for name, x in (("reward", reward), ("terminated", terminated), ("truncated", truncated)):
        if jnp.shape(x) != (batch_size,):
            raise ValueError(
                f"env {type(env).__name__}: step must return a scalar {name} per env ([B]=({batch_size},) "
                f"after vmap), got shape {jnp.shape(x)}."
            )
    return EnvStep(
        obs,
        env_state,
        jnp.asarray(reward, dtype=jnp.float32),
        jnp.asarray(terminated, dtype=bool),
        jnp.asarray(truncated, dtype=bool),
        info["final_observation"],
    )


def _steps_until_reset(env: Any) -> bool:
    """Whether `env` is an adapter built on `envs._base.SameStepEnv` whose `step` is the base's (its
    `step_until_reset`, then its `reset_env` for an env that is done), not one of its own."""
    from jaxrl_rollout.envs._base import SameStepEnv

    return isinstance(env, SameStepEnv) and type(env).step is SameStepEnv.step


def _gymnax_step(env: Any) -> bool:
    """Whether `env` is a gymnax `Environment` whose `step` is gymnax's own (`step_env`, then `reset_env`, then a
    select), not one of its own."""
    from gymnax.environments.environment import Environment

    return isinstance(env, Environment) and type(env).step is Environment.step


def _step_without_reset(env: Any) -> Callable | None:
    """`env`'s step of one env without its auto-reset, `(key, state, action, params) -> (obs, state, reward,
    terminated, truncated, info)`, or None for an env that resets itself within its own `step`.

    Every output of an env whose episode goes on is `env.step`'s computation (the same step key: the first of one
    split of `key`; up to XLA's rounding, see `env_step`); a done env keeps its final state and observation. For
    a `_steps_until_reset` adapter, its `step_until_reset`; for a gymnax `Environment` with gymnax's `step`, its
    `step_env` and `is_truncated` with the info `step` returns; for `envs.ClipAction` around either, theirs on
    the clipped action.
    """
    from jaxrl_rollout.envs import ClipAction

    if _steps_until_reset(env):
        return lambda key, state, action, params: env.step_until_reset(key, state, action, params)[:6]
    if _gymnax_step(env):
        def step(key, state, action, params):
            step_key, _ = jax.random.split(key)
            obs, state, reward, terminated, info = env.step_env(step_key, state, action, params)
            truncated = env.is_truncated(state, params)
            return obs, state, reward, terminated, truncated, {
                **info, "terminated": terminated, "truncated": truncated, "final_observation": obs}

        return step
    if isinstance(env, ClipAction) and (inner := _step_without_reset(env.env)) is not None:
        return lambda key, state, action, params: inner(key, state, env.clip(action, params), params)
    return None


def keeps_final_state(env: Any) -> bool:
    """Whether `env_step(..., reset_done=False)` leaves a done env in the state its episode ended in (a suite
    adapter built on `envs._base.SameStepEnv`, a gymnax `Environment`, each with its base's `step`, or either in
    `envs.ClipAction`), so that state can be read after the step (the last frame of an episode's video); other
    envs reset themselves within the step and the final state is gone."""
    return not is_vectorized(env) and _step_without_reset(env) is not None


def _resets_only_done(env: Any) -> bool:
    """Whether `env_step` resets only the envs that are done: a `_steps_until_reset` adapter whose
    `resets_only_done` is True."""
    return _steps_until_reset(env) and env.resets_only_done is True


def reset_group(batch_size: int) -> int:
    """How many resets `env_step` computes at a time for a `SameStepEnv` adapter's B envs: ceil(B / 8)."""
    return -(-batch_size // 8)


def _step_resetting_done(
    env: Any, env_params: Any, keys: jax.Array, env_state: PyTree, action: PyTree, batch_size: int
) -> tuple:
    """`jax.vmap(env.step)` for a `SameStepEnv` adapter, with only the done envs' resets computed.

    The vmapped `step` computes every env's reset at every step (a select
    cannot skip one) and keeps the done envs' only. A reset can cost far more
    than a step: craftax's generates a world (64 envs of Craftax-Classic
    stepped 64 times: 9.0 s with every reset, 0.49 s so, on 2 CPU cores;
    `benchmarks/reset_only_done.py`). Here `SameStepEnv.step_until_reset`
    (`step` up to its reset, with each env's reset key) runs vmapped, and
    the done envs, in index order, reset in groups of `reset_group(B)` inside
    a `lax.while_loop` that runs no group when no env is done (under an outer
    vmap, as many as the run with the most done envs needs). Each done env
    resets from its own reset key, as in the vmapped `step`: the results are
    its results, bit for bit where the env's reset computes an env alike in a
    batch of any size (craftax's world generation rounds some values
    differently in a batch of 16 than of 8 or fewer, which changes tiles of
    the world: the same key gives another valid world). An env whose reset
    returns other shapes or dtypes than its step (a select would promote them)
    takes the vmapped step's select instead.
    """
    params = env.default_params if env_params is None else env_params
    obs, state, reward, terminated, truncated, info, reset_keys_ = jax.vmap(
        env.step_until_reset, in_axes=(0, 0, 0, None))(keys, env_state, action, params)
    done = terminated | truncated
    step_out = (obs, state)
    reset_out = jax.eval_shape(lambda key: env.reset_env(key, params), reset_keys_[0])
    if jax.tree.structure(step_out) != jax.tree.structure(reset_out) or any(
        jnp.shape(a)[1:] != b.shape or jnp.result_type(a) != b.dtype
        for a, b in zip(jax.tree.leaves(step_out), jax.tree.leaves(reset_out))
    ):
        reset_obs, reset_state = jax.vmap(env.reset_env, in_axes=(0, None))(reset_keys_, params)
        obs, state = batch_where(done, reset_obs, obs), batch_where(done, reset_state, state)
    else:
        group = reset_group(batch_size)
        rank = jnp.cumsum(done, dtype=jnp.int32) - 1  # a done env's place among the done envs
        count = rank[-1] + 1

        def reset_next_group(carry):
            # Group g: the done envs ranked g * group to g * group + group - 1 (found here, in the loop, so a step
            # without a done env does not pay for it: jnp.nonzero before the loop took half of xminigrid's step).
            g, tree = carry
            hit = (rank == (g * group + jnp.arange(group, dtype=jnp.int32))[:, None]) & done  # [group, B]
            ids = jnp.where(hit.any(axis=1), jnp.argmax(hit, axis=1), batch_size)  # B past the last: dropped
            reset = jax.vmap(env.reset_env, in_axes=(0, None))(reset_keys_[jnp.minimum(ids, batch_size - 1)], params)
            return g + 1, jax.tree.map(lambda x, r: x.at[ids].set(r, mode="drop"), tree, reset)

        _, (obs, state) = jax.lax.while_loop(lambda carry: carry[0] * group < count, reset_next_group,
                                             (jnp.int32(0), step_out))
    return obs, state, reward, terminated, truncated, info


def check_env(env: Any, env_params: Any, key: jax.Array, num_envs: int) -> None:
    """Traces one reset and one step (no env runs) to check the step protocol.

    Args:
      env: the environment (static).
      env_params: its params (resolved, see `resolve_params`).
      key: a PRNG key for the traced calls.
      num_envs: B, used to batch a vectorized env's keys.

    Raises:
      TypeError: the step's result is not the 6-tuple of the protocol, or its
        info has no "final_observation".
      ValueError: its observations are not the pytree, shapes and dtypes of
        the reset's (`_checks.check_step_like_reset`), also where a gymnax
        env's own `step_env` is what differs (or its done, or `is_truncated`,
        is not one scalar) and its `step` fails inside gymnax's auto-reset
        select (`_explain_select_failure`).
    """

    def one_step(key, env_params):
        obs, state = env.reset(key, env_params)
        action = env.action_space(env_params).sample(key)
        return obs, env.step(key, state, action, env_params)

    def all_steps(keys, env_params):  # a vectorized env: all B at once
        obs, state = env.reset(keys, env_params)
        actions = jax.vmap(env.action_space(env_params).sample)(keys)
        return obs, env.step(keys, state, actions, env_params)

    if is_vectorized(env):
        obs, result = jax.eval_shape(all_steps, jax.random.split(key, num_envs), env_params)
    else:
        try:
            obs, result = jax.eval_shape(one_step, key, env_params)
        except Exception as error:
            _explain_select_failure(env, env_params, key, error)
            raise
    step_obs = _checks.unpack_step(result, env, batched=is_vectorized(env))[0]
    _checks.check_step_like_reset(env, obs, step_obs, batched=is_vectorized(env))


def _explain_select_failure(env: Any, env_params: Any, key: jax.Array, error: Exception) -> None:
    """A ValueError, from `error`, where a gymnax env's own `step_env` returns observations or a state unlike its
    `reset_env`'s (`_checks.check_step_like_reset`, `_checks.check_step_state_like_reset`), or a done (or
    `is_truncated` a flag) that is not one scalar; else nothing (the caller raises `error`).

    gymnax's `Environment.step` selects between the two per leaf for its auto-reset, with
    `terminated | is_truncated(state)`, so such an env (a user's own, say) failed there with "select cases must
    have the same shapes, got [(1,), (2,)]", a dtype mismatch or "select `which` must be scalar or have the
    same shape as cases", naming neither the env nor what differs."""
    while not callable(getattr(env, "step_env", None)) and getattr(env, "env", None) is not None:
        env = env.env  # a wrapper's (`envs.ClipAction`, PPO's and A2C's on continuous actions) gymnax env
    step_env, reset_env = getattr(env, "step_env", None), getattr(env, "reset_env", None)
    if not (callable(step_env) and callable(reset_env)):
        return

    def parts(key, env_params):  # env_params resolved (check_env's)
        obs, state = reset_env(key, env_params)
        action = env.action_space(env_params).sample(key)
        stepped = step_env(key, state, action, env_params)
        is_truncated = getattr(env, "is_truncated", None)
        truncated = is_truncated(stepped[1], env_params) if callable(is_truncated) else jnp.zeros((), bool)
        return obs, state, stepped[0], stepped[1], stepped[3], truncated

    try:
        reset_obs, reset_state, step_obs, step_state, terminated, truncated = jax.eval_shape(parts, key, env_params)
    except Exception:  # noqa: BLE001 -- its own parts fail too: the caller raises the original error
        return
    try:
        # gymnax's step selects with terminated | is_truncated(state): one bool per env
        for name, flag in (("step_env returns a done (terminated) of", terminated), ("is_truncated returns", truncated)):
            if [jnp.shape(x) for x in jax.tree.leaves(flag)] != [()]:
                raise ValueError(
                    f"env {type(env).__name__}: {name} {_checks.tree_text(flag)}; gymnax's step selects between "
                    "reset_env's and step_env's observations and states with terminated | is_truncated(state), so "
                    "each must be one scalar (a bool[]) per env.")
        _checks.check_step_like_reset(env, reset_obs, step_obs)
        _checks.check_step_state_like_reset(env, reset_state, step_state)
    except ValueError as mismatch:
        raise mismatch from error


def takes_fused_keys(env: Any, env_params: Any, num_envs: int) -> bool:
    """Whether `num_envs` copies of `env` reset and step with `prng.FUSED_THREEFRY` keys.

    With such keys the env's own draws (its resets, its auto-reset inside
    `step`) hash in one fused kernel each (`prng`), the same bits as with
    JAX's keys. A traced reset and step (`jax.eval_shape`, nothing runs)
    decides: False when fusing is off, when the trace fails (an env that
    needs raw uint32 keys), or when a key ends up in its outputs (an env that
    keeps its key in its state, whose type would then change between a fused
    and an unfused step). Such an env keeps JAX's keys; nothing else changes.

    Args:
      env: the environment (static).
      env_params: its params.
      num_envs: B.
    """
    return _fused_trace(env, env_params, num_envs) is True


def check_env_and_fused_keys(env: Any, env_params: Any, key: jax.Array, num_envs: int) -> bool:
    """`check_env`, then `takes_fused_keys`, tracing the env once where it can.

    The traced reset and step of `takes_fused_keys` checks the step protocol
    too (`env_step` unpacks what `step` returns), so where it goes through,
    `check_env`'s own trace is left out; where it fails, `check_env`'s plain
    trace runs and raises the protocol's errors. For an env whose step is slow
    to trace (craftax: about 0.6 s a step) that is one trace fewer per build.

    Args:
      env: the environment (static).
      env_params: its params (resolved, see `resolve_params`).
      key: a PRNG key for `check_env`'s traced calls.
      num_envs: B.

    Returns:
      `takes_fused_keys(env, env_params, num_envs)`.

    Raises:
      TypeError, ValueError: as `check_env`.
    """
    fused = _fused_trace(env, env_params, num_envs)
    if fused is None:
        check_env(env, env_params, key, num_envs)
    return fused is True


# What `_fused_trace` found, by env: the answer is the env's (whether its reset and step trace on fused keys, and
# whether a key ends up in its state), not the batch's, and a command asked it once per `rollout_init` it traced
# (training's, the periodic evaluation's, a checkpoint's template): each a traced reset and step, 1.5 s for brax's
# inverted_pendulum and 1.2 s for craftax on 2 cores. Kept for the `_FUSED_PROBES_KEPT` envs probed last (an entry
# holds its env, so an id is never another env's). An env object changed after its probe (an attribute its step
# reads) is not probed again: make a new env object instead.
_FUSED_PROBES: collections.OrderedDict = collections.OrderedDict()
_FUSED_PROBES_KEPT = 32
_FUSED_PROBES_LOCK = threading.Lock()


def _probe_key(env: Any, env_params: Any, num_envs: int) -> tuple | None:
    """`_fused_trace`'s cache key: the env (by identity), its params' shapes, dtypes and tree (a traced params
    tree and the concrete one it traces give the same), B for a vectorized env (one call steps all B), and
    the x64 flag. None where the params are not arrays or their tree cannot be hashed (then nothing is kept)."""
    try:
        leaves, treedef = jax.tree.flatten(jax.eval_shape(lambda params: params, env_params))
        key = (id(env), treedef, tuple(leaves), num_envs if is_vectorized(env) else None,
               bool(jax.config.jax_enable_x64))
        hash(key)
    except Exception:  # noqa: BLE001 -- a leaf that is no array, a static field that cannot be hashed: not kept
        return None
    return key


def _fused_trace(env: Any, env_params: Any, num_envs: int) -> bool | None:
    """A traced reset and step on fused keys: None where it did not go through (fusing is off, or the trace
    failed), else whether the env takes fused keys (False: a key ends up in its outputs).

    The answer is kept by env and params shapes (`_probe_key`): a later call for the same env traces nothing,
    whatever its B (but a vectorized env's). An env that raises here (`_checks.check_step_like_reset`) raises
    each time."""
    key = jax.random.PRNGKey(0)
    if not prng.can_fuse(key):
        return None
    cache_key = _probe_key(env, env_params, num_envs)
    with _FUSED_PROBES_LOCK:
        kept = _FUSED_PROBES.get(cache_key) if cache_key is not None else None
        if kept is not None:  # (its env is this one: the entry holds it, so its id is no other object's)
            _FUSED_PROBES.move_to_end(cache_key)
            return kept[1]
    found = _fused_probe(env, env_params, num_envs, key)
    if cache_key is not None:
        with _FUSED_PROBES_LOCK:
            _FUSED_PROBES[cache_key] = (env, found)
            _FUSED_PROBES.move_to_end(cache_key)
            while len(_FUSED_PROBES) > _FUSED_PROBES_KEPT:
                _FUSED_PROBES.popitem(last=False)
    return found


def _fused_probe(env: Any, env_params: Any, num_envs: int, key: jax.Array) -> bool | None:
    """`_fused_trace`'s traced reset and step, uncached."""

    def reset_and_step(key, env_params):
        keys = jax.random.split(prng.fused(key), num_envs)
        obs, state = env_reset(env, keys, env_params)
        actions = jax.vmap(env.action_space(env_params).sample)(prng.like(keys, key))
        return obs, state, env_step(env, env_params, keys, state, actions, num_envs)

    try:
        out = jax.eval_shape(reset_and_step, key, env_params)
    except Exception:  # noqa: BLE001 -- the env then gets JAX's keys, whose errors surface there
        return None
    _checks.check_step_like_reset(env, out[0], out[2].obs, batched=True)
    return not keeps_a_key(out)


def keeps_a_key(env_state: PyTree) -> bool:
    """Whether an env state (any pytree) holds a typed PRNG key.

    An env that keeps its key in its state cannot step on fused keys (their
    type would end up in the state). Only typed keys (`jax.random.key`) are
    seen here; a raw uint32 key (`jax.random.PRNGKey`) is not told apart from
    other uint32 data.
    """
    return any(prng.is_key(x) for x in jax.tree.leaves(env_state))


def step_keys(
    key: jax.Array, batch_size: int, fused_env_keys: bool = False
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One step's keys from one split of `key`.

    One threefry hash per step instead of two (a split into three, then the
    env key into B), computed as one fused kernel (`prng`): on CPU JAX's own
    lowering of a hash is a loop of about 25 small kernels and copies, a large
    share of a small-batch rollout step. The keys are the ones
    `jax.random.split(key, batch_size + 2)` gives, in `key`'s representation.

    Args:
      key: the PRNG key to split (typed or raw uint32).
      batch_size: B, a Python int.
      fused_env_keys: keep the env keys as `prng.FUSED_THREEFRY` keys (same
        bits), so the env's own draws are fused too; only for an env that
        accepts such keys.

    Returns:
      `(next_key, policy_key, env_keys)`: the key to carry to the next step,
      the policy's key and the env keys [B].
    """
    keys = jax.random.split(prng.fused(key), batch_size + 2)
    env_keys = keys[2:] if fused_env_keys else prng.like(keys[2:], key)
    return prng.like(keys[0], key), prng.like(keys[1], key), env_keys


def reset_keys(key: jax.Array, batch_size: int, fused_env_keys: bool = False) -> jax.Array:
    """The B reset keys `jax.random.split(key, batch_size)` gives, hashed in one fused kernel.

    Args:
      key: the PRNG key to split (typed or raw uint32).
      batch_size: B, a Python int.
      fused_env_keys: return them as `prng.FUSED_THREEFRY` keys (same bits),
        so the env's own draws are fused too (`takes_fused_keys`); otherwise
        in `key`'s representation.
    """
    keys = jax.random.split(prng.fused(key), batch_size)
    return keys if fused_env_keys else prng.like(keys, key)


def act(
    policy_fn: Any,
    params: PyTree,
    obs: PyTree,
    key: jax.Array,
    carry: PyTree | None,
    first: jax.Array | None,
    batch_size: int,
    space: Any,
) -> tuple[PolicyOutput, PyTree | None]:
    """Calls the policy on B observations and checks what it returns.

    Args:
      policy_fn: `policy_fn(params, obs, key) -> PolicyOutput`, or the
        recurrent `policy_fn(params, obs, key, carry) -> (PolicyOutput,
        new_carry)` (static).
      params: the policy's parameters.
      obs: observations, leaves [B, ...].
      key: the policy's PRNG key.
      carry: the recurrent carry (leaves [B, ...]), or None for a feedforward
        policy.
      first: [B] bool, rows whose carry is zeroed before the call (see
        `reset_carry`); ignored when `carry` is None.
      batch_size: B, a Python int.
      space: the env's action space, which the actions must match.

    Returns:
      `(PolicyOutput, new_carry)` with action, log_prob and value [B, ...];
      new_carry is None for a feedforward policy.

    Raises:
      TypeError, ValueError: the policy's output does not have the promised
        structure, shapes or dtypes (see `_checks`).
    """
    if not callable(policy_fn):
        raise TypeError(f"policy_fn must be a function policy_fn(params, obs, key) -> PolicyOutput, got "
                        f"{type(policy_fn).__name__}; a learner's greedy or deterministic policy is its "
                        "eval_policy_fn (DQN's policy_fn is None: its exploration belongs to training).")
    _checks.refuse_train_state("params", params)
    _check_policy_arity(policy_fn, recurrent=carry is not None)
    try:
        with _checks.acting_in(space):
            if carry is None:
                out = policy_fn(params, obs, key)
            else:
                out = policy_fn(params, obs, key, reset_carry(carry, first))
    except Exception as error:
        if getattr(error, "jaxrl_rollout_says_why", False):
            raise
        error.add_note(
            f"jaxrl_rollout: this was raised inside policy_fn(params, obs, key) on observations "
            f"{_checks.tree_text(obs, batched=True)} per env. If the params are the cause: they must be what the "
            "policy takes, a learner's policy_params(state) (PQN's is the pair (q_params, epsilon)), and the params "
            "of a vmapped sweep carry a leading run axis: take run i's with jax.tree.map(lambda x: x[i], params), or "
            "vmap over them.")
        raise
    if carry is None:
        return _checks.check_policy_output(out, batch_size, space), None
    return _checks.check_recurrent_output(out, batch_size, space, carry)


def _check_policy_arity(policy_fn: Callable, recurrent: bool) -> None:
    """A TypeError naming policy_fn when its signature cannot take the call the state asks for: a feedforward
    policy (3 arguments) with a recurrent state, or a recurrent one (4) with a feedforward state, which failed
    with the function's own "takes 3 positional arguments but 4 were given". Signatures that cannot be read
    (builtins, some wrappers) are not checked."""
    try:
        signature = inspect.signature(policy_fn)
    except (TypeError, ValueError):
        return
    args = (None,) * (4 if recurrent else 3)
    try:
        signature.bind(*args)
    except TypeError:
        if recurrent:
            raise TypeError("the rollout state holds a recurrent carry (rollout_init(..., initial_carry=...)), so "
                            "policy_fn is called as policy_fn(params, obs, key, carry) -> (PolicyOutput, "
                            f"new_carry), which {getattr(policy_fn, '__name__', 'it')}{signature} cannot take; "
                            "pass a recurrent policy or init without initial_carry.") from None
        raise TypeError("the rollout state holds no carry, so policy_fn is called as policy_fn(params, obs, key), "
                        f"which {getattr(policy_fn, '__name__', 'it')}{signature} cannot take; a recurrent policy "
                        "needs an initial carry: rollout_init(..., initial_carry=...), or evaluate(..., "
                        "initial_carry=...) (a learner's: algo.module.initial_carry(num_episodes)).") from None
