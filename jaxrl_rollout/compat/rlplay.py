"""rlplay engine (https://github.com/ivannz/rlplay): fragment estimators, as pure JAX.

A fragment has T + 1 rows: row t holds (x_t, a_{t-1}, r_t, fin_t), fin_t meaning
the transition into t ended the episode; row T is the bootstrap step.
Estimators read rew = rew[1:], fin = fin[1:], val = value[:-1] and
bootstrap = value[-1], and mask with a select (`masked_fill`), so a NaN in a
masked value does not propagate (unlike the multiplicative masks elsewhere;
docs/semantics.md §15.3).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks, stepping
from jaxrl_rollout.types import PolicyOutput

__all__ = ["Context", "Fragment", "collect", "context", "evaluate", "gae", "returns"]


class Context(NamedTuple):
    """rlplay's running context: the latest row (stepno, x_t, a_{t-1}, r_t, fin_t), hx, env states.

    Attributes:
      stepno: [B] int32 steps since the episode's reset.
      obs: [B, ...] x_t.
      act: [B, ...] a_{t-1} (undefined, zeros, in a fresh context).
      rew: [B] float32 r_t (0 in a fresh context).
      fin: [B] bool, the transition into t ended an episode (True in a fresh context).
      hx: recurrent state h_t (leaves [B, ...]) or None.
      env_state: gymnax env states [B].
      key: PRNG key.
    """

    stepno: jax.Array
    obs: Any
    act: Any
    rew: jax.Array
    fin: jax.Array
    hx: Any | None
    env_state: Any
    key: jax.Array


class Fragment(NamedTuple):
    """A (1 + T) x B trajectory fragment.

    Attributes:
      stepno, obs, act, rew, fin: [T + 1, B, ...] rows of the context; row 0
        repeats the previous fragment's last row.
      actor: `PolicyOutput` [T + 1, B, ...]; row T is the virtual bootstrap step.
      hx: the recurrent state at row 0 (None for feedforward policies).
      stuck: [T + 1, B] bool, sticky mode only: env not stepped into this row,
        so its `act` entry (a fresh actor action that was never taken) is
        meaningless; always False in non-sticky mode.
    """

    stepno: jax.Array
    obs: Any
    act: Any
    rew: jax.Array
    fin: jax.Array
    actor: PolicyOutput
    hx: Any | None
    stuck: jax.Array


def _check_fragment(rew, fin, value, **coefficients):
    """The fragment's rows 1.. of rew and fin and all of value, in the estimators' float dtype (at least float32:
    integer rewards, half precision), after checking their shapes, fin's flags and the coefficients (floats in
    [0, 1])."""
    _checks.check_flags(fin=fin)
    for name, x in coefficients.items():
        _checks.check_coefficient(x, name)
        if jnp.ndim(x) != 0:  # a [B] gamma was read per env, a [T] one failed in a broadcast
            raise ValueError(f"{name} must be a float, as rlplay's is (advantages.gae takes per-step "
                             f"coefficients), got an array of shape {tuple(jnp.shape(x))}.")
    dtype = _checks.float_dtype(rew, value)
    rew, fin, value = jnp.asarray(rew, dtype), jnp.asarray(fin, bool), jnp.asarray(value, dtype)
    if rew.ndim < 1 or rew.shape[0] < 2 or fin.shape != rew.shape or value.shape != rew.shape:
        raise ValueError(
            "rew, fin and value must share a fragment shape [T + 1, ...] with T >= 1, got "
            f"{rew.shape}, {fin.shape} and {value.shape}."
        )
    return rew[1:], fin[1:], value


def _reverse_select(deltas, coefs, fin, init):
    """x_t = deltas_t + where(fin_t, 0, coefs_t x_{t+1}), x_T = init."""

    def step(carry, inputs):
        delta, coef, done = inputs
        carry = delta + jnp.where(done, 0.0, coef * carry)
        return carry, carry

    return jax.lax.scan(step, init, (deltas, coefs, fin), reverse=True)[1]


def gae(rew: jax.Array, fin: jax.Array, value: jax.Array, gamma: float, gae_lambda: float) -> jax.Array:
    """rlplay's GAE on a fragment: delta_t = where(fin_t, 0, gamma v_{t+1}) + (r_t - v_t).

    Args:
      rew, fin, value: [T + 1, ...] fragment columns (value from the actor,
        row T the bootstrap).
      gamma, gae_lambda: floats.

    Returns:
      [T, ...] advantages for the actions in rows 0..T-1.
    """
    rew, fin, value = _check_fragment(rew, fin, value, gamma=gamma, gae_lambda=gae_lambda)
    val, following = value[:-1], value[1:]
    deltas = jnp.where(fin, 0.0, gamma * following) + (rew - val)
    coefs = jnp.broadcast_to(jnp.asarray(gamma * gae_lambda, rew.dtype), rew.shape)
    return _reverse_select(deltas, coefs, fin, jnp.zeros(rew.shape[1:], rew.dtype))


def returns(rew: jax.Array, fin: jax.Array, value: jax.Array, gamma: float) -> jax.Array:
    """rlplay's discounted returns on a fragment: G_t = r_t + where(fin_t, 0, gamma G_{t+1}), G_T = value[-1]."""
    rew, fin, value = _check_fragment(rew, fin, value, gamma=gamma)
    coefs = jnp.broadcast_to(jnp.asarray(gamma, rew.dtype), rew.shape)
    return _reverse_select(rew, coefs, fin, value[-1])


def context(key: jax.Array, env: Any, env_params: Any, num_envs: int, hx: Any | None = None) -> Context:
    """A fresh context: every env reset, fin = True, rew = 0, stepno = 0, act zeros.

    Args:
      key: PRNG key; env i is reset with the i-th split.
      env, env_params: gymnax env and params (None for defaults).
      num_envs: B.
      hx: initial recurrent state (leaves [B, ...]) or None.
    """
    _checks.check_function_key(key, "rlplay.context", "contexts")
    num_envs = _checks.check_positive_int("num_envs", num_envs)
    env_params = stepping.resolve_params(env, env_params)
    if hx is not None:
        _checks.check_carry(hx, num_envs)
    reset_key, key = jax.random.split(key)
    obs, env_state = stepping.env_reset(env, jax.random.split(reset_key, num_envs), env_params)
    space = env.action_space(env_params)
    act = jax.tree.map(lambda a: jnp.zeros((num_envs, *a.shape), a.dtype), jax.eval_shape(space.sample, key))
    return Context(
        stepno=jnp.zeros((num_envs,), jnp.int32),
        obs=obs,
        act=act,
        rew=jnp.zeros((num_envs,), jnp.float32),
        fin=jnp.ones((num_envs,), bool),
        hx=hx,
        env_state=env_state,
        key=key,
    )


def _row(ctx: Context) -> tuple:
    return ctx.stepno, ctx.obs, ctx.act, ctx.rew, ctx.fin


def _reactor(env, env_params, policy_fn, params, batch_size):
    """The actor's REACT: a policy call on the context; hx is handed over unreset
    (rlplay resets hx when an env finishes, not when the actor reads it)."""
    space = env.action_space(env_params)
    never = jnp.zeros((batch_size,), bool)
    return lambda ctx, key: stepping.act(policy_fn, params, ctx.obs, key, ctx.hx, never, batch_size, space)


def _advance(ctx, t, react, env, env_params, batch_size, *, freeze_finished, reset_finished):
    """One REACT + STEP of rlplay's loop; returns (next context, actor output, frozen mask).

    freeze_finished: an env that finished earlier (t > 0) is not stepped: rew 0,
      obs, fin, stepno and env state kept (sticky `collect`, `evaluate`).
    reset_finished: a finishing env continues from its reset observation with
      hx zeroed (`collect`); otherwise it keeps its terminal observation and hx
      (`evaluate`).
    """
    key, policy_key, env_keys = stepping.step_keys(ctx.key, batch_size)
    out, hx = react(ctx, policy_key)
    obs, env_state, rew, terminated, truncated, final_obs = stepping.env_step(
        env, env_params, env_keys, ctx.env_state, out.action, batch_size
    )
    fin = terminated | truncated
    frozen = ctx.fin & (t > 0) if freeze_finished else jnp.zeros_like(fin)
    if not reset_finished:
        obs = stepping.batch_where(fin, final_obs, obs)
    elif hx is not None:
        hx = stepping.reset_carry(hx, fin & ~frozen)
    new = Context(
        stepno=jnp.where(frozen, ctx.stepno, jnp.where(fin, 0, ctx.stepno + 1)),
        obs=stepping.batch_where(frozen, ctx.obs, obs),
        act=out.action,
        rew=jnp.where(frozen, 0.0, rew),
        fin=jnp.where(frozen, ctx.fin, fin),
        hx=hx,
        env_state=stepping.batch_where(frozen, ctx.env_state, env_state),
        key=key,
    )
    return new, out, frozen


def collect(
    env: Any,
    env_params: Any,
    policy_fn: Any,
    params: Any,
    ctx: Context,
    num_steps: int,
    *,
    sticky: bool = False,
) -> tuple[Context, Fragment]:
    """rlplay's `collect`: a (1 + T) x B fragment and the context to continue from.

    The actor acts on every row t = 0..T (row T is the virtual bootstrap step,
    whose action is not taken). An env that finishes is reset at once and its
    hx zeroed (non-sticky), or, in sticky mode, is not stepped again within the
    fragment: rew 0, obs and fin frozen at (x_*, True), stepno frozen; its hx
    keeps being advanced by the actor on the frozen input, as in rlplay, and is
    zeroed at the end of the fragment. The rewards of a finishing step are never
    altered.

    Args:
      env, env_params, policy_fn, params: as in `rollout`; a recurrent policy
        (ctx.hx not None) is called with the hx as its carry, unreset: rlplay
        resets hx itself when an env finishes.
      ctx: the running `Context` from `context` or a previous `collect`.
      num_steps: T.
      sticky: stop interacting with finished envs until the next fragment.

    Returns:
      (ctx, fragment).
    """
    num_steps = _checks.check_positive_int("num_steps", num_steps)
    env_params = stepping.resolve_params(env, env_params)
    batch_size = jnp.shape(ctx.fin)[0]
    react = _reactor(env, env_params, policy_fn, params, batch_size)

    def step(carry, t):
        ctx, stuck = carry
        new, out, frozen = _advance(
            ctx, t, react, env, env_params, batch_size, freeze_finished=sticky, reset_finished=True
        )
        return (new, frozen), (_row(ctx), stuck, out)

    start_hx = ctx.hx
    never = jnp.zeros((batch_size,), bool)
    (ctx, stuck_last), (rows, stuck, actor) = jax.lax.scan(step, (ctx, never), jnp.arange(num_steps))
    last_out, _ = react(ctx, jax.random.fold_in(ctx.key, 1))  # the virtual lookahead step
    append = lambda seq, last: jnp.concatenate([seq, last[None]])  # noqa: E731
    stepno, obs, act, rew, fin = (jax.tree.map(append, r, last) for r, last in zip(rows, _row(ctx)))
    actor = jax.tree.map(append, actor, last_out)
    if sticky and ctx.hx is not None:
        ctx = ctx._replace(hx=stepping.reset_carry(ctx.hx, ctx.fin))
    fragment = Fragment(
        stepno=stepno, obs=obs, act=act, rew=rew, fin=fin, actor=actor, hx=start_hx,
        stuck=append(stuck, stuck_last),
    )
    return ctx, fragment


def evaluate(
    env: Any,
    env_params: Any,
    policy_fn: Any,
    params: Any,
    key: jax.Array,
    num_envs: int,
    n_steps: int,
    hx: Any | None = None,
) -> tuple[jax.Array, PolicyOutput, jax.Array]:
    """rlplay's `evaluate`: step until every env is done or `n_steps` steps have run.

    Envs that finished (at t > 0) get reward 0 and are not reset (their obs
    stays the terminal observation); hx is not reset either. A fresh context
    starts with fin = True, which does not freeze anything at t = 0.

    Returns:
      (rewards, info, num_steps): rlplay's (T, B) rewards are
      `rewards[:num_steps]` (rows past it are 0; sum over time for the episode
      returns), and its (1 + T, B) actor info is `info[:num_steps + 1]`, the
      last row being the virtual lookahead step. Buffers have n_steps (+ 1) rows.
    """
    _checks.check_function_key(key, "rlplay.evaluate", "evaluations")
    n_steps = _checks.check_positive_int("n_steps", n_steps)
    ctx = context(key, env, env_params, num_envs, hx)
    env_params = stepping.resolve_params(env, env_params)
    batch_size = jnp.shape(ctx.fin)[0]
    react = _reactor(env, env_params, policy_fn, params, batch_size)

    def cond(loop):
        ctx, t, _, _ = loop
        return (t < n_steps) & ~((t > 0) & jnp.all(ctx.fin))

    def body(loop):
        ctx, t, rewards, info = loop
        ctx, out, _ = _advance(
            ctx, t, react, env, env_params, batch_size, freeze_finished=True, reset_finished=False
        )
        info = jax.tree.map(lambda buf, x: buf.at[t].set(x), info, out)
        return ctx, t + 1, rewards.at[t].set(ctx.rew), info

    shapes = jax.eval_shape(react, ctx, ctx.key)[0]
    info = jax.tree.map(lambda x: jnp.zeros((n_steps + 1, *x.shape), x.dtype), shapes)
    rewards = jnp.zeros((n_steps, batch_size), jnp.float32)
    ctx, num_steps, rewards, info = jax.lax.while_loop(
        cond, body, (ctx, jnp.int32(0), rewards, info)
    )
    last, _ = react(ctx, jax.random.fold_in(ctx.key, 1))  # the virtual lookahead step
    info = jax.tree.map(lambda buf, x: buf.at[num_steps].set(x), info, last)
    return rewards, info, num_steps
