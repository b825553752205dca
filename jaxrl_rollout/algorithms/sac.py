"""SAC as a pure `train(key, hparams)`, with an on-device replay buffer and time limits bootstrapped.

The computation is that of CleanRL's `sac_continuous_action.py`
(https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/sac_continuous_action.py;
Haarnoja et al. 2018, https://arxiv.org/abs/1812.05905), with the update math
of `actor_critic_losses` (docs/semantics.md §21), on B = `num_envs` envs
stepped together. CleanRL's `global_step` counts these vector steps
(iterations), which are env steps when `num_envs` is 1 (the default):

- iteration g acts with actions drawn uniformly in the Box bounds while
  g < `learning_starts`, afterwards with a sample of the tanh-Gaussian actor
  scaled to the bounds (`action_scale`, `action_bias`, §21.1), and adds the B
  transitions to the replay buffer (`replay`), the true final observation
  kept as `next_obs` where an episode ended (docs/semantics.md §4);
- after iteration g, when g > `learning_starts`: one critic Adam step on
  `twin_critic_loss` against `sac_critic_target` (§21.2, §21.3) over a
  uniform sample of `batch_size` transitions; `config.bootstrap` decides
  whether a truncation bootstraps ("time_limits") or not ("done");
- on those steps, when also g % `policy_frequency` == 0, `policy_frequency`
  actor steps (§21.4) on that batch, each with a fresh sample, each followed
  (with `autotune`) by a temperature step on a fresh sample of the updated
  actor (§21.5), alpha = exp(log_alpha) refreshed after each;
- on those steps, when also g % `target_network_frequency` == 0, the target
  critics become tau * Q + (1 - tau) * Q_target (§21.8).

A learner step is `policy_frequency` iterations, each with its critic step
and the actor steps when they are due (checked on g itself, so the iteration
is compiled once): learner step k takes iterations g = k * policy_frequency,
..., (k + 1) * policy_frequency - 1 (`init` takes none), and its first is the
one where CleanRL's delayed actor update is due. An update (`update`, one row
of the metrics) is `config.learner_steps_per_update` learner steps (about
`log_interval` iterations), their metrics merged by `_common.merge_rows`. The
target critics do not enter the actor step, so taking it before or after the
iteration's target update is the same.
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
from gymnax.environments import spaces

from jaxrl_rollout import _checks, envs, optim, prng
from jaxrl_rollout import actor_critic_losses as acl
from jaxrl_rollout.algorithms import _common, replay
from jaxrl_rollout.networks import fused_init
from jaxrl_rollout.stepping import check_env_and_fused_keys, env_reset, env_step, reset_keys, step_keys

__all__ = [
    "HPARAM_RANGES", "SAC", "SACActor", "SACConfig", "SACCritic", "SACHParams", "SACMetrics", "SACState",
    "check_hparams", "check_hparams_read", "make_sac", "make_train",
]

HPARAM_RANGES = {
    "policy_lr": (0.0, False, None, False),
    "q_lr": (0.0, False, None, False),
    "gamma": (0.0, True, 1.0, True),
    "tau": (0.0, False, 1.0, True),
    "alpha": (0.0, True, None, False),
}
"""SAC's hyperparameter name -> (low, low included, high or None, high included)."""

TEMPERATURE_FORMS = ("cleanrl", "sb3")


@dataclasses.dataclass(frozen=True)
class SACConfig(_common.LearnerSizes):
    """Static configuration; defaults are CleanRL `sac_continuous_action.py`'s.

    Static and serialisable: it never builds its env. CleanRL's default
    `total_timesteps` (1,000,000) is kept; Pendulum-v1 needs far fewer
    (benchmarks/offpolicy_learning.py `--algo sac`).

    Attributes:
      env_id: the env to build (not read when `make_train` gets an `env`);
        its actions must be a 1-D Box. Pendulum-v1, gymnax's continuous
        control task (CleanRL's default, Hopper-v4, is a MuJoCo env).
      env_options: options of the env's make (`envs.make(env_id, **env_options)`),
        as in `PPOConfig`.
      total_timesteps: env steps in the run; `total_timesteps // num_envs`
        iterations of B = `num_envs` env steps.
      num_envs: envs stepped together.
      buffer_size: replay capacity, in transitions.
      batch_size: transitions per gradient step.
      learning_starts: iterations of uniform random actions, and before the
        first gradient step (CleanRL: a step needs g > learning_starts).
      policy_frequency: iterations per delayed actor update, which takes
        `policy_frequency` actor (and temperature) steps; also the
        iterations of one learner step.
      target_network_frequency: iterations between target updates.
      autotune: learn the temperature (log_alpha starts at 0, Adam at
        `q_lr`, as CleanRL); False keeps `SACHParams.alpha`.
      target_entropy: the temperature's entropy target; None for -A.
      temperature_loss: "cleanrl" or "sb3" (`sac_temperature_loss`, §21.5).
      log_interval: iterations per update, the metrics' row: rounded down to
        whole learner steps of `policy_frequency` iterations, at least one.
        It changes only how the metrics are grouped, not what is trained,
        except that the run takes whole updates: total_timesteps is rounded
        down to them (docs/semantics.md §22.5).
      network: "auto", "mlp" or "cnn" (`_common.choose_torso`, DQN's choice):
        "auto" reads an image of at least 36 x 36 (Atari's frames, gymnasium's
        CarRacing) with the Nature DQN's torso in the actor and in each critic
        (`networks.cnn_torso`: SB3's `NatureCNN`, x / 255 for pixels), its
        512 features then the hidden layers; anything else flattened (CleanRL's
        MLPs). "cnn" asks for the torso on any image [H, W, C] (MinAtar's one
        convolution below 36 x 36), "mlp" for the flattened image. Leave it at
        "auto" when `make_train` is given a `network` of your own.
      hidden_sizes: the actor's and each critic's hidden layers (ReLU).
      adam_eps: Adam's epsilon (torch's default).
      bootstrap: "time_limits" (bootstrap through truncations, SB3's
        `handle_timeout_termination`) or "done" (a truncation ends the
        bootstrap); see `replay`.
      optimize_memory_usage: the compact replay buffer, half the memory for
        images, as `dqn.DQNConfig.optimize_memory_usage` says.
      frame_stack_axis: None, or the axis along which observations stack
        frames, each frame then stored once (with optimize_memory_usage), as
        `dqn.DQNConfig.frame_stack_axis` says.
    """

    # The runner's default chunk count (`runner.default_chunk_updates`): an update here is a thousand
    # iterations, each with a gradient step of the (256, 256) networks, so CleanRL's million steps in the
    # usual ~20 chunks kept a CPU user of 4 seeds waiting over 10 minutes for the first progress line.
    default_chunks: ClassVar[int] = 100

    env_id: str = "Pendulum-v1"
    total_timesteps: int = 1_000_000
    num_envs: int = 1
    buffer_size: int = 1_000_000
    batch_size: int = 256
    learning_starts: int = 5_000
    policy_frequency: int = 2
    target_network_frequency: int = 1
    log_interval: int = 1000
    autotune: bool = True
    target_entropy: float | None = None
    temperature_loss: str = "cleanrl"
    network: str = "auto"
    hidden_sizes: tuple = (256, 256)
    adam_eps: float = 1e-8
    bootstrap: str = "time_limits"
    optimize_memory_usage: bool = False
    frame_stack_axis: int | None = None
    env_options: tuple = ()

    def __post_init__(self):
        _common.plain_numbers(self)
        for name in ("total_timesteps", "num_envs", "buffer_size", "batch_size", "policy_frequency",
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
            raise self.no_update_error("policy_frequency")
        self.check_learning_starts()
        self.warn_partial_run()
        self.check_target_updates()
        self.check_policy_updates()
        _common.check_bool("autotune", self.autotune)
        if self.target_entropy is not None and (isinstance(self.target_entropy, bool) or not isinstance(
                self.target_entropy, (int, float)) or not np.isfinite(self.target_entropy)):
            raise ValueError(f"target_entropy must be a finite number or None, got {self.target_entropy!r}.")
        if self.target_entropy is not None and not self.autotune:
            raise ValueError(f"target_entropy={self.target_entropy!r} is read only when the temperature is learned "
                             "(autotune=True); with autotune=False alpha is fixed (SACHParams.alpha).")
        _common.check_choice("temperature_loss", self.temperature_loss, TEMPERATURE_FORMS)
        if self.temperature_loss != "cleanrl" and not self.autotune:
            raise ValueError(f"temperature_loss={self.temperature_loss!r} is read only when the temperature is "
                             "learned (autotune=True); with autotune=False alpha is fixed (SACHParams.alpha).")
        object.__setattr__(self, "hidden_sizes", _common.hidden_sizes_tuple(self.hidden_sizes))
        _common.check_choice("network", self.network, _common.Q_NETWORKS)
        _common.check_eps("adam_eps", self.adam_eps)
        _common.check_choice("bootstrap", self.bootstrap, replay.BOOTSTRAP)
        _common.check_replay_memory(self)
        envs.check_id(self.env_id)
        _common.check_env_options(self)

    @property
    def learner_period(self) -> int:
        """Iterations in one learner step: `policy_frequency`."""
        return self.policy_frequency


class SACHParams(NamedTuple):
    """Traced hyperparameters; defaults are CleanRL `sac_continuous_action.py`'s.

    Valid values (`HPARAM_RANGES`): policy_lr and q_lr > 0, gamma in [0, 1],
    tau in (0, 1], alpha >= 0. `alpha` is read only when `config.autotune`
    is False (the tuned temperature starts at exp(0) = 1, as CleanRL's);
    with autotune, a concrete alpha other than the default is refused
    (`check_hparams_read`), as are such grids in a `runner.RunSpec`. The
    temperature's Adam uses `q_lr`, as CleanRL's. `init`, `update` and
    `train` raise a ValueError naming a concrete field out of range; traced
    values are not checked.
    """

    policy_lr: float = 3e-4
    q_lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    alpha: float = 0.2


class SACState(NamedTuple):
    """The train state: actor, twin critics and targets, temperature, optimisers, replay buffer, envs.

    Attributes:
      actor_params: the actor's params.
      critic_params, target_critic_params: the twin critics' params, stacked
        on a leading axis of 2 (critic 1, critic 2), and their targets.
      log_alpha: float32 [1], the log-temperature (fixed at log(alpha)
        without autotune).
      actor_opt_state, critic_opt_state, alpha_opt_state: the Adam states.
      buffer: the flashbax buffer state (`replay.make_replay_buffer`).
      env_state, obs: the envs' state and the observations acted on next [B, ...].
      episode_return, episode_length: [B] of the running episodes.
      iteration: int32, iterations taken so far (the next one's g).
      key: PRNG key for the next steps.
    """

    actor_params: Any
    critic_params: Any
    target_critic_params: Any
    log_alpha: jax.Array
    actor_opt_state: Any
    critic_opt_state: Any
    alpha_opt_state: Any
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


class SACMetrics(NamedTuple):
    """Per-update metrics.

    Attributes:
      env_steps: cumulative env steps at the end of the update (`train`;
        `update` gives the update's own count).
      episode_return, episode_length: means over the episodes that ended in
        the update; NaN when none did.
      num_episodes: int32, episodes that ended in the update.
      trained: bool, some iteration of the update took a critic step
        (g > learning_starts).
      critic_loss, q_values: the loss (CleanRL's `qf_loss`, Q1 + Q2 losses)
        and the mean of Q1 and Q2 at the batch's actions of the last critic
        step of each learner step (a period of `policy_frequency`
        iterations; CleanRL logs one step's values too), averaged over the
        update's learner steps; NaN without a step. With policy_frequency
        1 that is every critic step.
      actor_loss, alpha_loss: the means over the update's actor and
        temperature steps; NaN without them (alpha_loss also without autotune).
      alpha: the temperature at the end of the update.
      entropy: -mean log pi of the samples of the last of a due iteration's
        `policy_frequency` actor steps, averaged over the update's learner
        steps; NaN without one.
      (An update is `log_interval` iterations; its rows are merged by
      `_common.merge_rows`.)
      nonfinite: int32 bitmask of what was not finite in the update's steps
        (1 loss, 2 gradients, 4 params; `_common.nonfinite_flags`); 0 without
        a step.
    """

    env_steps: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    num_episodes: jax.Array
    trained: jax.Array
    critic_loss: jax.Array
    q_values: jax.Array
    actor_loss: jax.Array
    alpha_loss: jax.Array
    alpha: jax.Array
    entropy: jax.Array
    nonfinite: jax.Array


class SACActor(nn.Module):
    """CleanRL's SAC actor: obs [B, ...] flattened -> Dense+ReLU layers -> (mean [B, A], log_std [B, A]).

    log_std is bounded to [-5, 2] by `actor_critic_losses.tanh_squash_log_std`
    (§21.1). Kernels are drawn as torch's `nn.Linear` default; biases start at 0.
    A Discrete(n) observation is one-hot encoded when `num_obs_values` is n
    (`_common.flat_observation`). With `torso` (a `networks.CNNTorso`, what
    `network="auto"` or `"cnn"` chooses for an image) the image torso reads
    the observation and the hidden layers its features: SB3's SAC actor on its
    `NatureCNN` (`_common.observation_features`).
    """

    action_dim: int
    hidden_sizes: tuple = (256, 256)
    num_obs_values: int = 0
    torso: Any = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = _common.observation_features(obs, self.num_obs_values, self.torso)
        for h in self.hidden_sizes:
            x = nn.relu(nn.Dense(h, kernel_init=_common.torch_linear_kernel_init())(x))
        mean = nn.Dense(self.action_dim, kernel_init=_common.torch_linear_kernel_init())(x)
        log_std = nn.Dense(self.action_dim, kernel_init=_common.torch_linear_kernel_init())(x)
        return mean, acl.tanh_squash_log_std(log_std)


SACCritic = _common.ObsActionCritic
"""CleanRL's `SoftQNetwork`: concat(obs flattened, action) -> Dense+ReLU layers -> Q [B]."""


def check_hparams(hparams: SACHParams) -> None:
    """Checks every concrete field against `HPARAM_RANGES`; a ValueError names the field. Traced fields are skipped."""
    _common.check_hparams(hparams, HPARAM_RANGES)


def resolve_hparams(hparams: SACHParams | None, config: SACConfig | None = None) -> SACHParams:
    """`SACHParams()` for None, else the record, checked; a TypeError for another type.

    With `config`, also `check_hparams_read(config, hparams)`.
    """
    if hparams is None:
        return SACHParams()
    if not isinstance(hparams, SACHParams):
        raise TypeError(f"hparams must be a SACHParams, got {type(hparams).__name__}.")
    check_hparams(hparams)
    if config is not None:
        check_hparams_read(config, hparams)
    _common.check_hparam_shapes(hparams)
    return hparams


def check_hparams_read(config: SACConfig, hparams: SACHParams) -> None:
    """A ValueError when a concrete `hparams.alpha` other than its default meets `config.autotune`.

    A learned temperature starts at exp(0) = 1 (CleanRL's) and never reads
    `alpha`, so a record (or a stacked grid) with another alpha would train
    exactly the default's run under its label. Traced values (a grid inside
    your own `jax.vmap`) cannot be read: check the grid with this first.
    """
    if not config.autotune:
        return
    value = _checks.concrete(hparams.alpha)
    if value is None:
        return
    default = SACHParams._field_defaults["alpha"]
    # within bfloat16's rounding of the default: the default, in whatever precision it was given
    other = [float(v) for v in np.asarray(value, np.float64).ravel() if not np.isclose(v, default, rtol=4e-3, atol=0)]
    if other:
        raise ValueError(f"hparams.alpha={other[0]:.7g} is not read: with config.autotune=True (the default) SAC learns "
                         "its temperature, starting at 1 as CleanRL's; pass SACConfig(autotune=False) to train with "
                         f"a fixed alpha, or leave alpha at its default {default!r}.")


NETWORK_CONTRACT = ("a pair (actor, critic) of flax linen Modules: actor.apply(params, obs [B, ...]) -> "
                    "(mean [B, A], log_std [B, A]) with log_std already bounded (e.g. "
                    "actor_critic_losses.tanh_squash_log_std), and critic.apply(params, obs [B, ...], action "
                    "[B, A]) -> Q [B] or [B, 1]; the critic is initialised twice (twin critics)")


def _check_network(network: Any, obs_space: Any, action_dim: int, sample: Any = None) -> tuple[Any, Any]:
    """The (actor, critic) pair, checked on a batch of `_common.PROBE_BATCH` observations; else a TypeError or
    ValueError naming `network`."""
    if not isinstance(network, (tuple, list)) or len(network) != 2:
        raise TypeError(f"network must be {NETWORK_CONTRACT}; got {type(network).__name__}.")
    actor, critic = network
    for what, m in (("actor", actor), ("critic", critic)):
        _common.refuse_class(f"network: the {what}", m)
        if not callable(getattr(m, "init", None)) or not callable(getattr(m, "apply", None)):
            raise TypeError(f"network: the {what} must be a flax linen Module, got {type(m).__name__}. network must "
                            f"be {NETWORK_CONTRACT}.")
    obs = _common.probe_observation(obs_space, sample)  # sample: as the env's reset gives it
    b = _common.PROBE_BATCH
    act = jnp.zeros((b, action_dim), jnp.float32)
    want = (b, action_dim)
    out = _common.probe_module(f"network: the actor {type(actor).__name__}'s __call__(obs)", NETWORK_CONTRACT,
                               actor, obs)
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(
            hasattr(x, "shape") and tuple(x.shape) == want and jnp.issubdtype(x.dtype, jnp.floating) for x in out)):
        raise ValueError(f"network: actor.apply(params, obs [B, ...]) must return (mean, log_std), float [B, A] = "
                         f"[{b}, {action_dim}] each on a batch of {b}, got {out!r}.")
    q = _common.probe_module(f"network: the critic {type(critic).__name__}'s __call__(obs, action [B, A])",
                             NETWORK_CONTRACT, critic, obs, act)
    if not hasattr(q, "shape") or tuple(q.shape) not in ((b,), (b, 1)) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"network: critic.apply(params, obs [B, ...], action [B, A]) must return float Q [B] or "
                         f"[B, 1] ([{b}] on a batch of {b}), got {q!r}.")
    return actor, critic


class SAC(NamedTuple):
    """`make_sac`'s result.

    Attributes:
      init: `init(key, hparams=None) -> SACState` (no env step taken).
      update: `update(state, hparams=None) -> (state, SACMetrics of one update)`.
      train: `train(key, hparams=None) -> (state, SACMetrics [num_updates])`.
      eval_policy_fn: deterministic `policy_fn(actor_params, obs, key) ->
        PolicyOutput` (tanh(mean) scaled to the bounds; log_prob and value
        zero) for `collect.evaluate` with `state.actor_params`.
      env, env_params: what it trains on.
      actor, critic: the flax modules.
      buffer: the `replay.ReplayBuffer` functions.
      action_scale, action_bias: float32 [A] (CleanRL's).
      target_entropy: the temperature's target.
      policy_fn: the stochastic policy `policy_fn(actor_params, obs, key) ->
        PolicyOutput` (a squashed Gaussian sample; value zero).
      policy_params: `policy_params(state)`, the params both policies take (`state.actor_params`).
      module: the actor (the network that acts).
      recurrent: False (the runner's `_common.Algorithm` protocol).
      num_updates: the config's updates (`periodic_eval.make_train` checks its count against it).
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
    action_scale: jax.Array
    action_bias: jax.Array
    target_entropy: float
    policy_fn: Callable | None = None
    policy_params: Callable | None = None
    module: Any = None
    recurrent: bool = False
    num_updates: int | None = None


def make_sac(config: SACConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> SAC:
    """Builds SAC's pure functions for a config, on its env id or on your own env and networks.

    Args:
      config: the static config.
      env: None to build `config.env_id`'s env; or your own env object of the
        gymnax>=1.0.1 protocol (6-value step with `info["final_observation"]`)
        with a 1-D Box action space of finite bounds.
      env_params: `env`'s params; None for `env.default_params`. Only with `env`.
      network: None for `(SACActor(A, config.hidden_sizes),
        SACCritic(config.hidden_sizes))`, with the image torso that
        `config.network` chooses; or your own pair `(actor, critic)`
        of flax linen Modules (`NETWORK_CONTRACT`): `actor.apply(params,
        obs [B, ...]) -> (mean [B, A], log_std [B, A])`, log_std already
        bounded, and `critic.apply(params, obs, action [B, A]) -> Q [B]` (or
        [B, 1]), initialised twice for the twin critics.
        With yours, leave `hidden_sizes` and `network` at their defaults:
        they are refused otherwise (they would not be read).

    Returns:
      The `SAC` functions.

    Raises:
      TypeError, ValueError: naming `config`, `env`, `env_params` or `network`.
    """
    from jaxrl_rollout.types import PolicyOutput

    if not isinstance(config, SACConfig):
        raise TypeError(f"config must be a SACConfig, got {type(config).__name__}.")
    env, env_params, sample = _common.resolve_env(env, env_params, config.env_id, options=config.env_options,
                                                  sample=network is not None)
    space = env.action_space(env_params)
    if not isinstance(space, spaces.Box) or len(tuple(space.shape)) != 1:
        _common.refuse_actions("SAC", env, space, "continuous actions, a 1-D Box")
    _common.action_info(env, env_params)  # the Box checks every learner makes (bounds in order, a float dtype)
    low = np.broadcast_to(np.asarray(space.low, np.float32), space.shape)
    high = np.broadcast_to(np.asarray(space.high, np.float32), space.shape)
    _common.check_scaled_box("SAC", env, low, high)
    A = int(space.shape[0])
    if network is None:
        _common.check_single_array_obs("SAC", "SACActor and SACCritic", env, env.observation_space(env_params))
        n = _common.num_obs_values(env.observation_space(env_params))  # one-hot a Discrete observation
        torso = _common.choose_torso(config.network, env.observation_space(env_params))  # None: flattened
        actor, critic = SACActor(A, config.hidden_sizes, n, torso), SACCritic(config.hidden_sizes, n, torso)
    else:
        _common.refuse_network_name(config, network)
        actor, critic = _check_network(network, env.observation_space(env_params), A,
                                       sample)
        _common.refuse_unread_network_fields(config, network)
    action_scale, action_bias = acl.action_scale_and_bias(low, high)
    low_j, high_j = jnp.asarray(low), jnp.asarray(high)
    target_entropy = float(-A if config.target_entropy is None else config.target_entropy)
    buffer = replay.for_config(config, env, env_params)
    B, pf = config.num_envs, config.policy_frequency
    bootstrap_on_truncation = config.bootstrap == "time_limits"
    fused_env_keys = check_env_and_fused_keys(env, env_params, jax.random.PRNGKey(0), B)  # (a broken step: check_env's error)

    def q_both(critic_params, obs, action):
        """[2, N] Q-values of the twin critics (params stacked on a leading axis of 2)."""
        return _common.twin_q_values(critic, critic_params, obs, action)

    def sample(actor_params, obs, key=None, noise=None):
        """A squashed Gaussian sample of the actor at obs, with `noise` [N, A] or a fresh draw from `key`."""
        mean, log_std = actor.apply(actor_params, obs)
        if noise is None:
            noise = jax.random.normal(prng.fused(key), jnp.shape(mean), jnp.float32)
        return acl.tanh_gaussian_sample(mean, log_std, noise, action_scale, action_bias)

    def adam(lr):
        return optim.torch_adam(lr, eps=config.adam_eps)

    def iterate(state: SACState, hp: SACHParams):
        """One vector step g = state.iteration: act, step, store; returns (state, stats)."""
        g = state.iteration
        key, act_key, env_keys = step_keys(state.key, B, fused_env_keys)
        random_key, policy_key = prng.split(act_key)
        random_action = jax.random.uniform(prng.fused(random_key), (B, A), jnp.float32, low_j, high_j)
        policy_action = sample(state.actor_params, state.obs, policy_key).action
        action = jnp.where(g < config.learning_starts, random_action, policy_action)
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

    def resolve(hparams):
        return resolve_hparams(hparams, config)

    def init(key: jax.Array, hparams: SACHParams | None = None) -> SACState:
        _common.check_init_key(key)
        hp = resolve(hparams)
        actor_key, critic_key, env_key, key = prng.split(key, 4)
        obs, env_state = env_reset(env, reset_keys(env_key, B, fused_env_keys), env_params)
        one_obs = jax.tree.map(lambda x: x[:1], obs)
        actor_params = fused_init(actor, actor_key, one_obs)
        critic_params = jax.vmap(lambda k: fused_init(critic, k, one_obs, jnp.zeros((1, A), jnp.float32)))(
            prng.split(critic_key))
        if config.autotune:
            log_alpha = jnp.zeros(1, jnp.float32)
        else:
            log_alpha = jnp.reshape(jnp.log(jnp.asarray(hp.alpha, jnp.float32)), (1,))
        example = replay.Transition(
            jax.tree.map(lambda x: x[0], obs), jnp.zeros(A, jnp.float32), jnp.float32(0),
            jax.tree.map(lambda x: x[0], obs), jnp.bool_(False), jnp.bool_(False))
        return SACState(
            actor_params, critic_params, critic_params, log_alpha, adam(hp.policy_lr).init(actor_params),
            adam(hp.q_lr).init(critic_params), adam(hp.q_lr).init(log_alpha), buffer.init(example), env_state, obs,
            jnp.zeros(B, jnp.float32), jnp.zeros(B, jnp.int32), jnp.int32(0), key)

    def critic_step(state: SACState, hp: SACHParams, noise: jax.Array):
        """CleanRL's critic step on a fresh batch, then the target update when due; returns (state, batch, stats).

        `noise` [N, A] draws the next actions' sample.
        """
        key, sample_key = prng.split(state.key)
        batch = buffer.sample(state.buffer, sample_key)
        alpha = jnp.exp(state.log_alpha[0])
        nxt = sample(state.actor_params, batch.next_obs, noise=noise)
        next_q = q_both(state.target_critic_params, batch.next_obs, nxt.action)
        target = acl.sac_critic_target(next_q[0], next_q[1], nxt.log_prob, batch.reward, batch.terminated,
                                       batch.truncated, hp.gamma, alpha,
                                       bootstrap_on_truncation=bootstrap_on_truncation)

        def loss_fn(critic_params):
            q = q_both(critic_params, batch.obs, batch.action)
            loss, parts = acl.twin_critic_loss(q[0], q[1], target)
            return loss, 0.5 * (parts["qf1_values"] + parts["qf2_values"])

        (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.critic_params)
        updates, opt_state = adam(hp.q_lr).update(grads, state.critic_opt_state, state.critic_params)
        critic_params = optax.apply_updates(state.critic_params, updates)
        g = state.iteration - 1
        target_params = optax.periodic_update(acl.polyak_update(critic_params, state.target_critic_params, hp.tau),
                                              state.target_critic_params, g, config.target_network_frequency)
        flags = _common.nonfinite_flags(loss, optax.tree.norm(grads), critic_params)
        state = state._replace(critic_params=critic_params, target_critic_params=target_params,
                               critic_opt_state=opt_state, key=key)
        return state, (batch, loss, q_mean, flags)

    def actor_step(state: SACState, batch: replay.Transition, hp: SACHParams, noise: jax.Array):
        """One actor step on the batch's observations, then (autotune) one temperature step on a fresh sample.

        `noise` [1 + autotune, N, A]: the actor sample's draws, then the temperature sample's.
        """
        alpha = jnp.exp(state.log_alpha[0])

        def loss_fn(actor_params):
            pi = sample(actor_params, batch.obs, noise=noise[0])
            q = q_both(state.critic_params, batch.obs, pi.action)
            loss, parts = acl.sac_actor_loss(pi.log_prob, q[0], q[1], alpha)
            return loss, parts["entropy"]

        (loss, entropy), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.actor_params)
        updates, opt_state = adam(hp.policy_lr).update(grads, state.actor_opt_state, state.actor_params)
        actor_params = optax.apply_updates(state.actor_params, updates)
        flags = _common.nonfinite_flags(loss, optax.tree.norm(grads), actor_params)
        state = state._replace(actor_params=actor_params, actor_opt_state=opt_state)
        if not config.autotune:
            return state, (loss, jnp.float32(jnp.nan), entropy, flags)
        log_pi = sample(actor_params, batch.obs, noise=noise[1]).log_prob
        (alpha_loss, _), a_grads = jax.value_and_grad(acl.sac_temperature_loss, has_aux=True)(
            state.log_alpha, log_pi, target_entropy, form=config.temperature_loss)
        a_updates, a_opt_state = adam(hp.q_lr).update(a_grads, state.alpha_opt_state, state.log_alpha)
        log_alpha = optax.apply_updates(state.log_alpha, a_updates)
        flags = flags | _common.nonfinite_flags(alpha_loss, optax.tree.norm(a_grads), log_alpha)
        return state._replace(log_alpha=log_alpha, alpha_opt_state=a_opt_state), (loss, alpha_loss, entropy, flags)

    nan = jnp.float32(jnp.nan)

    dummy_losses = (jnp.full(pf, nan), jnp.full(pf, nan), jnp.full(pf, nan), jnp.zeros(pf, jnp.int32))

    def iterate_and_learn(state: SACState, hp: SACHParams, critic_noise: jax.Array, actor_noise: jax.Array):
        """Iteration g; then, when g > learning_starts, the critic step, and the actor steps when also g % pf == 0.

        `critic_noise` [N, A] and `actor_noise` [pf, 1 + autotune, N, A] are the samples' normal draws.
        """
        state, stats = iterate(state, hp)
        g = state.iteration - 1
        trained = g > config.learning_starts

        def actor_steps(s, batch):
            return jax.lax.scan(lambda s2, noise: actor_step(s2, batch, hp, noise), s, actor_noise)

        def learn(s):
            s, (batch, loss, q_mean, flags) = critic_step(s, hp, critic_noise)
            if pf == 1:  # every iteration is due
                s, actor_out = actor_steps(s, batch)
            else:
                s, actor_out = jax.lax.cond(g % pf == 0, actor_steps, lambda s2, _: (s2, dummy_losses), s, batch)
            return s, (loss, q_mean, flags, actor_out)

        state, (loss, q_mean, flags, actor_out) = jax.lax.cond(
            trained, learn, lambda s: (s, (nan, nan, jnp.int32(0), dummy_losses)), state)
        return state, (stats, trained, trained & (g % pf == 0), loss, q_mean, flags, actor_out)

    def learner_step(state: SACState, hp: SACHParams):
        """One learner step: the metrics row of the CleanRL loop's period.

        The normal draws of all its samples (pf critic steps, pf actor steps, and pf temperature steps with
        autotune) come from one `jax.random.normal` call, one threefry hash (fused into one CPU kernel by
        `prng.fused`) where three draws per iteration (policy_frequency 1) took three. Before the hash was
        fused, when JAX's CPU lowering made each draw a loop of 5 trips, this alone cut the kernels of the
        5,000-step benchmark train by 18% and its time at 8 seeds by 9% (BENCHMARKS.md section 11).
        """
        key, noise_key = prng.split(state.key)
        state = state._replace(key=key)
        draws = pf * (2 + config.autotune)
        noise = jax.random.normal(prng.fused(noise_key), (draws, config.batch_size, A), jnp.float32)
        critic_noise = noise[:pf]
        actor_noise = jnp.reshape(noise[pf:], (pf, 1 + config.autotune, config.batch_size, A))
        if pf == 1:
            state, (stats, trained, _, c_loss, q_mean, c_flags, (a_loss, al_loss, entropy, a_flags)) = \
                iterate_and_learn(state, hp, critic_noise[0], actor_noise)
        else:
            state, (stats, trains, dues, c_losses, q_means, c_flags, actor_out) = jax.lax.scan(
                lambda s, n: iterate_and_learn(s, hp, n, actor_noise), state, critic_noise)
            # the period's last iteration's critic values; the actor's of its one due iteration
            trained, c_loss, q_mean = jnp.any(trains), c_losses[-1], q_means[-1]
            a_loss, al_loss, entropy, a_flags = _common.due_row(actor_out, dues)
        ret_sum, len_sum, count = stats
        n = jnp.sum(count)
        metrics = SACMetrics(
            env_steps=jnp.int32(pf * B),
            episode_return=jnp.where(n > 0, jnp.sum(ret_sum) / jnp.maximum(n, 1), jnp.nan).astype(jnp.float32),
            episode_length=jnp.where(n > 0, jnp.sum(len_sum) / jnp.maximum(n, 1), jnp.nan).astype(jnp.float32),
            num_episodes=n.astype(jnp.int32), trained=trained, critic_loss=c_loss, q_values=q_mean,
            actor_loss=jnp.mean(a_loss), alpha_loss=jnp.mean(al_loss), alpha=jnp.exp(state.log_alpha[0]),
            entropy=entropy[-1],
            nonfinite=jax.lax.reduce(jnp.concatenate([jnp.ravel(c_flags), jnp.ravel(a_flags)]), jnp.int32(0),
                                     jax.lax.bitwise_or, (0,)))
        return state, metrics

    update = _common.merged_update(learner_step, config.learner_steps_per_update, resolve)

    train = _common.make_train_loop(init, update, config.num_updates, resolve)

    def eval_policy_fn(actor_params, obs, key):
        mean, _ = actor.apply(actor_params, obs)
        action = acl.tanh_gaussian_mode(mean, action_scale, action_bias)
        zeros = jnp.zeros(action.shape[:1], jnp.float32)
        return PolicyOutput(action=action, log_prob=zeros, value=zeros)

    def policy_fn(actor_params, obs, key):
        """The stochastic policy: a tanh-squashed Gaussian sample, scaled to the bounds; log_prob its density."""
        out = sample(actor_params, obs, key)
        return PolicyOutput(action=out.action, log_prob=out.log_prob, value=jnp.zeros(out.log_prob.shape, jnp.float32))

    return SAC(init, update, train, eval_policy_fn, env, env_params, actor, critic, buffer, action_scale,
               action_bias, target_entropy, policy_fn=policy_fn, policy_params=lambda state: state.actor_params,
               module=actor, num_updates=config.num_updates)


def make_train(config: SACConfig, *, env: Any = None, env_params: Any = None, network: Any = None) -> Callable:
    """`train(key, hparams=None) -> (SACState, SACMetrics [num_updates])`, pure and jittable.

    Args:
      config, env, env_params, network: as `make_sac`.

    Returns:
      The train function; it vmaps over keys and over stacked `SACHParams`.

    Raises:
      TypeError, ValueError: as `make_sac`, naming the argument.
    """
    return make_sac(config, env=env, env_params=env_params, network=network).train
