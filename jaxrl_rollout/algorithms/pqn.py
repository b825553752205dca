"""PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning", arXiv:2407.04811).

Parallel Q-learning: B vectorised envs, no replay buffer and no target
network. A LayerNorm MLP (a LayerNorm CNN for Atari-sized images) gives Q(s, .) [B, A]; each update rolls out T steps
with an epsilon-greedy policy (`jaxrl_rollout.collect.rollout`), computes
Q(lambda) targets on the rollout, then runs `update_epochs` x
`num_minibatches` gradient steps of `0.5 * mean((Q(s, a) - G)^2)`. Defaults
are purejaxql's CartPole-v1 configuration
(https://github.com/mttga/purejaxql, `config/alg/pqn_cartpole.yaml`).

    train = make_train(PQNConfig())                   # static: shapes and trip counts
    state, metrics = jax.jit(train)(key)              # one seed
    jax.jit(jax.vmap(train))(keys)                    # many seeds
    jax.jit(jax.vmap(train, in_axes=(None, 0)))(key, hparams_batch)   # a sweep
    make_train(PQNConfig(), env=MyEnv(), network=MyQNetwork())        # your own env and Q-network

How the Q-network fits the rollout's policy contract (`jaxrl_rollout.types.FeedForwardPolicy`):
the rollout's `params` are the pair `(q_params, epsilon)`, and the policy
returns `PolicyOutput(action, log_prob, value)` with `action` epsilon-greedy
in Q, `log_prob` its log-probability under the epsilon-greedy policy and
`value = max_a Q(s, a)`. The rollout then gives, for every transition,
`next_value[t] = max_a Q(s_{t+1}, a)` of the true next state: Q of the
pre-reset final observation where the episode was truncated
(docs/semantics.md §4), of the next observation otherwise, and of the
observation left in the rollout state after the last step. Those are
exactly the bootstraps of Q(lambda).

Time limits differ from purejaxql. purejaxql's targets use `done` (a time
limit ends the bootstrap as a termination does, and the value of the
reset observation is multiplied by zero). Here, with
`bootstrap_on_truncation=True` (the default), a truncated transition
bootstraps from max_a Q(final observation) and only a termination stops the
bootstrap; either one cuts the lambda trace (see `q_lambda_targets`).
`bootstrap_on_truncation=False` reproduces purejaxql's targets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from gymnax.environments import spaces

from jaxrl_rollout import batching, networks, optim, prng
from jaxrl_rollout.advantages import lambda_returns
from jaxrl_rollout.algorithms import _common
from jaxrl_rollout.collect import rollout, rollout_init
from jaxrl_rollout.episodes import episode_metrics
from jaxrl_rollout.types import PolicyOutput, RolloutState

__all__ = [
    "HPARAM_RANGES", "PQN", "PQNConfig", "PQNHParams", "PQNMetrics", "PQNState", "QNetwork", "check_hparams",
    "epsilon_at", "epsilon_greedy_policy", "make_optimizer", "make_pqn", "make_train", "q_lambda_targets",
    "q_loss",
]

OPTIMIZERS = ("radam", "adam")


@dataclasses.dataclass(frozen=True)
class PQNConfig(_common.ConfigSizes):
    """Everything that fixes shapes or trip counts (static under jit).

    Defaults are purejaxql's CartPole-v1 configuration (`pqn_cartpole.yaml`):
    32 envs x 64 steps, 4 epochs of 16 minibatches, a 2 x 256 LayerNorm ReLU
    MLP, RAdam with the learning rate decayed linearly per gradient step,
    500k env steps. A config holds only static, serialisable values and never
    builds its env.

    Attributes:
      env_id: an env id (`envs.make`); not read when `make_train` is given an `env`.
      env_options: options of the env's make (`envs.make(env_id, **env_options)`),
        as in `PPOConfig`.
      num_envs: parallel envs B.
      num_steps: rollout length T per update.
      total_timesteps: env steps in the whole run; num_updates =
        total_timesteps // (num_envs * num_steps).
      update_epochs: passes over each rollout (purejaxql's NUM_EPOCHS).
      num_minibatches: minibatches per epoch; must divide num_envs * num_steps.
      network: "auto", "mlp" or "cnn" (`_common.choose_q_network`): "cnn"
        is the CNN `networks.QNetworkCNN` with LayerNorm and He-normal
        kernels for an image observation [H, W, C] (purejaxql's
        `pqn_minatar.py` network below 36 x 36, its `pqn_atari.py` one from
        there); "mlp" the LayerNorm MLP `QNetwork` on any observation (images
        flattened); "auto" the CNN for images of at least 36 x 36 (Atari's)
        and the MLP for everything else, MinAtar's grids included. Leave it
        "auto" when `make_train` is given a `network` of your own.
      hidden_sizes: the MLP's hidden layers (the CNN's are fixed).
      activation: the MLP's, "relu" (purejaxql) or "tanh" (the CNN's is ReLU).
      layer_norm: LayerNorm after every hidden layer, the MLP's or the CNN's
        (PQN's normalisation; purejaxql's NORM_TYPE="layer_norm").
      bootstrap_on_truncation: bootstrap time limits from max_a Q(final
        observation) (True) or treat them as terminations like purejaxql (False).
      anneal_lr: decay the learning rate linearly to 0 over every gradient
        step of the run (purejaxql's LR_LINEAR_DECAY).
      optimizer: "radam" (purejaxql: `optax.radam`) or "adam"
        (`optim.torch_adam`, torch.optim.Adam's defaults). Both after
        clipping the global gradient norm to max_grad_norm.
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 32
    num_steps: int = 64
    total_timesteps: int = 500_000
    update_epochs: int = 4
    num_minibatches: int = 16
    network: str = "auto"
    hidden_sizes: tuple = (256, 256)
    activation: str = "relu"
    layer_norm: bool = True
    bootstrap_on_truncation: bool = True
    anneal_lr: bool = True
    optimizer: str = "radam"
    env_options: tuple = ()

    def __post_init__(self):
        _common.plain_numbers(self)
        _common.check_common_config(self, networks=_common.Q_NETWORKS)
        _common.check_choice("optimizer", self.optimizer, OPTIMIZERS)
        for name in ("update_epochs", "num_minibatches"):
            _common.check_positive(name, getattr(self, name))
        if self.batch_size % self.num_minibatches:
            raise ValueError(
                f"the batch num_envs * num_steps = {self.batch_size} does not divide into "
                f"num_minibatches={self.num_minibatches}."
            )

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def updates_per_iteration(self) -> int:
        """Gradient steps per PQN update: update_epochs x num_minibatches."""
        return self.update_epochs * self.num_minibatches


class PQNHParams(NamedTuple):
    """Traced hyperparameters (vmappable for sweeps); defaults are purejaxql's CartPole values.

    Attributes:
      lr: learning rate (initial, when annealed).
      gamma: discount.
      q_lambda: the lambda of the Q(lambda) targets (purejaxql's LAMBDA: 0.95
        for CartPole, 0.65 for MinAtar and Atari).
      max_grad_norm: global gradient-norm clip.
      reward_scale: rewards are multiplied by it for the targets
        (purejaxql's REW_SCALE); episode metrics stay in raw rewards.
      epsilon_start, epsilon_finish: the exploration rate decays linearly
        from start to finish ...
      epsilon_decay: ... over this fraction of the run's updates, then stays
        at finish (purejaxql's EPS_DECAY).

    Valid values (`HPARAM_RANGES`): lr > 0, gamma and q_lambda in [0, 1],
    max_grad_norm > 0, reward_scale > 0, epsilon_start and epsilon_finish in
    [0, 1], epsilon_decay > 0. `init`, `update` and `train` raise a
    ValueError naming a field out of range when its value is concrete;
    traced values are not checked. `algorithms.stack_hparams` checks every
    record of a grid against these ranges before it stacks them.
    """

    lr: float = 1e-4
    gamma: float = 0.99
    q_lambda: float = 0.95
    max_grad_norm: float = 10.0
    reward_scale: float = 0.1
    epsilon_start: float = 1.0
    epsilon_finish: float = 0.2
    epsilon_decay: float = 0.2


HPARAM_RANGES = {
    "lr": (0.0, False, None, False),
    "gamma": (0.0, True, 1.0, True),
    "q_lambda": (0.0, True, 1.0, True),
    "max_grad_norm": (0.0, False, None, False),
    "reward_scale": (0.0, False, None, False),
    "epsilon_start": (0.0, True, 1.0, True),
    "epsilon_finish": (0.0, True, 1.0, True),
    "epsilon_decay": (0.0, False, None, False),
}
"""Name -> (low, low included, high or None, high included): the valid values of `PQNHParams`."""


def check_hparams(hparams: PQNHParams) -> None:
    """Checks every concrete field of a `PQNHParams` against `HPARAM_RANGES`.

    Fields may be Python floats or arrays (a stacked grid); every element is
    checked. Traced values (inside `jax.jit` or `jax.vmap`) are skipped.

    Raises:
      TypeError: hparams is not a `PQNHParams`.
      ValueError: naming the first field out of its range.
    """
    if not isinstance(hparams, PQNHParams):
        raise TypeError(f"hparams must be a PQNHParams, got {type(hparams).__name__}.")
    _common.check_hparams(hparams, HPARAM_RANGES)


def _resolve(hparams: PQNHParams | None) -> PQNHParams:
    if hparams is None:
        return PQNHParams()
    check_hparams(hparams)
    _common.check_hparam_shapes(hparams)
    return hparams


class PQNState(NamedTuple):
    """The whole training state: enough to resume a run exactly.

    Attributes:
      params: Q-network parameters.
      opt_state: optimiser state (its count drives the learning-rate decay).
      rollout: the `RolloutState` (env states, observations, episode statistics, key).
      key: PRNG key for minibatch permutations.
      update_count: int32, updates done so far (drives the epsilon schedule).
      epsilon: float32, the exploration rate of the last rollout
        (`epsilon_start` before the first); what `policy_params` acts with.
    """

    params: Any
    opt_state: Any
    rollout: RolloutState
    key: jax.Array
    update_count: jax.Array
    epsilon: jax.Array


class PQNMetrics(NamedTuple):
    """Per-update metrics (leading axis: updates; per seed under vmap).

    Attributes:
      env_steps: cumulative env steps (in `train`'s output).
      episode_return, episode_length: means over the episodes that ended in
        the update's rollout, in raw rewards; NaN when none ended.
      num_episodes: how many ended.
      loss: mean TD loss over the update's gradient steps.
      q_mean: mean Q(s, a) of the taken actions over the gradient steps.
      target_mean: mean Q(lambda) target of the rollout (scaled rewards).
      epsilon: the exploration rate of the update's rollout.
      grad_norm: mean global gradient norm before clipping.
      nonfinite: 0 when the losses, gradients and new params were all
        finite, else the int32 bitmask of `_common.nonfinite_flags` (1 loss,
        2 gradients, 4 params).
    """

    env_steps: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    num_episodes: jax.Array
    loss: jax.Array
    q_mean: jax.Array
    target_mean: jax.Array
    epsilon: jax.Array
    grad_norm: jax.Array
    nonfinite: jax.Array


PQN = _common.Algorithm
"""`make_pqn`'s result (see `_common.Algorithm`); `policy_params(state)` is `(state.params, state.epsilon)`."""


class QNetwork(nn.Module):
    """PQN's Q-network: obs [B, ...] (flattened) -> Q-values [B, A].

    Dense -> LayerNorm -> activation per hidden layer, then a Dense head
    (purejaxql's `QNetwork` with NORM_TYPE="layer_norm"); flax's default
    initialisers.
    """

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    layer_norm: bool = True

    @nn.compact
    def __call__(self, obs):
        x = jnp.asarray(obs, jnp.float32).reshape(jnp.shape(obs)[0], -1)
        act = nn.relu if self.activation == "relu" else nn.tanh
        for size in self.hidden_sizes:
            x = nn.Dense(size)(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = act(x)
        return nn.Dense(self.action_dim)(x)


NETWORK_CONTRACT = "a flax linen Module whose __call__(obs [B, ...]) returns Q-values float [B, A]"
"""What `make_train(network=...)` takes for PQN."""


def epsilon_greedy_policy(module: Any, action_dim: int, deterministic: bool = False) -> Callable:
    """The rollout policy over a Q-network: `policy_fn((q_params, epsilon), obs, key) -> PolicyOutput`.

    With probability epsilon (per env) a uniform random action, else argmax_a
    Q(s, a) (purejaxql's `eps_greedy_exploration`). log_prob is the
    action's log-probability under the epsilon-greedy policy; value is
    max_a Q(s, a), so the rollout's `next_value` is the Q(lambda) bootstrap.

    Args:
      module: the Q-network (`__call__(obs) -> [B, A]`).
      action_dim: A.
      deterministic: act greedily (epsilon is ignored); for evaluation.

    Returns:
      The policy function (`types.FeedForwardPolicy`).
    """

    def policy_fn(params, obs, key):
        if not isinstance(params, (tuple, list)) or len(params) != 2:
            what = (f"a dict with keys {sorted(params)}" if isinstance(params, dict) else type(params).__name__)
            raise TypeError(f"PQN's policy takes params = (q_params, epsilon), what make_pqn(config)."
                            f"policy_params(state) gives; got {what}.")
        q_params, epsilon = params
        q = module.apply(q_params, obs)
        greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
        value = jnp.max(q, axis=-1)
        if deterministic:
            return PolicyOutput(greedy, jnp.zeros_like(value), value)
        explore, random_action = _common.epsilon_draws(key, greedy.shape, epsilon, action_dim)
        action = jnp.where(explore, random_action, greedy)
        prob = epsilon / action_dim + (1.0 - epsilon) * (action == greedy)
        return PolicyOutput(action, jnp.log(prob).astype(value.dtype), value)

    return policy_fn


def epsilon_at(hp: PQNHParams, update_count: jax.Array, num_updates: int) -> jax.Array:
    """The exploration rate of update `update_count` (0-based).

        eps(u) = start + (finish - start) * min(u / (decay * num_updates), 1)

    (`optax.linear_schedule(start, finish, decay * num_updates)` at u, as purejaxql).
    """
    steps = jnp.maximum(jnp.asarray(hp.epsilon_decay, jnp.float32) * num_updates, 1e-12)
    frac = jnp.clip(jnp.asarray(update_count, jnp.float32) / steps, 0.0, 1.0)
    return (hp.epsilon_start + (hp.epsilon_finish - hp.epsilon_start) * frac).astype(jnp.float32)


def q_lambda_targets(reward, next_q, terminated, truncated, gamma, q_lambda, *, bootstrap_on_truncation=True):
    """Q(lambda) targets on a time-major rollout (arXiv:2407.04811, Algorithm 1; purejaxql's `_get_target`).

        G_t = r_t + gamma (1 - end_t) [lambda (1 - cut_t) G_{t+1} + (1 - lambda (1 - cut_t)) next_q_t]

    with next_q_t = max_a Q(true next state of t), G at t = T - 1 the
    one-step target r + gamma (1 - end) next_q, and the lambda trace cut
    (cut_t) where the episode ended. With `bootstrap_on_truncation`, end_t
    is `terminated` and next_q_t at a truncation is max_a Q(final
    observation) (docs/semantics.md §4); without it, end_t is terminated or
    truncated, as purejaxql's `done`. This is `advantages.lambda_returns`
    (docs/semantics.md §6.2) with next_values = next_q.

    Args:
      reward: [T, ...] rewards (already scaled).
      next_q: [T, ...] max_a Q of the true next state (the rollout's `next_value`).
      terminated, truncated: [T, ...] bool.
      gamma, q_lambda: scalars (or per-step, as `lambda_returns`).
      bootstrap_on_truncation: see above.

    Returns:
      [T, ...] targets.
    """
    done = jnp.logical_or(terminated, truncated)
    end = terminated if bootstrap_on_truncation else done
    return lambda_returns(reward, next_q, end, done, gamma, q_lambda)


def q_loss(module: Any, params: Any, obs: Any, action: jax.Array, target: jax.Array):
    """`(0.5 * mean((Q(s, a) - G)^2), Q(s, a))`: PQN's loss on one minibatch (purejaxql's `_loss_fn`)."""
    q = module.apply(params, obs)
    chosen = jnp.take_along_axis(q, action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return 0.5 * jnp.mean(jnp.square(chosen - jax.lax.stop_gradient(target))), chosen


def make_optimizer(config: PQNConfig, hp: PQNHParams) -> optax.GradientTransformation:
    """Clip the global gradient norm (`optim.clip_grad_norm_torch`) then RAdam or torch's Adam.

    With `anneal_lr` the rate decays linearly from lr to 0 over every gradient
    step of the run (purejaxql: `optax.linear_schedule(lr, 1e-20, num_updates
    * num_minibatches * update_epochs)`).
    """
    lr = hp.lr
    if config.anneal_lr:
        total = config.num_updates * config.updates_per_iteration
        lr0 = hp.lr
        lr = lambda count: lr0 * (1.0 - jnp.minimum(count, total) / total)  # noqa: E731
    inner = optax.radam(lr) if config.optimizer == "radam" else optim.torch_adam(lr)
    return optax.chain(optim.clip_grad_norm_torch(hp.max_grad_norm), inner)


def _build(config: PQNConfig, env: Any, env_params: Any, network: Any):
    """(env, env_params, module, action_dim) for a config and `make_train`'s arguments."""
    _common.refuse_network_name(config, network)
    env, env_params, sample = _common.resolve_env(env, env_params, config.env_id, options=config.env_options,
                                                  sample=network is not None)
    _common.refuse_self_play("PQN", env)
    space = env.action_space(env_params)
    if not isinstance(space, spaces.Discrete):
        _common.refuse_actions("PQN", env, space, "Discrete actions")
    action_dim = int(space.n)
    obs_space = env.observation_space(env_params)
    if network is None:
        _common.check_single_array_obs("PQN", "QNetwork", env, obs_space)
        module = _common.choose_q_network(
            config.network, obs_space,
            QNetwork(action_dim, tuple(config.hidden_sizes), config.activation, config.layer_norm),
            layer_norm=config.layer_norm, kernels="he_normal")
        if isinstance(module, networks.QNetworkCNN) and config.activation != "relu":
            raise ValueError(f"activation={config.activation!r}: the CNN Q-network (network={config.network!r}, for "
                             "this env's image observation) uses ReLU and reads no activation; leave activation "
                             "'relu', or set network='mlp'.")
    else:
        module = _check_network(network, obs_space, action_dim, sample)
        _common.refuse_unread_network_fields(config, network)
    return env, env_params, module, action_dim


def _check_network(module: Any, obs_space: Any, action_dim: int, sample: Any = None) -> Any:
    """Checks a user's Q-network on a batch of `_common.PROBE_BATCH` observations (traced, not run); returns it.

    Raises:
      TypeError: naming `network`, for an object without init and apply.
      ValueError: naming `network`, when init or apply fails or the output is not float [B, A] on a batch of
        B = `_common.PROBE_BATCH`.
    """
    _common.refuse_class("network", module)
    if isinstance(module, str) or not (callable(getattr(module, "init", None))
                                       and callable(getattr(module, "apply", None))):
        raise TypeError(f"network must be {NETWORK_CONTRACT}; got {type(module).__name__}.")
    obs = _common.probe_observation(obs_space, sample)  # sample: as the env's reset gives it
    name = type(module).__name__
    out = _common.probe_module(f"network {name}: __call__(obs)", NETWORK_CONTRACT, module, obs)
    b = _common.PROBE_BATCH
    if not (hasattr(out, "shape") and tuple(out.shape) == (b, action_dim) and jnp.issubdtype(out.dtype, jnp.floating)):
        raise ValueError(f"network {name}: __call__(obs) must return Q-values float [B, A] = [{b}, {action_dim}] "
                         f"for the env's Discrete({action_dim}) actions on a batch of {b}, got {out!r}.")
    return module


def make_pqn(config: PQNConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> PQN:
    """Builds PQN's pure functions for a validated config, on its env id or on your own env and Q-network.

    Args:
      config: the static config.
      env: None to build `config.env_id`'s env; or your own env object of
        the gymnax>=1.0.1 protocol (see `ppo.make_ppo`), with Discrete actions.
      env_params: `env`'s params; None for `env.default_params`. Only with `env`.
      network: None for `QNetwork` from the config; or your own flax linen
        Module whose `__call__(obs [B, ...])` returns Q-values float [B, A],
        initialised with `module.init(key, obs [1, ...])`.
        The built-in network takes one array observation; a pytree one (a
        Dict or Tuple space) needs yours. Exploration draws uniformly over
        all A actions: an action mask in the observation is not read (mask
        the greedy action in your network's Q-values if the env has one).
        With yours, leave `hidden_sizes`, `activation` and `layer_norm` at
        their defaults: they are refused otherwise (they would not be read).

    Returns:
      The `PQN` functions (`_common.Algorithm`). Its policies take
      `policy_params(state) = (state.params, state.epsilon)`.

    Raises:
      TypeError: `config` is not a `PQNConfig`; `env` lacks a method of the
        protocol; `network` is not a linen Module.
      ValueError: naming `env` (e.g. actions that are not Discrete, a
        self-play game), `env_params` or `network` (its output is not [B, A]).
    """
    if not isinstance(config, PQNConfig):
        raise TypeError(f"config must be a PQNConfig, got {type(config).__name__}.")
    env, env_params, module, action_dim = _build(config, env, env_params, network)
    policy_fn = epsilon_greedy_policy(module, action_dim)
    eval_policy_fn = epsilon_greedy_policy(module, action_dim, deterministic=True)
    num_updates = config.num_updates

    def init(key: jax.Array, hparams: PQNHParams | None = None) -> PQNState:
        _common.check_init_key(key)
        hp = _resolve(hparams)
        net_key, env_key, key = prng.split(key, 3)
        rollout_state = rollout_init(env_key, env, env_params, config.num_envs)
        params = networks.fused_init(module, net_key, jax.tree.map(lambda x: x[:1], rollout_state.obs))
        return PQNState(params, make_optimizer(config, hp).init(params), rollout_state, key, jnp.int32(0),
                        jnp.asarray(hp.epsilon_start, jnp.float32))

    def learn(params, opt_state, data, indices, tx):
        # The per-step loss, chosen-Q mean and gradient norm are summed in the carry rather than stacked as scan
        # outputs: an update reports their means only, and on a GPU each stacked output is a write per step.
        def step(carry, mb):
            params, opt_state, sums = carry
            (loss, chosen), grads = jax.value_and_grad(
                lambda p: q_loss(module, p, mb["obs"], mb["action"], mb["target"]), has_aux=True
            )(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            sums = (sums[0] + loss, sums[1] + jnp.mean(chosen), sums[2] + _common.grad_norm(opt_state, grads))
            return (optax.apply_updates(params, updates), opt_state, sums), None

        def epoch(carry, index):
            return jax.lax.scan(step, carry, batching.take(data, index))

        zero = jnp.zeros([], jnp.float32)
        (params, opt_state, sums), _ = jax.lax.scan(epoch, (params, opt_state, (zero, zero, zero)), indices)
        steps = config.updates_per_iteration
        return params, opt_state, dict(loss=sums[0] / steps, q_mean=sums[1] / steps, grad_norm=sums[2] / steps)

    def update(state: PQNState, hparams: PQNHParams | None = None):
        hp = _resolve(hparams)
        epsilon = epsilon_at(hp, state.update_count, num_updates)
        rollout_state, traj = rollout(
            env, env_params, policy_fn, (state.params, epsilon), state.rollout, config.num_steps,
            bootstrap_truncated=config.bootstrap_on_truncation,
        )
        targets = q_lambda_targets(
            traj.reward * hp.reward_scale, traj.next_value, traj.terminated, traj.truncated, hp.gamma, hp.q_lambda,
            bootstrap_on_truncation=config.bootstrap_on_truncation,
        )
        data = batching.flatten_time_major({"obs": traj.obs, "action": traj.action, "target": targets})
        key, perm_key = prng.split(state.key)
        indices = batching.minibatch_indices(perm_key, config.batch_size, config.num_minibatches,
                                             config.update_epochs)
        params, opt_state, parts = learn(state.params, state.opt_state, data, indices, make_optimizer(config, hp))
        episodes = episode_metrics(traj)
        metrics = PQNMetrics(
            env_steps=jnp.int32(config.batch_size),
            episode_return=episodes.mean_return,
            episode_length=episodes.mean_length,
            num_episodes=episodes.num_episodes,
            loss=parts["loss"],
            q_mean=parts["q_mean"],
            target_mean=jnp.mean(targets),
            epsilon=epsilon,
            grad_norm=parts["grad_norm"],
            nonfinite=_common.nonfinite_flags(parts["loss"], parts["grad_norm"], params),
        )
        return PQNState(params, opt_state, rollout_state, key, state.update_count + 1, epsilon), metrics

    train = _common.make_train_loop(init, update, num_updates, _resolve)

    return PQN(init=init, update=update, train=train, policy_fn=policy_fn, eval_policy_fn=eval_policy_fn,
               env=env, env_params=env_params, module=module,
               policy_params=lambda state: (state.params, state.epsilon), recurrent=False, num_updates=num_updates)


def make_train(config: PQNConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> Callable:
    """`train(key, hparams=None) -> (PQNState, PQNMetrics [num_updates])`, pure and jittable.

    Args:
      config: the static config.
      env, env_params: None to train on `config.env_id`; or your own env (Discrete actions) and its params.
      network: None for `QNetwork`; or your own flax module, `__call__(obs [B, ...]) -> Q-values [B, A]`.

    Returns:
      The train function.

    Raises:
      TypeError, ValueError: as `make_pqn`, naming the argument.
    """
    return make_pqn(config, env=env, env_params=env_params, network=network).train
