"""DQN as a pure `train(key, hparams)`, with an on-device replay buffer and time limits bootstrapped.

The computation is that of CleanRL's `dqn.py`
(https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/dqn.py; Mnih et al.
2015, https://doi.org/10.1038/nature14236), on B = `num_envs` envs stepped
together. CleanRL's `global_step` counts these vector steps (iterations);
the schedules below are in iterations, which are env steps when `num_envs`
is 1 (the default):

- iteration g acts epsilon-greedily with epsilon = `epsilon_schedule(start_e,
  end_e, exploration_fraction * num_iterations, g)` (CleanRL's
  `linear_schedule`; a rising schedule stops at end_e), each env drawing its
  own exploration coin, and adds the B transitions to the replay buffer
  (`replay`), the true final observation kept as `next_obs` where an episode
  ended (docs/semantics.md §4);
- after iteration g, when g > `learning_starts` and g % `train_frequency` == 0,
  one Adam step (torch's Adam, `optim.torch_adam`) on the mean squared error
  between Q(s, a) and the target r + gamma * mask * max_a' Q_target(s', a')
  over a uniform sample of `batch_size` transitions, where mask is
  `replay.discount_mask(terminated, truncated, config.bootstrap)`;
- after iteration g (and its gradient step, if one is due), when g >
  `learning_starts` and g % `target_network_frequency` == 0, the target
  network becomes tau * Q + (1 - tau) * Q_target (`optax.incremental_update`;
  tau = 1 is a hard copy). As in CleanRL this test is not nested in the
  `train_frequency` one: with a `target_network_frequency` that is not a
  multiple of `train_frequency` the target also moves after iterations
  without a gradient step (it then takes the last step's Q).

A learner step is `train_frequency` iterations, each followed by the
gradient step when it is due (the check is on g itself, so the iteration is
compiled once and the schedule is CleanRL's whatever the step holds): learner
step k takes iterations g = k * train_frequency, ..., (k + 1) *
train_frequency - 1 and trains after its first. An update (`update`, one row
of the metrics) is `config.learner_steps_per_update` learner steps (about
`log_interval` iterations), their metrics merged by `_common.merge_rows`; with
`log_interval=train_frequency` it is one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxrl_rollout import _checks, envs, optim, prng
from jaxrl_rollout.algorithms import _common, replay
from jaxrl_rollout.networks import fused_init
from jaxrl_rollout.stepping import check_env_and_fused_keys, env_reset, env_step, reset_keys, step_keys

__all__ = [
    "DQN", "DQNConfig", "DQNHParams", "DQNMetrics", "DQNState", "HPARAM_RANGES", "QNetwork", "check_hparams", "dqn_loss",
    "epsilon_schedule", "make_dqn", "make_train", "td_targets", "update_target",
]

HPARAM_RANGES = {
    "lr": (0.0, False, None, False),
    "gamma": (0.0, True, 1.0, True),
    "tau": (0.0, False, 1.0, True),
    "start_e": (0.0, True, 1.0, True),
    "end_e": (0.0, True, 1.0, True),
    "exploration_fraction": (0.0, False, 1.0, True),
}
"""DQN's hyperparameter name -> (low, low included, high or None, high included)."""


@dataclasses.dataclass(frozen=True)
class DQNConfig(_common.LearnerSizes):
    """Static configuration; defaults are CleanRL `dqn.py`'s for CartPole-v1.

    Static and serialisable: it never builds its env.

    Attributes:
      env_id: the env to build (not read when `make_train` gets an `env`);
        its actions must be Discrete.
      env_options: options of the env's make (`envs.make(env_id, **env_options)`),
        as in `PPOConfig`.
      total_timesteps: env steps in the run; the run takes
        `total_timesteps // num_envs` iterations of B = `num_envs` env steps.
      num_envs: envs stepped together.
      buffer_size: replay capacity, in transitions.
      batch_size: transitions per gradient step.
      learning_starts: iterations before the first gradient step (CleanRL:
        a step needs g > learning_starts).
      train_frequency: iterations per gradient step (DQN's learner step;
        an update is `log_interval` iterations of them).
      target_network_frequency: iterations between target updates.
      log_interval: iterations per update, the metrics' row: rounded down to
        whole learner steps of `train_frequency` iterations, at least one.
        It changes only how the metrics are grouped, not what is trained,
        except that the run takes whole updates: total_timesteps is rounded
        down to them (docs/semantics.md §22.5).
      network: "auto", "mlp" or "cnn" (`_common.choose_q_network`): "cnn"
        is the CNN `networks.QNetworkCNN` for an image observation [H, W, C]
        (the Nature DQN's torso from 36 x 36, as CleanRL's `dqn_atari.py`;
        the MinAtar paper's one convolution below); "mlp" the MLP `QNetwork`
        on any observation (images flattened); "auto" the CNN for images of
        at least 36 x 36 (Atari's) and the MLP for everything else, MinAtar's
        grids included. Leave it "auto" when `make_train` is given a
        `network` of your own.
      hidden_sizes: the MLP's hidden layers (ReLU), CleanRL's 120-84 (the
        CNN's are fixed).
      adam_eps: Adam's epsilon (torch's default).
      bootstrap: "time_limits" (bootstrap through truncations from the true
        final observation: SB3's `handle_timeout_termination`, and CleanRL's
        scripts since their gymnasium port, which store terminations) or
        "done" (a truncation ends the bootstrap too: most JAX ports, and
        SB3's buffer with handle_timeout_termination=False); see `replay`.
      optimize_memory_usage: store each observation once
        (`replay.make_compact_replay_buffer`): about half the replay memory
        for image observations, time limits still bootstrapped from the true
        final observation (SB3's option of this name refuses its
        handle_timeout_termination). It holds buffer_size // num_envs
        transitions per env and samples other draws than the full buffer.
      frame_stack_axis: None, or the axis along which each observation
        stacks its last frames (-1 for Atari's [84, 84, 4]; with
        optimize_memory_usage): the compact buffer then stores each frame
        once, not once per stack it is in (about a quarter of the memory
        for Atari's stacks; `replay.make_compact_replay_buffer`), with the
        same samples as without it where every transition fits.
    """

    env_id: str = "CartPole-v1"
    total_timesteps: int = 500_000
    num_envs: int = 1
    buffer_size: int = 10_000
    batch_size: int = 128
    learning_starts: int = 10_000
    train_frequency: int = 10
    target_network_frequency: int = 500
    log_interval: int = 1000
    network: str = "auto"
    hidden_sizes: tuple = (120, 84)
    adam_eps: float = 1e-8
    bootstrap: str = "time_limits"
    optimize_memory_usage: bool = False
    frame_stack_axis: int | None = None
    env_options: tuple = ()

    def __post_init__(self):
        _common.plain_numbers(self)
        for name in ("total_timesteps", "num_envs", "buffer_size", "batch_size", "train_frequency",
                     "target_network_frequency", "log_interval"):
            _common.check_positive(name, getattr(self, name))
        replay.check_sizes(self.buffer_size, self.batch_size, self.num_envs)
        if not _checks.is_int(self.learning_starts, numpy=False) or \
                self.learning_starts < 0:
            raise ValueError(f"learning_starts must be an int >= 0, got {self.learning_starts!r}.")
        if self.total_timesteps > _common.MAX_TOTAL_TIMESTEPS:
            raise ValueError(f"total_timesteps={self.total_timesteps} is more than {_common.MAX_TOTAL_TIMESTEPS:,} "
                             "(2**31 - 1), the most env steps the int32 step counters of a run hold.")
        if self.num_updates < 1:
            raise self.no_update_error("train_frequency")
        self.check_learning_starts(self.train_frequency)
        self.warn_partial_run()
        self.check_target_updates()
        _common.check_choice("network", self.network, _common.Q_NETWORKS)
        object.__setattr__(self, "hidden_sizes", _common.hidden_sizes_tuple(self.hidden_sizes))
        _common.check_eps("adam_eps", self.adam_eps)
        _common.check_choice("bootstrap", self.bootstrap, replay.BOOTSTRAP)
        _common.check_replay_memory(self)
        envs.check_id(self.env_id)
        _common.check_env_options(self)

    @property
    def learner_period(self) -> int:
        """Iterations in one learner step: `train_frequency`."""
        return self.train_frequency


class DQNHParams(NamedTuple):
    """Traced hyperparameters; defaults are CleanRL `dqn.py`'s.

    Valid values (`HPARAM_RANGES`): lr > 0, gamma in [0, 1], tau in (0, 1],
    start_e and end_e in [0, 1], exploration_fraction in (0, 1]. `init`,
    `update` and `train` raise a ValueError naming a concrete field out of
    range; traced values are not checked.
    """

    lr: float = 2.5e-4
    gamma: float = 0.99
    tau: float = 1.0
    start_e: float = 1.0
    end_e: float = 0.05
    exploration_fraction: float = 0.5


class DQNState(NamedTuple):
    """The train state: networks, optimiser, replay buffer and the envs where they stand.

    Attributes:
      params, target_params: the Q-network's and the target network's params.
      opt_state: Adam's state.
      buffer: the flashbax buffer state (`replay.make_replay_buffer`).
      env_state, obs: the envs' state and the observations acted on next [B, ...].
      episode_return, episode_length: [B] of the running episodes.
      iteration: int32, iterations taken so far (the next one's g).
      key: PRNG key for the next steps.
    """

    params: Any
    target_params: Any
    opt_state: Any
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


class DQNMetrics(NamedTuple):
    """Per-update metrics.

    Attributes:
      env_steps: cumulative env steps at the end of the update (`train`;
        `update` gives the update's own count).
      episode_return, episode_length: means over the episodes that ended in
        the update; NaN when none did.
      num_episodes: int32, episodes that ended in the update.
      epsilon: the exploration rate of the update's last iteration.
      trained: bool, the update took a gradient step.
      loss, q_values: the step's TD loss and mean Q(s, a); NaN without a step.
      nonfinite: int32 bitmask of what was not finite in the step (1 loss, 2
        gradients, 4 params; `_common.nonfinite_flags`); 0 without a step.
    """

    env_steps: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    num_episodes: jax.Array
    epsilon: jax.Array
    trained: jax.Array
    loss: jax.Array
    q_values: jax.Array
    nonfinite: jax.Array


class QNetwork(nn.Module):
    """CleanRL's Q-network: obs [B, ...] flattened -> Dense+ReLU hidden layers -> Q [B, A].

    Kernels are drawn as torch's `nn.Linear` default (uniform in
    +-1/sqrt(fan_in)); biases start at zero.
    """

    action_dim: int
    hidden_sizes: tuple = (120, 84)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = jnp.reshape(jnp.asarray(obs, jnp.float32), (jnp.shape(obs)[0], -1))
        init = _common.torch_linear_kernel_init()
        for h in self.hidden_sizes:
            x = nn.relu(nn.Dense(h, kernel_init=init)(x))
        return nn.Dense(self.action_dim, kernel_init=init)(x)


def check_hparams(hparams: DQNHParams) -> None:
    """Checks every concrete field against `HPARAM_RANGES`; a ValueError names the field. Traced fields are skipped."""
    _common.check_hparams(hparams, HPARAM_RANGES)


def resolve_hparams(hparams: DQNHParams | None) -> DQNHParams:
    """`DQNHParams()` for None, else the record, checked; a TypeError for another type."""
    if hparams is None:
        return DQNHParams()
    if not isinstance(hparams, DQNHParams):
        raise TypeError(f"hparams must be a DQNHParams, got {type(hparams).__name__}.")
    check_hparams(hparams)
    _common.check_hparam_shapes(hparams)
    return hparams


def epsilon_schedule(start_e, end_e, duration, t) -> jax.Array:
    """The exploration rate at iteration t >= 0: linear from start_e to end_e over `duration`, then end_e; float32.

    With end_e <= start_e (every default) this is CleanRL's `linear_schedule(start_e, end_e, duration, t)`,
    max(slope * t + start_e, end_e) with slope = (end_e - start_e) / duration, value for value. CleanRL's
    formula has no upper clamp, so a rising schedule (end_e > start_e) would climb past end_e and past 1;
    here it stops at end_e, as PQN's `epsilon_at` does: the value is clipped to [min, max] of the two ends,
    which leaves a falling schedule unchanged. `optax.linear_schedule` is not used: it needs a static integer
    `transition_steps`, while `duration` = exploration_fraction * num_iterations is traced and fractional here.
    """
    t = jnp.asarray(t, jnp.float32)
    start_e, end_e = jnp.asarray(start_e, jnp.float32), jnp.asarray(end_e, jnp.float32)
    slope = (end_e - start_e) / duration
    return jnp.clip(slope * t + start_e, jnp.minimum(start_e, end_e), jnp.maximum(start_e, end_e)).astype(jnp.float32)


def td_targets(next_q_target: jax.Array, reward: jax.Array, mask: jax.Array, gamma) -> jax.Array:
    """r + gamma * max_a' Q_target(s', a') * mask, CleanRL's `td_target` with mask = 1 - done.

    Args:
      next_q_target: [N, A] target-network values of the next observations.
      reward: [N].
      mask: [N] float32 from `replay.discount_mask`.
      gamma: the discount.
    """
    return reward + gamma * jnp.max(next_q_target, axis=-1) * mask


def dqn_loss(apply_fn: Callable, params: Any, target_params: Any, batch: replay.Transition, gamma,
             bootstrap: str):
    """CleanRL's DQN loss on a batch: `(mse(td_target, Q(s, a)), (mean Q(s, a), td_target))`.

    The target carries no gradient (CleanRL computes it under `torch.no_grad`).

    Args:
      apply_fn: `apply_fn(params, obs [N, ...]) -> Q [N, A]`.
      params, target_params: the Q-network's and the target network's params.
      batch: transitions [N, ...] (`replay.Transition`).
      gamma: the discount.
      bootstrap: "time_limits" or "done" (`replay.discount_mask`).
    """
    mask = replay.discount_mask(batch.terminated, batch.truncated, bootstrap)
    target = jax.lax.stop_gradient(td_targets(apply_fn(target_params, batch.next_obs), batch.reward, mask, gamma))
    q = apply_fn(params, batch.obs)
    old_val = jnp.take_along_axis(q, jnp.asarray(batch.action, jnp.int32)[:, None], axis=1)[:, 0]
    return jnp.mean((target - old_val) ** 2), (jnp.mean(old_val), target)


def update_target(params: Any, target_params: Any, tau, iteration, period: int) -> Any:
    """tau * params + (1 - tau) * target where `iteration % period == 0`, else the target unchanged.

    `optax.incremental_update` (Polyak; tau = 1 copies) gated by `optax.periodic_update`.
    """
    return optax.periodic_update(optax.incremental_update(params, target_params, tau), target_params, iteration,
                                 period)


def _check_q_network(module: Any, obs_space: Any, action_dim: int, sample: Any = None) -> None:
    """The module maps obs [B, ...] to Q [B, A] (B = `_common.PROBE_BATCH`); else a TypeError/ValueError naming
    `network`."""
    _common.refuse_class("network", module)
    if not callable(getattr(module, "init", None)) or not callable(getattr(module, "apply", None)):
        raise TypeError(f"network must be a flax linen Module with __call__(obs [B, ...]) -> Q [B, A], got "
                        f"{type(module).__name__}.")
    obs = _common.probe_observation(obs_space, sample)  # sample: as the env's reset gives it
    out = _common.probe_module(f"network {type(module).__name__}: __call__(obs)",
                               "a flax linen Module with __call__(obs [B, ...]) -> Q [B, A]", module, obs)
    b = _common.PROBE_BATCH
    if not hasattr(out, "shape") or tuple(out.shape) != (b, action_dim) or not jnp.issubdtype(out.dtype, jnp.floating):
        raise ValueError(f"network: module.apply(params, obs [B, ...]) must return float Q-values [B, A] = "
                         f"[{b}, {action_dim}] for the env's Discrete({action_dim}) actions on a batch of {b}, got {out!r}.")


class DQN(NamedTuple):
    """`make_dqn`'s result.

    Attributes:
      init: `init(key, hparams=None) -> DQNState` (no env step taken).
      update: `update(state, hparams=None) -> (state, DQNMetrics of one update)`.
      train: `train(key, hparams=None) -> (state, DQNMetrics [num_updates])`.
      eval_policy_fn: greedy `policy_fn(params, obs, key) -> PolicyOutput`
        (log_prob and value zero) for `collect.evaluate` with `state.params`.
      env, env_params, module: what it trains on and with.
      buffer: the `replay.ReplayBuffer` functions.
      policy_fn: None: DQN's policy is greedy (exploration is training's, not the policy's).
      policy_params: `policy_params(state)`, the params both policies take (`state.params`).
      recurrent: False (the runner's `_common.Algorithm` protocol).
      num_updates: the config's updates (`periodic_eval.make_train` checks its count against it).
    """

    init: Callable
    update: Callable
    train: Callable
    eval_policy_fn: Callable
    env: Any
    env_params: Any
    module: Any
    buffer: replay.ReplayBuffer
    policy_fn: Callable | None = None
    policy_params: Callable | None = None
    recurrent: bool = False
    num_updates: int | None = None


def make_dqn(config: DQNConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> DQN:
    """Builds DQN's pure functions for a config, on its env id or on your own env and Q-network.

    Args:
      config: the static config.
      env: None to build `config.env_id`'s env; or your own env object of the
        gymnax>=1.0.1 protocol (6-value step with `info["final_observation"]`)
        with Discrete actions.
      env_params: `env`'s params; None for `env.default_params`. Only with `env`.
      network: None for the built-in network `config.network` names (the
        MLP `QNetwork(hidden_sizes=config.hidden_sizes)`, or for images
        `networks.QNetworkCNN`); or your own flax linen Module with
        `__call__(obs [B, ...]) -> Q [B, A]`.
        The built-in network takes one array observation; a pytree one (a
        Dict or Tuple space) needs yours. Exploration draws uniformly over
        all A actions: an action mask in the observation is not read (mask
        the greedy action in your network's Q-values if the env has one).
        With yours, leave `hidden_sizes` at its default: it is refused
        otherwise (it would not be read).

    Returns:
      The `DQN` functions.

    Raises:
      TypeError, ValueError: naming `config`, `env`, `env_params` or `network`.
    """
    from jaxrl_rollout.types import PolicyOutput

    if not isinstance(config, DQNConfig):
        raise TypeError(f"config must be a DQNConfig, got {type(config).__name__}.")
    env, env_params, sample = _common.resolve_env(env, env_params, config.env_id, options=config.env_options,
                                                  sample=network is not None)
    _common.refuse_self_play("DQN", env)
    action_dim, continuous = _common.action_info(env, env_params)
    if continuous:
        _common.refuse_actions("DQN", env, env.action_space(env_params), "Discrete actions")
    _common.refuse_network_name(config, network)
    obs_space = env.observation_space(env_params)
    if network is None:
        _common.check_single_array_obs("DQN", "QNetwork", env, obs_space)
    module = (_common.choose_q_network(config.network, obs_space, QNetwork(action_dim, config.hidden_sizes),
                                       layer_norm=False, kernels="torch")
              if network is None else network)
    _check_q_network(module, obs_space, action_dim, sample)
    _common.refuse_unread_network_fields(config, network)
    apply_fn = module.apply
    buffer = replay.for_config(config, env, env_params)
    B, A = config.num_envs, action_dim
    # The resets of `init` draw on fused keys where the env takes them (the same bits, fewer compiled kernels).
    # The step keeps JAX's env keys: fused there, the 1-seed CartPole benchmark ran 40% longer on 2 CPU cores
    # (half the thunks and less kernel time, but 1.7 s of CPU time in 1.2 s of wall time: kernels ran side by
    # side on the two cores, which did not pay), where SAC and TD3 on Pendulum were unchanged.
    fused_reset_keys = check_env_and_fused_keys(env, env_params, jax.random.PRNGKey(0), B)  # (a broken step: check_env's error)
    duration_scale = float(config.num_iterations)

    def optimizer(hp: DQNHParams) -> optax.GradientTransformation:
        return optim.torch_adam(hp.lr, eps=config.adam_eps)

    def iterate(state: DQNState, hp: DQNHParams):
        """One vector step g = state.iteration: act epsilon-greedily, step, store; returns (state, stats)."""
        g = state.iteration
        epsilon = epsilon_schedule(hp.start_e, hp.end_e, hp.exploration_fraction * duration_scale, g)
        key, act_key, env_keys = step_keys(state.key, B)
        greedy = jnp.argmax(apply_fn(state.params, state.obs), axis=-1).astype(jnp.int32)
        explore, random_action = _common.epsilon_draws(act_key, (B,), epsilon, A)
        action = jnp.where(explore, random_action, greedy)
        step = env_step(env, env_params, env_keys, state.env_state, action, B)
        buf = buffer.add(state.buffer, replay.transitions(state.obs, action, step))
        done = step.terminated | step.truncated
        ret = state.episode_return + step.reward
        length = state.episode_length + 1
        stats = (jnp.sum(jnp.where(done, ret, 0.0)), jnp.sum(jnp.where(done, length, 0)), jnp.sum(done), epsilon)
        state = state._replace(
            buffer=buf, env_state=step.env_state, obs=step.obs, episode_return=jnp.where(done, 0.0, ret),
            episode_length=jnp.where(done, 0, length), iteration=g + 1, key=key)
        return state, stats

    def init(key: jax.Array, hparams: DQNHParams | None = None) -> DQNState:
        _common.check_init_key(key)
        hp = resolve_hparams(hparams)
        net_key, env_key, key = prng.split(key, 3)
        obs, env_state = env_reset(env, reset_keys(env_key, B, fused_reset_keys), env_params)
        params = fused_init(module, net_key, jax.tree.map(lambda x: x[:1], obs))
        example = replay.Transition(
            jax.tree.map(lambda x: x[0], obs), jnp.int32(0), jnp.float32(0), jax.tree.map(lambda x: x[0], obs),
            jnp.bool_(False), jnp.bool_(False))
        return DQNState(params, params, optimizer(hp).init(params), buffer.init(example), env_state, obs,
                        jnp.zeros(B, jnp.float32), jnp.zeros(B, jnp.int32), jnp.int32(0), key)

    # A target update is due after iteration g when g > learning_starts and g % target_network_frequency == 0
    # (CleanRL). When target_network_frequency is a multiple of train_frequency (the defaults: 500 and 10),
    # every such g also has a gradient step, so the update goes inside it; otherwise it has a branch of its own.
    target_on_gradient_steps = config.target_network_frequency % config.train_frequency == 0

    def learn(state: DQNState, hp: DQNHParams):
        key, sample_key = prng.split(state.key)
        batch = buffer.sample(state.buffer, sample_key)
        (loss, (q_mean, _)), grads = jax.value_and_grad(dqn_loss, argnums=1, has_aux=True)(
            apply_fn, state.params, state.target_params, batch, hp.gamma, config.bootstrap)
        updates, opt_state = optimizer(hp).update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        g = state.iteration - 1
        target = state.target_params
        if target_on_gradient_steps:
            target = update_target(params, target, hp.tau, g, config.target_network_frequency)
        flags = _common.nonfinite_flags(loss, optax.tree.norm(grads), params)
        return state._replace(params=params, target_params=target, opt_state=opt_state, key=key), (loss, q_mean, flags)

    nan = jnp.float32(jnp.nan)

    def iterate_and_learn(state: DQNState, hp: DQNHParams):
        """Iteration g, then the gradient step when g > learning_starts and g % train_frequency == 0, then the
        target update when g > learning_starts and g % target_network_frequency == 0."""
        state, stats = iterate(state, hp)
        g = state.iteration - 1
        due = (g > config.learning_starts) & (g % config.train_frequency == 0)
        state, (loss, q_mean, flags) = jax.lax.cond(due, learn, lambda s, _: (s, (nan, nan, jnp.int32(0))), state, hp)
        if not target_on_gradient_steps:
            target_due = (g > config.learning_starts) & (g % config.target_network_frequency == 0)
            target = jax.lax.cond(target_due, lambda p, t: optax.incremental_update(p, t, hp.tau),
                                  lambda p, t: t, state.params, state.target_params)
            state = state._replace(target_params=target)
        return state, (stats, due, loss, q_mean, flags)

    def learner_step(state: DQNState, hp: DQNHParams):
        """One learner step: the metrics row of the CleanRL loop's period."""
        if config.train_frequency == 1:
            state, (stats, due, loss, q_mean, flags) = iterate_and_learn(state, hp)
            ret_sum, len_sum, count, epsilon = stats
        else:
            state, (stats, dues, losses, q_means, all_flags) = jax.lax.scan(
                lambda s, _: iterate_and_learn(s, hp), state, None, length=config.train_frequency)
            ret_sum, len_sum, count, epsilons = stats
            due, epsilon = jnp.any(dues), epsilons[-1]
            loss, q_mean, flags = _common.due_row((losses, q_means, all_flags), dues)
        n = jnp.sum(count)
        metrics = DQNMetrics(
            env_steps=jnp.int32(config.train_frequency * B),
            episode_return=jnp.where(n > 0, jnp.sum(ret_sum) / jnp.maximum(n, 1), jnp.nan).astype(jnp.float32),
            episode_length=jnp.where(n > 0, jnp.sum(len_sum) / jnp.maximum(n, 1), jnp.nan).astype(jnp.float32),
            num_episodes=n.astype(jnp.int32), epsilon=epsilon, trained=due, loss=loss, q_values=q_mean,
            nonfinite=flags)
        return state, metrics

    update = _common.merged_update(learner_step, config.learner_steps_per_update, resolve_hparams)

    train = _common.make_train_loop(init, update, config.num_updates, resolve_hparams)

    def eval_policy_fn(params, obs, key):
        action = jnp.argmax(apply_fn(params, obs), axis=-1).astype(jnp.int32)
        zeros = jnp.zeros(action.shape, jnp.float32)
        return PolicyOutput(action=action, log_prob=zeros, value=zeros)

    return DQN(init, update, train, eval_policy_fn, env, env_params, module, buffer, policy_fn=None,
               policy_params=lambda state: state.params, num_updates=config.num_updates)


def make_train(config: DQNConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> Callable:
    """`train(key, hparams=None) -> (DQNState, DQNMetrics [num_updates])`, pure and jittable.

    Args:
      config, env, env_params, network: as `make_dqn`.

    Returns:
      The train function; it vmaps over keys and over stacked `DQNHParams`.

    Raises:
      TypeError, ValueError: as `make_dqn`, naming the argument.
    """
    return make_dqn(config, env=env, env_params=env_params, network=network).train
