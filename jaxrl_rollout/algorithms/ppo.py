"""PPO (CleanRL `ppo.py` / PureJaxRL semantics) as a pure, jittable, vmappable `train(key, hparams)`.

One code path serves discrete and continuous actions and feedforward and
recurrent networks; the only difference is how a minibatch is evaluated
(flattened transitions, or whole env sequences replayed from the rollout's
starting carry).

    train = make_train(PPOConfig())                  # static: shapes and trip counts
    state, metrics = jax.jit(train)(key)             # one seed
    jax.jit(jax.vmap(train))(keys)                   # many seeds
    jax.jit(jax.vmap(train, in_axes=(None, 0)))(key, hparams_batch)   # a sweep
    make_train(PPOConfig(), env=MyEnv(), network=MyActorCritic())     # your own env and network
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_rollout import batching, networks, normalization, optim, prng
from jaxrl_rollout.advantages import gae, trajectory_gae
from jaxrl_rollout.algorithms import _common
from jaxrl_rollout.collect import rollout
from jaxrl_rollout.episodes import episode_metrics
from jaxrl_rollout.losses import ppo_loss
from jaxrl_rollout.types import RolloutState

__all__ = [
    "PPO", "PPOConfig", "PPOHParams", "PPOMetrics", "PPOState", "check_minibatches", "learn_minibatches",
    "make_optimizer", "make_ppo", "make_train", "minibatch_loss",
]


@dataclasses.dataclass(frozen=True)
class PPOConfig(_common.ConfigSizes):
    """Everything that fixes shapes or trip counts (static under jit).

    Defaults are the CleanRL / PureJaxRL CartPole-v1 configuration.

    A config holds only static, serialisable values and never builds its env
    (`envs.check_id` checks the id's form and gymnax names; the rest of what
    depends on the env is checked by `make_ppo`).

    Attributes:
      env_id: an env id (`envs.make`: a gymnax id, or "<suite>/<name>"); not
        read when `make_train` is given an `env`.
      env_options: options of the env's make, `envs.make(env_id, **env_options)`,
        e.g. {"max_episode_steps": 500} (gymnasium, envpool, jumanji),
        {"episode_length": 500} (brax), {"max_steps": 100} (pgx, navix,
        xminigrid); a dict or (name, value) pairs, kept as pairs sorted by name,
        each value a bool, int, float, str or None (`_common.env_options_tuple`).
        gymnax envs take none. Not read when `make_train` is given an `env`.
      num_envs: parallel envs B.
      num_steps: rollout length T per update.
      total_timesteps: env steps in the whole run; num_updates =
        total_timesteps // (num_envs * num_steps).
      update_epochs: passes over each batch.
      num_minibatches: minibatches per epoch (must divide the batch, or the
        envs for a recurrent network, which keeps env sequences whole).
      network: "auto" (default: chosen from the env's observation space, see
        `_common.choose_network`: an MLP for vectors, a CNN for images (the
        Atari network for images of 36 x 36 pixels or more), an encoder per
        leaf with action masks applied for dict/tuple observations), "mlp",
        "cnn" (image observations) or "gru" (recurrent).
        Leave it "auto" when `make_train` is given a `network` of your own.
      hidden_sizes: MLP hidden layers; the GRU uses hidden_sizes[0] units.
      activation: "tanh" or "relu" (MLP). Neither is read for your own
        `network`: set off their defaults with one, `make_train` refuses them.
      bootstrap_on_truncation: bootstrap time limits from V(final observation)
        (True) or treat them as terminations like CleanRL and PureJaxRL (False).
      anneal_lr: CleanRL's linear learning-rate annealing per update.
      normalize_advantages: CleanRL's per-minibatch `norm_adv`.
      clip_value_loss: CleanRL's `clip_vloss`.
      normalize_observations: running observation normalisation shared by
        the envs (CleanRL's continuous-control NormalizeObservation), its
        statistics in `state.rollout.obs_rms`; see `jaxrl_rollout.normalization`.
      normalize_rewards: scale rewards by the running std of the discounted
        return (NormalizeReward with the hparam gamma), its state in
        `state.reward_scale`. Episode metrics stay in raw rewards.
      obs_clip, reward_clip: clip after normalising (CleanRL: 10); None for none.
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 4
    num_steps: int = 128
    total_timesteps: int = 500_000
    update_epochs: int = 4
    num_minibatches: int = 4
    network: str = "auto"
    hidden_sizes: tuple = (64, 64)
    activation: str = "tanh"
    bootstrap_on_truncation: bool = True
    anneal_lr: bool = True
    normalize_advantages: bool = True
    clip_value_loss: bool = True
    normalize_observations: bool = False
    normalize_rewards: bool = False
    obs_clip: float | None = 10.0
    reward_clip: float | None = 10.0
    env_options: tuple = ()

    def __post_init__(self):
        _common.plain_numbers(self)
        _common.check_common_config(self)
        _common.check_normalization_config(self)
        for name in ("update_epochs", "num_minibatches"):
            _common.check_positive(name, getattr(self, name))
        check_minibatches(self, self.recurrent)

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def updates_per_iteration(self) -> int:
        """Gradient steps per PPO update: update_epochs x num_minibatches."""
        return self.update_epochs * self.num_minibatches


def check_minibatches(config: PPOConfig, recurrent: bool) -> None:
    """Checks that a batch divides into `config.num_minibatches`: transitions, or whole env sequences if recurrent.

    The config checks it for its own network; `make_ppo` again for a
    recurrent module of your own (`network=` with `initial_carry`).

    Args:
      config: the config.
      recurrent: the network steps a carry.

    Raises:
      ValueError: naming num_minibatches and what it must divide; or a
        minibatch of one transition with `normalize_advantages`, whose
        advantages' std (ddof=1, torch's) is NaN: every update would be NaN.
    """
    if recurrent:
        if config.num_envs % config.num_minibatches:
            raise ValueError(
                f"a recurrent network keeps env sequences whole, so num_envs={config.num_envs} must "
                f"divide into num_minibatches={config.num_minibatches}."
            )
    elif config.batch_size % config.num_minibatches:
        raise ValueError(
            f"the batch num_envs * num_steps = {config.batch_size} does not divide into "
            f"num_minibatches={config.num_minibatches}."
        )
    if config.normalize_advantages and config.minibatch_size == 1:
        raise ValueError(
            f"num_minibatches={config.num_minibatches} leaves one transition per minibatch of the batch "
            f"num_envs * num_steps = {config.batch_size}, and normalize_advantages divides by the minibatch's "
            "advantage std (ddof=1, as torch's), which is NaN for one value: every update would be NaN; use "
            "fewer minibatches or normalize_advantages=False."
        )


class PPOHParams(NamedTuple):
    """Traced hyperparameters (vmappable for sweeps); defaults are CleanRL's CartPole values.

    Valid values: lr > 0, 0 <= gamma <= 1, 0 <= gae_lambda <= 1, clip_eps > 0, ent_coef >= 0,
    vf_coef >= 0, max_grad_norm > 0 (`_common.HPARAM_RANGES`). `init`, `update`, `train`
    and `stack_hparams` raise a ValueError naming a field out of range when its value is
    concrete (Python floats, concrete arrays); traced values (inside `jax.jit` or
    `jax.vmap`) cannot be read at trace time and are not checked.
    """

    lr: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5


class PPOState(NamedTuple):
    """The whole training state: enough to resume a run exactly.

    Attributes:
      params: network parameters.
      opt_state: optimiser state (its count drives the learning-rate schedule).
      rollout: the `RolloutState` (env states, observations, episode
        statistics, recurrent carry, rollout key).
      key: PRNG key for minibatch permutations.
      reward_scale: the reward scaler's running return and statistics
        (`normalization.RewardScaleState`) with `normalize_rewards`, else None.
        Observation statistics live in `rollout.obs_rms`.
    """

    params: Any
    opt_state: Any
    rollout: RolloutState
    key: jax.Array
    reward_scale: normalization.RewardScaleState | None = None


class PPOMetrics(NamedTuple):
    """Per-update metrics (leading axis: updates; per seed under vmap).

    episode_return and episode_length are NaN for an update in which no
    episode completed; num_episodes says how many did. `nonfinite` is 0 when
    the update's losses, gradients and new params were all finite, else an
    int32 bitmask of what was not (`_common.nonfinite_flags`: 1 loss, 2
    gradients, 4 params); `runner.train` stops at the first update that sets
    it (`runner.Diverged`).
    """

    env_steps: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    num_episodes: jax.Array
    policy_loss: jax.Array
    value_loss: jax.Array
    entropy: jax.Array
    approx_kl: jax.Array
    clip_fraction: jax.Array
    explained_variance: jax.Array
    nonfinite: jax.Array


PPO = _common.Algorithm
"""`make_ppo`'s result: init, update, train, policies, env and module (see `_common.Algorithm`)."""


def minibatch_loss(module, params, mb: dict, hp: PPOHParams, *, clip_value_loss=True, normalize=True):
    """PPO's loss on one minibatch: `(loss, parts)`.

    `mb` holds obs, action, log_prob, value, advantage and returns, flat [N,
    ...] for feedforward modules; recurrent ones get [T, b, ...] sequences plus
    `first` [T, b] and `carry0` (the raw carry at the rollout's start, [b, H]),
    replayed with `networks.unroll`.
    """
    if "carry0" in mb:
        dist, value = networks.unroll(module, params, mb["carry0"], mb["obs"], mb["first"])
    else:
        dist, value = module.apply(params, mb["obs"])
    return ppo_loss(
        dist.log_prob(mb["action"]), mb["log_prob"], mb["advantage"], value, mb["value"], mb["returns"],
        dist.entropy(), hp.clip_eps, hp.vf_coef, hp.ent_coef, clip_value_loss=clip_value_loss, normalize=normalize,
    )


def learn_minibatches(module, tx, params, opt_state, data: dict, indices: jax.Array, hp: PPOHParams, *,
                      recurrent=False, clip_value_loss=True, normalize=True):
    """All epochs and minibatches of one PPO update (CleanRL's inner loops).

    Each epoch gathers its rows once, in minibatch order, and then scans
    over the contiguous minibatches, so no gradient step gathers from the
    batch: the same rows in the same order as one gather per step, with
    fewer and larger kernels (see BENCHMARKS.md, issue #14).

    Args:
      module: the network (or apply function).
      tx: the optimiser (clip_grad_norm then Adam).
      params, opt_state: before the update.
      data: feedforward: flat [N, ...] fields (see `minibatch_loss`);
        recurrent: [T, B, ...] fields plus `carry0` [B, ...].
      indices: int [E, M, mb] rows (or [E, M, b] envs when recurrent): E
        epochs of M minibatches, gathered one epoch at a time; or [U, mb]
        (one row per gradient step), gathered at once. Pass a PyTorch run's
        permutations to replay it.
      hp: hyperparameters.

    Returns:
      (params, opt_state, parts) with parts [E * M] (or [U]) per step: the
      loss terms and grad_norm (the global norm before clipping, as
      clip_grad_norm_ returns; read from the optimiser's `total_norm` state
      where it keeps one).
    """
    indices = jnp.asarray(indices)
    if indices.ndim == 2:
        indices = indices[None]
    if indices.ndim != 3:
        raise ValueError(f"indices must be int [E, M, mb] or [U, mb], got shape {indices.shape}.")

    def gather(index):
        if not recurrent:
            return batching.take(data, index)
        mbs = batching.take_sequences({k: v for k, v in data.items() if k != "carry0"}, index)
        mbs["carry0"] = jax.tree.map(lambda c: c[index], data["carry0"])
        return mbs

    def step(carry, mb):
        params, opt_state = carry
        (loss, parts), grads = jax.value_and_grad(minibatch_loss, argnums=1, has_aux=True)(
            module, params, mb, hp, clip_value_loss=clip_value_loss, normalize=normalize
        )
        updates, opt_state = tx.update(grads, opt_state, params)
        parts = dict(parts, loss=loss, grad_norm=_common.grad_norm(opt_state, grads))
        return (optax.apply_updates(params, updates), opt_state), parts

    def epoch(carry, index):
        return jax.lax.scan(step, carry, gather(index))

    (params, opt_state), parts = jax.lax.scan(epoch, (params, opt_state), indices)
    return params, opt_state, jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), parts)


def make_optimizer(config: PPOConfig, hp: PPOHParams) -> optax.GradientTransformation:
    """CleanRL's optimiser: `clip_grad_norm_(max_grad_norm)` then Adam(lr, eps=1e-5), torch-exact.

    With `anneal_lr` the learning rate decays linearly once per update
    (`optim.linear_annealing`). The chain works per parameter tensor, as torch
    does. (Running it on the parameters raveled into one vector with
    `optax.flatten` was tried: it saves a few kernels for one seed, within
    this machine's noise, and made 8 vmapped seeds about 7% slower, the cost
    of the ravel and unravel copies; see BENCHMARKS.md.)
    """
    lr = optim.linear_annealing(hp.lr, config.num_updates, config.updates_per_iteration) if config.anneal_lr else hp.lr
    return optax.chain(optim.clip_grad_norm_torch(hp.max_grad_norm), optim.torch_adam(lr, eps=1e-5))


def make_ppo(config: PPOConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> PPO:
    """Builds PPO's pure functions for a validated config, on its env id or on your own env and network.

    Args:
      config: the static config.
      env: None to build `config.env_id`'s env; or your own env object of
        the gymnax>=1.0.1 protocol: `reset(key, params) -> (obs, state)`,
        `step(key, state, action, params) -> (obs, state, reward,
        terminated, truncated, info)` with same-step auto-reset and the
        pre-reset observation in `info["final_observation"]`,
        `action_space(params)` (Discrete, or a 1-D Box: its actions are
        clipped to the bounds at the env, as for an id) and
        `observation_space(params)` (Box, Discrete, Dict or Tuple). The
        rollout vmaps it over the envs, unless it has `vectorized = True`.
        It is trained on as it is (never rebuilt for self-play), and is the
        env of the result.
      env_params: `env`'s params; None for `env.default_params`. Only with `env`.
      network: None for `config.network`'s; or your own flax linen Module
        (`_common.NETWORK_CONTRACT`): feedforward, `__call__(obs [B, ...]) ->
        (dist, value [B])`; recurrent, with `initial_carry(batch_size) ->
        carry [B, ...]` and `__call__(carry, obs) -> (new_carry, (dist,
        value [B]))` (the rollout zeroes the carry where an episode starts).
        `dist` has `sample(key)`, `mode()`, `log_prob(action)` and
        `entropy()` (`distributions.categorical_from_logits`,
        `distributions.diag_gaussian`); actions are int [B] for Discrete,
        float [B, A] for a Box. Initialised with `module.init(key, obs [1,
        ...])` (recurrent: `(key, initial_carry(1), obs)`). Leave
        `config.network` "auto", and hidden_sizes and activation at their
        defaults: they are not read, and refused when set off them.

    Returns:
      The `PPO` functions (`_common.Algorithm`).

    Raises:
      TypeError: `config` is not a `PPOConfig`; `env` lacks a method of
        the protocol; `network` is not a linen Module or returns the wrong
        kind of output.
      ValueError: naming `env`, `env_params` or `network` for what does not
        fit (e.g. an unknown env id, an action space that is neither
        Discrete nor a 1-D Box, a network whose shapes break the contract on
        one sample observation), or num_minibatches for a recurrent module
        whose env sequences it does not divide.
    """
    if not isinstance(config, PPOConfig):
        raise TypeError(f"config must be a PPOConfig, got {type(config).__name__}.")
    built = _common.build(config, env=env, env_params=env_params, network=network)
    check_minibatches(config, built.recurrent)
    env, module, policy_fn, recurrent = built.env, built.module, built.policy_fn, built.recurrent
    acting = _common.acting_policies(built, config)
    value_fn = _common.rollout_value_fn(built, config.num_envs, config.num_steps)
    optimizer = lambda hp: make_optimizer(config, hp)  # noqa: E731

    def init(key: jax.Array, hparams: PPOHParams | None = None) -> PPOState:
        _common.check_init_key(key)
        hp = _common.resolve_hparams(hparams, PPOHParams)
        params, state, key = _common.init_params_and_rollout(
            key, built, config.num_envs, recurrent, config.normalize_observations
        )
        reward_scale = normalization.reward_scale_init(config.num_envs) if config.normalize_rewards else None
        return PPOState(params, optimizer(hp).init(params), state, key, reward_scale)

    def update(state: PPOState, hparams: PPOHParams | None = None):
        hp = _common.resolve_hparams(hparams, PPOHParams)
        rollout_state, traj = rollout(
            env, _common.rollout_env_params(built, state.params), policy_fn, state.params, state.rollout,
            config.num_steps,
            bootstrap_truncated=config.bootstrap_on_truncation, obs_clip=config.obs_clip, value_fn=value_fn,
        )
        reward_scale, learn_traj = state.reward_scale, traj
        if config.normalize_rewards:
            reward_scale, scaled = normalization.scale_rewards(
                reward_scale, traj.reward, traj.done, hp.gamma, config.reward_clip
            )
            learn_traj = traj._replace(reward=scaled)
        if config.bootstrap_on_truncation:
            advantages, returns = trajectory_gae(learn_traj, hp.gamma, hp.gae_lambda)
        else:
            advantages, returns = gae(
                learn_traj.reward, traj.value, traj.next_value, traj.done, traj.done, hp.gamma, hp.gae_lambda
            )
        data = {"obs": traj.obs, "action": traj.action, "log_prob": traj.log_prob, "value": traj.value,
                "advantage": advantages, "returns": returns}
        key, perm_key = prng.split(state.key)
        if recurrent:
            data.update(first=traj.first, carry0=jax.tree.map(lambda c: c[0], traj.carry))
            indices = batching.sequence_minibatch_indices(
                perm_key, config.num_envs, config.num_minibatches, config.update_epochs
            )
        else:
            data = batching.flatten_time_major(data)
            indices = batching.minibatch_indices(
                perm_key, config.batch_size, config.num_minibatches, config.update_epochs
            )
        params, opt_state, parts = learn_minibatches(
            module, optimizer(hp), state.params, state.opt_state, data, indices, hp, recurrent=recurrent,
            clip_value_loss=config.clip_value_loss, normalize=config.normalize_advantages,
        )
        nonfinite = _common.nonfinite_flags(parts["loss"], parts["grad_norm"], params)
        parts = {k: v for k, v in parts.items() if k in PPOMetrics._fields}
        episodes = episode_metrics(traj)
        metrics = PPOMetrics(
            env_steps=jnp.int32(config.batch_size),
            episode_return=episodes.mean_return,
            episode_length=episodes.mean_length,
            num_episodes=episodes.num_episodes,
            explained_variance=_common.explained_variance(traj.value, returns),
            nonfinite=nonfinite,
            **{k: jnp.mean(v) for k, v in parts.items()},
        )
        return PPOState(params, opt_state, rollout_state, key, reward_scale), metrics

    train = _common.make_train_loop(init, update, config.num_updates, lambda h: _common.resolve_hparams(h, PPOHParams))

    return PPO(init=init, update=update, train=train, env=built.eval_env, env_params=built.eval_env_params,
               module=module, recurrent=recurrent, num_updates=config.num_updates, **acting)


def make_train(config: PPOConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> Callable:
    """`train(key, hparams=None) -> (PPOState, PPOMetrics [num_updates])`, pure and jittable.

    Args:
      config: the static config.
      env, env_params: None to train on `config.env_id`; or your own env
        object of the gymnax>=1.0.1 protocol and its params (None:
        `env.default_params`). See `make_ppo`.
      network: None for `config.network`'s; or your own flax linen Module
        whose `__call__(obs [B, ...])` returns `(dist, value [B])` (recurrent:
        `initial_carry(batch_size)` and `__call__(carry, obs) -> (new_carry,
        (dist, value [B]))`), `dist` with sample, mode, log_prob and
        entropy. See `make_ppo` for the whole contract.

    Returns:
      The train function.

    Raises:
      TypeError, ValueError: as `make_ppo`, naming the argument.
    """
    return make_ppo(config, env=env, env_params=env_params, network=network).train
