"""Pieces shared by the algorithms: env construction, networks, config checks, metrics.

`network="auto"` (the configs' default) chooses the flax module from the env's
observation space when the algorithm is built (`choose_network`):

- a 1-D Box [O]: `ActorCriticMLP`, exactly what `network="mlp"` builds;
- a 3-D Box [H, W, C] (channels-last image): `ActorCriticCNN` (MinAtar
  style), its kernel shrunk to min(3, H, W) for smaller images; an image of
  at least 36 x 36 (`networks.NATURE_CNN_MIN_SIZE`: Atari's 84 x 84 frames,
  rendered pixels) `ActorCriticNatureCNN`, the Atari network, which reads a
  uint8 image space with bounds [0, 255] (`is_pixel_space`) as x / 255;
- a Discrete(n) observation (an index: gymnasium's FrozenLake, Taxi):
  `ActorCriticMLP` on its one-hot vector (`OneHotObservation`), with
  `network="mlp"` too;
- a scalar Box, or a 2-D Box [H, W] without channels: `ActorCriticMultiInput`
  on the one leaf, which flattens it into its dense encoder;
- a Dict or Tuple space (jumanji, pgx, your own env's pytree observations):
  `ActorCriticMultiInput`, one encoder per leaf by its shape (a Discrete
  leaf on its one-hot vector, `discrete_sizes`; an image leaf of 36 x 36 or
  more through the Nature CNN's convolutions, and read x / 255 where it is
  pixels, `pixel_leaves`); leaves named
  `action_mask` or `legal_action_mask` (`networks.ACTION_MASK_KEYS`) are the
  action mask, bool [A], applied to the policy's logits rather than encoded.

A GRU is never chosen: ask for `network="gru"`.

`make_train(config, env=..., env_params=..., network=...)` replaces the
config's env id and network name with objects of your own (`build`,
`setup`): an env of the gymnax protocol (`check_env`, `ENV_METHODS`) and a
flax module of `NETWORK_CONTRACT`, checked on a batch of two observations when the
algorithm is built (`check_network`). Configs stay static and serialisable
and never build an env (`check_common_config` calls `envs.check_id`).

Two-player pgx games (`pgx/tic_tac_toe`, `pgx/connect_four`, ...) train by
self-play (`setup`): the opponent plays with the learner's current policy (the
rollout's env params are the state's params), the agent's seat is drawn per
episode, and the algorithm's `env` is the game against `envs.pgx.random_opponent`
(seat drawn per episode too) that evaluation reports on.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from gymnax.environments import spaces

from jaxrl_rollout import _checks, envs, prng
from jaxrl_rollout._warnings import PartialRunWarning, user_stacklevel

__all__ = [
    "Algorithm", "ConfigSizes", "ENV_METHODS", "NETWORK_CONTRACT", "Setup", "build", "check_choice",
    "check_common_config", "check_env", "check_env_options", "env_options_tuple", "self_play_eval_env",
    "check_hparams", "check_network", "check_positive", "check_train_key",
    "choose_network", "choose_q_network", "choose_torso", "Q_NETWORKS", "observation_features",
    "check_scaled_box", "explained_variance", "grad_norm", "HPARAM_RANGES", "init_params_and_rollout", "is_self_play",
    "refuse_self_play", "refuse_network_name", "refuse_actions", "space_text",
    "LearnerSizes", "make_train_loop", "MAX_TOTAL_TIMESTEPS", "merge_rows", "merged_update", "ROW_MERGE",
    "steps_in_rows", "twin_q_values",
    "nonfinite_flags", "NONFINITE_GRADIENTS", "NONFINITE_LOSS", "probe_module", "check_only_params",
    "check_hparam_shapes", "check_init_key",
    "sample_observation", "check_observation_space", "resolve_env", "plain_numbers", "plain_record", "one_hot_if_discrete",
    "NONFINITE_PARAMS", "resolve_hparams", "rollout_env_params", "setup", "space_leaves",
]

NETWORKS = ("auto", "mlp", "cnn", "gru")

# The most agent moves in an evaluation game of a self-play pgx game; a game still running then counts as a draw.
SELF_PLAY_EVAL_MAX_MOVES = 1000
# The make options of a self-play game's evaluation env: pgx's random opponent from a random seat, at most
# SELF_PLAY_EVAL_MAX_MOVES agent moves (`self_play_eval_env`; `rollout`'s defaults for a two-player game).
SELF_PLAY_EVAL_OPTIONS = {"agent_seat": "random", "max_steps": SELF_PLAY_EVAL_MAX_MOVES}


# The most env steps in one run: the step counters are int32 (the metrics' cumulative env_steps in
# `make_train_loop`, the optimiser's step count that drives anneal_lr), so a longer run would wrap around.
MAX_TOTAL_TIMESTEPS = 2**31 - 1

HPARAM_RANGES = {
    "lr": (0.0, False, None, False),
    "gamma": (0.0, True, 1.0, True),
    "gae_lambda": (0.0, True, 1.0, True),
    "clip_eps": (0.0, False, None, False),
    "ent_coef": (0.0, True, None, False),
    "vf_coef": (0.0, True, None, False),
    "max_grad_norm": (0.0, False, None, False),
}
"""Hyperparameter name -> (low, low included, high or None, high included): the valid values of PPO's and A2C's."""


NO_LIMIT = frozenset({"max_grad_norm", "noise_clip"})
"""Open-ended hyperparameters for which inf means something (no clipping); every other one must be finite (an
inf learning rate or temperature gave an all-NaN run)."""


def hparam_range_text(name: str, ranges: dict | None = None) -> str:
    """The valid range of a hyperparameter in words: "> 0 and finite", "in [0, 1]", "> 0 (inf: no limit)"
    (`ranges`: default `HPARAM_RANGES`)."""
    low, low_in, high, high_in = (HPARAM_RANGES if ranges is None else ranges)[name]
    if high is None:
        return f"{'>=' if low_in else '>'} {low:g}" + (" (inf: no limit)" if name in NO_LIMIT else " and finite")
    return f"in {'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"


def hparam_in_range(name: str, value: float, ranges: dict | None = None) -> bool:
    """Whether one concrete value is valid for `name` (NaN never is; names without a range always are)."""
    ranges = HPARAM_RANGES if ranges is None else ranges
    if name not in ranges:
        return True
    low, low_in, high, high_in = ranges[name]
    if value == np.inf and name not in NO_LIMIT:
        return False
    ok = value >= low if low_in else value > low
    if high is not None:
        ok = ok and (value <= high if high_in else value < high)
    return bool(ok)


def check_hparams(hparams: Any, ranges: dict | None = None) -> None:
    """Checks every concrete field of a hyperparameter record against `ranges`; ValueError names it.

    `ranges` maps a field name to (low, low included, high or None, high
    included); the default is `HPARAM_RANGES` (PPO's and A2C's fields); the
    off-policy learners pass their own. Fields without a range are not
    checked. Fields may be Python floats or arrays (a stacked grid, [G]); every
    element is checked. Traced values (inside `jax.jit` or `jax.vmap`) cannot
    be read at trace time and are skipped: check a record before you trace
    with it, or let `train` / `init` check it when called eagerly.
    """
    for name in hparams._fields:
        if name not in (HPARAM_RANGES if ranges is None else ranges):
            continue
        value = getattr(hparams, name)
        array = _checks.concrete(value)
        if array is None:
            continue  # traced: its value is not known until it runs
        if isinstance(value, bool) or not jnp.issubdtype(array.dtype, jnp.number) or jnp.issubdtype(
                array.dtype, jnp.complexfloating):  # "3e-4" would convert to a float, and None to NaN
            raise TypeError(f"{name} must be a number or an array of numbers, got {value!r}.")
        values = array.astype(np.float64).ravel()
        bad = [v for v in values if not hparam_in_range(name, v, ranges)]
        if bad:
            raise ValueError(f"{name} must be {hparam_range_text(name, ranges)}, got {bad[0]:g}.")


def check_hparam_shapes(hparams: Any) -> None:
    """Raises unless every field of the record `train` or `update` runs with is one number (shape ()).

    Shapes are known at trace time, values often are not: a stacked grid passed without `jax.vmap`, or a
    field of shape [1] or [T], otherwise broadcast silently against the update's arrays or failed deep inside
    it. (A vmapped grid's fields are scalars inside the vmap.)
    """
    for name in hparams._fields:
        shape = jnp.shape(getattr(hparams, name))
        if shape != ():
            raise ValueError(
                f"hparams.{name} must be a scalar (shape ()), got shape {shape}; to train a grid of values, vmap "
                "train over the stacked record: jax.vmap(train, in_axes=(None, 0))(key, stack_hparams([...])).")


def check_positive(name: str, value: Any) -> None:
    """A positive Python int, or a ValueError naming the field."""
    if not _checks.is_int(value, numpy=False) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")


def check_eps(name: str, value: Any) -> None:
    """A finite number >= 0 (an optimiser's epsilon), or a ValueError naming the field: an inf epsilon would
    fail inside optax as the run traces, or (RMSprop) silently turn every update into zero."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < np.inf:
        raise ValueError(f"{name} must be a number >= 0 and finite, got {value!r}.")


def hidden_sizes_tuple(value: Any) -> tuple[int, ...]:
    """A config's `hidden_sizes` as a tuple of Python ints: a non-empty tuple, list or 1-D NumPy array of positive
    ints; else a ValueError naming it (an int was "'int' object is not iterable", an array NumPy's "truth value
    ... is ambiguous")."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = tuple(value.tolist())
    if not isinstance(value, (tuple, list)) or not value or any(not _checks.is_int(h) or h <= 0 for h in value):
        raise ValueError(f"hidden_sizes must be a non-empty tuple of positive ints, such as (64, 64), got {value!r}.")
    if max(value) > 2**31 - 1:  # (the orthogonal init's int32 indices overflowed: a traceback from inside the init)
        raise ValueError(f"hidden_sizes must be at most 2,147,483,647 (2**31 - 1) units a layer, got {value!r}.")
    return tuple(int(h) for h in value)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}.")


def check_bool(name: str, value: Any) -> None:
    """Raises ValueError naming `name` unless `value` is a bool (a string such as "false" is truthy)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {value!r}.")


def check_replay_memory(config: Any) -> None:
    """Checks an off-policy config's `optimize_memory_usage` (a bool) and `frame_stack_axis` (None, or an int
    with `optimize_memory_usage`: frames are shared within the compact buffer); ValueError naming them."""
    check_bool("optimize_memory_usage", config.optimize_memory_usage)
    axis = config.frame_stack_axis
    if axis is None:
        return
    if not _checks.is_int(axis, numpy=False):
        raise ValueError(f"frame_stack_axis must be None or an int axis of the observation (e.g. -1 for [84, 84, 4] "
                         f"frame stacks), got {axis!r}.")
    if not config.optimize_memory_usage:
        raise ValueError(f"frame_stack_axis={axis} shares frames within the compact replay buffer, which "
                         "optimize_memory_usage=True turns on: set it too (or leave frame_stack_axis None).")


def action_info(env, env_params) -> tuple[int, bool]:
    """(action_dim, continuous) for a Discrete or 1-D Box action space."""
    space = env.action_space(env_params)
    if isinstance(space, spaces.Discrete):
        return int(space.n), False
    if isinstance(space, spaces.Box) and len(tuple(space.shape)) == 1:
        try:
            reversed_bounds = bool(np.any(np.asarray(space.high) < np.asarray(space.low)))
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
            reversed_bounds = False  # bounds from traced env params: not known until it runs
        if reversed_bounds:
            raise ValueError(f"env {type(env).__name__}: its action Box has high < low (low={space.low}, "
                             f"high={space.high}); a Box's bounds must have low <= high.")
        dtype = np.dtype(getattr(space, "dtype", np.float32))
        if not np.issubdtype(dtype, np.floating):  # clipped float actions would reach the env, never rounded
            raise ValueError(f"env {type(env).__name__}: its action Box has dtype {dtype.name}, but a continuous "
                             "policy draws float actions (clipped to the Box, not rounded); give the env a Discrete "
                             "action space, or a float Box that its step rounds.")
        return int(space.shape[0]), True
    raise ValueError(f"env {type(env).__name__}: unsupported action space {space_text(space)}: expected Discrete or a 1-D "
                     f"Box.{tuple_actions_hint(space)}")


def space_text(space: Any) -> str:
    """A gymnax space in a few words, for messages: e.g. "Discrete(4)", "Box(84x84x4 uint8)", "Box(1 float32)",
    "Dict(board: Box(3x3x2 bool), ...)"."""
    if isinstance(space, spaces.Dict):
        return f"Dict({', '.join(f'{k}: {space_text(space.spaces[k])}' for k in sorted(space.spaces))})"
    if isinstance(space, spaces.Tuple):
        return f"Tuple({', '.join(space_text(s) for s in space.spaces)})"
    if isinstance(space, spaces.Box):
        return f"Box({'x'.join(str(int(d)) for d in space.shape) or 'scalar'} {np.dtype(space.dtype).name})"
    if isinstance(space, spaces.Discrete):
        return f"Discrete({int(space.n)})"
    return type(space).__name__


# The learners of each kind of action space, named where a learner is given the other kind.
_LEARNERS_OF = {spaces.Discrete: ("DQN", "PQN", "PPO", "A2C"), spaces.Box: ("SAC", "TD3", "PPO", "A2C")}


def refuse_actions(algo: str, env: Any, space: Any, needed: str) -> None:
    """Raises the one ValueError of a learner whose env's action space is not the kind it needs; where it is the
    other kind, with the learners that take that kind, e.g. "env Pendulum: DQN needs Discrete actions, got Box(1
    float32); SAC, TD3, PPO and A2C learn actions in a 1-D Box of floats."."""
    others = ""
    for kind, learners in _LEARNERS_OF.items():
        if isinstance(space, kind) and algo not in learners:
            what = "Discrete actions" if kind is spaces.Discrete else "actions in a 1-D Box of floats"
            others = f"; {', '.join(learners[:-1])} and {learners[-1]} learn {what}"
    raise ValueError(f"env {type(env).__name__}: {algo} needs {needed}, got {space_text(space)}{others}.")


def tuple_actions_hint(space: Any) -> str:
    """" ..." on how to give a Tuple of Discrete actions (jumanji's multi-discrete) as one Discrete, else ""."""
    if isinstance(space, spaces.Tuple) and all(isinstance(s, spaces.Discrete) for s in space.spaces):
        return (" A jumanji env gives its Tuple of Discrete actions as one Discrete of their combinations when "
                "made with multi_discrete='flat': env_options={'multi_discrete': 'flat'} in the config, "
                "--env-option multi_discrete=flat on the command line.")
    return ""


PROBE_BATCH = 2
"""The batch a user's network is checked on: 2, so that a module that ignores or collapses the batch axis (a
reshape(-1), a mean over axis 0) gives the wrong shape there instead of passing on a batch of 1 and failing, or
broadcasting silently, in training."""


def probe_observation(space: Any, sample: Any = None) -> Any:
    """`PROBE_BATCH` observations: `sample` ([1, ...], as the env's reset gives it) repeated, or zeros of `space`."""
    obs = zeros_for(space) if sample is None else sample
    return jax.tree.map(lambda x: jnp.concatenate([x] * PROBE_BATCH), obs)


def refuse_class(what: str, module: Any) -> None:
    """A TypeError naming `what` for a Module class passed where an instance goes (flax's own error said
    "InvalidInstanceModuleError" from deep inside init)."""
    if isinstance(module, type):
        raise TypeError(f"{what} must be a flax linen Module instance, got the class {module.__name__}; pass an "
                        f"instance: {module.__name__}(...).")


def probe_module(call: str, contract: str, module: Any, *args: Any) -> Any:
    """`module.apply(module.init(key, *args), *args)` under `jax.eval_shape`: the output's shapes and dtypes.

    An error of the module's own (a kernel that does not fit the observation, a bad reshape) is raised as a
    ValueError "`call` failed on a sample observation (...): its error. network must be `contract`.", chained
    to it, so a user's network that cannot run is named as the network, with what it must be.
    """
    def probe(key):
        try:
            variables = module.init(key, *args)
            out = module.apply(variables, *args)
        except Exception as error:  # noqa: BLE001 - the module's own error, chained, with the contract
            raise ValueError(f"{call} failed on a sample observation ({_shape_text(args[0])}): "
                             f"{type(error).__name__}: {str(error).rstrip('.')}. network must be {contract}.") from error
        check_only_params(f"network {type(module).__name__}", variables)
        return out

    return jax.eval_shape(probe, jax.random.key(0))


def check_only_params(who: str, variables: Any) -> None:
    """Raises unless a module's `init` made the 'params' collection alone.

    The learners differentiate and optimise every variable a network holds, so
    another collection (BatchNorm's running statistics, a constant kept with
    `self.variable`) would be moved by the optimiser as if it were a weight.
    """
    other = sorted(k for k in getattr(variables, "keys", lambda: ())() if k != "params")
    if other:
        raise ValueError(f"{who}: its init made the variable collections {other} besides 'params'; the learners "
                         "optimise every variable a network holds, so these would be trained as weights. A network "
                         "holds 'params' only: keep constants as module attributes or arrays made in __call__, and "
                         "normalise with nn.LayerNorm rather than nn.BatchNorm.")


def check_scaled_box(algo: str, env: Any, low: Any, high: Any) -> None:
    """Raises unless the action Box's bounds are finite with high > low: SAC's and TD3's actors squash to them.

    (scale = (high - low) / 2 would be 0 on a zero-width dimension, and infinite or NaN on an unbounded one.)
    """
    low, high = np.asarray(low), np.asarray(high)
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
        raise ValueError(f"env {type(env).__name__}: {algo} scales actions to the Box bounds, which must be finite "
                         f"with high > low, got low={low}, high={high}.")


def _leaf_spaces(space: Any, path: tuple = ()) -> list:
    """[(path, space)] for every space of an observation space that is not a Dict or Tuple, in jax's leaf order
    for the matching pytree (a Dict's keys sorted, as jax flattens a dict)."""
    if isinstance(space, spaces.Dict):
        return [leaf for k in sorted(space.spaces) for leaf in _leaf_spaces(space.spaces[k], path + (str(k),))]
    if isinstance(space, spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in _leaf_spaces(sub, path + (str(i),))]
    return [(path, space)]


def space_leaves(space: Any, path: tuple = ()) -> list:
    """The arrays of an observation space: [(path, shape, dtype)], in jax's leaf order for the matching pytree.

    Box and Discrete spaces are leaves; Dict and Tuple spaces are walked
    (a Dict's keys sorted, as jax flattens a dict). Any other space is a
    ValueError naming `network`.
    """
    leaves = []
    for leaf_path, leaf in _leaf_spaces(space, path):
        if isinstance(leaf, spaces.Box):
            leaves.append((leaf_path, tuple(int(d) for d in leaf.shape), np.dtype(leaf.dtype)))
        elif isinstance(leaf, spaces.Discrete):
            leaves.append((leaf_path, (), np.dtype(getattr(leaf, "dtype", np.int32))))
        else:
            raise ValueError(
                f"network='auto' cannot read the observation space {leaf!r}"
                + (f" at {'/'.join(leaf_path)}" if leaf_path else "")
                + ": expected gymnax Box, Discrete, Dict or Tuple spaces."
            )
    return leaves


def is_pixel_space(space: Any) -> bool:
    """Whether `space` holds pixel intensities: a uint8 Box whose bounds are 0 and 255 (SB3's `is_image_space`
    rule; envpool's Atari frames, gymnasium's image envs). A uint8 space of other bounds (xminigrid's and
    navix's symbolic grids of tile ids) is not."""
    if not isinstance(space, spaces.Box) or np.dtype(space.dtype) != np.uint8:
        return False
    low, high = np.asarray(space.low), np.asarray(space.high)
    return bool(np.all(low == 0) and np.all(high == 255))


def _describe(leaves: list) -> str:
    return ", ".join(f"{'/'.join(p) or 'obs'} {dtype}{list(shape)}" for p, shape, dtype in leaves)


def _check_channels_last(network: str, where: str, shape: tuple) -> None:
    """A ValueError naming `network` for an image leaf that looks channels first: [C, H, W] with C <= 4 the shortest
    axis and W > 4 (a stack of 4 Atari frames [4, 84, 84] read as a 4 x 84 image of 84 channels trained silently);
    [H, W, C] images, MinAtar's [10, 10, C] and board planes such as [6, 7, 2] pass. It takes any env's images,
    so it is narrower than the envpool adapter's rule (`envs.envpool`: three axes, the first the shortest), which
    knows envpool's convention and transposes instead of refusing."""
    if len(shape) == 3 and shape[0] <= 4 < shape[2] and shape[0] < shape[1]:
        raise ValueError(f"network={network!r} reads images channels last [H, W, C]; {where} {list(shape)} looks "
                         f"channels first [C, H, W]; give the env's images as {list(shape[1:]) + [shape[0]]} "
                         "(jnp.moveaxis(obs, -3, -1)), or pass make_train a network of your own.")


def choose_network(network: str, observation_space: Any, action_dim: int, continuous: bool, hidden_sizes,
                   activation: str, sample: Any = None):
    """The flax module for a config's network name and the env's observation space (see the module docstring).

    `sample`, an observation as the env gives it (`sample_observation`), orders the multi-input network's
    one-hot sizes as its leaves come (see `discrete_sizes`); without it they come in the space's order.

    Raises:
      ValueError: naming `network`, when the observation space does not fit
        the network asked for (e.g. `network='mlp'` on images or dicts), or
        `network='auto'` meets one it cannot encode (a leaf of rank > 3, or a
        mask that is not bool [A] over discrete actions).
    """
    from jaxrl_rollout import networks

    leaves = space_leaves(observation_space)
    single = isinstance(observation_space, (spaces.Box, spaces.Discrete))
    shape = leaves[0][1] if single else None
    mlp = lambda: networks.ActorCriticMLP(  # noqa: E731
        action_dim=action_dim, continuous=continuous, hidden_sizes=tuple(hidden_sizes), activation=activation
    )
    def cnn():
        if min(shape[:2]) >= networks.NATURE_CNN_MIN_SIZE:
            return networks.ActorCriticNatureCNN(action_dim=action_dim, continuous=continuous,
                                                 pixels=is_pixel_space(observation_space))
        return networks.ActorCriticCNN(action_dim=action_dim, continuous=continuous, kernel_size=min(3, *shape[:2]))

    if network == "gru":
        if not single:
            raise ValueError(f"network='gru' needs a single array observation, got a pytree ({_describe(leaves)}); "
                             "use network='auto' (an encoder per leaf, action masks applied).")
        gru = networks.ActorCriticGRU(action_dim=action_dim, continuous=continuous, hidden_size=hidden_sizes[0])
        if isinstance(observation_space, spaces.Discrete):  # an index: one-hot, as for the MLP below
            return networks.OneHotRecurrentObservation(int(observation_space.n), gru)
        return gru
    if isinstance(observation_space, spaces.Discrete) and network in ("auto", "mlp"):
        return networks.OneHotObservation(int(observation_space.n), mlp())  # an index, one-hot as SB3 reads it
    if network == "mlp":
        if not (single and len(shape) == 1):
            raise ValueError(f"network='mlp' needs a flat vector observation [O], got {_describe(leaves)}; "
                             "use network='auto' (a CNN for images, an encoder per leaf for pytrees).")
        return mlp()
    if network == "cnn":
        if not (single and len(shape) == 3):
            raise ValueError(f"network='cnn' needs an image observation [H, W, C] (channels last), got "
                             f"{_describe(leaves)}; use network='auto'.")
        _check_channels_last(network, "the observation", shape)
        return cnn()
    for path, leaf_shape, dtype in leaves:
        if len(leaf_shape) > 3:
            raise ValueError(f"network='auto' encodes observation leaves of shape [], [O], [H, W] or [H, W, C]; "
                             f"{'/'.join(path) or 'obs'} has shape {list(leaf_shape)}.")
        _check_channels_last(network, f"observation leaf {'/'.join(path)}" if path else "the observation",
                             leaf_shape)
        if path and path[-1] in networks.ACTION_MASK_KEYS and (
            continuous or dtype != np.bool_ or leaf_shape != (action_dim,)
        ):
            raise ValueError(f"network='auto' reads {'/'.join(path)} as an action mask, which must be bool "
                             f"[A={action_dim}] over Discrete({action_dim}) actions; got {dtype}{list(leaf_shape)} "
                             f"with {'continuous' if continuous else 'discrete'} actions.")
    if single and len(shape) == 1:
        return mlp()
    if single and len(shape) == 3:
        return cnn()
    sizes = discrete_sizes(observation_space, sample)
    pixels = pixel_leaves(observation_space, sample)
    return networks.ActorCriticMultiInput(
        action_dim=action_dim, continuous=continuous, hidden_sizes=tuple(hidden_sizes), activation=activation,
        one_hot=sizes if any(sizes) else (),  # Discrete leaves read one-hot, as a top-level Discrete is
        pixels=pixels if any(pixels) else (),  # uint8 images bounded by 0 and 255 read x / 255, as a single one is
    )


def discrete_sizes(space: Any, sample: Any = None) -> tuple[int, ...]:
    """Per leaf of an observation space, a Discrete leaf's n, else 0 (any other space too: this reads a space,
    `space_leaves` checks it).

    In `space_leaves`' order, or with `sample` (an observation, such as `sample_observation`'s) in the order of
    its own leaves, which is the order a network meets them in: a NamedTuple observation described by a Dict
    space (every jumanji env's) flattens in field order, the space in sorted-key order. Leaves are matched by
    their paths' names (a field and a key of the same name match); where they do not all match, the two
    structures are taken to correspond position by position (a NamedTuple described by a Tuple space).
    """
    return _per_leaf(space, sample, lambda leaf: int(leaf.n) if isinstance(leaf, spaces.Discrete) else 0)


def pixel_leaves(space: Any, sample: Any = None) -> tuple[bool, ...]:
    """Per leaf of an observation space, whether it holds pixel intensities (`is_pixel_space`); in the order of
    `discrete_sizes`."""
    return _per_leaf(space, sample, is_pixel_space)


def _per_leaf(space: Any, sample: Any, fn: Callable) -> tuple:
    """`fn(leaf space)` for every leaf of `space`, in the order `discrete_sizes` gives."""
    from jaxrl_rollout.networks.modules import leaf_name

    leaves = _leaf_spaces(space)
    values = tuple(fn(leaf) for _, leaf in leaves)
    if sample is None:
        return values
    by_path = dict(zip((path for path, _ in leaves), values, strict=True))
    paths = [tuple(leaf_name([entry]) for entry in path) for path, _ in jax.tree_util.tree_leaves_with_path(sample)]
    if sorted(paths) != sorted(by_path):
        return values
    return tuple(by_path[path] for path in paths)


def grad_norm(opt_state: Any, grads: Any) -> jax.Array:
    """The global gradient norm before clipping, for logging.

    Read from the optimiser state's `total_norm` (what `optim.clip_grad_norm_torch`
    keeps, torch's `clip_grad_norm_` return value) where there is one, so it is
    not computed twice; otherwise computed from `grads`.
    """
    norm = optax.tree.get(opt_state, "total_norm", None)
    return optax.tree.norm(grads) if norm is None else norm


NONFINITE_LOSS = 1
NONFINITE_GRADIENTS = 2
NONFINITE_PARAMS = 4


def nonfinite_flags(loss: jax.Array, grad_norm: jax.Array, params: Any) -> jax.Array:
    """int32 bitmask of what was not finite in one update: 1 loss, 2 gradients, 4 params (0: all finite).

    Cheap enough for every update: the loss and the gradient norm are reduced
    to one finiteness test each (a NaN or inf anywhere makes their sums
    non-finite), and the params to the sum of their leaves' sums (one small
    reduction per tensor; an overflow past float32's range counts as non-finite).

    Args:
      loss: the update's losses, any shape (e.g. [U] per gradient step).
      grad_norm: the global gradient norms before clipping, any shape.
      params: the updated parameters.
    """
    params_sum = sum(jnp.sum(x, dtype=jnp.float32) for x in jax.tree.leaves(params))
    return (jnp.where(jnp.isfinite(jnp.sum(loss)), 0, NONFINITE_LOSS)
            | jnp.where(jnp.isfinite(jnp.sum(grad_norm)), 0, NONFINITE_GRADIENTS)
            | jnp.where(jnp.isfinite(params_sum), 0, NONFINITE_PARAMS)).astype(jnp.int32)


def epsilon_draws(key: jax.Array, shape: tuple, epsilon: jax.Array, action_dim: int) -> tuple[jax.Array, jax.Array]:
    """Epsilon-greedy's coin and random action: (explore bool [shape], action int32 [shape] uniform in [0, A)).

    Both come from one `jax.random.uniform` draw of [2, *shape], one threefry
    hash (fused into one CPU kernel by `prng.fused`) where a split, a uniform
    and a randint took five. With JAX's own CPU lowering (a loop of 5 trips,
    about 80 kernels, per draw) the one draw alone took 7% off PQN's 1-seed
    CartPole run (BENCHMARKS.md section 11). explore is u0 < epsilon, the
    action floor(u1 * A); u1 takes the 2**23 values k / 2**23 (at most
    1 - 2**-23, and the float32 product then stays below A: checked for every
    A < 2**26), so for A a power of two the action is exactly uniform, and
    otherwise each action's probability is within A / 2**23 of 1 / A.
    """
    u = jax.random.uniform(prng.fused(key), (2, *shape), jnp.float32)
    action = jnp.floor(u[1] * action_dim).astype(jnp.int32)
    return u[0] < epsilon, action


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

    @property
    def steps_per_update(self) -> int:
        """Env steps in one update (the runner's step count): `batch_size`."""
        return self.batch_size


ROW_MERGE = {
    "env_steps": "sum", "num_episodes": "sum", "episode_return": "per_episode", "episode_length": "per_episode",
    "nonfinite": "or", "trained": "any", "actor_updated": "any", "epsilon": "last", "alpha": "last",
}
"""How `merge_rows` reduces a metric over the learner steps of one update; any other metric: "nanmean"."""


def merge_rows(rows: Any) -> Any:
    """One update's metrics from its K learner steps' metrics (a NamedTuple of [K] leaves).

    The off-policy learners report one metrics row per `log_interval`
    iterations rather than per gradient step, so a long run keeps a few
    hundred rows, not a million. Each field is reduced by `ROW_MERGE`: counts
    summed; episode returns and lengths averaged over the episodes that ended
    (weighted by `num_episodes`, NaN when none did); flags OR-ed; schedules
    (epsilon, alpha) taken at the last step; losses and values averaged over
    the steps that have them (NaN where a step took no gradient step).
    """
    n = jnp.sum(rows.num_episodes)

    def reduce(name, x):
        how = ROW_MERGE.get(name, "nanmean")
        if how == "sum":
            return jnp.sum(x).astype(x.dtype)
        if how == "per_episode":
            total = jnp.sum(jnp.where(rows.num_episodes > 0, x * rows.num_episodes, 0.0))
            return jnp.where(n > 0, total / jnp.maximum(n, 1), jnp.nan).astype(x.dtype)
        if how == "or":
            return jax.lax.reduce(x, jnp.zeros((), x.dtype), jax.lax.bitwise_or, (0,))
        if how == "any":
            return jnp.any(x)
        if how == "last":
            return x[-1]
        return jnp.nanmean(x).astype(x.dtype)

    return type(rows)(**{name: reduce(name, x) for name, x in rows._asdict().items()})


def steps_in_rows(log_interval: int, period: int) -> int:
    """Learner steps of `period` iterations in one update of about `log_interval` iterations (at least one)."""
    return max(1, log_interval // period)


class LearnerSizes:
    """Derived step counts of the off-policy configs (DQN, SAC, TD3), frozen dataclasses that inherit them.

    A learner step is `learner_period` iterations (the config says how many:
    DQN's `train_frequency`, SAC's `policy_frequency`, TD3's one) of
    `num_envs` env steps, from iteration 0 on (`init` takes none); an update,
    the metrics' row, is `learner_steps_per_update` learner steps
    (`log_interval` rounded down, at least one).
    """

    @property
    def num_iterations(self) -> int:
        """Vector steps of the run (CleanRL's `global_step` range)."""
        return self.total_timesteps // self.num_envs

    @property
    def learner_steps_per_update(self) -> int:
        """Learner steps in one update (`log_interval` rounded down to whole learner steps, at least one)."""
        return steps_in_rows(self.log_interval, self.learner_period)

    @property
    def num_updates(self) -> int:
        """Updates in the run: whole updates of `num_iterations` (a remainder of iterations is not taken)."""
        return self.num_iterations // (self.learner_steps_per_update * self.learner_period)

    @property
    def steps_per_update(self) -> int:
        """Env steps in one update."""
        return self.learner_steps_per_update * self.learner_period * self.num_envs

    def no_update_error(self, period: str | None = None) -> ValueError:
        """The ValueError for a run too short for one update, with the way out that works: a shorter
        log_interval while an update holds several learner steps; else fewer envs, a shorter `period` (the
        config's field that sets `learner_period`: train_frequency, policy_frequency) or more steps."""
        product = "num_envs * learner_steps_per_update" + (f" * {period}" if period else "")
        if self.learner_steps_per_update > 1:
            hint = "lower log_interval for a shorter run"
        else:
            hint = ("an update is already one learner step; raise total_timesteps, or lower num_envs"
                    + (f" or {period}" if period else ""))
        return ValueError(f"total_timesteps={self.total_timesteps} gives no update: it needs at least {product} = "
                          f"{self.steps_per_update} env steps ({hint}).")

    def warn_partial_run(self) -> None:
        """A `PartialRunWarning` (a UserWarning) when whole updates leave some of `total_timesteps` untaken
        (the command line's header says the steps it trains instead)."""
        taken = self.iterations_taken * self.num_envs
        if taken < self.total_timesteps:
            per_update, steps = self.steps_per_update, self.learner_steps_per_update
            made_of = (f"{steps} learner step{'s' * (steps > 1)} (log_interval={self.log_interval}) of "
                       f"{self.learner_period} iteration{'s' * (self.learner_period > 1)} of num_envs={self.num_envs}")
            lower = ", or lower log_interval" if steps > 1 else ""
            warnings.warn(
                f"total_timesteps={self.total_timesteps} trains {taken:,} env steps: a run takes whole updates of "
                f"{per_update:,} env steps ({made_of}); for all of them make total_timesteps a multiple of "
                f"{per_update:,}{lower}.", PartialRunWarning, stacklevel=user_stacklevel())

    @property
    def iterations_taken(self) -> int:
        """Iterations the run takes, g = 0 .. iterations_taken - 1: its whole updates' (at most `num_iterations`)."""
        return self.num_updates * self.learner_steps_per_update * self.learner_period

    def check_learning_starts(self, due_every: int = 1) -> None:
        """Raises when `learning_starts` leaves the run without a gradient step.

        Iterations g = 0 .. num_updates * steps of an update - 1 are taken; a
        gradient step follows iteration g when g > learning_starts and g is a
        multiple of `due_every` (DQN's train_frequency; 1 for SAC and TD3).
        Without this check such a config trains nothing and says nothing.

        Raises:
          ValueError: naming learning_starts and total_timesteps.
        """
        taken = self.iterations_taken
        first = (self.learning_starts // due_every + 1) * due_every
        if first >= taken:
            per_update = self.learner_steps_per_update * self.learner_period
            left = self.num_iterations - taken
            whole = (f" (whole updates of {per_update} iterations, log_interval={self.log_interval}; the last {left} "
                     "are not taken)") if left else ""
            raise ValueError(
                f"learning_starts={self.learning_starts} leaves no gradient step: the first comes after iteration "
                f"{first}, and total_timesteps={self.total_timesteps} with num_envs={self.num_envs} takes iterations "
                f"0 to {taken - 1}{whole}; lower learning_starts (in iterations of num_envs env steps) or raise "
                "total_timesteps.")

    def check_target_updates(self) -> None:
        """Raises when the run takes no target-network update (DQN's and SAC's `target_network_frequency`).

        A target update follows iteration g when g > learning_starts and g %
        target_network_frequency == 0 (CleanRL's DQN and SAC); a run that ends
        before the first would learn against the initial random target to the
        end, and say nothing.

        Raises:
          ValueError: naming target_network_frequency, learning_starts and total_timesteps.
        """
        self.check_first_due("target_network_frequency", self.target_network_frequency,
                             "the target network as initialised")

    def check_policy_updates(self) -> None:
        """Raises when the run takes no actor update (SAC's and TD3's `policy_frequency`).

        The delayed actor step (TD3's with its target updates, SAC's with its
        temperature's) follows iteration g when g > learning_starts and g %
        policy_frequency == 0 (CleanRL's SAC and TD3); a run that ends before
        the first would keep the initial actor to the end, and say nothing.

        Raises:
          ValueError: naming policy_frequency, learning_starts and total_timesteps.
        """
        self.check_first_due("policy_frequency", self.policy_frequency, "the actor as initialised")

    def check_first_due(self, field: str, every: int, what: str) -> None:
        """Raises unless some iteration g > learning_starts with g % every == 0 is taken (`field`'s first step)."""
        taken = self.iterations_taken
        first = (self.learning_starts // every + 1) * every
        if first >= taken:
            raise ValueError(
                f"{field}={every} leaves {what}: its first update comes after iteration {first} (the first multiple "
                f"of {every} past learning_starts={self.learning_starts}), and total_timesteps={self.total_timesteps} "
                f"with num_envs={self.num_envs} takes iterations 0 to {taken - 1}; lower {field} (in iterations of "
                "num_envs env steps) or raise total_timesteps.")


def due_row(rows: Any, due: jax.Array) -> Any:
    """Of a learner step's per-iteration outputs (leaves [period, ...]), the row of its one due iteration.

    At most one iteration of a period is due (its index g is a multiple of the
    period); where none is, the first row, whose values are the not-due
    placeholders (NaN losses, zero flags).
    """
    return jax.tree.map(lambda x: x[jnp.argmax(due)], rows)


def merged_update(learner_step: Callable, steps: int, resolve: Callable) -> Callable:
    """`update(state, hparams=None)`: `steps` learner steps in a `lax.scan`, their metrics merged (`merge_rows`).

    With one step per update it is the learner step itself (no scan), so
    `log_interval` equal to the learner period builds the plain program.
    `resolve` turns `hparams` (None for the defaults) into a checked record.
    """

    def update(state: Any, hparams: Any = None):
        hp = resolve(hparams)
        if steps == 1:
            return learner_step(state, hp)
        state, rows = jax.lax.scan(lambda s, _: learner_step(s, hp), state, None, length=steps)
        return state, merge_rows(rows)

    return update


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
      env, env_params, module: what the policies act on and with. For a
        self-play game (two-player pgx) env is the game against
        `envs.pgx.random_opponent` from a random seat, the one evaluation
        reports on; training plays the current policy instead.
      policy_params: `policy_params(state)`, the params the policies take.
      recurrent: `module` steps a carry: the policies take and return it,
        starting from `module.initial_carry(B)`.
      num_updates: the config's updates (`train`'s length; None when not
        known), which `periodic_eval.make_train` checks its count against.
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
    recurrent: bool = False
    num_updates: int | None = None


def resolve_hparams(hparams: Any, cls: type) -> Any:
    """`cls()` for None, the record itself if it is a `cls` (checked by `check_hparams`), else a TypeError.

    A ValueError names a concrete field out of its range; traced fields are not checked.
    """
    if hparams is None:
        return cls()
    if not isinstance(hparams, cls):
        raise TypeError(f"hparams must be a {cls.__name__}, got {type(hparams).__name__}.")
    check_hparams(hparams)
    check_hparam_shapes(hparams)
    return hparams


def check_train_key(key: Any) -> None:
    """Checks `train`'s key at trace time: one PRNG key, typed (`jax.random.key`) or raw uint32
    (`jax.random.PRNGKey`), not a batch of them (seeds are vmapped) and not a plain seed."""
    _checks.check_key(key, "train's key",
                      "for several seeds, vmap train over split keys: jax.vmap(train)(jax.random.split(key, n))")


def check_init_key(key: Any) -> None:
    """`check_train_key` for a learner's `init(key, hparams)`: one PRNG key, the errors naming init's key."""
    _checks.check_function_key(key, "init", "seeds")


def make_train_loop(init: Callable, update: Callable, num_updates: int, resolve: Callable) -> Callable:
    """`train(key, hparams=None)`: the key checked, `resolve(hparams)` (the algorithm's defaults for None, else
    the record checked), init, then `num_updates` updates in one `lax.scan`; env_steps cumulative."""

    def train(key: jax.Array, hparams: Any = None):
        check_train_key(key)
        hp = resolve(hparams)
        state, metrics = jax.lax.scan(lambda s, _: update(s, hp), init(key, hp), None, length=num_updates)
        return state, metrics._replace(env_steps=jnp.cumsum(metrics.env_steps))

    return train


class Setup(NamedTuple):
    """What every algorithm builds from its config: env, network and policies.

    Attributes:
      env, env_params: the env the rollout trains on and its params; for a
        self-play game env_params is None and the rollout's env params are
        the policy params (`rollout_env_params`).
      module, policy_fn, eval_policy_fn: the network and its policies.
      self_play: the opponent in `env` plays with the current policy.
      eval_env, eval_env_params: the env evaluation reports on: `env` itself,
        or for self-play the game against `envs.pgx.random_opponent`.
      recurrent: the module steps a carry (`network="gru"`, or a module of
        your own with `initial_carry`); the algorithms read this, not the
        config, to replay sequences.
    """

    env: Any
    env_params: Any
    module: Any
    policy_fn: Callable
    eval_policy_fn: Callable
    self_play: bool = False
    eval_env: Any = None
    eval_env_params: Any = None
    recurrent: bool = False


def is_self_play(env: Any) -> bool:
    """Whether the algorithms train on `env` by self-play: a two-player pgx game (`envs.pgx.two_player`)."""
    if type(env).__module__ != "jaxrl_rollout.envs.pgx":
        return False  # not imported for other envs
    from jaxrl_rollout.envs import pgx

    return pgx.two_player(env)


def refuse_self_play(algo_name: str, env: Any) -> None:
    """Raises for a two-player game (`is_self_play`) given to a learner that has no self-play (DQN, PQN).

    The message starts with "env TYPE: ", as the learners' other env refusals do, so that the command line
    names the env as its option was typed.
    """
    if is_self_play(env):
        raise ValueError(f"env {type(env).__name__}: a two-player game trains by self-play, which {algo_name} does "
                         "not do; train it with ppo or a2c.")


ENV_METHODS = ("reset", "step", "action_space", "observation_space")
"""The methods an env passed to `make_train(env=...)` must have (the gymnax>=1.0.1 protocol)."""

NETWORK_CONTRACT = (
    "a flax linen Module whose __call__(obs [B, ...]) returns (dist, value [B]), or, for a recurrent one, "
    "which also has initial_carry(batch_size) -> carry [B, ...] and whose __call__(carry, obs) returns "
    "(new_carry, (dist, value [B])); dist has sample(key), mode(), log_prob(action) and entropy() "
    "(e.g. distributions.categorical_from_logits(logits [B, A]) or distributions.diag_gaussian(mean [B, A], "
    "log_std))"
)
"""The network contract in words, as the errors of `check_network` state it."""


ENV_OPTION_VALUES = "a bool, int, float, str or None"
"""What a value of `config.env_options` may be: a config is static (hashed under jit) and saved as JSON."""


def env_options_tuple(options: Any) -> tuple:
    """`config.env_options` as a config keeps it: (name, value) pairs, sorted by name.

    Args:
      options: the options of the env's make (`envs.make(env_id, **options)`): a mapping of name to value, or a
        sequence of (name, value) pairs; each name a Python keyword (str), each value a bool, int, float, str or
        None (a NumPy scalar counts as the number it holds). Objects (a ruleset, a callable) are given from Python
        with the env itself: `make_train(config, env=envs.make(env_id, ...))`.

    Returns:
      The pairs, sorted by name (so two spellings of the same options are one config).

    Raises:
      ValueError: naming env_options: not a mapping or pairs, a name that is not a keyword or is given twice, a
        value of another kind.
    """
    import collections.abc

    if isinstance(options, collections.abc.Mapping):
        pairs = list(options.items())
    elif isinstance(options, (tuple, list)) and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in options):
        pairs = [tuple(p) for p in options]
    else:
        raise ValueError("env_options must be a dict of the env's make options (name -> value), e.g. "
                         f"{{'max_episode_steps': 500}}, or (name, value) pairs; got {options!r}.")
    names = [name for name, _ in pairs]
    for name in names:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"env_options: an option's name must be a keyword of the env's make (a str such as "
                             f"'max_episode_steps'), got {name!r}.")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"env_options: {', '.join(twice)} given more than once.")
    plain = []
    for name, value in pairs:
        value = _plain(value)
        if not isinstance(value, (bool, int, float, str, type(None))):
            raise ValueError(f"env_options: {name}={value!r} is a {type(value).__name__}; an option's value must "
                             f"be {ENV_OPTION_VALUES} (a config is static and saved as JSON); give an env built "
                             "with other values from Python: make_train(config, env=envs.make(env_id, ...)).")
        plain.append((name, value))
    return tuple(sorted(plain))


def check_env_options(cfg) -> None:
    """Makes `cfg.env_options` its sorted pairs (`env_options_tuple`); refuses options for a gymnax env (its make
    takes none) at config time, where `envs.make` would refuse them when the env is built."""
    options = env_options_tuple(cfg.env_options)
    object.__setattr__(cfg, "env_options", options)
    if options and envs.suite_of(cfg.env_id) == "gymnax":
        raise ValueError(f"env_options {dict(options)}: gymnax envs take no options, and env_id={cfg.env_id!r} is "
                         "one (its settings are its env params: make_train(config, env=env, env_params=params.replace(...)), with "
                         "env, params = envs.make(env_id)).")


def resolve_env(env: Any, env_params: Any, env_id: str, *, options: tuple = (),
                sample: bool = True) -> tuple[Any, Any, Any]:
    """The env a learner trains, its params and one sample observation: `make_train`'s env, or config.env_id's.

    An env of your own is checked (`check_env`); the sample observation that check traces serves the network's
    probe too, so `env.reset` is traced once.

    Args:
      env: the env passed to `make_train(env=...)`, or None for `env_id`'s.
      env_params: `env`'s params (None for its `default_params`); must be None without `env`.
      env_id: the config's env id, read when `env` is None.
      options: the config's `env_options`, the options of `env_id`'s make (not read with `env`).
      sample: whether a registry env's sample observation is wanted (a network of your own to probe); an env of
        your own always has one.

    Returns:
      `(env, env_params, sample)`: `sample` as `sample_observation` gives it (None where reset cannot be traced
      alone, or not wanted).

    Raises:
      ValueError: naming `env_params` when it is given without `env`; what `check_env` raises.
    """
    if env is None:
        if env_params is not None:
            raise ValueError("env_params is given without env: env_params are the params of the env you pass as "
                             "env; config.env_id's env comes with its own.")
        env, env_params = envs.make(env_id, **dict(options))
        return env, env_params, sample_observation(env, env_params) if sample else None
    env_params, obs = check_env(env, env_params)
    return env, env_params, obs


def check_env(env: Any, env_params: Any) -> tuple[Any, Any]:
    """The params to train a user's env with, and its sample observation, after checking that the env follows the gymnax protocol.

    The methods are checked, and that what `reset` returns fits the observation
    space (`check_observation_space`); the rollout checks what `reset` and
    `step` return when it first traces them.

    Args:
      env: the env passed to `make_train(env=...)`.
      env_params: its params, or None for `env.default_params`.

    Returns:
      `(env_params, sample)`: `env_params`, or `env.default_params` for None; and the observation
      `sample_observation` gives (None where reset cannot be traced alone).

    Raises:
      TypeError: naming `env` when it is a string (an id goes in
        `config.env_id`) or a class, or lacks a method of `ENV_METHODS`; naming
        `env_params` when it is None and the env has no `default_params`.
    """
    if isinstance(env, str):
        raise TypeError(f"env must be an env object (the gymnax protocol), got the string {env!r}; an env id goes "
                        "in config.env_id.")
    if isinstance(env, type):  # its methods are callable, unbound: the first call would fail inside gymnax
        raise TypeError(f"env must be an env object, got the class {env.__name__}; pass an instance: "
                        f"env={env.__name__}().")
    missing = [name for name in ENV_METHODS if not callable(getattr(env, name, None))]
    if missing:
        raise TypeError(
            "env must follow the gymnax>=1.0.1 protocol: reset(key, params) -> (obs, state), step(key, state, "
            "action, params) -> (obs, state, reward, terminated, truncated, info with 'final_observation'), "
            f"action_space(params) and observation_space(params); {type(env).__name__} has no callable "
            + ", ".join(f"`{name}`" for name in missing) + "."
        )
    if env_params is None:
        if not hasattr(env, "default_params"):
            raise TypeError(f"env_params is None and env {type(env).__name__} has no default_params; pass "
                            "env_params.")
        env_params = env.default_params
    else:
        default = getattr(env, "default_params", None)
        if default is not None and not isinstance(env_params, type(default)):  # another env's params
            def named(x):  # two envs' params classes are often both called EnvParams
                return f"{type(x).__module__}.{type(x).__qualname__}"

            raise TypeError(f"env_params must be {type(env).__name__}'s params, a {named(default)} (its "
                            f"default_params, or default_params.replace(...)), got {named(env_params)}.")
    for which in ("observation_space", "action_space"):
        try:
            space = getattr(env, which)(env_params)
        except (AttributeError, KeyError, TypeError) as error:  # a field the env reads is missing
            raise TypeError(f"env_params do not fit env {type(env).__name__}: its {which}(env_params) failed with "
                            f"{type(error).__name__}: {error}.") from error
        _check_box_shapes(env, which, space)
    sample = sample_observation(env, env_params)
    check_observation_space(env, env_params, sample)
    return env_params, sample


def _check_box_shapes(env: Any, which: str, space: Any, path: str = "") -> None:
    """A TypeError naming `env` for a Box (inside Dict and Tuple spaces too) whose shape is not a tuple of ints.

    gymnax's Box takes `shape` as a tuple; an int (`Box(0, 1, 8)`) samples as (8,), but the learners read the
    space's shape as a tuple to size their networks and actions.
    """
    if isinstance(space, spaces.Box):
        shape = space.shape
        if not (isinstance(shape, tuple | list) and all(isinstance(d, int | np.integer) for d in shape)):
            example = f"({shape},)" if isinstance(shape, int | np.integer) else "(n, ...)"
            raise TypeError(f"env {type(env).__name__}: {which}(params){path} is a Box whose shape is {shape!r}; a "
                            f"Box's shape is a tuple of ints, e.g. spaces.Box(low, high, {example}).")
    elif isinstance(space, spaces.Dict):
        for k, sub in space.spaces.items():
            _check_box_shapes(env, which, sub, f"{path}[{k!r}]")
    elif isinstance(space, spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            _check_box_shapes(env, which, sub, f"{path}[{i}]")


def _shape_text(tree: Any) -> str:
    return ", ".join(f"{jnp.dtype(x.dtype).name}{list(x.shape)}" for x in jax.tree.leaves(tree)) or "nothing"


def _kind_text(x: Any) -> str:
    """What a module returned, in words: "an array float32[1, 2]", "a tuple of 3", or its type's name."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"an array {_shape_text(x)}"
    if isinstance(x, tuple):
        return f"a tuple of {len(x)}"
    return type(x).__name__


def check_network(module: Any, observation_space: Any, action_dim: int, continuous: bool, *,
                  sample: Any = None) -> bool:
    """Checks a user's flax module against `NETWORK_CONTRACT` on two observations; returns whether it is recurrent.

    The module is initialised and applied under `jax.eval_shape` (traced, not
    run or compiled) on a batch of B = `PROBE_BATCH` (2) observations of the
    env's space. A module with a callable `initial_carry` is recurrent. Then:
    the output's structure; a recurrent module's new carry keeps the shapes and
    dtypes of `initial_carry(B)`; `dist` has the four methods; the sampled
    action is [B] integers for Discrete(A) (a distribution with `logits` has A
    of them) or [B, A] floats for a Box of A; log_prob, entropy and value are
    [B].

    Args:
      module: the module passed to `make_train(network=...)`.
      observation_space: the env's observation space (Box, Discrete, Dict or Tuple).
      action_dim: A, the env's number of discrete actions or its Box's size.
      continuous: the actions are a Box.
      sample: the observation [1, ...] to probe with (`sample_observation`),
        repeated to B; None for zeros of `observation_space`.

    Returns:
      Whether the module is recurrent.

    Raises:
      TypeError: naming `network`, for an object without `init` and `apply`
        or an output of the wrong structure or kind.
      ValueError: naming `network`, for wrong shapes, or when `init` or
        `__call__` itself fails on the sample observation (chained to the
        module's own error).
    """
    if isinstance(module, str):
        raise TypeError(f"network must be a flax linen Module, got the string {module!r}; a network name goes in "
                        "config.network.")
    refuse_class("network", module)
    if not (callable(getattr(module, "init", None)) and callable(getattr(module, "apply", None))):
        raise TypeError(f"network must be {NETWORK_CONTRACT}; got {type(module).__name__}, which has no init and "
                        "apply (wrap a plain function or an nnx model in a linen Module).")
    name = type(module).__name__
    recurrent = callable(getattr(module, "initial_carry", None))
    try:
        obs = probe_observation(observation_space, sample)
    except ValueError as error:
        raise ValueError(f"network: cannot make a sample observation to check {name} with: {error}") from None
    b = PROBE_BATCH
    call = f"network {name}: __call__(carry, obs)" if recurrent else f"network {name}: __call__(obs)"
    obs_text = _shape_text(obs)

    def probe(key):
        carry = None
        if recurrent:
            carry = module.initial_carry(b)
            bad = [x.shape for x in jax.tree.leaves(carry) if jnp.ndim(x) < 1 or jnp.shape(x)[0] != b]
            if bad or not jax.tree.leaves(carry):
                raise ValueError(f"network {name}: initial_carry({b}) must return a carry of [{b}, ...] arrays, got "
                                 f"{_shape_text(carry)}.")
        args = (carry, obs) if recurrent else (obs,)
        try:
            params = module.init(key, *args)
            out = module.apply(params, *args)
        except Exception as error:  # noqa: BLE001 - the module's own error, chained, with the contract
            raise ValueError(f"{call} failed on a sample observation ({obs_text}): {type(error).__name__}: "
                             f"{str(error).rstrip('.')}. network must be {NETWORK_CONTRACT}.") from error
        check_only_params(f"network {name}", params)
        if recurrent:
            if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], tuple)):
                # (dist, value) alone, the new carry forgotten, was told it returned a carry of the wrong shape
                raise TypeError(f"{call} must return (new_carry, (dist, value)), got {_kind_text(out)}.")
            new_carry, out = out
            same = jax.tree.structure(new_carry) == jax.tree.structure(carry) and all(
                jnp.shape(a) == jnp.shape(b) and jnp.result_type(a) == jnp.result_type(b)
                for a, b in zip(jax.tree.leaves(new_carry), jax.tree.leaves(carry)))
            if not same:
                raise ValueError(f"{call} must return a new_carry like initial_carry({b}) ({_shape_text(carry)}), "
                                 f"got {_shape_text(new_carry)}.")
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"{call} must return (dist, value [B]), got {_kind_text(out)}. network must be "
                            f"{NETWORK_CONTRACT}.")
        dist, value = out
        missing = [m for m in ("sample", "mode", "log_prob", "entropy") if not callable(getattr(dist, m, None))]
        if missing:
            raise TypeError(f"{call} must return a distribution with sample(key), mode(), log_prob(action) and "
                            f"entropy(), got {_kind_text(dist)} without {', '.join(missing)} (build one with "
                            "distributions.categorical_from_logits or distributions.diag_gaussian).")
        action = dist.sample(key)
        want = (b, action_dim) if continuous else (b,)
        kind = "floating" if continuous else "integer"
        if jnp.shape(action) != want or not jnp.issubdtype(jnp.result_type(action), getattr(jnp, kind)):
            space = f"Box of {action_dim}" if continuous else f"Discrete({action_dim})"
            raise ValueError(f"{call}: dist.sample(key) must give {kind} actions of shape {list(want)} for the "
                             f"env's {space} actions on a batch of {b}, got {_shape_text(action)}.")
        logits = getattr(dist, "logits", None)
        if not continuous and logits is not None and jnp.shape(logits)[-1:] != (action_dim,):
            raise ValueError(f"{call}: the distribution's logits must be [B, A] with A={action_dim}, the env's "
                             f"Discrete({action_dim}) actions, got {_shape_text(logits)}.")
        if jnp.shape(dist.mode()) != want:
            raise ValueError(f"{call}: dist.mode() must have the shape of a sample, {list(want)}, got "
                             f"{_shape_text(dist.mode())}.")
        for what, x in (("value", value), ("dist.log_prob(action)", dist.log_prob(action)),
                        ("dist.entropy()", dist.entropy())):
            if jnp.shape(x) != (b,):
                raise ValueError(f"{call}: {what} must have the batch shape [B], [{b}] here, got {_shape_text(x)}"
                                 + ("; squeeze a critic output [B, 1]." if what == "value" else "."))
            if not jnp.issubdtype(jnp.result_type(x), jnp.floating):
                raise ValueError(f"{call}: {what} must be floating, got {_shape_text(x)}.")

    jax.eval_shape(probe, jax.random.key(0))
    return recurrent


def setup(env_id: str, network: str, hidden_sizes, activation: str, *, env: Any = None, env_params: Any = None,
          module: Any = None, env_options: tuple = ()) -> Setup:
    """Env (with actions clipped to Box bounds at the env), flax module and rollout policies.

    The env is built from `env_id` unless `env` is given (then `env_params`,
    or its `default_params`); the network is chosen by `choose_network` from
    the env's observation space unless `module` is given (then checked by
    `check_network`). For a two-player pgx game named by `env_id` the
    training env is rebuilt for self-play: `opponent_from_policy` of the
    sampling policy, whose params are the env params, and
    `agent_seat="random"`; the evaluation env plays `random_opponent` from a
    random seat, at most `SELF_PLAY_EVAL_MAX_MOVES` agent moves per game
    (`max_steps` of `env_options`, where given). An env object you pass is
    trained on as it is, never rebuilt for self-play.

    Args:
      env_id: the config's env id (not read when `env` is given).
      network, hidden_sizes, activation: the config's network fields (not
        read when `module` is given).
      env: an env object of the gymnax protocol (`check_env`), or None.
      env_params: `env`'s params; None for its `default_params`. Only with `env`.
      module: a flax module of `NETWORK_CONTRACT`, or None.
      env_options: the config's `env_options` (`env_id`'s make options; not read when `env` is given).

    Returns:
      The `Setup`.

    Raises:
      ValueError, TypeError: naming `env`, `env_params` or `network` for what
        does not fit (see `check_env`, `check_network`, `choose_network`).
    """
    from jaxrl_rollout import networks

    own_env = env is not None
    env, env_params, sample = resolve_env(env, env_params, env_id, options=env_options, sample=module is not None)
    action_dim, continuous = action_info(env, env_params)
    if continuous:
        env = envs.ClipAction(env)
    if module is None:
        space = env.observation_space(env_params)
        if sample is None and isinstance(space, (spaces.Dict, spaces.Tuple)) and any(discrete_sizes(space)):
            sample = sample_observation(env, env_params)  # the order of the leaves the one-hot sizes go with
        module = choose_network(network, space, action_dim, continuous, hidden_sizes, activation, sample)
        recurrent = network == "gru"
    else:
        recurrent = check_network(module, env.observation_space(env_params), action_dim, continuous,
                                  sample=sample)
    make = networks.recurrent_policy if recurrent else networks.feedforward_policy
    policy_fn, eval_policy_fn = make(module), make(module, deterministic=True)
    if own_env or not is_self_play(env):
        return Setup(env, env_params, module, policy_fn, eval_policy_fn, False, env, env_params, recurrent)
    from jaxrl_rollout.envs import pgx

    if recurrent:
        what = "network='gru'" if network == "gru" else f"network {type(module).__name__} (recurrent)"
        raise ValueError(f"{what} cannot play the self-play game {env_id!r} (the opponent's policy would "
                         "need its own carry); use network='auto'.")
    eval_env, eval_params = self_play_eval_env(env_id, env_options)  # refuses options that self-play sets
    train_env, _ = envs.make(env_id, **dict(env_options), opponent=pgx.opponent_from_policy(policy_fn),
                             agent_seat="random")
    return Setup(train_env, None, module, policy_fn, eval_policy_fn, True, eval_env, eval_params, recurrent)


def self_play_eval_env(env_id: str, env_options: tuple = ()) -> tuple[Any, Any]:
    """The env a self-play game's policy is evaluated on, and its params: pgx's random opponent from a random
    seat, at most `SELF_PLAY_EVAL_MAX_MOVES` agent moves a game (`max_steps` of `env_options` where given).

    Raises:
      ValueError: naming env_options that set what self-play sets itself (`agent_seat`, `opponent_params`).
    """
    options = dict(env_options)
    seated = sorted({"agent_seat", "opponent_params"} & set(options))
    if seated:
        raise ValueError(f"env_options {', '.join(f'{k}={options[k]!r}' for k in seated)}: self-play training of "
                         f"{env_id!r} seats the agent at random against its own policy, and sets {', '.join(seated)} "
                         "itself; drop them (a fixed seat or opponent is an env of your own: make_train(config, "
                         "env=envs.make(env_id, agent_seat=..., opponent=...))).")
    return envs.make(env_id, **{**SELF_PLAY_EVAL_OPTIONS, **options})


BUILT_IN_NETWORK_FIELDS = ("hidden_sizes", "activation", "layer_norm")
"""Config fields that shape only a learner's built-in network (those a config has)."""


def refuse_network_name(config: Any, network: Any) -> None:
    """A ValueError naming `network` when a module of one's own meets a config whose `network` names a built-in
    one (anything but "auto"), which would not be read."""
    if network is not None and config.network != "auto":
        raise ValueError(f"network: a module of your own is given, and config.network={config.network!r} names "
                         "another; leave config.network='auto' (the default) when you pass network.")


def refuse_unread_network_fields(config: Any, network: Any) -> None:
    """A ValueError naming `network` when a module of one's own meets a built-in network field set off its default.

    `hidden_sizes`, `activation` and `layer_norm` size the network the learner builds; with `network=` they are
    not read, and a config that sets them would train the given module under a label it does not have.
    """
    if network is None:
        return
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for name in BUILT_IN_NETWORK_FIELDS:
        if name in defaults and getattr(config, name) != defaults[name]:
            raise ValueError(
                f"network: a module of your own is given, and config.{name}={getattr(config, name)!r} shapes only "
                f"the built-in network, so it would not be read; leave {name} at its default "
                f"({defaults[name]!r}) when you pass network.")


def build(config: Any, *, env: Any = None, env_params: Any = None, network: Any = None) -> Setup:
    """`setup` for an algorithm's config and `make_train`'s keyword arguments.

    Args:
      config: a `PPOConfig` or `A2CConfig` (already validated).
      env, env_params, network: as `make_train` takes them.

    Returns:
      The `Setup`.

    Raises:
      ValueError: naming `network` when a module is given while
        `config.network` names another network than "auto".
    """
    refuse_network_name(config, network)
    built = setup(config.env_id, config.network, config.hidden_sizes, config.activation, env=env,
                  env_params=env_params, module=network, env_options=config.env_options)
    refuse_unread_network_fields(config, network)  # after the module's own checks
    return built


def rollout_env_params(s: Setup, params: Any) -> Any:
    """The env params the rollout passes to `s.env`: the policy params for self-play, else `s.env_params`."""
    return params if s.self_play else s.env_params


def rollout_value_fn(s: Setup, num_envs: int, num_steps: int) -> Callable | None:
    """The `value_fn` PPO and A2C give `rollout`: the critic alone, for separate trunks and small rollouts.

    An `ActorCriticMLP` with separate actor and critic trunks (the default
    network for vector observations) values observations without the
    actor, so the rollout can value all T steps in one batched pass after
    its scan instead of one critic pass per step (`rollout`'s value_fn). Up
    to `collect.BATCHED_FINAL_VALUE_ROWS` rows per rollout (T * B), where
    the per-step passes are small and their overhead counts; larger
    rollouts keep the per-step values, as they keep per-step final values.
    Any other network (a shared trunk, a CNN, a recurrent core, yours) gives
    None: its critic shares work with the actor that a second pass would
    repeat.
    """
    from jaxrl_rollout import collect, networks

    module = s.module
    if type(module) is not networks.ActorCriticMLP or module.shared_trunk or s.recurrent:
        return None
    if num_envs * num_steps > collect.BATCHED_FINAL_VALUE_ROWS:
        return None
    return lambda params, obs: module.apply(params, obs)[1]


def acting_policies(s: Setup, cfg) -> dict:
    """`Algorithm`'s policy_fn, eval_policy_fn and policy_params, acting on raw observations.

    Without observation normalisation the policies are the setup's and take
    `state.params`; with it they normalise with the frozen statistics and take
    `(state.rollout.obs_rms, state.params)`.
    """
    from jaxrl_rollout.normalization import normalized_policy

    if not getattr(cfg, "normalize_observations", False):
        return dict(policy_fn=s.policy_fn, eval_policy_fn=s.eval_policy_fn, policy_params=lambda state: state.params)
    if any(discrete_sizes(s.eval_env.observation_space(s.eval_env_params))):
        raise ValueError("normalize_observations=True: the env's observation is (or holds) a Discrete index, which "
                         "the network reads one-hot encoded and which has no scale to normalise; leave it False.")
    return dict(
        policy_fn=normalized_policy(s.policy_fn, cfg.obs_clip),
        eval_policy_fn=normalized_policy(s.eval_policy_fn, cfg.obs_clip),
        policy_params=lambda state: (state.rollout.obs_rms, state.params),
    )


def check_normalization_config(cfg) -> None:
    """The normalisation flags are bools and the clips positive numbers or None."""
    for name in ("normalize_observations", "normalize_rewards"):
        check_bool(name, getattr(cfg, name))
    for name in ("obs_clip", "reward_clip"):
        value = getattr(cfg, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"{name} must be a positive number or None, got {value!r}.")


def one_hot_if_discrete(module: Any, observation_space: Any) -> Any:
    """`module` on the one-hot vector of a Discrete observation (`networks.OneHotObservation`), else `module`:
    DQN's and PQN's own Q-networks read an index as SB3's do, not as one number."""
    from jaxrl_rollout import networks

    if isinstance(observation_space, spaces.Discrete):
        return networks.OneHotObservation(int(observation_space.n), module)
    return module


Q_NETWORKS = ("auto", "mlp", "cnn")
"""The names DQN's and PQN's configs take for `network`."""


def choose_q_network(network: str, observation_space: Any, mlp: Any, *, layer_norm: bool,
                     kernels: str) -> Any:
    """DQN's or PQN's built-in Q-network for a config's `network` name and the env's observation space.

    - "auto": a channels-last image [H, W, C] (a 3-D Box) of at least 36 x 36 (`networks.NATURE_CNN_MIN_SIZE`:
      Atari's frames, rendered pixels) gets `networks.QNetworkCNN` with the Nature DQN's torso, reading a pixel
      space (`is_pixel_space`) x / 255; any other single array, smaller images (MinAtar's) included, gets `mlp`,
      the algorithm's MLP on the flattened observation (a Discrete index one-hot). On MinAtar the CNN learned no
      better than the MLP in the runs measured (DQN 100k steps, PQN 200k, README) and ran 13 to 16 times slower
      on a CPU, so it is asked for by name there;
    - "mlp": `mlp` on any single array, images flattened;
    - "cnn": `QNetworkCNN`, its torso by size (the Nature DQN's from 36 x 36, MinAtar's one convolution
      below); the observation must be an image [H, W, C].

    `layer_norm` and `kernels` are the CNN's (`QNetworkCNN`): PQN's LayerNorm and He-normal kernels, DQN's
    torch-default ones.

    Raises:
      ValueError: naming `network`, for "cnn" on an observation that is not an image [H, W, C], or an image that
        looks channels first [C, H, W] (with "auto" or "cnn").
    """
    torso = choose_torso(network, observation_space)
    if torso is None:
        return one_hot_if_discrete(mlp, observation_space)
    from jaxrl_rollout import networks

    return networks.QNetworkCNN(action_dim=mlp.action_dim, nature=torso.nature, pixels=torso.pixels,
                                layer_norm=layer_norm, kernels=kernels, kernel_size=torso.kernel_size)


def choose_torso(network: str, observation_space: Any) -> Any:
    """The image torso (`networks.CNNTorso`) a config's `network` name gives the env's observation, or None for
    the MLP on the flattened observation: the choice of `choose_q_network` (its docstring says the rules), which
    SAC's and TD3's built-in actor and critics make too.

    Raises:
      ValueError: as `choose_q_network`.
    """
    from jaxrl_rollout import networks

    check_choice("network", network, Q_NETWORKS)
    shape = tuple(observation_space.shape) if isinstance(observation_space, spaces.Box) else None
    image = shape is not None and len(shape) == 3
    if network == "cnn" and not image:
        raise ValueError(f"network='cnn' needs an image observation [H, W, C] (channels last), got "
                         f"{_describe(space_leaves(observation_space))}; use network='auto' or 'mlp'.")
    if image and network != "mlp":  # a flattened image has no layout to get wrong
        _check_channels_last(network, "the observation", shape)
    nature = image and min(shape[:2]) >= networks.NATURE_CNN_MIN_SIZE
    if network == "mlp" or (network == "auto" and not nature):
        return None
    return networks.CNNTorso(nature=nature, pixels=is_pixel_space(observation_space), kernel_size=min(3, *shape[:2]))


def check_single_array_obs(algo: str, module_name: str, env: Any, observation_space: Any) -> None:
    """Raises when an algorithm's built-in network meets an observation it cannot take.

    DQN's, PQN's, SAC's and TD3's own networks flatten one array observation
    (a Box or Discrete space); a pytree observation (Dict or Tuple, e.g.
    jumanji's with an action mask) needs a network of the user's.

    Raises:
      ValueError: "env TYPE: ..." (the env is what the default network cannot take; the command line names it
        as `--env ID`), naming the algorithm, its network and the space, and what to do from the command line
        (ppo or a2c) and from Python (a network of one's own).
    """
    if not isinstance(observation_space, (spaces.Box, spaces.Discrete)):
        raise ValueError(
            f"env {type(env).__name__}: {algo}'s {module_name} takes a single array observation (a Box or Discrete "
            f"space), got a pytree ({_describe(space_leaves(observation_space))}); train it with ppo or a2c, whose "
            "network='auto' encodes each leaf and applies an action mask, or, from Python, pass make_train a "
            "network of your own (network=...) that takes it.")


def sample_observation(env: Any, env_params: Any) -> Any:
    """One observation of zeros [1, ...] with the pytree, shapes and dtypes `env.reset` gives, or None.

    The networks' probes run on it, so a network sees what it will be given (a NamedTuple observation stays a
    NamedTuple; `zeros_for` of a Tuple space would give a tuple). Traced, not run (`jax.eval_shape`). None
    where reset cannot be traced on its own (a self-play game's reset needs the policy's params): the
    space's zeros (`zeros_for`) serve there.
    """
    from jaxrl_rollout import stepping

    vectorized = stepping.is_vectorized(env)  # reset takes [B] keys and gives [B, ...] observations
    try:
        key = jax.random.split(jax.random.key(0), 1) if vectorized else jax.random.key(0)
        obs = jax.eval_shape(lambda k: env.reset(k, env_params)[0], key)
    except Exception:  # noqa: BLE001 - not traceable alone; the rollout traces it with what it needs
        return None
    return jax.tree.map(lambda x: jnp.zeros(tuple(x.shape) if vectorized else (1, *x.shape), x.dtype), obs)


def check_observation_space(env: Any, env_params: Any, sample: Any) -> None:
    """A ValueError naming `env` when what its reset returns does not fit its `observation_space(params)`.

    The leaves' shapes, in any order (a NamedTuple observation described by a Dict space flattens in another
    order); the networks and buffers are sized from the space, so an observation of another shape would fail
    inside them, or be sliced or broadcast silently. `sample` is `sample_observation(env, env_params)`; None
    (reset not traceable alone) checks nothing.
    """
    if sample is None:
        return
    try:
        want = [shape for _, shape, _ in space_leaves(env.observation_space(env_params))]
    except ValueError:
        return  # a space the learners cannot read: refused where it is read, with its own message
    got = [tuple(jnp.shape(x))[1:] for x in jax.tree.leaves(sample)]
    if sorted(got) != sorted(want):  # as sets of shapes: a NamedTuple observation's fields keep their order, a
        # Dict space's leaves come sorted by key (jumanji's Snake: grid, step_count, action_mask)
        def text(shapes):
            return ", ".join(str(list(s)) for s in shapes) or "nothing"

        raise ValueError(f"env {type(env).__name__}: reset returns observations of shape {text(got)}, but its "
                         f"observation_space(params) says {text(want)}; the networks are sized from the space, so "
                         "make it describe the observation.")


def zeros_for(space: Any) -> Any:
    """One observation of zeros [1, ...] shaped like `space` (Box, Discrete, Dict -> dict, Tuple -> tuple)."""
    if isinstance(space, spaces.Dict):
        return {k: zeros_for(v) for k, v in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(zeros_for(v) for v in space.spaces)
    ((_, shape, dtype),) = space_leaves(space)
    return jnp.zeros((1, *shape), dtype)


def torch_linear_kernel_init():
    """torch `nn.Linear`'s default kernel distribution: uniform in +-1/sqrt(fan_in) (the off-policy learners' MLPs)."""
    from jaxrl_rollout.networks.init import torch_kernel_init

    return torch_kernel_init()


def flat_observation(obs: Any, num_obs_values: int = 0) -> jax.Array:
    """float32 [B, -1]: the observation flattened, or with `num_obs_values` n > 0 the one-hot [B, n] of a
    Discrete(n) index [B] (an index read as one number would put FrozenLake's cell 3 between 2 and 4; SB3
    one-hot encodes Discrete observations, as `networks.OneHotObservation` does for DQN and PQN)."""
    if num_obs_values:
        return jax.nn.one_hot(jnp.reshape(obs, (jnp.shape(obs)[0],)), num_obs_values, dtype=jnp.float32)
    return jnp.reshape(jnp.asarray(obs, jnp.float32), (jnp.shape(obs)[0], -1))


def observation_features(obs: Any, num_obs_values: int = 0, torso: Any = None) -> jax.Array:
    """float32 [B, F]: `flat_observation(obs, num_obs_values)`, or with `torso` (a `networks.CNNTorso`) the image
    torso's features of images [B, H, W, C] (`networks.cnn_torso`, torch's default kernels; its layers become
    those of the compact module that calls this)."""
    if torso is None:
        return flat_observation(obs, num_obs_values)
    from jaxrl_rollout import networks

    return networks.cnn_torso(obs, nature=torso.nature, pixels=torso.pixels, kernel_size=torso.kernel_size)


def num_obs_values(observation_space: Any) -> int:
    """n for a Discrete(n) observation space (`flat_observation` one-hot encodes it), else 0."""
    return int(observation_space.n) if isinstance(observation_space, spaces.Discrete) else 0


class ObsActionCritic(nn.Module):
    """CleanRL's continuous-action Q-network (SAC's `SoftQNetwork`, TD3's `QNetwork`).

    concat(obs flattened, action) -> Dense+ReLU layers -> Q [B]; kernels drawn
    as torch's `nn.Linear` default (`torch_linear_kernel_init`), biases 0. A
    Discrete(n) observation is one-hot encoded when `num_obs_values` is n
    (`flat_observation`). With `torso` (a `networks.CNNTorso`, what
    `network="auto"` or `"cnn"` chooses for an image), the observation is
    read by that image torso instead, whose features are concatenated with
    the action: SB3's `ContinuousCritic` on its `NatureCNN` (SB3's two Q heads
    share one torso; here each twin critic has its own).
    """

    hidden_sizes: tuple = (256, 256)
    num_obs_values: int = 0
    torso: Any = None

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = observation_features(obs, self.num_obs_values, self.torso)
        x = jnp.concatenate([x, jnp.asarray(action, jnp.float32)], axis=-1)
        for h in self.hidden_sizes:
            x = nn.relu(nn.Dense(h, kernel_init=torch_linear_kernel_init())(x))
        return nn.Dense(1, kernel_init=torch_linear_kernel_init())(x)[:, 0]


def twin_q_values(critic: nn.Module, critic_params: Any, obs: Any, action: jax.Array) -> jax.Array:
    """[2, N] Q-values of twin critics whose params are stacked on a leading axis of 2 (SAC's).

    Both critics run as one product per layer, batched over the twin axis (as
    rejax's). The inputs are broadcast to the twin axis too, so that the twin
    axis leads each product: with the inputs shared, JAX folds the twin axis of
    the first layer into its output features ([N, 2, H]) and XLA transposed it
    to [2, N, H] for the second layer and back for its gradient (8 vmapped seeds
    of SAC's 5,000-step Pendulum benchmark: 22.1 s against 19.9 s in one profile
    on 2 CPU cores, BENCHMARKS.md section 11). Each critic computed on its own
    slice of the params instead was 10% faster at 8 seeds on the CPU, 9% slower at
    one, and drifted twice as far between a run in a vmapped sweep and the same
    run alone (section 11, seventh pass), so it is not used.
    """
    twice = lambda x: jnp.broadcast_to(x, (2, *jnp.shape(x)))  # noqa: E731
    q = jax.vmap(critic.apply)(critic_params, jax.tree.map(twice, obs), twice(action))
    return jnp.reshape(q, (2, -1))


def init_params_and_rollout(key, s: Setup, num_envs: int, recurrent: bool, normalize_observations: bool = False):
    """(params, RolloutState, key) for a fresh run; the carry starts at zeros.

    Feedforward networks are initialised by `networks.batched_init` (module.init's
    distribution at a fraction of its compile time). For self-play the params
    come first, from a zero observation of the env's space, since the env's
    reset (where the opponent may open) needs them as its params.
    """
    from jaxrl_rollout import networks
    from jaxrl_rollout.collect import rollout_init

    net_key, env_key, key = prng.split(key, 3)  # jax.random.split's keys, hashed in one kernel
    carry = s.module.initial_carry(num_envs) if recurrent else None
    if s.self_play:
        params = networks.batched_init(s.module, net_key, zeros_for(s.env.observation_space(None)))
        state = rollout_init(env_key, s.env, params, num_envs, normalize_observations=normalize_observations)
        return params, state, key
    state = rollout_init(
        env_key, s.env, s.env_params, num_envs, initial_carry=carry, normalize_observations=normalize_observations
    )
    one_obs = jax.tree.map(lambda x: x[:1], state.obs)
    if recurrent:
        params = networks.fused_init(s.module, net_key, s.module.initial_carry(1), one_obs)
    else:
        params = networks.batched_init(s.module, net_key, one_obs)
    return params, state, key


def plain_numbers(cfg) -> None:
    """Replaces a config's NumPy scalars (and NumPy ints in a tuple field) with the Python numbers they hold.

    A value computed with NumPy (`total_timesteps=np.int64(1e6)`, a grid's `np.float32`) was refused as "must
    be a positive int" although it is one; a config also goes to JSON (the run folder's config.json), which
    takes Python numbers only. Arrays and other types are left for the checks to refuse.
    """
    for field in dataclasses.fields(cfg):
        object.__setattr__(cfg, field.name, _plain(getattr(cfg, field.name)))


def plain_record(record: tuple) -> tuple:
    """A NamedTuple (a grid point's HParams) with its NumPy scalars as the Python numbers they hold, as
    `plain_numbers` does for a config."""
    return record._replace(**{k: _plain(v) for k, v in record._asdict().items()})


def _plain(value: Any) -> Any:
    """A NumPy scalar as its Python number, a tuple's NumPy scalars too; anything else as it is."""
    if isinstance(value, np.generic) and np.ndim(value) == 0:
        return value.item()
    if isinstance(value, tuple) and any(isinstance(v, np.generic) for v in value):
        return tuple(v.item() if isinstance(v, np.generic) else v for v in value)
    return value


def check_common_config(cfg, networks: Sequence[str] = NETWORKS) -> None:
    """Checks the fields PPO's, A2C's and PQN's configs share; raises ValueError naming the field.

    Every field declared `bool` must be a bool (a string such as "false" is
    truthy, and would turn the option on). `networks` are the names the
    algorithm takes for `network` (PQN: `Q_NETWORKS`).

    Nothing here builds an env (`envs.check_id`): what depends on the env
    itself is checked when the algorithm is built (`setup`).
    """
    for name in ("num_envs", "num_steps", "total_timesteps"):
        check_positive(name, getattr(cfg, name))
    for field in dataclasses.fields(cfg):
        if field.type in ("bool", bool):
            check_bool(field.name, getattr(cfg, field.name))
    if cfg.total_timesteps > MAX_TOTAL_TIMESTEPS:
        raise ValueError(f"total_timesteps={cfg.total_timesteps} is more than {MAX_TOTAL_TIMESTEPS:,} (2**31 - 1), "
                         "the most env steps the int32 step counters of a run hold.")
    check_choice("network", cfg.network, networks)
    check_choice("activation", cfg.activation, ("tanh", "relu"))
    object.__setattr__(cfg, "hidden_sizes", hidden_sizes_tuple(cfg.hidden_sizes))
    batch = cfg.num_envs * cfg.num_steps
    if cfg.total_timesteps < batch:
        raise ValueError(
            f"total_timesteps={cfg.total_timesteps} is less than one batch of num_envs * num_steps = {batch} steps."
        )
    # A config never builds its env: a gymnax name is checked here (an unknown one fails with suggestions);
    # another suite's id, its suite included, when make_train builds the env.
    envs.check_id(cfg.env_id)
    check_env_options(cfg)
