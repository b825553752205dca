"""Deterministic evaluation every N updates, inside the jitted training program.

    from jaxrl_rollout import periodic_eval
    algorithm = ppo.make_ppo(ppo.PPOConfig())
    update = periodic_eval.make_update(algorithm, every=10, num_episodes=10)
    state, metrics = update(state, hparams, update_index, eval_key)   # metrics.eval_return: NaN but every 10th
    train = periodic_eval.make_train(algorithm, num_updates, every=10, num_episodes=10)
    state, metrics = jax.jit(jax.vmap(train))(keys)                   # `algorithm.train` plus eval metrics

`make_update` wraps any registered algorithm's `update` (the `Algorithm`
protocol: PPO, A2C, DQN, PQN, SAC, TD3, or your own built the same way).
After update number n = update_index + 1 (counted from 1 over the whole run)
with n % every == 0, a `lax.cond` runs `collect.evaluate` on
`algorithm.policy_params(state)` with `algorithm.eval_policy_fn` (the mode
of the action distribution; observation normalisation with the state's
frozen statistics, which `policy_params` carries): `num_episodes` whole
episodes in their own env copies of `algorithm.env` (for a self-play pgx
game, the game against a random opponent from a random seat; for a host
env, gymnasium or envpool, another object of it, `eval_env`), a recurrent
policy from `module.initial_carry`. Its key is `fold_in(eval_key, n)`, never
split from the training state's keys, so the trained params are bit-identical
with and without the evaluation. `update_index` must not be vmapped (pass it
with `in_axes=None`, or scan over it): the condition then stays a real
branch, and the updates without an evaluation cost nothing.

`keep_best(best, algorithm, state, metrics, update_index)` keeps a run's
best evaluated policy (`BestPolicy`: its return, its update, its policy
params) through a loop of these updates, starting from `no_best(algorithm,
state)`; the runner carries it through every chunk and saves it with the
checkpoint (`runner.load_policy(folder, r, best_policy=True)`).

The updates' metrics gain `EVAL_FIELDS` (NaN in updates without an
evaluation): eval_return and eval_length, the means over the episodes, and
for a two-player pgx game eval_win, eval_draw and eval_loss, the outcome rates
of `envs.pgx.outcome_rates`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks, collect
from jaxrl_rollout.algorithms._common import Algorithm, check_train_key, is_self_play
from jaxrl_rollout.collect import evaluate
from jaxrl_rollout.envs._host import host_env

__all__ = ["BestPolicy", "EVAL_FIELDS", "EVAL_KEY_TAG", "eval_key", "eval_metric_names", "keep_best", "make_train",
           "make_update", "no_best"]

EVAL_FIELDS = ("eval_return", "eval_length", "eval_win", "eval_draw", "eval_loss")
"""The metric fields an evaluation adds; the last three only for a two-player pgx game (`eval_metric_names`)."""

EVAL_KEY_TAG = 0x6576616C  # "eval"
"""What a run's key is folded with to give its root eval key (`eval_key`)."""


def eval_key(run_key: jax.Array) -> jax.Array:
    """A run's root eval key, `fold_in(run_key, EVAL_KEY_TAG)`: apart from every key training splits off."""
    return jax.random.fold_in(run_key, EVAL_KEY_TAG)


def eval_metric_names(algorithm: Algorithm) -> tuple[str, ...]:
    """The metrics `make_update` adds for `algorithm`: eval_return, eval_length, and win/draw/loss for a game."""
    return EVAL_FIELDS if is_self_play(algorithm.env) else EVAL_FIELDS[:2]


@functools.cache
def _metrics_class(cls: type, names: tuple[str, ...]) -> type:
    """`cls`'s fields followed by `names`, as a NamedTuple class of its own (one per pair, so traces agree)."""
    fields = [(name, Any) for name in (*cls._fields, *names)]
    return NamedTuple(f"{cls.__name__}WithEval", fields)


class BestPolicy(NamedTuple):
    """A run's best evaluated policy so far (`keep_best`): what `train --eval-every` keeps with its checkpoints.

    Attributes:
      eval_return: its evaluation's mean return (float32; -inf before the first evaluation).
      update: the update after which it was evaluated, counted from 1 (int32; 0 before the first evaluation).
      params: its policy params, `algorithm.policy_params(state)` of that update's state (with the frozen
        observation statistics where the run normalises observations): what `eval_policy_fn` takes.
    """

    eval_return: jax.Array
    update: jax.Array
    params: Any


def no_best(algorithm: Algorithm, state: Any) -> BestPolicy:
    """The `BestPolicy` before any evaluation: return -inf, update 0, the params of `state` (for their shapes)."""
    return BestPolicy(jnp.full((), -jnp.inf, jnp.float32), jnp.zeros((), jnp.int32), algorithm.policy_params(state))


def keep_best(best: BestPolicy, algorithm: Algorithm, state: Any, metrics: Any, update_index: Any) -> BestPolicy:
    """`best`, or the policy of `state` where `metrics.eval_return` (from `make_update`) beats its return.

    `state` and `metrics` are what `make_update`'s update returned for the
    update after `update_index` updates. An update without an evaluation
    (eval_return NaN) never replaces `best`, nor does a tie (the earlier
    policy stays). Jittable and vmappable; the state is not changed, so a
    run's training is the same with and without it.
    """
    value = jnp.asarray(metrics.eval_return, jnp.float32)
    better = value > best.eval_return  # False for NaN
    new = BestPolicy(value, jnp.asarray(update_index, jnp.int32) + 1, algorithm.policy_params(state))
    return jax.tree.map(lambda a, b: jnp.where(better, a, b), new, best)


def make_update(algorithm: Algorithm, every: int, num_episodes: int = 10, max_steps: int | None = None, *,
                eval_env: Any = None, eval_env_params: Any = None) -> Callable:
    """`update(state, hparams, update_index, eval_key) -> (state, metrics)`: `algorithm.update`, then an evaluation.

    Args:
      algorithm: an `Algorithm` (`make_ppo(config)`, `algorithms.get(name).make(config)`, ...).
      every: N, a positive int: evaluate after updates N, 2N, ... counted from 1 over the whole run.
      num_episodes: K, whole episodes per evaluation, each in its own env copy.
      max_steps: the most steps of an evaluation (None: the env's time limit, as `collect.evaluate`).
      eval_env, eval_env_params: the env the evaluations play (None: `algorithm.env` and its params). A host
        env (gymnasium, envpool) needs one of its own: training steps `algorithm.env`'s one pool of envs, so
        the evaluations take another object of the same env (e.g. `runner.make_algorithm(spec).env`, as the
        runner does), whose pool each evaluation resets; a vmap's runs are evaluated in lockstep in it
        (`collect.evaluate`).

    Returns:
      The wrapped update. `update_index` is an int32 scalar, the updates done
      before this one (unbatched: not vmapped); `eval_key` is the run's root
      eval key (`eval_key(run_key)`), from which each evaluation folds in its
      update number. The metrics are `algorithm.update`'s fields followed by
      `eval_metric_names(algorithm)`, float32 scalars, NaN without an
      evaluation. The state is exactly `algorithm.update`'s.

    Raises:
      ValueError: naming `every`, `num_episodes`, or `eval_env` when the
        algorithm's env is a host env (gymnasium, envpool) and no other
        object of it is given to evaluate on.
    """
    every = _checks.check_positive_int("every", every)
    num_episodes = _checks.check_positive_int("num_episodes", num_episodes)
    host = host_env(algorithm.env)
    env, env_params = (algorithm.env, algorithm.env_params) if eval_env is None else (eval_env, eval_env_params)
    if host is not None and host_env(env) is host:  # it reopened the pool training steps: a stale state next update
        raise ValueError(
            f"eval_env: the algorithm's env {host!r} is a host env, whose one pool of envs training steps; an "
            "evaluation in it would reopen that pool under the training's envs. Pass another object of the env "
            "to evaluate on: make_update(..., eval_env=other.env, eval_env_params=other.env_params) with "
            "other = runner.make_algorithm(spec) (or the algorithm built again)."
        )
    names = eval_metric_names(algorithm)
    carry = algorithm.module.initial_carry(num_episodes) if algorithm.recurrent else None

    def run_eval(state, key):
        result = evaluate(env, env_params, algorithm.eval_policy_fn, algorithm.policy_params(state), key,
                          num_episodes, max_steps, initial_carry=carry)
        returns = result.returns.astype(jnp.float32)
        values = [returns.mean(), result.lengths.astype(jnp.float32).mean()]
        if len(names) > 2:  # as `envs.pgx.outcome_rates`: a game won pays > 0, drawn 0, lost < 0
            values += [jnp.mean(returns > 0), jnp.mean(returns == 0), jnp.mean(returns < 0)]
        return tuple(jnp.asarray(v, jnp.float32) for v in values)

    def skip(state, key):
        return tuple(jnp.full((), jnp.nan, jnp.float32) for _ in names)

    # a host env's evaluation calls back into the host: JAX refuses that inside a cond under vmap, so there the
    # cond is taken above the vmap of the runs (its condition, the update number, is the same for all of them)
    cond = jax.lax.cond if host_env(env) is None else _cond_above_vmap

    def update(state, hparams, update_index, eval_key):
        state, metrics = algorithm.update(state, hparams)
        number = jnp.asarray(update_index, jnp.int32) + 1
        values = cond(number % every == 0, run_eval, skip, state, jax.random.fold_in(eval_key, number))
        return state, _metrics_class(type(metrics), names)(*metrics, *values)

    return update


def _cond_above_vmap(pred: Any, true_fn: Callable, false_fn: Callable, *operands: Any, runs: int = 0) -> Any:
    """`lax.cond(pred, true_fn, false_fn, *operands)` that may call back into the host under `jax.vmap`.

    JAX refuses a cond (or while_loop) holding an io_callback under vmap. This one is a `custom_vmap`
    function: vmapped (any number of times), it takes the cond once, above the vmaps, with each branch
    vmapped over the runs inside it, so a host env's evaluation (`collect.evaluate`, which evaluates a vmap's
    runs in lockstep) runs every run's episodes in one pool. `pred` must not be vmapped (the update number).
    """
    def each(fn: Callable) -> Callable:
        for _ in range(runs):
            fn = jax.vmap(fn)
        return fn

    @jax.custom_batching.custom_vmap
    def taken(pred, *operands):
        return jax.lax.cond(pred, each(true_fn), each(false_fn), *operands)

    @taken.def_vmap
    def _rule(axis_size, in_batched, pred, *operands):
        if in_batched[0]:
            raise ValueError("an evaluation's condition (the update number) must be the same for every run: pass "
                             "update_index unbatched (in_axes=None, or scan over it).")
        return collect.vmap_rule(lambda *ops: _cond_above_vmap(pred, true_fn, false_fn, *ops, runs=runs + 1),
                                 axis_size, in_batched[1:], *operands)

    return taken(pred, *operands)


def make_train(algorithm: Algorithm, num_updates: int | None, every: int, num_episodes: int = 10, *,
               eval_env: Any = None, eval_env_params: Any = None) -> Callable:
    """`train(key, hparams=None)`: `algorithm.train` with the evaluations of `make_update`.

    Init with `key`, then `num_updates` updates in one `lax.scan` over the
    update index; the eval key is `eval_key(key)`. The state equals
    `algorithm.train(key, hparams)`'s bit for bit; env_steps is cumulative, as there.

    Args:
      algorithm: an `Algorithm`.
      num_updates: updates in the run (`config.num_updates`; None: the
        algorithm's own `num_updates`). Fewer than the config's train a prefix
        of its run; more are refused: the schedules end with the config's run
        (with anneal_lr every later update trained at a learning rate of 0).
      every, num_episodes, eval_env, eval_env_params: as in `make_update`.

    Returns:
      `train(key, hparams=None) -> (state, metrics [num_updates])`.
    """
    configured = getattr(algorithm, "num_updates", None)
    if num_updates is None:
        if configured is None:
            raise ValueError("num_updates is None and the algorithm does not say its own; pass config.num_updates.")
        num_updates = configured
    num_updates = _checks.check_positive_int("num_updates", num_updates)
    if configured is not None and num_updates > configured:
        raise ValueError(f"num_updates={num_updates} is more than the {configured} updates the algorithm's config "
                         "was built for: its schedules end there (with anneal_lr the rest would train at a "
                         "learning rate of 0); build the algorithm with a larger total_timesteps.")
    update = make_update(algorithm, every, num_episodes, eval_env=eval_env, eval_env_params=eval_env_params)
    if every > num_updates:
        raise ValueError(f"every={every} is more than num_updates={num_updates}: no update would be evaluated "
                         "(every eval metric NaN); evaluate every num_updates or fewer.")

    def train(key: jax.Array, hparams: Any = None):
        check_train_key(key)
        root = eval_key(key)
        state, metrics = jax.lax.scan(lambda s, u: update(s, hparams, u, root), algorithm.init(key, hparams),
                                      jnp.arange(num_updates, dtype=jnp.int32))
        return state, metrics._replace(env_steps=jnp.cumsum(metrics.env_steps))

    return train
