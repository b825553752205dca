"""Pieces shared by the algorithms: env construction, networks, config checks, metrics."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import optax
from gymnax.environments import spaces

from jaxrl_rollout import envs, prng

__all__ = [
    "Algorithm", "ConfigSizes", "Setup", "check_choice", "check_common_config", "check_positive", "explained_variance",
    "grad_norm", "init_params_and_rollout", "make_network", "make_train_loop", "resolve_hparams", "setup",
]

NETWORKS = ("mlp", "cnn", "gru")


def check_positive(name: str, value: Any) -> None:
    """A positive Python int, or a ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")


def check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}.")


def action_info(env, env_params) -> tuple[int, bool]:
    """(action_dim, continuous) for a Discrete or 1-D Box action space."""
    space = env.action_space(env_params)
    if isinstance(space, spaces.Discrete):
        return int(space.n), False
    if isinstance(space, spaces.Box) and len(tuple(space.shape)) == 1:
        return int(space.shape[0]), True
    raise ValueError(f"unsupported action space {space!r}: expected Discrete or a 1-D Box.")


def make_network(network: str, action_dim: int, continuous: bool, hidden_sizes, activation: str):
    """The flax module for a config's network name."""
    from jaxrl_rollout import networks

    if network == "mlp":
        return networks.ActorCriticMLP(
            action_dim=action_dim, continuous=continuous, hidden_sizes=tuple(hidden_sizes), activation=activation
        )
    if network == "cnn":
        return networks.ActorCriticCNN(action_dim=action_dim)
    return networks.ActorCriticGRU(action_dim=action_dim, continuous=continuous, hidden_size=hidden_sizes[0])


def grad_norm(opt_state: Any, grads: Any) -> jax.Array:
    """The global gradient norm before clipping, for logging.

    Read from the optimiser state's `total_norm` (what `optim.clip_grad_norm_torch`
    keeps, torch's `clip_grad_norm_` return value) where there is one, so it is
    not computed twice; otherwise computed from `grads`.
    """
    norm = optax.tree.get(opt_state, "total_norm", None)
    return optax.tree.norm(grads) if norm is None else norm


def explained_variance(values: jax.Array, returns: jax.Array) -> jax.Array:
    """1 - Var[R - v] / Var[R] (CleanRL); NaN when Var[R] is 0."""
    var_returns = jnp.var(returns)
    return jnp.where(var_returns == 0, jnp.nan, 1.0 - jnp.var(returns - values) / var_returns)


class ConfigSizes:
    """Derived sizes shared by the algorithm configs (frozen dataclasses inherit them)."""

    @property
    def recurrent(self) -> bool:
        return self.network == "gru"

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size


class Algorithm(NamedTuple):
    """The pure functions of a configured algorithm (`make_ppo`, `make_a2c`).

    Attributes:
      init: `init(key, hparams=None) -> state`.
      update: `update(state, hparams=None) -> (state, metrics of one update)`.
      train: `train(key, hparams=None) -> (state, metrics [num_updates])`.
      policy_fn: the rollout policy (samples); eval_policy_fn acts with the mode.
        Both act on raw env observations with `policy_params(state)`, so
        `evaluate(env, env_params, eval_policy_fn, policy_params(state), key, n)`
        works for every config (with observation normalisation they
        normalise with the state's frozen statistics).
      env, env_params, module: what the policies act on and with.
      policy_params: `policy_params(state)`, the params the policies take.
    """

    init: Callable
    update: Callable
    train: Callable
    policy_fn: Callable
    eval_policy_fn: Callable
    env: Any
    env_params: Any
    module: Any
    policy_params: Callable


def resolve_hparams(hparams: Any, cls: type) -> Any:
    """`cls()` for None, the record itself if it is a `cls`, else a TypeError naming the argument."""
    if hparams is None:
        return cls()
    if not isinstance(hparams, cls):
        raise TypeError(f"hparams must be a {cls.__name__}, got {type(hparams).__name__}.")
    return hparams


def make_train_loop(init: Callable, update: Callable, num_updates: int, hparams_cls: type) -> Callable:
    """`train(key, hparams=None)`: init, then `num_updates` updates in one `lax.scan`; env_steps cumulative."""

    def train(key: jax.Array, hparams: Any = None):
        hp = resolve_hparams(hparams, hparams_cls)
        state, metrics = jax.lax.scan(lambda s, _: update(s, hp), init(key, hp), None, length=num_updates)
        return state, metrics._replace(env_steps=jnp.cumsum(metrics.env_steps))

    return train


class Setup(NamedTuple):
    """What every algorithm builds from its config: env, network and policies."""

    env: Any
    env_params: Any
    module: Any
    policy_fn: Callable
    eval_policy_fn: Callable


def setup(env_id: str, network: str, hidden_sizes, activation: str) -> Setup:
    """Env (with actions clipped to Box bounds at the env), flax module and rollout policies."""
    from jaxrl_rollout import networks

    env, env_params = envs.make(env_id)
    action_dim, continuous = action_info(env, env_params)
    if continuous:
        env = envs.ClipAction(env)
    module = make_network(network, action_dim, continuous, hidden_sizes, activation)
    make = networks.recurrent_policy if network == "gru" else networks.feedforward_policy
    return Setup(env, env_params, module, make(module), make(module, deterministic=True))


def acting_policies(s: Setup, cfg) -> dict:
    """`Algorithm`'s policy_fn, eval_policy_fn and policy_params, acting on raw observations.

    Without observation normalisation the policies are the setup's and take
    `state.params`; with it they normalise with the frozen statistics and take
    `(state.rollout.obs_rms, state.params)`.
    """
    from jaxrl_rollout.normalization import normalized_policy

    if not getattr(cfg, "normalize_observations", False):
        return dict(policy_fn=s.policy_fn, eval_policy_fn=s.eval_policy_fn, policy_params=lambda state: state.params)
    return dict(
        policy_fn=normalized_policy(s.policy_fn, cfg.obs_clip),
        eval_policy_fn=normalized_policy(s.eval_policy_fn, cfg.obs_clip),
        policy_params=lambda state: (state.rollout.obs_rms, state.params),
    )


def check_normalization_config(cfg) -> None:
    """The normalisation flags are bools and the clips positive numbers or None."""
    for name in ("normalize_observations", "normalize_rewards"):
        if not isinstance(getattr(cfg, name), bool):
            raise ValueError(f"{name} must be a bool, got {getattr(cfg, name)!r}.")
    for name in ("obs_clip", "reward_clip"):
        value = getattr(cfg, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"{name} must be a positive number or None, got {value!r}.")


def init_params_and_rollout(key, s: Setup, num_envs: int, recurrent: bool, normalize_observations: bool = False):
    """(params, RolloutState, key) for a fresh run; the carry starts at zeros.

    Feedforward networks are initialised by `networks.batched_init` (module.init's
    distribution at a fraction of its compile time).
    """
    from jaxrl_rollout import networks
    from jaxrl_rollout.rollout import rollout_init

    net_key, env_key, key = prng.split(key, 3)  # jax.random.split's keys, hashed in one kernel
    carry = s.module.initial_carry(num_envs) if recurrent else None
    state = rollout_init(
        env_key, s.env, s.env_params, num_envs, initial_carry=carry, normalize_observations=normalize_observations
    )
    one_obs = jax.tree.map(lambda x: x[:1], state.obs)
    if recurrent:
        params = s.module.init(net_key, s.module.initial_carry(1), one_obs)
    else:
        params = networks.batched_init(s.module, net_key, one_obs)
    return params, state, key


def check_common_config(cfg) -> None:
    """Checks the fields PPO and A2C configs share; raises ValueError naming the field."""
    for name in ("num_envs", "num_steps", "total_timesteps"):
        check_positive(name, getattr(cfg, name))
    check_choice("network", cfg.network, NETWORKS)
    check_choice("activation", cfg.activation, ("tanh", "relu"))
    if not cfg.hidden_sizes or any(isinstance(h, bool) or not isinstance(h, int) or h <= 0 for h in cfg.hidden_sizes):
        raise ValueError(f"hidden_sizes must be a non-empty tuple of positive ints, got {cfg.hidden_sizes!r}.")
    object.__setattr__(cfg, "hidden_sizes", tuple(cfg.hidden_sizes))
    batch = cfg.num_envs * cfg.num_steps
    if cfg.total_timesteps < batch:
        raise ValueError(
            f"total_timesteps={cfg.total_timesteps} is less than one batch of num_envs * num_steps = {batch} steps."
        )
    envs.make(cfg.env_id)  # unknown ids fail here, with suggestions
