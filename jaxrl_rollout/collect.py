"""Collecting experience: `rollout_init`, `rollout` and `evaluate`.

The module is named for what it does, collect trajectories and episodes,
rather than after its main function: a submodule called `rollout` would
share its name with the exported `jaxrl_rollout.rollout` function, and
importing it would rebind that package attribute to the module. The per-step
pieces these functions are built from (env reset and step over B envs,
acting with a policy, per-step keys) are the public `jaxrl_rollout.stepping`.

The env protocol is gymnax 1.0's `Environment`: `reset(key, params)` and
`step(key, state, action, params) -> (obs, state, reward, terminated,
truncated, info)` with same-step auto-reset and the pre-reset observation in
`info["final_observation"]`. Any object with those two methods and an
`action_space(params)` works, with no wrapper. The rollout vmaps `reset` and
`step` over its B envs itself; an env that steps all B at once (a host env
such as `jaxrl_rollout.envs.gymnasium`'s, stepped through `io_callback`) says
so with a class attribute `vectorized = True` and then gets keys [B], the
batched state and the actions [B] directly.

Everything here is a pure function of its inputs: call it eagerly, inside your
own `jax.jit`, or under `jax.vmap` over keys or params. `env`, `policy_fn` and
the sizes are static (Python objects); keys, params, env_params and states
are traced.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks, normalization, prng, stepping
from jaxrl_rollout.types import EvalResult, PyTree, RolloutState, Trajectory

__all__ = ["episode_limit", "evaluate", "rollout", "rollout_init"]

# Up to this many T * B rows, a rollout values the truncated final observations
# in one batched call after the scan (cheap per-step overhead for small batches;
# costs the [T, B] final observations and one critic pass's activations over
# them). Above it, each step values them under a `lax.cond`, whose memory is
# one step's worth and whose per-step overhead large batches hide.
BATCHED_FINAL_VALUE_ROWS = 2048


def rollout_init(
    key: jax.Array,
    env: Any,
    env_params: Any,
    num_envs: int,
    initial_carry: PyTree | None = None,
    *,
    normalize_observations: bool = False,
) -> RolloutState:
    """Resets `num_envs` copies of `env` and returns the state `rollout` starts from.

    Args:
      key: PRNG key; env i is reset with the i-th split of it.
      env: a gymnax>=1.0.1 environment (static).
      env_params: the env's params (traced; may be vmapped), or None for
        `env.default_params`.
      num_envs: B, a positive Python int.
      initial_carry: for recurrent policies, the carry pytree with leaves
        [B, ...] (its values are irrelevant at the first step, which resets
        it to zeros). None for feedforward policies.
      normalize_observations: keep running observation statistics, shared
        by the B envs, in `state.obs_rms` (started from the reset
        observations); `rollout` then updates them every step and the policy
        acts on normalised observations (see `jaxrl_rollout.normalization`).
        Needs a single array observation.

    Returns:
      A `RolloutState` with every `first` flag set.
    """
    num_envs = _checks.check_positive_int("num_envs", num_envs)
    _checks.check_key(key, "rollout_init's key", "it splits the one key over the num_envs envs itself")
    env_params = stepping.resolve_params(env, env_params)
    reset_key, key = prng.split(key)  # jax.random.split's keys, each split hashed in one kernel
    fused_env_keys = stepping.check_env_and_fused_keys(env, env_params, reset_key, num_envs)
    if initial_carry is not None:
        _checks.check_carry(initial_carry, num_envs)
    obs, env_state = stepping.env_reset(env, stepping.reset_keys(reset_key, num_envs, fused_env_keys), env_params)
    obs_rms = None
    if normalize_observations:
        if not isinstance(obs, jax.Array) or not jnp.issubdtype(obs.dtype, jnp.number):
            raise ValueError(
                "normalize_observations=True needs the env's observation to be a single numeric array; "
                f"got {jax.tree.structure(obs)} with dtypes {[x.dtype for x in jax.tree.leaves(obs)]}."
            )
        obs_rms = normalization.rms_update(normalization.rms_init(obs.shape[1:]), obs)
    return RolloutState(
        env_state=env_state,
        obs=obs,
        first=jnp.ones((num_envs,), dtype=bool),
        episode_return=jnp.zeros((num_envs,), dtype=jnp.float32),
        episode_length=jnp.zeros((num_envs,), dtype=jnp.int32),
        carry=initial_carry,
        key=key,
        obs_rms=obs_rms,
    )


def rollout(
    env: Any,
    env_params: Any,
    policy_fn: Any,
    params: PyTree,
    state: RolloutState,
    num_steps: int,
    *,
    bootstrap_truncated: bool = True,
    obs_clip: float | None = 10.0,
    obs_epsilon: float = 1e-8,
    value_fn: Any = None,
) -> tuple[RolloutState, Trajectory]:
    """Runs `num_steps` steps of the policy in every env with a `lax.scan`.

    At each step the policy acts on `state.obs` ([B, ...]), every env is stepped
    once (auto-resetting on done), and running episode statistics are updated.
    After the scan one more policy call gives V of the last observation, so
    `next_value[t]` is V(obs[t + 1]) everywhere, except where the transition
    was truncated: there it is V(info["final_observation"]), the true next
    state. For T * B <= `BATCHED_FINAL_VALUE_ROWS` (2048) the final
    observations are kept during the scan and valued after it in one policy
    call vmapped over the T steps (one batched critic pass over all of them,
    which saves per-step kernels, most of all under `vmap`, where a
    conditional call becomes an unconditional one); for larger rollouts each
    step values them under a `lax.cond`, skipped when no env truncated, so the
    memory stays one step's worth. The values are those of `policy_fn`'s
    `value` output; the actions of these extra calls are discarded.

    With `value_fn`, every value comes from it instead: the scan keeps no
    per-step value (the policy's is left unused, and XLA drops its critic
    from the step), and after the scan V(obs[t]) of all T steps is computed
    in one call vmapped over them, as are the last observation's and the
    final observations' values. For a network whose critic shares nothing
    with the actor (`ActorCriticMLP`'s separate trunks, which PPO and A2C
    pass this for) that moves a critic pass per step out of the scan into
    one batched pass (BENCHMARKS.md section 9 measures it). The values
    equal the policy's to float32 rounding (XLA may sum a batched product
    in another order). A network whose critic shares a trunk or a
    recurrent core with the actor would compute that trunk twice, so leave
    it None there.

    Keys: each step splits `state.key` once; the env gets its keys as
    `prng.FUSED_THREEFRY` keys (the same bits as `jax.random.split` gives,
    hashed in one kernel on CPU) unless it cannot take them (an env that keeps
    its key in its state, or needs raw key arrays), which is found when the
    scan is traced; the policy gets keys of `state.key`'s own type.

    Recurrent policies: when `state.carry` is not None, `policy_fn` is called as
    `policy_fn(params, obs, key, carry) -> (PolicyOutput, new_carry)` and the
    carry is reset to zeros for each env whose `first` flag is set before the
    call. The value of a final observation is computed with the carry that
    continues the finished episode.

    Args:
      env: gymnax>=1.0.1 environment (static).
      env_params: env params (traced), or None for `env.default_params`.
      policy_fn: `policy_fn(params, obs, key) -> PolicyOutput` (static), or the
        recurrent form above.
      params: policy parameters (traced).
      state: the `RolloutState` from `rollout_init` or a previous `rollout`.
      num_steps: T, a positive Python int.
      bootstrap_truncated: if False, skip the extra value call on final
        observations: `next_value` is then V(obs[t + 1]) everywhere, the
        convention of code that treats a time limit as termination (CleanRL,
        PureJaxRL): estimate with `gae(..., traj.done, traj.done, ...)`, not
        `trajectory_gae`, which would bootstrap a time limit from the next
        episode's first observation.
      obs_clip, obs_epsilon: when `state.obs_rms` is set (see
        `rollout_init`'s normalize_observations), the policy acts on
        `clip((obs - mean) / sqrt(var + obs_epsilon), -obs_clip, obs_clip)`
        (CleanRL's NormalizeObservation then clip at 10); None skips the clip.
      value_fn: None, or `value_fn(params, obs [B, ...]) -> value [B]`
        (static), the policy's value without acting: e.g.
        `lambda params, obs: module.apply(params, obs)[1]`. It must give the
        value `policy_fn` gives for the same params and (normalised)
        observations; feedforward policies only.

    Returns:
      `(state, trajectory)`: the state to continue from and a time-major
      `Trajectory` with leaves [T, B, ...].

    Raises:
      TypeError, ValueError: num_steps is not a positive int, state is not a
        `RolloutState`, value_fn is not callable or is given with a recurrent
        state, or the env's step, the policy's output or value_fn's breaks
        its protocol (the message names which). Actions are checked for
        structure, shape and dtype against the env's action space, and
        `categorical_policy`'s logits for one per action of a Discrete
        space; the values a policy of your own computes are not (they are
        traced): a Discrete action outside [0, n) reaches the env as it is.
    """
    num_steps, env_params = _check_rollout_inputs(env, env_params, state, num_steps)
    if value_fn is not None:
        if not callable(value_fn):
            raise TypeError(f"value_fn must be None or callable(params, obs) -> value [B], got "
                            f"{type(value_fn).__name__}.")
        if state.carry is not None:
            raise ValueError("value_fn is for feedforward policies; this rollout state holds a recurrent carry, so "
                             "leave value_fn None (the recurrent policy's own values are used).")
    batch_size = jnp.shape(state.first)[0]
    spec = _RolloutSpec(
        env=env,
        env_params=env_params,
        policy_fn=policy_fn,
        params=params,
        batch_size=batch_size,
        space=env.action_space(env_params),
        normalizing=state.obs_rms is not None,
        obs_clip=obs_clip,
        obs_epsilon=obs_epsilon,
        final_values=_final_values_path(bootstrap_truncated, num_steps, batch_size),
        value_fn=value_fn,
    )
    state, (traj, final_obs) = _scan_steps(spec, state, num_steps)
    if value_fn is not None:
        traj = traj._replace(value=_values_after_scan(spec, traj.obs))
    return state, traj._replace(next_value=_next_values(spec, state, traj, final_obs))


# How a rollout values the final observations of truncated transitions; see
# `_final_values_path` (None: it does not, bootstrap_truncated=False).
_AFTER_SCAN = "after the scan"
_PER_STEP = "per step"


class _RolloutSpec(NamedTuple):
    """What every step of one `rollout` call shares: its arguments, resolved.

    Attributes:
      env, env_params, policy_fn, params: `rollout`'s arguments (env_params
        resolved by `stepping.resolve_params`).
      batch_size: B, a Python int.
      space: the env's action space.
      normalizing: whether the policy acts on normalised observations
        (`state.obs_rms` is set).
      obs_clip, obs_epsilon: `rollout`'s normalisation arguments.
      final_values: `_AFTER_SCAN`, `_PER_STEP` or None (see
        `_final_values_path`).
      value_fn: `rollout`'s value_fn, or None (values from the policy).
    """

    env: Any
    env_params: Any
    policy_fn: Any
    params: PyTree
    batch_size: int
    space: Any
    normalizing: bool
    obs_clip: float | None
    obs_epsilon: float
    final_values: str | None
    value_fn: Any = None


def _check_rollout_inputs(env: Any, env_params: Any, state: Any, num_steps: Any) -> tuple[int, Any]:
    """Checks `rollout`'s arguments.

    Returns:
      `(num_steps, env_params)`: num_steps as an int, and the env's params
      (`env.default_params` when `env_params` is None).

    Raises:
      TypeError, ValueError: num_steps is not a positive int, state is not a
        `RolloutState`, or env does not follow the gymnax protocol (see
        `stepping.resolve_params`).
    """
    num_steps = _checks.check_positive_int("num_steps", num_steps)
    if not isinstance(state, RolloutState):
        raise TypeError(f"state must be a RolloutState from rollout_init, got {type(state).__name__}.")
    return num_steps, stepping.resolve_params(env, env_params)


def _final_values_path(bootstrap_truncated: bool, num_steps: int, batch_size: int) -> str | None:
    """Chooses how a rollout values the final observations of truncated transitions.

    Both paths give the same values, bit for bit (tests/test_rollout.py); they
    trade speed against memory:

    - `_AFTER_SCAN` for T * B <= `BATCHED_FINAL_VALUE_ROWS`: the scan keeps
      the [T, B] final observations and `_final_values_after_scan` values them
      in one batched policy call. Cheaper per step, most of all under `vmap`,
      where a conditional call becomes an unconditional one.
    - `_PER_STEP` above it: each step values its own under a `lax.cond`
      (`_final_value_per_step`), so the memory stays one step's worth.

    Returns:
      `_AFTER_SCAN`, `_PER_STEP`, or None when `bootstrap_truncated` is False.
    """
    if not bootstrap_truncated:
        return None
    return _AFTER_SCAN if num_steps * batch_size <= BATCHED_FINAL_VALUE_ROWS else _PER_STEP


def _observed(spec: _RolloutSpec, obs: PyTree, obs_rms: Any) -> PyTree:
    """What the policy sees of `obs`: normalised by `obs_rms` when the rollout normalises, else `obs`."""
    if spec.normalizing:
        return normalization.normalize(obs_rms, obs, spec.obs_clip, spec.obs_epsilon)
    return obs


def _value(spec: _RolloutSpec, params: PyTree, obs: PyTree, key: jax.Array, carry: Any, first: Any) -> jax.Array:
    """V(obs) [B]: `spec.value_fn`'s, else from a policy call whose action and carry are discarded (and so DCE'd)."""
    if spec.value_fn is not None:
        return _checks.check_values(spec.value_fn(params, obs), spec.batch_size, "value_fn(params, obs)")
    out, _ = stepping.act(spec.policy_fn, params, obs, key, carry, first, spec.batch_size, spec.space)
    return out.value


def _values_after_scan(spec: _RolloutSpec, obs: PyTree) -> jax.Array:
    """`value` [T, B] with `spec.value_fn`: V(obs[t]) for every step, in one call vmapped over the T steps.

    A `jax.jit`, like `_final_values_after_scan`, so that an eager rollout
    rounds these values as a jitted one does.
    """
    return jax.jit(lambda params, obs: jax.vmap(lambda o: _value(spec, params, o, None, None, None))(obs))(
        spec.params, obs
    )


def _scan_steps(spec: _RolloutSpec, state: RolloutState, num_steps: int) -> tuple[RolloutState, tuple]:
    """Runs `_step` `num_steps` times in a `lax.scan`.

    The env gets fused keys (bit-identical, fewer kernels) unless it cannot
    take them: an env that keeps its key in its state (its type would change
    from step to step, which the scan rejects) or that needs raw key arrays.
    An env state that holds a typed key is not tried (`stepping.keeps_a_key`:
    no failed trace of a slow env's step); otherwise a failed fused trace is
    followed by the plain one, and any error comes from that, as it would
    without this.

    Returns:
      `(state, (trajectory, final_obs))`: the state after the last step, the
      stacked `Trajectory` [T, B, ...] (its `next_value` not yet complete, see
      `_next_values`), and the stacked final observations on the
      `_AFTER_SCAN` path (None otherwise).
    """
    if prng.can_fuse(state.key) and not stepping.keeps_a_key(state.env_state):
        try:
            return jax.lax.scan(functools.partial(_step, spec, True), state, None, length=num_steps)
        except Exception:  # noqa: BLE001 -- retraced below with the env's usual keys
            pass
    return jax.lax.scan(functools.partial(_step, spec, False), state, None, length=num_steps)


def _step(spec: _RolloutSpec, fused_env_keys: bool, state: RolloutState, _: Any) -> tuple[RolloutState, tuple]:
    """One scan step: the policy acts, every env steps once, episode statistics advance.

    Returns:
      `(next_state, (record, final_obs))`: the record is the step's
      `Trajectory` row, whose `next_value` holds V(final observation) where
      truncated on the `_PER_STEP` path and zeros otherwise; final_obs is the
      step's (normalised) final observations on the `_AFTER_SCAN` path, else
      None.
    """
    key, policy_key, env_keys = stepping.step_keys(state.key, spec.batch_size, fused_env_keys)
    policy_obs = _observed(spec, state.obs, state.obs_rms)
    out, new_carry = stepping.act(
        spec.policy_fn, spec.params, policy_obs, policy_key, state.carry, state.first, spec.batch_size, spec.space
    )
    obs, env_state, reward, terminated, truncated, final_obs = stepping.env_step(
        spec.env, spec.env_params, env_keys, state.env_state, out.action, spec.batch_size
    )
    obs_rms = normalization.rms_update(state.obs_rms, obs) if spec.normalizing else None
    final_obs = _observed(spec, final_obs, obs_rms)
    done = terminated | truncated
    truncated = truncated & ~terminated
    ep_return = state.episode_return + reward
    ep_length = state.episode_length + 1
    if spec.final_values == _PER_STEP:
        step_final_value = _final_value_per_step(spec, final_obs, new_carry, truncated, policy_key, out.value)
    else:
        step_final_value = jnp.zeros_like(out.value)  # valued after the scan, or not needed

    record = Trajectory(
        obs=policy_obs,
        action=out.action,
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        done=done,
        first=state.first,
        log_prob=out.log_prob,
        value=out.value if spec.value_fn is None else None,  # with value_fn: valued after the scan
        next_value=step_final_value,  # V(final observation) where truncated; completed after the scan
        completed_return=jnp.where(done, ep_return, 0.0),
        completed_length=jnp.where(done, ep_length, 0),
        carry=state.carry,
    )
    next_state = RolloutState(
        env_state=env_state,
        obs=obs,
        first=done,
        episode_return=jnp.where(done, 0.0, ep_return),
        episode_length=jnp.where(done, 0, ep_length),
        carry=new_carry,
        key=key,
        obs_rms=obs_rms,
    )
    return next_state, (record, final_obs if spec.final_values == _AFTER_SCAN else None)


def _final_value_per_step(
    spec: _RolloutSpec,
    final_obs: PyTree,
    new_carry: Any,
    truncated: jax.Array,
    policy_key: jax.Array,
    value: jax.Array,
) -> jax.Array:
    """The `_PER_STEP` path: one step's V(final observation) where truncated, inside the scan.

    The policy call runs under a `lax.cond`, skipped when no env truncated;
    a recurrent policy continues the finished episode with `new_carry` (no
    carry is reset).

    Args:
      final_obs: the step's (normalised) final observations [B, ...].
      new_carry: the carry the step's policy call produced, or None.
      truncated: [B] bool, truncated and not terminated.
      policy_key: the step's policy key; the call gets `fold_in(policy_key, 1)`.
      value: the step's V(obs) [B], whose dtype and shape the result takes.

    Returns:
      [B]: V(final_obs) where `truncated`, 0 elsewhere.
    """
    final_value = jax.lax.cond(
        jnp.any(truncated),
        lambda: _value(
            spec, spec.params, final_obs, jax.random.fold_in(policy_key, 1), new_carry, jnp.zeros_like(truncated)
        ).astype(value.dtype),
        lambda: jnp.zeros_like(value),
    )
    return jnp.where(truncated, final_value, jnp.zeros_like(value))


def _next_values(spec: _RolloutSpec, state: RolloutState, traj: Trajectory, final_obs: Any) -> jax.Array:
    """`next_value` [T, B]: V(obs[t + 1]), or V(final observation) where truncated.

    One more policy call values the last observation; its key is derived
    without advancing `state.key`, so two rollouts of T steps draw the same
    actions as one rollout of 2T steps.

    Args:
      state: the state after the scan.
      traj: the scanned trajectory (its `next_value` from `_step`).
      final_obs: the stacked final observations on the `_AFTER_SCAN` path,
        else None.

    Returns:
      [T, B] in `traj.value`'s dtype.
    """
    last_value = _value(
        spec, spec.params, _observed(spec, state.obs, state.obs_rms), jax.random.fold_in(state.key, 2),
        state.carry, state.first,
    )
    following = jnp.concatenate([traj.value[1:], last_value[None].astype(traj.value.dtype)])
    if spec.final_values == _AFTER_SCAN:
        key = jax.random.fold_in(state.key, 3)
        final_value = _final_values_after_scan(spec, final_obs, traj.carry, state.carry, key)
        following = jnp.where(traj.truncated, final_value.astype(traj.value.dtype), following)
    elif spec.final_values == _PER_STEP:
        following = jnp.where(traj.truncated, traj.next_value, following)
    return following


def _final_values_after_scan(
    spec: _RolloutSpec, final_obs: PyTree, carries: Any, last_carry: Any, key: jax.Array
) -> jax.Array:
    """The `_AFTER_SCAN` path: V(final_obs[t]) [T, B] for every step and env, in one policy call vmapped over T.

    The policy still sees [B] batches (so per-env closures keep working), and
    XLA runs the critic as one batched matmul over all T * B observations. A
    recurrent policy values final_obs[t] with the carry it produced at step t
    (the carry that continues the finished episode): `carries[t + 1]`, and
    `last_carry` for the last step; no carry is reset. This replaces a
    per-step `lax.cond`, which under `vmap` becomes a select that runs the
    critic at every step anyway.

    The call is a `jax.jit`: under jit it inlines; called eagerly it still runs
    as one XLA program, so an eager rollout fuses (and rounds) these values
    exactly as a jitted one does.

    Args:
      final_obs: the stacked final observations [T, B, ...].
      carries: `Trajectory.carry` [T, B, ...], or None for a feedforward policy.
      last_carry: the carry after the last step [B, ...], or None.
      key: the key every policy call gets.

    Returns:
      [T, B] in the policy's value dtype.
    """

    def final_values(params, final_obs, carries, last_carry, key):
        if last_carry is None:
            return jax.vmap(lambda obs: _value(spec, params, obs, key, None, None))(final_obs)
        following = jax.tree.map(lambda seq, last: jnp.concatenate([seq[1:], last[None]]), carries, last_carry)
        no_reset = jnp.zeros(jnp.shape(jax.tree.leaves(last_carry)[0])[:1], dtype=bool)
        return jax.vmap(lambda obs, carry: _value(spec, params, obs, key, carry, no_reset))(final_obs, following)

    return jax.jit(final_values)(spec.params, final_obs, carries, last_carry, key)


def env_time_limit(env: Any, env_params: Any) -> Any:
    """The env's own time limit: `env_params.max_steps_in_episode`, else `env.max_steps_in_episode(env_params)`
    (a number, or an array inside jit), or None where it has neither."""
    bound = getattr(env_params, "max_steps_in_episode", None)
    if bound is None and callable(getattr(env, "max_steps_in_episode", None)):
        bound = env.max_steps_in_episode(env_params)
    return bound


def episode_limit(env: Any, env_params: Any, max_steps: int | None, what: str = "the episodes") -> Any:
    """The most steps of an episode: `max_steps` (checked), else the env's own time limit.

    The limit is `env_params.max_steps_in_episode`, else
    `env.max_steps_in_episode(env_params)` (a number, or an array inside jit).

    Raises:
      ValueError: naming `max_steps`, when it is not a positive int or None
        and the env has no time limit (`what` says what it would bound).
    """
    if max_steps is not None:
        return _checks.check_positive_int("max_steps", max_steps)
    bound = env_time_limit(env, env_params)
    if bound is None:
        raise ValueError(
            "max_steps is None and neither env_params.max_steps_in_episode nor "
            f"{type(env).__name__}.max_steps_in_episode(env_params) gives a time limit; "
            f"pass max_steps (a positive int) to bound {what}."
        )
    return bound


def evaluation_step(env: Any, env_params: Any, policy_fn: Any, params: PyTree, num_episodes: int) -> Any:
    """One step of `evaluate`'s episodes: `step(state, active) -> (state, active, reward)`.

    `state` is the `RolloutState` of the N envs, `active` [N] marks the
    episodes still running; a finished episode's later rewards and steps are
    not counted (its reward in the result is 0) and it stays inactive.
    `evaluate` and `video.record_episodes` loop over it in a
    `lax.while_loop`; a host env's video steps it from Python, one call at a
    time, drawing the env between calls: the same steps, so the same episodes.
    `env_params` must be resolved (not None).
    """
    step = _evaluation_step(env, env_params, policy_fn, params, num_episodes)
    return lambda state, active: step(state, active)[:3]


def _evaluation_step(env: Any, env_params: Any, policy_fn: Any, params: PyTree, num_episodes: int) -> Any:
    """`evaluation_step` whose step also gives the true final observations: `step(state, active) -> (state,
    active, reward, final_obs)` (a host env's video draws the one of an episode its env has reset)."""
    space = env.action_space(env_params)

    def step(state: RolloutState, active: jax.Array) -> tuple[RolloutState, jax.Array, jax.Array, PyTree]:
        key, policy_key, env_keys = stepping.step_keys(state.key, num_episodes)
        out, carry = stepping.act(
            policy_fn, params, state.obs, policy_key, state.carry, state.first, num_episodes, space
        )
        obs, env_state, reward, terminated, truncated, final_obs = stepping.env_step(
            env, env_params, env_keys, state.env_state, out.action, num_episodes, reset_done=False
        )
        done = terminated | truncated
        reward = jnp.where(active, reward, 0.0)
        state = RolloutState(
            env_state=env_state,
            obs=obs,
            first=done,
            episode_return=state.episode_return + reward,
            episode_length=state.episode_length + active.astype(jnp.int32),
            carry=carry,
            key=key,
        )
        return state, active & ~done, reward, final_obs

    return step


def evaluate(
    env: Any,
    env_params: Any,
    policy_fn: Any,
    params: PyTree,
    key: jax.Array,
    num_episodes: int,
    max_steps: int | None = None,
    *,
    initial_carry: PyTree | None = None,
) -> EvalResult:
    """Runs `num_episodes` whole episodes in parallel and returns their outcomes.

    Each episode runs in its own env copy. Once an env's episode is done, its
    later steps are discarded (rlplay `evaluate`, ilpyt
    `generate_test_episodes`): no reward or length is added and the auto-reset
    episode is never counted. A `lax.while_loop` stops as soon as every episode
    is done or `max_steps` steps have run, so the call is jittable and
    vmappable. Since nothing after an episode's end is read, a suite
    adapter's or a gymnax env's finished env is not reset
    (`stepping.env_step(..., reset_done=False)`: no reset compiled into the
    loop, and the env keeps the state its episode ended in).

    For deterministic evaluation pass a policy that acts with the mode of its
    action distribution, e.g. `categorical_policy(apply_fn, deterministic=True)`.

    A host env (gymnasium, envpool) vmaps too: the runs of a vmap are
    evaluated in lockstep, in one pool of every run's envs and one loop until
    every run's episodes are done, each run's result that of its key alone.

    Args:
      env: gymnax>=1.0.1 environment (static).
      env_params: env params (traced), or None for `env.default_params`.
      policy_fn: feedforward or recurrent policy, as in `rollout` (static).
      params: policy parameters.
      key: PRNG key for resets, actions and env transitions.
      num_episodes: N, a positive Python int (one env per episode).
      max_steps: the most steps to run; None uses
        `env_params.max_steps_in_episode` (the env's own time limit), or
        else `env.max_steps_in_episode(env_params)` (the suite adapters'
        time limits, see `jaxrl_rollout.envs`).
      initial_carry: recurrent carry with leaves [N, ...], None otherwise.

    Returns:
      An `EvalResult` with per-episode returns [N], lengths [N] and a
      `completed` mask [N].
    """
    num_episodes = _checks.check_positive_int("num_episodes", num_episodes)
    _checks.check_key(key, "evaluate's key", "it splits the one key over the num_episodes episodes itself")
    env_params = stepping.resolve_params(env, env_params)
    max_steps = episode_limit(env, env_params, max_steps, "the evaluation")
    from jaxrl_rollout.envs._host import host_env  # (light: the host env machinery, no suite)

    if host_env(env) is not None:
        return _lockstep_runs(env, env_params, policy_fn, num_episodes, max_steps)(params, key, initial_carry)
    return _evaluate_runs(env, env_params, policy_fn, num_episodes, max_steps, params, key, initial_carry, ())


def _evaluate_runs(env: Any, env_params: Any, policy_fn: Any, num_episodes: int, max_steps: Any, params: PyTree,
                   key: jax.Array, initial_carry: PyTree | None, runs: tuple[int, ...]) -> EvalResult:
    """`evaluate`'s episodes for the runs of leading shape `runs` (() for one run): params, key and carry with
    those leading axes, every run's envs stepped together in one `lax.while_loop` until every run's episodes
    are done. A run's episodes are its own key's, as alone: its finished episodes are masked as they are within
    one run, so stepping them on changes nothing of its result."""
    def each(fn):  # vmapped over every runs axis
        for _ in runs:
            fn = jax.vmap(fn)
        return fn

    state = each(lambda k, c: rollout_init(k, env, env_params, num_episodes, c))(key, initial_carry)
    step = each(lambda p, st, a: evaluation_step(env, env_params, policy_fn, p, num_episodes)(st, a))

    def cond(loop):
        state, active, t = loop
        return jnp.any(active) & (t < max_steps)

    def body(loop):
        state, active, t = loop
        state, active, _ = step(params, state, active)
        return state, active, t + 1

    active = jnp.ones((*runs, num_episodes), dtype=bool)
    state, active, _ = jax.lax.while_loop(cond, body, (state, active, jnp.int32(0)))
    return EvalResult(
        returns=state.episode_return, lengths=state.episode_length, completed=~active
    )


def _lockstep_runs(env: Any, env_params: Any, policy_fn: Any, num_episodes: int, max_steps: Any) -> Any:
    """`evaluate` of a host env as `fn(params, key, initial_carry)`, which runs evaluate in lockstep under vmap.

    Under a plain vmap, a `lax.while_loop` whose runs finish at different steps keeps a finished run's state
    while the others step on, and a host env, whose one pool of R x N envs every step call advances, refuses
    such a stale state. Here a vmap (any number of them, nested) evaluates all its runs in one
    `_evaluate_runs` over their leading axes: one reset of the pool and one loop, whose condition is every
    run's, so each run's env state follows the pool. Each run's result equals its evaluation alone.
    """
    def runs_of(runs: tuple[int, ...]):  # the runs of leading shape `runs`; vmapped, a new axis in front
        @jax.custom_batching.custom_vmap
        def fn(params, key, carry):
            return _evaluate_runs(env, env_params, policy_fn, num_episodes, max_steps, params, key, carry, runs)

        @fn.def_vmap
        def _rule(axis_size, in_batched, params, key, carry):
            return vmap_rule(runs_of((axis_size, *runs)), axis_size, in_batched, params, key, carry)

        return fn

    return runs_of(())


def vmap_rule(fn: Any, axis_size: int, in_batched: Any, *args: Any) -> tuple[Any, Any]:
    """A `jax.custom_batching.custom_vmap` rule: `fn(*args)` with every argument given the new leading axis
    (broadcast where unbatched), every output batched. Used by the host env's lockstep evaluation here,
    `periodic_eval`'s cond above the vmap and the host env's own calls (`envs._host`)."""
    args = [jax.tree.map(lambda x, mapped: x if mapped else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))), a, b)
            for a, b in zip(args, in_batched)]
    out = fn(*args)
    return out, jax.tree.map(lambda _: True, out)
