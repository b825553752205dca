"""TD3 as a pure `train(key, hparams)`, with an on-device replay buffer and time limits bootstrapped.

The computation is that of CleanRL's `td3_continuous_action.py`
(https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/td3_continuous_action.py;
Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477), on B = `num_envs`
envs stepped together, with the update math of `actor_critic_losses`
(docs/semantics.md §21.6-§21.8). CleanRL's `global_step` counts vector steps
(iterations); the schedules below are in iterations, which are env steps when
`num_envs` is 1 (the default). At iteration g:

- while g < `learning_starts` the actions are uniform in the Box; after, they
  are `clip(mu(s) + N(0, exploration_noise * action_scale), low, high)`, with
  `action_scale = (high - low) / 2`;
- the B transitions go into the replay buffer (`replay`), the true final
  observation kept as `next_obs` where an episode ended (docs/semantics.md §4);
- when g > `learning_starts`: one Adam step (torch's Adam, `optim.torch_adam`)
  on both critics' loss `mse(Q1, y) + mse(Q2, y)` (`twin_critic_loss`), y the
  clipped double-Q target from the target actor's smoothed actions
  (`td3_target_actions`, `td3_critic_target`, bootstrapping as
  `config.bootstrap`, §21.2);
- on those steps, when also g % `policy_frequency` == 0
  (`delayed_update_due`, §21.7): one Adam step of the actor on
  -mean(Q1(s, mu(s))) (`td3_actor_loss`, scored with the updated critic),
  then the Polyak update of the target actor and both target critics
  (`polyak_update`, §21.8).

A learner step is one iteration and the gradient steps that may follow it:
learner step k is iteration g = k (`init` takes none), trained as CleanRL
trains after it. An update (`update`, one row of the metrics) is
`config.learner_steps_per_update` = `log_interval` learner steps, their
metrics merged by `_common.merge_rows`.

Deviation from CleanRL: the target-smoothing clamp uses the per-dimension
bounds of the Box, where CleanRL clamps to `low[0]`, `high[0]` (equal for
boxes with the same bounds in every dimension, such as Pendulum's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl_rollout import _checks, envs, optim, prng
from jaxrl_rollout import actor_critic_losses as acl
from jaxrl_rollout.algorithms import _common, replay
from jaxrl_rollout.networks import fused_init
from jaxrl_rollout.stepping import check_env_and_fused_keys, env_reset, env_step, reset_keys, step_keys

__all__ = [
    "HPARAM_RANGES", "TD3", "TD3Actor", "TD3Config", "TD3Critic", "TD3HParams", "TD3Metrics", "TD3State",
    "check_hparams", "make_td3", "make_train",
]

HPARAM_RANGES = {
    "lr": (0.0, False, None, False),
    "gamma": (0.0, True, 1.0, True),
    "tau": (0.0, False, 1.0, True),
    "policy_noise": (0.0, True, None, False),
    "exploration_noise": (0.0, True, None, False),
    "noise_clip": (0.0, True, None, False),
}
"""TD3's hyperparameter name -> (low, low included, high or None, high included)."""


@dataclasses.dataclass(frozen=True)
class TD3Config(_common.LearnerSizes):
    """Static configuration; defaults are CleanRL `td3_continuous_action.py`'s.

    Static and serialisable: it never builds its env. CleanRL's default env is
    Hopper-v4 (MuJoCo, not available here); the default `env_id` is
    Pendulum-v1, with CleanRL's other defaults unchanged (1e6 steps is far
    more than Pendulum needs: pass a smaller `total_timesteps` and
    `learning_starts` for it, as `benchmarks/offpolicy_learning.py --algo td3`
    does).

    Attributes:
      env_id: the env to build (not read when `make_train` gets an `env`);
        its actions must be a 1-D Box.
      env_options: options of the env's make (`envs.make(env_id, **env_options)`),
        as in `PPOConfig`.
      total_timesteps: env steps in the run; `total_timesteps // num_envs`
        iterations of B = `num_envs` env steps.
      num_envs: envs stepped together.
      buffer_size: replay capacity, in transitions.
      batch_size: transitions per gradient step.
      learning_starts: iterations of uniform random actions, and before the
        first gradient step (CleanRL: a step needs g > learning_starts).
      policy_frequency: critic steps (iterations) per delayed actor and
        target update.
      log_interval: iterations per update, the metrics' row (a learner step
        is one iteration), at least one. It changes only how the metrics are
        grouped, not what is trained, except that the run takes whole
        updates: total_timesteps is rounded down to them (docs/semantics.md
        §22.5).
      network: "auto", "mlp" or "cnn": whether the actor and each critic
        read the observation with an image torso, as `sac.SACConfig.network`
        says (the Nature torso for an image of 36 x 36 or more by default).
      hidden_sizes: the actor's and each critic's hidden layers (ReLU),
        CleanRL's 256-256.
      adam_eps: Adam's epsilon (torch's default).
      bootstrap: "time_limits" (bootstrap through truncations, SB3's
        `handle_timeout_termination`, CleanRL's current scripts) or "done"
        (a truncation ends the bootstrap too); see `replay`.
      optimize_memory_usage: the compact replay buffer, half the memory for
        images, as `dqn.DQNConfig.optimize_memory_usage` says.
      frame_stack_axis: None, or the axis along which observations stack
        frames, each frame then stored once (with optimize_memory_usage), as
        `dqn.DQNConfig.frame_stack_axis` says.
    """

    # The runner's default chunk count, as SAC's (`sac.SACConfig.default_chunks` says why).
    default_chunks: ClassVar[int] = 100

    env_id: str = "Pendulum-v1"
    total_timesteps: int = 1_000_000
    num_envs: int = 1
    buffer_size: int = 1_000_000
    batch_size: int = 256
    learning_starts: int = 25_000
    policy_frequency: int = 2
    log_interval: int = 1000
    network: str = "auto"
    hidden_sizes: tuple = (256, 256)
    adam_eps: float = 1e-8
    bootstrap: str = "time_limits"
    optimize_memory_usage: bool = False
    frame_stack_axis: int | None = None
    env_options: tuple = ()

    def __post_init__(self):
        _common.plain_numbers(self)
        for name in ("total_timesteps", "num_envs", "buffer_size", "batch_size", "policy_frequency", "log_interval"):
            _common.check_positive(name, getattr(self, name))
        replay.check_sizes(self.buffer_size, self.batch_size, self.num_envs)
        if not _checks.is_int(self.learning_starts, numpy=False) or \
                self.learning_starts < 0:
            raise ValueError(f"learning_starts must be an int >= 0, got {self.learning_starts!r}.")
        if self.total_timesteps > _common.MAX_TOTAL_TIMESTEPS:
            raise ValueError(f"total_timesteps={self.total_timesteps} is more than {_common.MAX_TOTAL_TIMESTEPS:,} "
                             "(2**31 - 1), the most env steps the int32 step counters of a run hold.")
        if self.num_updates < 1:
            raise self.no_update_error()
        self.check_learning_starts()
        self.warn_partial_run()
        self.check_policy_updates()
        object.__setattr__(self, "hidden_sizes", _common.hidden_sizes_tuple(self.hidden_sizes))
        _common.check_choice("network", self.network, _common.Q_NETWORKS)
        _common.check_eps("adam_eps", self.adam_eps)
        _common.check_choice("bootstrap", self.bootstrap, replay.BOOTSTRAP)
        _common.check_replay_memory(self)
        envs.check_id(self.env_id)
        _common.check_env_options(self)

    @property
    def learner_period(self) -> int:
        """Iterations in one learner step: one."""
        return 1


class TD3HParams(NamedTuple):
    """Traced hyperparameters; defaults are CleanRL `td3_continuous_action.py`'s.

    `lr` is the learning rate of both the actor's and the critics' Adam.
    `policy_noise` and `noise_clip` are in units of the [-1, 1] squashed
    action and `exploration_noise` in units of `action_scale` (§21.6).
    Valid values (`HPARAM_RANGES`): lr > 0, gamma in [0, 1], tau in (0, 1],
    policy_noise, exploration_noise, noise_clip >= 0. `init`, `update` and
    `train` raise a ValueError naming a concrete field out of range; traced
    values are not checked.
    """

    lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    policy_noise: float = 0.2
    exploration_noise: float = 0.1
    noise_clip: float = 0.5


class TD3State(NamedTuple):
    """The train state: networks, targets, optimisers, replay buffer and the envs where they stand.

    Attributes:
      actor_params: the actor's params.
      critic_params: a pair (Q1 params, Q2 params) of the critic module.
      target_actor_params, target_critic_params: their Polyak targets.
      actor_opt_state, critic_opt_state: Adam's states (one Adam over both
        critics, as CleanRL's `q_optimizer`).
      buffer: the flashbax buffer state (`replay.make_replay_buffer`).
      env_state, obs: the envs' state and the observations acted on next [B, ...].
      episode_return, episode_length: [B] of the running episodes.
      iteration: int32, iterations taken so far (the next one's g).
      key: PRNG key for the next steps.
    """

    actor_params: Any
    critic_params: Any
    target_actor_params: Any
    target_critic_params: Any
    actor_opt_state: Any
    critic_opt_state: Any
    buffer: Any
    env_state: Any
    obs: Any
    episode_return: jax.Array
    episode_length: jax.Array
    iteration: jax.Array
    key: jax.Array

    # Equal in every run of a vmapped group: the runner passes it unbatched, so the `lax.cond`s on it stay
    # branches (runner._in_lockstep).
    LOCKSTEP = ("iteration",)


class TD3Metrics(NamedTuple):
    """Per-update metrics.

    Attributes:
      env_steps: cumulative env steps at the end of the update (`train`;
        `update` gives the update's own count).
      episode_return, episode_length: means over the episodes that ended in
        the update; NaN when none did.
      num_episodes: int32, episodes that ended in the update.
      trained: bool, the update took a critic step.
      actor_updated: bool, it also took the delayed actor step and target update.
      critic_loss: mse(Q1, y) + mse(Q2, y); NaN without a critic step.
      actor_loss: -mean Q1(s, mu(s)); NaN without an actor step.
      q_values: mean of Q1 and Q2 at the batch's (s, a); NaN without a step.
      nonfinite: int32 bitmask of what was not finite in the steps (1 a loss,
        2 gradients, 4 params, of the critics and the actor;
        `_common.nonfinite_flags`); 0 without a step.
    """

    env_steps: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    num_episodes: jax.Array
    trained: jax.Array
    actor_updated: jax.Array
    critic_loss: jax.Array
    actor_loss: jax.Array
    q_values: jax.Array
    nonfinite: jax.Array


class TD3Actor(nn.Module):
    """CleanRL's TD3 actor: obs [B, ...] flattened -> Dense+ReLU layers -> tanh -> scaled to the Box [B, A].

    `action_scale`, `action_bias` are `actor_critic_losses.action_scale_and_bias(low, high)`. A Discrete(n)
    observation is one-hot encoded when `num_obs_values` is n (`_common.flat_observation`). With `torso` (a
    `networks.CNNTorso`, what `network="auto"` or `"cnn"` chooses for an image) the image torso reads the
    observation and the hidden layers its features: SB3's TD3 actor on its `NatureCNN`
    (`_common.observation_features`).
    """

    action_dim: int
    action_scale: Any
    action_bias: Any
    hidden_sizes: tuple = (256, 256)
    num_obs_values: int = 0
    torso: Any = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = _common.observation_features(obs, self.num_obs_values, self.torso)
        for h in self.hidden_sizes:
            x = nn.relu(nn.Dense(h, kernel_init=_common.torch_linear_kernel_init())(x))
        x = jnp.tanh(nn.Dense(self.action_dim, kernel_init=_common.torch_linear_kernel_init())(x))
        return x * jnp.asarray(self.action_scale, jnp.float32) + jnp.asarray(self.action_bias, jnp.float32)


TD3Critic = _common.ObsActionCritic
"""CleanRL's TD3 Q-network: concat(obs flattened, action) -> Dense+ReLU layers -> Q [B]."""


def check_hparams(hparams: TD3HParams) -> None:
    """Checks every concrete field against `HPARAM_RANGES`; a ValueError names the field. Traced fields are skipped."""
    _common.check_hparams(hparams, HPARAM_RANGES)


def resolve_hparams(hparams: TD3HParams | None) -> TD3HParams:
    """`TD3HParams()` for None, else the record, checked; a TypeError for another type."""
    if hparams is None:
        return TD3HParams()
    if not isinstance(hparams, TD3HParams):
        raise TypeError(f"hparams must be a TD3HParams, got {type(hparams).__name__}.")
    check_hparams(hparams)
    _common.check_hparam_shapes(hparams)
    return hparams


NETWORK_CONTRACT = ("a pair (actor, critic) of flax linen Modules: actor.apply(params, obs [B, ...]) -> actions "
                    "float [B, A] in the Box's bounds (e.g. tanh scaled by action_scale_and_bias), and critic.apply(params, obs [B, ...], "
                    "action [B, A]) -> Q [B] or [B, 1]; the critic is initialised twice (twin critics)")


def _check_networks(network: Any, obs_space: Any, action_dim: int, sample: Any = None):
    """(actor, critic) from `network`; a TypeError/ValueError naming `network` when they do not fit."""
    if not isinstance(network, (tuple, list)) or len(network) != 2:
        raise TypeError(f"network must be a pair (actor_module, critic_module) of flax linen Modules, got "
                        f"{type(network).__name__}.")
    actor, critic = network
    for what, m in (("actor_module", actor), ("critic_module", critic)):
        _common.refuse_class(f"network: {what}", m)
        if not callable(getattr(m, "init", None)) or not callable(getattr(m, "apply", None)):
            raise TypeError(f"network: {what} must be a flax linen Module, got {type(m).__name__}.")
    obs = _common.probe_observation(obs_space, sample)  # sample: as the env's reset gives it
    b = _common.PROBE_BATCH
    act = jnp.zeros((b, action_dim), jnp.float32)
    a = _common.probe_module(f"network: the actor {type(actor).__name__}'s __call__(obs)", NETWORK_CONTRACT,
                             actor, obs)
    q = _common.probe_module(f"network: the critic {type(critic).__name__}'s __call__(obs, action [B, A])",
                             NETWORK_CONTRACT, critic, obs, act)
    if not hasattr(a, "shape") or tuple(a.shape) != (b, action_dim) or not jnp.issubdtype(a.dtype, jnp.floating):
        raise ValueError(f"network: actor_module.apply(params, obs [B, ...]) must return float actions [B, A] = "
                         f"[{b}, {action_dim}] on a batch of {b}, got {a!r}.")
    if not hasattr(q, "shape") or tuple(q.shape) not in ((b,), (b, 1)) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"network: critic_module.apply(params, obs [B, ...], action [B, A]) must return float Q "
                         f"[B] (or [B, 1]; [{b}] on a batch of {b}), got {q!r}.")
    return actor, critic


class TD3(NamedTuple):
    """`make_td3`'s result.

    Attributes:
      init: `init(key, hparams=None) -> TD3State` (no env step taken).
      update: `update(state, hparams=None) -> (state, TD3Metrics of one update)`.
      train: `train(key, hparams=None) -> (state, TD3Metrics [num_updates])`.
      eval_policy_fn: deterministic `policy_fn(actor_params, obs, key) -> PolicyOutput`
        (log_prob and value zero) for `collect.evaluate` with `state.actor_params`.
      env, env_params: what it trains on.
      actor, critic: the modules.
      buffer: the `replay.ReplayBuffer` functions.
      policy_fn: None: TD3's policy is deterministic (its exploration noise is training's).
      policy_params: `policy_params(state)`, the params both policies take (`state.actor_params`).
      recurrent: False (the runner's `_common.Algorithm` protocol).
      num_updates: the config's updates (`periodic_eval.make_train` checks its count against it).
      module: the actor (the network that acts).
    """

    init: Callable
    update: Callable
    train: Callable
    eval_policy_fn: Callable
    env: Any
    env_params: Any
    actor: Any
    critic: Any
    buffer: replay.ReplayBuffer
    policy_fn: Callable | None = None
    policy_params: Callable | None = None
    module: Any = None
    recurrent: bool = False
    num_updates: int | None = None


def make_td3(config: TD3Config, *, env: Any = None, env_params: Any = None, network: Any = None) -> TD3:
    """Builds TD3's pure functions for a config, on its env id or on your own env and networks.

    Args:
      config: the static config.
      env: None to build `config.env_id`'s env; or your own env object of the
        gymnax>=1.0.1 protocol (6-value step with `info["final_observation"]`)
        with 1-D Box actions.
      env_params: `env`'s params; None for `env.default_params`. Only with `env`.
      network: None for `(TD3Actor, TD3Critic)` of `config.hidden_sizes`, with
        the image torso that `config.network` chooses; or
        your own pair `(actor_module, critic_module)` of flax linen Modules:
        `actor(obs [B, ...]) -> action [B, A]`, already within the Box bounds
        (e.g. tanh scaled by `action_scale_and_bias`; exploration noise is
        added and clipped outside), and `critic(obs [B, ...], action [B, A])
        -> Q [B]` (or [B, 1]). The two critics are two param sets of
        `critic_module`, initialised with different keys.
        With yours, leave `hidden_sizes` and `network` at their defaults:
        they are refused otherwise (they would not be read).

    Returns:
      The `TD3` functions.

    Raises:
      TypeError, ValueError: naming `config`, `env`, `env_params` or `network`.
    """
    from jaxrl_rollout.types import PolicyOutput

    if not isinstance(config, TD3Config):
        raise TypeError(f"config must be a TD3Config, got {type(config).__name__}.")
    env, env_params, sample = _common.resolve_env(env, env_params, config.env_id, options=config.env_options,
                                                  sample=network is not None)
    action_dim, continuous = _common.action_info(env, env_params)
    if not continuous:
        _common.refuse_actions("TD3", env, env.action_space(env_params), "continuous actions, a 1-D Box")
    space = env.action_space(env_params)
    low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), (action_dim,))
    high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), (action_dim,))
    _common.check_scaled_box("TD3", env, low, high)
    action_scale, action_bias = acl.action_scale_and_bias(low, high)
    own_network = network
    if network is None:
        _common.check_single_array_obs("TD3", "TD3Actor and TD3Critic", env, env.observation_space(env_params))
        n = _common.num_obs_values(env.observation_space(env_params))  # one-hot a Discrete observation
        torso = _common.choose_torso(config.network, env.observation_space(env_params))  # None: flattened
        network = (TD3Actor(action_dim, tuple(np.asarray(action_scale).tolist()),
                            tuple(np.asarray(action_bias).tolist()), config.hidden_sizes, n, torso),
                   TD3Critic(config.hidden_sizes, n, torso))
    _common.refuse_network_name(config, own_network)
    actor, critic = _check_networks(network, env.observation_space(env_params), action_dim,
                                    sample)
    _common.refuse_unread_network_fields(config, own_network)
    buffer = replay.for_config(config, env, env_params)
    B, A = config.num_envs, action_dim
    fused_env_keys = check_env_and_fused_keys(env, env_params, jax.random.PRNGKey(0), B)  # (a broken step: check_env's error)
    bootstrap_on_truncation = config.bootstrap == "time_limits"

    def q_fn(params, obs, action):
        return jnp.reshape(critic.apply(params, obs, action), (-1,))

    def optimizer(hp: TD3HParams) -> optax.GradientTransformation:
        return optim.torch_adam(hp.lr, eps=config.adam_eps)

    def iterate(state: TD3State, hp: TD3HParams):
        """One vector step g = state.iteration: act, step, store; returns (state, stats)."""
        g = state.iteration
        key, act_key, env_keys = step_keys(state.key, B, fused_env_keys)
        noise_key, random_key = prng.split(act_key)
        mu = actor.apply(state.actor_params, state.obs)
        noisy = jnp.clip(mu + jax.random.normal(prng.fused(noise_key), (B, A)) * (action_scale * hp.exploration_noise), low, high)
        uniform = jax.random.uniform(prng.fused(random_key), (B, A), minval=low, maxval=high)
        action = jnp.where(g < config.learning_starts, uniform, noisy).astype(jnp.float32)
        step = env_step(env, env_params, env_keys, state.env_state, action, B)
        buf = buffer.add(state.buffer, replay.transitions(state.obs, action, step))
        done = step.terminated | step.truncated
        ret = state.episode_return + step.reward
        length = state.episode_length + 1
        stats = (jnp.sum(jnp.where(done, ret, 0.0)), jnp.sum(jnp.where(done, length, 0)), jnp.sum(done))
        state = state._replace(
            buffer=buf, env_state=step.env_state, obs=step.obs, episode_return=jnp.where(done, 0.0, ret),
            episode_length=jnp.where(done, 0, length), iteration=g + 1, key=key)
        return state, stats

    def init(key: jax.Array, hparams: TD3HParams | None = None) -> TD3State:
        _common.check_init_key(key)
        hp = resolve_hparams(hparams)
        actor_key, q1_key, q2_key, env_key, key = prng.split(key, 5)
        obs, env_state = env_reset(env, reset_keys(env_key, B, fused_env_keys), env_params)
        obs1 = jax.tree.map(lambda x: x[:1], obs)
        act1 = jnp.zeros((1, A), jnp.float32)
        actor_params = fused_init(actor, actor_key, obs1)
        critic_params = (fused_init(critic, q1_key, obs1, act1), fused_init(critic, q2_key, obs1, act1))
        example = replay.Transition(
            jax.tree.map(lambda x: x[0], obs), jnp.zeros(A, jnp.float32), jnp.float32(0),
            jax.tree.map(lambda x: x[0], obs), jnp.bool_(False), jnp.bool_(False))
        opt = optimizer(hp)
        return TD3State(actor_params, critic_params, actor_params, critic_params, opt.init(actor_params),
                        opt.init(critic_params), buffer.init(example), env_state, obs, jnp.zeros(B, jnp.float32),
                        jnp.zeros(B, jnp.int32), jnp.int32(0), key)

    def critic_loss_fn(critic_params, state: TD3State, batch: replay.Transition, noise, hp: TD3HParams):
        next_actions = acl.td3_target_actions(actor.apply(state.target_actor_params, batch.next_obs), noise,
                                              action_scale, hp.policy_noise, hp.noise_clip, low, high)
        t1, t2 = state.target_critic_params
        target = acl.td3_critic_target(q_fn(t1, batch.next_obs, next_actions), q_fn(t2, batch.next_obs, next_actions),
                                       batch.reward, batch.terminated, batch.truncated, hp.gamma,
                                       bootstrap_on_truncation=bootstrap_on_truncation)
        p1, p2 = critic_params
        q1, q2 = q_fn(p1, batch.obs, batch.action), q_fn(p2, batch.obs, batch.action)
        loss, parts = acl.twin_critic_loss(q1, q2, target)
        return loss, 0.5 * (parts["qf1_values"] + parts["qf2_values"])

    def actor_step(state: TD3State, batch: replay.Transition, hp: TD3HParams):
        def loss_fn(actor_params):
            return acl.td3_actor_loss(q_fn(state.critic_params[0], batch.obs, actor.apply(actor_params, batch.obs)))[0]

        loss, grads = jax.value_and_grad(loss_fn)(state.actor_params)
        updates, opt_state = optimizer(hp).update(grads, state.actor_opt_state, state.actor_params)
        actor_params = optax.apply_updates(state.actor_params, updates)
        state = state._replace(
            actor_params=actor_params, actor_opt_state=opt_state,
            target_actor_params=acl.polyak_update(actor_params, state.target_actor_params, hp.tau),
            target_critic_params=acl.polyak_update(state.critic_params, state.target_critic_params, hp.tau))
        flags = _common.nonfinite_flags(loss, optax.tree.norm(grads), actor_params)
        return state, (loss, flags)

    def learn(state: TD3State, hp: TD3HParams):
        key, sample_key, noise_key = prng.split(state.key, 3)
        batch = buffer.sample(state.buffer, sample_key)
        noise = jax.random.normal(prng.fused(noise_key), (config.batch_size, A))
        (loss, q_mean), grads = jax.value_and_grad(critic_loss_fn, has_aux=True)(
            state.critic_params, state, batch, noise, hp)
        updates, opt_state = optimizer(hp).update(grads, state.critic_opt_state, state.critic_params)
        critic_params = optax.apply_updates(state.critic_params, updates)
        flags = _common.nonfinite_flags(loss, optax.tree.norm(grads), critic_params)
        state = state._replace(critic_params=critic_params, critic_opt_state=opt_state, key=key)
        due = acl.delayed_update_due(state.iteration - 1, config.policy_frequency)
        state, (actor_loss, actor_flags) = jax.lax.cond(
            due, actor_step, lambda s, b, h: (s, (jnp.float32(jnp.nan), jnp.int32(0))), state, batch, hp)
        return state, (loss, actor_loss, q_mean, flags | actor_flags, due)

    def learner_step(state: TD3State, hp: TD3HParams):
        """One learner step: the metrics row of the CleanRL loop's period."""
        state, (ret_sum, len_sum, n) = iterate(state, hp)
        trained = state.iteration - 1 > config.learning_starts
        nan = jnp.float32(jnp.nan)
        state, (loss, actor_loss, q_mean, flags, due) = jax.lax.cond(
            trained, learn, lambda s, _: (s, (nan, nan, nan, jnp.int32(0), jnp.bool_(False))), state, hp)
        metrics = TD3Metrics(
            env_steps=jnp.int32(B),
            episode_return=jnp.where(n > 0, ret_sum / jnp.maximum(n, 1), jnp.nan).astype(jnp.float32),
            episode_length=jnp.where(n > 0, len_sum / jnp.maximum(n, 1), jnp.nan).astype(jnp.float32),
            num_episodes=n.astype(jnp.int32), trained=trained, actor_updated=due, critic_loss=loss,
            actor_loss=actor_loss, q_values=q_mean, nonfinite=flags)
        return state, metrics

    update = _common.merged_update(learner_step, config.learner_steps_per_update, resolve_hparams)

    train = _common.make_train_loop(init, update, config.num_updates, resolve_hparams)

    def eval_policy_fn(actor_params, obs, key):
        action = actor.apply(actor_params, obs)
        zeros = jnp.zeros(action.shape[:1], jnp.float32)
        return PolicyOutput(action=action, log_prob=zeros, value=zeros)

    return TD3(init, update, train, eval_policy_fn, env, env_params, actor, critic, buffer, policy_fn=None,
               policy_params=lambda state: state.actor_params, module=actor, num_updates=config.num_updates)


def make_train(config: TD3Config, *, env: Any = None, env_params: Any = None, network: Any = None) -> Callable:
    """`train(key, hparams=None) -> (TD3State, TD3Metrics [num_updates])`, pure and jittable.

    Args:
      config, env, env_params, network: as `make_td3`.

    Returns:
      The train function; it vmaps over keys and over stacked `TD3HParams`.

    Raises:
      TypeError, ValueError: as `make_td3`, naming the argument.
    """
    return make_td3(config, env=env, env_params=env_params, network=network).train
