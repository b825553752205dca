"""A2C as a pure `train(key, hparams)`: the A2C agent of docs/semantics.md §9.2.

That agent (https://github.com/TianhongDai/reinforcement-learning-algorithms)
is a baselines-style runner with an `_update_network` step.

Each update rolls out `num_steps` (n) steps in every env, computes the
runner's n-step returns (bootstrapped from V of the observation after the last
step unless that step ended the episode), and takes one gradient step on
loss = -mean(A log pi) + vf_coef mean(A^2) - ent_coef mean(H) with torch's
`clip_grad_norm_` and `RMSprop(lr, alpha, eps)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_rollout import batching, networks, optim
from jaxrl_rollout.advantages import lambda_returns
from jaxrl_rollout.algorithms import _common
from jaxrl_rollout.collect import rollout
from jaxrl_rollout.distributions import Categorical, categorical_from_probs
from jaxrl_rollout.episodes import episode_metrics
from jaxrl_rollout.losses import a2c_loss
from jaxrl_rollout.types import RolloutState

__all__ = [
    "A2C", "A2CConfig", "A2CHParams", "A2CMetrics", "A2CState", "batch_loss", "learn_batch", "make_a2c",
    "make_optimizer",
    "make_train",
]


@dataclasses.dataclass(frozen=True)
class A2CConfig(_common.ConfigSizes):
    """Static configuration; defaults follow the A2C agent (16 workers, 5 steps; docs/semantics.md §20).

    Static and serialisable, like `PPOConfig`: it never builds its env.

    Attributes:
      env_id, num_envs, num_steps, total_timesteps, network, hidden_sizes,
      activation: as in `PPOConfig` (env_id is not read when `make_train` is
        given an `env`, nor the network fields for a `network` of your own).
      env_options: options of the env's make (`envs.make(env_id, **env_options)`),
        as in `PPOConfig`.
      bootstrap_on_truncation: bootstrap time limits from V(final observation);
        False treats them as terminations, as the agent's runner does.
      anneal_lr: baselines' linear schedule (the agent keeps lr constant).
      rms_alpha, rms_eps: RMSprop's smoothing constant and epsilon (outside
        the square root, as torch); static because they fix the optimiser.
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 16
    num_steps: int = 5
    total_timesteps: int = 500_000
    network: str = "auto"
    hidden_sizes: tuple = (64, 64)
    activation: str = "tanh"
    bootstrap_on_truncation: bool = True
    anneal_lr: bool = False
    rms_alpha: float = 0.99
    rms_eps: float = 1e-5
    env_options: tuple = ()

    def __post_init__(self):
        _common.plain_numbers(self)
        _common.check_common_config(self)
        number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
        if not (number(self.rms_alpha) and 0.0 <= self.rms_alpha <= 1.0):
            raise ValueError(f"rms_alpha must be a number in [0, 1], got {self.rms_alpha!r}.")
        _common.check_eps("rms_eps", self.rms_eps)


class A2CHParams(NamedTuple):
    """Traced hyperparameters; defaults are the A2C agent's (baselines') values.

    Valid values: lr > 0, 0 <= gamma <= 1, ent_coef >= 0,
    vf_coef >= 0, max_grad_norm > 0 (`_common.HPARAM_RANGES`). `init`, `update`, `train`
    and `stack_hparams` raise a ValueError naming a field out of range when its value is
    concrete (Python floats, concrete arrays); traced values (inside `jax.jit` or
    `jax.vmap`) cannot be read at trace time and are not checked.
    """

    lr: float = 7e-4
    gamma: float = 0.99
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5


class A2CState(NamedTuple):
    params: Any
    opt_state: Any
    rollout: RolloutState


class A2CMetrics(NamedTuple):
    """Per-update metrics; episode_return / episode_length are NaN when no episode completed.

    `nonfinite` is 0 when the update's loss, gradients and new params were all
    finite, else an int32 bitmask of what was not (1 loss, 2 gradients, 4
    params; see `PPOMetrics`).
    """

    env_steps: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    num_episodes: jax.Array
    policy_loss: jax.Array
    value_loss: jax.Array
    entropy: jax.Array
    explained_variance: jax.Array
    nonfinite: jax.Array


A2C = _common.Algorithm
"""`make_a2c`'s result: init, update, train, policies, env and module (see `_common.Algorithm`)."""


def batch_loss(module, params, batch: dict, hp: A2CHParams):
    """The A2C agent's loss on a batch (docs/semantics.md §9.2): `(loss, parts)`.

    `batch` holds obs, action and returns, flat [N, ...] (env-major, as the
    agent flattens) for feedforward modules, or [T, B, ...] plus `first` and
    `carry0` for recurrent ones. A categorical policy is rebuilt from its
    softmax probabilities, as the agent's `Categorical(pi)`: torch's probs
    path (docs/semantics.md §13.2).
    """
    if "carry0" in batch:
        dist, value = networks.unroll(module, params, batch["carry0"], batch["obs"], batch["first"])
    else:
        dist, value = module.apply(params, batch["obs"])
    if isinstance(dist, Categorical):
        dist = categorical_from_probs(dist.probs)
    return a2c_loss(dist.log_prob(batch["action"]), value, batch["returns"], dist.entropy(), hp.vf_coef, hp.ent_coef)


def learn_batch(module, tx, params, opt_state, batch: dict, hp: A2CHParams):
    """One A2C gradient step (`_update_network`): returns (params, opt_state, parts with grad_norm)."""
    (loss, parts), grads = jax.value_and_grad(batch_loss, argnums=1, has_aux=True)(module, params, batch, hp)
    updates, opt_state = tx.update(grads, opt_state, params)
    parts = dict(parts, loss=loss, grad_norm=_common.grad_norm(opt_state, grads))
    return optax.apply_updates(params, updates), opt_state, parts


def make_optimizer(config: A2CConfig, hp: A2CHParams) -> optax.GradientTransformation:
    """The A2C agent's optimiser: `clip_grad_norm_(max_grad_norm)` then RMSprop(lr, alpha, eps), torch-exact.

    With `anneal_lr` the learning rate decays linearly once per update.
    """
    lr = optim.linear_annealing(hp.lr, config.num_updates, 1) if config.anneal_lr else hp.lr
    return optax.chain(
        optim.clip_grad_norm_torch(hp.max_grad_norm), optim.torch_rmsprop(lr, alpha=config.rms_alpha, eps=config.rms_eps)
    )


def make_a2c(config: A2CConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> A2C:
    """Builds A2C's pure functions for a validated config, on its env id or on your own env and network.

    Args:
      config: the static config.
      env: None to build `config.env_id`'s env; or your own env object of
        the gymnax>=1.0.1 protocol (`reset`, `step` returning `(obs, state,
        reward, terminated, truncated, info)` with
        `info["final_observation"]`, `action_space`, `observation_space`),
        trained on as it is; see `ppo.make_ppo` for the whole protocol.
      env_params: `env`'s params; None for `env.default_params`. Only with `env`.
      network: None for `config.network`'s; or your own flax linen Module:
        feedforward, `__call__(obs [B, ...]) -> (dist, value [B])`;
        recurrent, with `initial_carry(batch_size) -> carry [B, ...]` and
        `__call__(carry, obs) -> (new_carry, (dist, value [B]))`; `dist` with
        `sample(key)`, `mode()`, `log_prob(action)` and `entropy()` (a
        `distributions.Categorical` is rebuilt from its probabilities, as
        the agent's loss does). See `ppo.make_ppo` and
        `_common.NETWORK_CONTRACT`. Leave `config.network` "auto", and
        `hidden_sizes` and `activation` at their defaults (refused otherwise).

    Returns:
      The `A2C` functions (`_common.Algorithm`).

    Raises:
      TypeError, ValueError: as `ppo.make_ppo`, naming `config`, `env`,
        `env_params` or `network`.
    """
    if not isinstance(config, A2CConfig):
        raise TypeError(f"config must be an A2CConfig, got {type(config).__name__}.")
    built = _common.build(config, env=env, env_params=env_params, network=network)
    module, recurrent = built.module, built.recurrent
    value_fn = _common.rollout_value_fn(built, config.num_envs, config.num_steps)

    optimizer = lambda hp: make_optimizer(config, hp)  # noqa: E731

    def init(key: jax.Array, hparams: A2CHParams | None = None) -> A2CState:
        _common.check_init_key(key)
        params, state, _ = _common.init_params_and_rollout(key, built, config.num_envs, recurrent)
        return A2CState(params, optimizer(_common.resolve_hparams(hparams, A2CHParams)).init(params), state)

    def update(state: A2CState, hparams: A2CHParams | None = None):
        hp = _common.resolve_hparams(hparams, A2CHParams)
        rollout_state, traj = rollout(
            built.env, _common.rollout_env_params(built, state.params), built.policy_fn, state.params, state.rollout,
            config.num_steps, bootstrap_truncated=config.bootstrap_on_truncation, value_fn=value_fn,
        )
        # lambda = 1 gives the runner's n-step returns: R_t = r_t + gamma (1 - d_t) R_{t+1},
        # R_T = V(last obs), never read when the last step ended the episode.
        terminated = traj.terminated if config.bootstrap_on_truncation else traj.done
        returns = lambda_returns(traj.reward, traj.next_value, terminated, traj.done, hp.gamma, 1.0)

        if recurrent:
            batch = {"obs": traj.obs, "action": traj.action, "returns": returns, "first": traj.first,
                     "carry0": jax.tree.map(lambda c: c[0], traj.carry)}
        else:
            batch = batching.flatten_env_major({"obs": traj.obs, "action": traj.action, "returns": returns})
        params, opt_state, parts = learn_batch(module, optimizer(hp), state.params, state.opt_state, batch, hp)
        nonfinite = _common.nonfinite_flags(parts["loss"], parts["grad_norm"], params)
        parts = {k: v for k, v in parts.items() if k in A2CMetrics._fields}
        episodes = episode_metrics(traj)
        metrics = A2CMetrics(
            env_steps=jnp.int32(config.batch_size),
            episode_return=episodes.mean_return,
            episode_length=episodes.mean_length,
            num_episodes=episodes.num_episodes,
            explained_variance=_common.explained_variance(traj.value, returns),
            nonfinite=nonfinite,
            **parts,
        )
        return A2CState(params, opt_state, rollout_state), metrics

    train = _common.make_train_loop(init, update, config.num_updates, lambda h: _common.resolve_hparams(h, A2CHParams))

    return A2C(init=init, update=update, train=train, env=built.eval_env, env_params=built.eval_env_params,
               module=module, recurrent=recurrent, num_updates=config.num_updates,
               **_common.acting_policies(built, config))


def make_train(config: A2CConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> Callable:
    """`train(key, hparams=None) -> (A2CState, A2CMetrics [num_updates])`, pure and jittable.

    Args:
      config: the static config.
      env, env_params: None to train on `config.env_id`; or your own env
        object of the gymnax>=1.0.1 protocol and its params (None:
        `env.default_params`). See `make_a2c`.
      network: None for `config.network`'s; or your own flax linen Module
        whose `__call__(obs [B, ...])` returns `(dist, value [B])` (recurrent:
        `initial_carry(batch_size)` and `__call__(carry, obs) -> (new_carry,
        (dist, value [B]))`). See `make_a2c`.

    Returns:
      The train function.

    Raises:
      TypeError, ValueError: as `make_a2c`, naming the argument.
    """
    return make_a2c(config, env=env, env_params=env_params, network=network).train
