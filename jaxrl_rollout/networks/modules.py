"""The actor-critic modules (flax linen), their construction checks and layer constants.

Modules (all return a distribution from `jaxrl_rollout.distributions` and a
value of the batch shape):

- `ActorCriticMLP`: `obs [B, O] -> (dist, value [B])`, separate actor and
  critic trunks (CleanRL `ppo.py` / `ppo_continuous_action.py`, PureJaxRL) or
  a shared one; `Categorical` logits or a `DiagGaussian` with a
  state-independent learned `log_std` initialised to 0.
- `ActorCriticCNN`: MinAtar-style images `[B, H, W, C] -> (dist, value [B])`.
- `ActorCriticNatureCNN`: the Atari network of Mnih et al. (2015), CleanRL's
  `ppo_atari.py` and SB3's `NatureCNN`, for images of at least 36 x 36
  pixels, with uint8 pixel intensities read as x / 255.
- `ActorCriticMultiInput`: pytree observations (dicts, tuples, NamedTuples)
  `{leaf: [B, ...]} -> (dist, value [B])`, one encoder per leaf (a conv
  torso for images, a dense torso for flattened vectors and scalars), the
  features concatenated, then actor and critic trunks; a leaf named in
  `ACTION_MASK_KEYS` masks the logits instead of being a feature
  (`leaf_name` gives a leaf's name).
- `OneHotObservation`: a Discrete(n) observation, an index [B], given to a
  module as its one-hot vector [B, n] (what `network='auto'` and DQN's and
  PQN's own networks take for such an env, as SB3 encodes it);
  `OneHotRecurrentObservation` the same for a recurrent module (`network='gru'`).
- `ActorCriticGRU`: one recurrent step
  `(carry [B, H], obs [B, ...]) -> (new_carry, (dist, value [B]))`. It never
  resets its carry: the rollout zeroes it at episode starts
  (`jaxrl_rollout.reset_carry`) and `networks.unroll` replays that rule for a
  learner.

Every Dense (and Conv) kernel is `orthogonal(gain)` with zero bias, which on a
flax (in, out) kernel mirrors torch's `orthogonal_(W, gain)` on the (out, in)
weight (docs/semantics.md §12):
gain sqrt(2) for hidden layers, 0.01 for the actor head and 1.0 for the critic
head (ARENA / CleanRL `layer_init`). The GRU cell keeps flax's own init
(torch's `nn.GRU` has no `layer_init` counterpart in the references).
The MLP and head layers are `OrthogonalDense` (`init.py`): `nn.Dense`'s parameters and
numbers, without flax's re-run of the initializer on every `apply`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import _checks
from jaxrl_rollout.distributions import (
    Categorical,
    DiagGaussian,
    categorical_from_logits,
    diag_gaussian,
    masked_logits,
)
from jaxrl_rollout.networks.init import orthogonal, orthogonal_dense, torch_kernel_init
from jaxrl_rollout.types import PyTree

__all__ = [
    "ACTION_MASK_KEYS",
    "ACTIVATIONS",
    "ACTOR_HEAD_GAIN",
    "CRITIC_HEAD_GAIN",
    "HIDDEN_GAIN",
    "NATURE_CNN_MIN_SIZE",
    "ActorCriticCNN",
    "ActorCriticGRU",
    "ActorCriticMLP",
    "ActorCriticMultiInput",
    "ActorCriticNatureCNN",
    "OneHotObservation",
    "OneHotRecurrentObservation",
    "Q_NETWORK_KERNELS",
    "QNetworkCNN",
    "leaf_name",
]

HIDDEN_GAIN = math.sqrt(2.0)
ACTOR_HEAD_GAIN = 0.01
CRITIC_HEAD_GAIN = 1.0
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"tanh": nn.tanh, "relu": nn.relu}
ACTION_MASK_KEYS = ("action_mask", "legal_action_mask")
"""Observation leaves with these names are action masks (jumanji's `action_mask`, pgx's `legal_action_mask`)."""

Distribution = Categorical | DiagGaussian


# --------------------------------------------------------------------------
# Construction checks and layers
# --------------------------------------------------------------------------


def _check_positive_int(name: str, value: Any) -> None:
    if not _checks.is_int(value) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")


def _check_sizes(name: str, sizes: Any) -> None:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise ValueError(f"{name} must be a sequence of positive ints, got {sizes!r}.")
    for i, size in enumerate(sizes):
        _check_positive_int(f"{name}[{i}]", size)
        if size > 2**31 - 1:  # (the orthogonal init's int32 indices would overflow)
            raise ValueError(f"{name}[{i}] must be at most 2,147,483,647 (2**31 - 1) units, got {size!r}.")


def _check_activation(activation: Any) -> None:
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(
            f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}."
        )


def _check_head_config(module: nn.Module) -> None:
    _check_positive_int("action_dim", module.action_dim)
    if not isinstance(module.continuous, (bool, np.bool_)):
        raise ValueError(f"continuous must be a bool, got {module.continuous!r}.")
    _check_activation(module.activation)


def _mlp(x: jax.Array, sizes: Sequence[int], activation: str, prefix: str) -> jax.Array:
    act = ACTIVATIONS[activation]
    for i, size in enumerate(sizes):
        x = act(orthogonal_dense(size, HIDDEN_GAIN, f"{prefix}_{i}")(x))
    return x


def _heads(
    module: nn.Module, actor_x: jax.Array, critic_x: jax.Array, action_mask: jax.Array | None = None
) -> tuple[Distribution, jax.Array]:
    """The actor head (logits or mean, plus log_std) and the critic head of `module`.

    Called inside the module's compact `__call__`, so the layers and the
    `log_std` parameter belong to it. `action_mask` ([B, A] bool, discrete
    only) sets the logits of masked actions to -inf (`masked_logits`).
    """
    head = orthogonal_dense(module.action_dim, ACTOR_HEAD_GAIN, "actor_head")(actor_x)
    if action_mask is not None:
        head = masked_logits(head, action_mask)
    if module.continuous:
        # CleanRL: a state-independent nn.Parameter(torch.zeros(1, A)), expanded to the mean.
        log_std = module.param("log_std", nn.initializers.zeros, (module.action_dim,), jnp.float32)
        dist: Distribution = diag_gaussian(head, log_std)
    else:
        dist = categorical_from_logits(head)
    value = orthogonal_dense(1, CRITIC_HEAD_GAIN, "critic_head")(critic_x)[..., 0]
    return dist, value


def _as_float(x: Any, name: str, min_rank: int, expected: str, pixels: bool = False) -> jax.Array:
    """`x` as floats, checked to have at least `min_rank` axes; with `pixels`, uint8 intensities read x / 255."""
    x = jnp.asarray(x)
    if x.ndim < min_rank:
        raise ValueError(f"{name} must have shape {expected}, got shape {x.shape}.")
    scale = pixels and x.dtype == jnp.uint8
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)  # MinAtar observations are bool, discrete ones int
    return x / 255.0 if scale else x


# --------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------


class ActorCriticMLP(nn.Module):
    """An MLP actor-critic (CleanRL `Agent`, PureJaxRL `ActorCritic`).

    Separate trunks (default): actor = hidden layers -> Dense(A, gain 0.01),
    critic = hidden layers -> Dense(1, gain 1.0). With `shared_trunk=True`
    both heads read one set of hidden layers.

    Attributes:
      action_dim: A, the number of discrete actions or action dimensions.
      continuous: False for `Categorical(logits)`, True for a `DiagGaussian`
        with a learned state-independent `log_std` [A] initialised to 0.
      hidden_sizes: widths of the hidden layers (empty for a linear policy).
      activation: one of `ACTIVATIONS` ("tanh", "relu").
      shared_trunk: share the hidden layers between actor and critic.

    Parameter names: `actor_hidden_{i}`, `critic_hidden_{i}` (or
    `shared_hidden_{i}`), `actor_head`, `critic_head`, and `log_std`.
    """

    action_dim: int
    continuous: bool = False
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    shared_trunk: bool = False

    def __post_init__(self) -> None:
        _check_head_config(self)
        _check_sizes("hidden_sizes", self.hidden_sizes)
        if not isinstance(self.shared_trunk, bool):
            raise ValueError(f"shared_trunk must be a bool, got {self.shared_trunk!r}.")
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[Distribution, jax.Array]:
        """Action distribution and value.

        Args:
          obs: [B, O] observations (any leading batch axes [..., O] work).

        Returns:
          `(dist, value)`: dist with batch shape [B] (logits or mean [B, A]),
          value [B] float32.
        """
        obs = _as_float(obs, "obs", 2, "[B, O] (at least one batch axis)")
        if self.shared_trunk:
            actor_x = critic_x = _mlp(obs, self.hidden_sizes, self.activation, "shared_hidden")
        else:
            actor_x = _mlp(obs, self.hidden_sizes, self.activation, "actor_hidden")
            critic_x = _mlp(obs, self.hidden_sizes, self.activation, "critic_hidden")
        return _heads(self, actor_x, critic_x)


class ActorCriticCNN(nn.Module):
    """A MinAtar-style convolutional actor-critic with a shared trunk.

    Conv(`conv_features`, k x k, stride 1, VALID) -> activation -> flatten ->
    Dense(`hidden_size`) -> activation, then Dense(A, gain 0.01) and
    Dense(1, gain 1.0) heads (the MinAtar DQN torso; for 10x10xC inputs the
    flattened conv output is 8 * 8 * 16 = 1024).

    Attributes:
      action_dim: A.
      continuous: as in `ActorCriticMLP` (MinAtar is discrete).
      conv_features: output channels of the conv layer.
      kernel_size: k, the square kernel's side.
      hidden_size: width of the dense layer after the conv.
      activation: one of `ACTIVATIONS`.

    Parameter names: `conv`, `dense`, `actor_head`, `critic_head` (`log_std`).
    """

    action_dim: int
    continuous: bool = False
    conv_features: int = 16
    kernel_size: int = 3
    hidden_size: int = 128
    activation: str = "relu"

    def __post_init__(self) -> None:
        _check_head_config(self)
        for name in ("conv_features", "kernel_size", "hidden_size"):
            _check_positive_int(name, getattr(self, name))
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[Distribution, jax.Array]:
        """Action distribution and value.

        Args:
          obs: [B, H, W, C] channels-last images, bool or float (any leading
            batch axes [..., H, W, C] work); H, W >= `kernel_size`.

        Returns:
          `(dist, value)`: dist with batch shape [B], value [B] float32.
        """
        obs = _as_float(obs, "obs", 4, "[B, H, W, C] (channels last)")
        if min(obs.shape[-3:-1]) < self.kernel_size:
            raise ValueError(
                f"obs images [H, W]={obs.shape[-3:-1]} must be at least kernel_size="
                f"{self.kernel_size} on each side (obs shape {obs.shape}, expected [B, H, W, C])."
            )
        act = ACTIVATIONS[self.activation]
        x = nn.Conv(
            self.conv_features,
            (self.kernel_size, self.kernel_size),
            padding="VALID",
            kernel_init=orthogonal(HIDDEN_GAIN),
            bias_init=nn.initializers.zeros,
            name="conv",
        )(obs)
        x = act(x)
        x = x.reshape(x.shape[:-3] + (-1,))
        x = act(orthogonal_dense(self.hidden_size, HIDDEN_GAIN, "dense")(x))
        return _heads(self, x, x)


NATURE_CNN_MIN_SIZE = 36
"""The smallest image side `ActorCriticNatureCNN` takes: its three VALID convolutions leave a 1 x 1 map of it."""

# (output channels, kernel side, stride) of the Nature CNN's convolutions.
_NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))


class ActorCriticNatureCNN(nn.Module):
    """The Atari actor-critic: the Nature DQN torso (Mnih et al., 2015) with a shared trunk.

    Conv(32, 8 x 8, stride 4) -> ReLU -> Conv(64, 4 x 4, stride 2) -> ReLU ->
    Conv(64, 3 x 3, stride 1) -> ReLU (all VALID) -> flatten ->
    Dense(`hidden_size`, default 512) -> ReLU, then Dense(A, gain 0.01) and Dense(1, gain
    1.0) heads: CleanRL's `ppo_atari.py` `Agent` and SB3's `NatureCNN`
    (orthogonal sqrt(2) kernels, zero biases). For an 84 x 84 frame stack the
    flattened conv output is 7 * 7 * 64 = 3136.

    `ActorCriticCNN`'s one stride-1 convolution followed by a dense layer
    suits MinAtar's 10 x 10 grids; on an 84 x 84 x 4 Atari frame stack its
    dense layer alone has 13.8 million weights (82 * 82 * 16 features), where
    this network has 1.7 million in all.

    Attributes:
      action_dim: A.
      continuous: as in `ActorCriticMLP`.
      pixels: read uint8 observations as pixel intensities, x / 255 (CleanRL
        divides Atari frames so; SB3 does it for every uint8 image space with
        bounds [0, 255]). Observations of any other dtype (normalised ones,
        float images already in [0, 1]) are used as they are.
      hidden_size: width of the dense layer after the convolutions.
      activation: one of `ACTIVATIONS`, after every layer but the heads (ReLU in the references).

    Parameter names: `conv_0`, `conv_1`, `conv_2`, `dense`, `actor_head`,
    `critic_head` (`log_std`).
    """

    action_dim: int
    continuous: bool = False
    pixels: bool = False
    hidden_size: int = 512
    activation: str = "relu"

    def __post_init__(self) -> None:
        _check_head_config(self)
        _check_positive_int("hidden_size", self.hidden_size)
        if not isinstance(self.pixels, (bool, np.bool_)):
            raise TypeError(f"pixels must be a bool, got {self.pixels!r}.")
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[Distribution, jax.Array]:
        """Action distribution and value.

        Args:
          obs: [B, H, W, C] channels-last images with H, W >= 36 (`NATURE_CNN_MIN_SIZE`);
            uint8, float, or bool (any leading batch axes [..., H, W, C] work).

        Returns:
          `(dist, value)`: dist with batch shape [B], value [B] float32.
        """
        obs = _as_float(obs, "obs", 4, "[B, H, W, C] (channels last)", self.pixels)
        if min(obs.shape[-3:-1]) < NATURE_CNN_MIN_SIZE:
            raise ValueError(f"obs images [H, W]={obs.shape[-3:-1]} must be at least {NATURE_CNN_MIN_SIZE} on each "
                             f"side for the Nature CNN (obs shape {obs.shape}, expected [B, H, W, C]); "
                             "ActorCriticCNN takes smaller ones.")
        batch = obs.shape[:-3]
        x = _nature_convs(obs.reshape((-1, *obs.shape[-3:])), ACTIVATIONS[self.activation], "conv_")
        x = x.reshape(batch + (-1,))
        x = ACTIVATIONS[self.activation](orthogonal_dense(self.hidden_size, HIDDEN_GAIN, "dense")(x))
        return _heads(self, x, x)


def _nature_convs(x: jax.Array, act: Callable, prefix: str) -> jax.Array:
    """The Nature CNN's three convolutions, each followed by `act`, on images [N, H, W, C] (called inside a
    compact module: the layers, `<prefix>0` to `<prefix>2`, are its)."""
    for i, (features, side, stride) in enumerate(_NATURE_CONVS):
        x = act(nn.Conv(features, (side, side), (stride, stride), padding="VALID", kernel_init=orthogonal(HIDDEN_GAIN),
                        bias_init=nn.initializers.zeros, name=f"{prefix}{i}")(x))
    return x


Q_NETWORK_KERNELS = ("torch", "he_normal")
"""`QNetworkCNN.kernels`' choices: DQN's ("torch") and PQN's ("he_normal")."""


class QNetworkCNN(nn.Module):
    """A Q-network for channels-last images: obs [B, H, W, C] -> Q-values [B, A] (DQN's and PQN's `network="cnn"`).

    The torso follows the image size, as the actor-critics' does:

    - `nature=True`, images of at least 36 x 36 (`NATURE_CNN_MIN_SIZE`: Atari frames): the Nature DQN's
      Conv(32, 8 x 8, stride 4) -> Conv(64, 4 x 4, stride 2) -> Conv(64, 3 x 3, stride 1) -> Dense(512), CleanRL's
      `dqn_atari.py` `QNetwork` and purejaxql's `pqn_atari.py` `CNN`;
    - `nature=False`, smaller images (MinAtar's 10 x 10): one Conv(16, k x k, stride 1) -> Dense(128), the DQN of
      the MinAtar paper (Young and Tian, 2019) and purejaxql's `pqn_minatar.py` `CNN`, k = `kernel_size`
      (3; less for an image smaller than that).

    All convolutions VALID, each layer followed by ReLU, then a Dense(A) head. With `layer_norm`, a LayerNorm
    (over the channels, flax's default axis) comes between every layer of the torso and its ReLU: PQN's
    normalisation (purejaxql's NORM_TYPE="layer_norm").

    Attributes:
      action_dim: A.
      nature: which torso (above); `network="auto"` and `"cnn"` choose it by size.
      pixels: read uint8 observations as pixel intensities, x / 255 (as `ActorCriticNatureCNN` does); other
        dtypes (MinAtar's bool grids, floats) are used as they are.
      layer_norm: LayerNorm in the torso (PQN: True; DQN: False).
      kernels: "torch", the torso's and the head's kernels drawn as torch's default for `nn.Conv2d` and `nn.Linear`
        (uniform in +-1/sqrt(fan_in)) with zero biases, as DQN's `QNetwork` draws its layers; or "he_normal",
        purejaxql's (He-normal torso kernels, flax's default head, zero biases).
      kernel_size: the small torso's kernel side (not read by the Nature torso).

    Parameter names: `conv_0` (to `conv_2` with `nature`), `dense`, `head`; with `layer_norm`, `conv_norm_0`
    (to `conv_norm_2`) and `dense_norm`.
    """

    action_dim: int
    nature: bool = False
    pixels: bool = False
    layer_norm: bool = False
    kernels: str = "torch"
    kernel_size: int = 3

    def __post_init__(self) -> None:
        _check_positive_int("action_dim", self.action_dim)
        _check_positive_int("kernel_size", self.kernel_size)
        for name in ("nature", "pixels", "layer_norm"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}.")
        if self.kernels not in Q_NETWORK_KERNELS:
            raise ValueError(f"kernels must be one of {Q_NETWORK_KERNELS}, got {self.kernels!r}.")
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """Q-values [B, A] float32 for images [B, H, W, C] (uint8, bool or float; any leading batch axes)."""
        x = cnn_torso(obs, nature=self.nature, pixels=self.pixels, layer_norm=self.layer_norm, kernels=self.kernels,
                      kernel_size=self.kernel_size)
        head = torch_kernel_init() if self.kernels == "torch" else nn.initializers.lecun_normal()
        return nn.Dense(self.action_dim, kernel_init=head, name="head")(x)


class CNNTorso(NamedTuple):
    """Which image torso `cnn_torso` builds (SAC's and TD3's `network="auto"` and `"cnn"`: their actor's and
    critics' `torso`).

    Attributes:
      nature: the Nature DQN's torso (images of at least `NATURE_CNN_MIN_SIZE` on each side), else MinAtar's one
        convolution.
      pixels: read uint8 observations as x / 255.
      kernel_size: the small torso's kernel side.
    """

    nature: bool = True
    pixels: bool = False
    kernel_size: int = 3


def cnn_torso(obs: jax.Array, *, nature: bool, pixels: bool, layer_norm: bool = False, kernels: str = "torch",
              kernel_size: int = 3) -> jax.Array:
    """`QNetworkCNN`'s torso (its docstring says which layers), called inside a compact module whose layers they
    become: images [..., H, W, C] -> features float32 [..., 512] (Nature) or [..., 128].

    With `kernels="torch"` and no `layer_norm` it is SB3's `NatureCNN` (from 36 x 36), CleanRL's `dqn_atari.py`
    torso, with the channels-last flatten of its last convolution (torch flattens [C, H, W]: the same network up to
    the order of the dense layer's input rows). Parameter names: `conv_0` (to `conv_2` with `nature`), `dense`;
    with `layer_norm`, `conv_norm_0` (to `conv_norm_2`) and `dense_norm`.
    """
    obs = _as_float(obs, "obs", 4, "[B, H, W, C] (channels last)", pixels)
    least = NATURE_CNN_MIN_SIZE if nature else kernel_size
    if min(obs.shape[-3:-1]) < least:
        raise ValueError(f"obs images [H, W]={obs.shape[-3:-1]} must be at least {least} on each side for "
                         f"{'the Nature torso' if nature else f'kernel_size={kernel_size}'} "
                         f"(obs shape {obs.shape}, expected [B, H, W, C]).")
    kernel = torch_kernel_init() if kernels == "torch" else nn.initializers.he_normal()

    def norm_relu(x, name):
        return nn.relu(nn.LayerNorm(name=name)(x) if layer_norm else x)

    layers = _NATURE_CONVS if nature else ((16, kernel_size, 1),)
    batch = obs.shape[:-3]
    x = obs.reshape((-1, *obs.shape[-3:]))
    for i, (features, side, stride) in enumerate(layers):
        x = nn.Conv(features, (side, side), (stride, stride), padding="VALID", kernel_init=kernel,
                    bias_init=nn.initializers.zeros, name=f"conv_{i}")(x)
        x = norm_relu(x, f"conv_norm_{i}")
    x = x.reshape(batch + (-1,))
    x = nn.Dense(512 if nature else 128, kernel_init=kernel, name="dense")(x)
    return norm_relu(x, "dense_norm")


class OneHotObservation(nn.Module):
    """A feedforward `module` of a Discrete(`num_values`) observation: the index [B] as one-hot floats [B, n].

    An index read as one number puts states that are neighbours in numbering,
    not in the game, next to each other (FrozenLake's cell 3 between 2 and 4,
    a row apart from 7); SB3 one-hot encodes Discrete observations, and so does
    this. An index outside [0, n) is all zeros (`jax.nn.one_hot`).

    Attributes:
      num_values: n, the Discrete space's size.
      module: the network on [B, n] (its parameters are under `module`).
    """

    num_values: int
    module: nn.Module

    def __post_init__(self) -> None:
        _check_positive_int("num_values", self.num_values)
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: jax.Array) -> Any:
        return self.module(_one_hot(obs, self.num_values))


class OneHotRecurrentObservation(nn.Module):
    """`OneHotObservation` for a recurrent `module`: `(carry, obs [B]) -> module(carry, one_hot(obs))`, with the
    module's `initial_carry`."""

    num_values: int
    module: nn.Module

    def __post_init__(self) -> None:
        _check_positive_int("num_values", self.num_values)
        super().__post_init__()

    def initial_carry(self, batch_size: int) -> Any:
        return self.module.initial_carry(batch_size)

    @nn.compact
    def __call__(self, carry: Any, obs: jax.Array) -> Any:
        return self.module(carry, _one_hot(obs, self.num_values))


def _one_hot(obs: Any, num_values: int) -> jax.Array:
    obs = jnp.asarray(obs)
    if obs.ndim != 1 or not jnp.issubdtype(obs.dtype, jnp.integer):
        raise ValueError(f"OneHotObservation takes a Discrete({num_values}) observation as integers [B], got "
                         f"{obs.dtype}{list(obs.shape)}.")
    return jax.nn.one_hot(obs, num_values, dtype=jnp.float32)


def leaf_name(path: Sequence[Any]) -> str:
    """The name of an observation leaf: its last dict key, attribute name or index, as a string.

    `{"grid": x}` and a NamedTuple field `grid` both give "grid", so the same
    leaf has the same name (and parameters) whichever container holds it.
    """
    if not path:
        return ""
    entry = path[-1]
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def _param_label(path: Sequence[Any]) -> str:
    """A flax-safe label for a leaf's layers, from its whole path (e.g. "grid", "0", "agent_pos")."""
    parts = [leaf_name([entry]) for entry in path] or ["obs"]
    return "_".join("".join(c if c.isalnum() else "_" for c in part) for part in parts)


class ActorCriticMultiInput(nn.Module):
    """An actor-critic over a pytree of observations, with an encoder per leaf.

    Every leaf [B, ...] is encoded by its shape:

    - images [B, H, W, C]: Conv(`conv_features`, k x k, stride 1, VALID) ->
      activation -> flatten -> Dense(hidden_sizes[0]) -> activation, with
      k = min(`kernel_size`, H, W), so images smaller than the kernel still
      work (a 2x2 image gets a 2x2 kernel); an image of at least 36 x 36
      (`NATURE_CNN_MIN_SIZE`) through `ActorCriticNatureCNN`'s three
      convolutions instead (SB3's MultiInputPolicy gives image leaves its
      NatureCNN too), then flattened into its Dense(hidden_sizes[0]);
    - scalars [B], vectors [B, O] and rank-2 arrays without channels
      [B, H, W] (flattened): Dense(hidden_sizes[0]) -> activation;
    - a Discrete leaf (an index [B], named in `one_hot`): its one-hot vector
      [B, n], then as a vector (SB3's MultiInputPolicy reads it so too).

    The encodings are concatenated in the pytree's leaf order and read by
    separate actor and critic trunks (Dense layers of hidden_sizes[1:]) and
    the heads of `ActorCriticMLP` (gains: sqrt(2) hidden, 0.01 actor, 1.0
    critic; orthogonal kernels, zero biases). Bool and int leaves are cast to
    float32.

    Action masks: a leaf whose name (`leaf_name`: its dict key, NamedTuple
    field or tuple index) is in `mask_keys` is not a feature. It must be
    bool [B, A]; True marks an allowed action, and the logits of the others
    are set to -inf (`distributions.masked_logits`), so the `Categorical` is
    the distribution renormalised over the allowed actions: masked actions
    have probability 0, and `log_prob` and `entropy` are the renormalised
    distribution's. A row with no allowed action (some envs give one at a
    terminal observation, which the rollout only values, never acts on) is
    left unmasked rather than turned into NaN. Masks need a discrete action
    space.

    Attributes:
      action_dim: A.
      continuous: as in `ActorCriticMLP` (then no leaf may be a mask).
      hidden_sizes: hidden_sizes[0] is each leaf encoder's width; the rest
        are the widths of the actor and critic trunks after the concatenation.
      activation: one of `ACTIVATIONS`, for every layer.
      conv_features: output channels of an image leaf's conv layer.
      kernel_size: the conv kernel's side for images of at least that size.
      mask_keys: names of leaves that are action masks.
      one_hot: per leaf, in the pytree's leaf order, the number of classes
        of a leaf read one-hot (a Discrete space's n), 0 for the others;
        empty (the default) for none. `choose_network` fills it from the
        observation space.
      pixels: per leaf, in the pytree's leaf order, whether a uint8 leaf is
        pixel intensities, read x / 255 (`ActorCriticNatureCNN.pixels`);
        empty (the default) for none. `choose_network` fills it from the
        observation space (`is_pixel_space`: uint8 bounded by 0 and 255).

    Parameter names: `conv_<leaf>` (a large image's `conv_<leaf>_0` to
    `conv_<leaf>_2`) and `encoder_<leaf>` per leaf (the leaf's path joined by "_"), `actor_hidden_{i}`, `critic_hidden_{i}`,
    `actor_head`, `critic_head` (`log_std`).
    """

    action_dim: int
    continuous: bool = False
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    conv_features: int = 16
    kernel_size: int = 3
    mask_keys: Sequence[str] = ACTION_MASK_KEYS
    one_hot: Sequence[int] = ()
    pixels: Sequence[bool] = ()

    def __post_init__(self) -> None:
        if isinstance(self.one_hot, (str, bytes)) or any(
                not _checks.is_int(n) or n < 0 for n in self.one_hot):
            raise ValueError(f"one_hot must hold an int >= 0 per observation leaf (0: not one-hot), got {self.one_hot!r}.")
        if isinstance(self.pixels, (str, bytes)) or any(not isinstance(b, (bool, np.bool_)) for b in self.pixels):
            raise ValueError(f"pixels must hold a bool per observation leaf, got {self.pixels!r}.")
        _check_head_config(self)
        _check_sizes("hidden_sizes", self.hidden_sizes)
        if not self.hidden_sizes:
            raise ValueError("hidden_sizes must hold at least the encoders' width, got ().")
        for name in ("conv_features", "kernel_size"):
            _check_positive_int(name, getattr(self, name))
        if isinstance(self.mask_keys, str) or not all(isinstance(k, str) for k in self.mask_keys):
            raise ValueError(f"mask_keys must be a sequence of leaf names, got {self.mask_keys!r}.")
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: PyTree) -> tuple[Distribution, jax.Array]:
        """Action distribution and value.

        Args:
          obs: a pytree of [B, ...] arrays with one batch axis B (a single
            array works too); mask leaves bool [B, A].

        Returns:
          `(dist, value)`: dist with batch shape [B] (logits or mean [B, A]),
          value [B] float32.
        """
        act = ACTIVATIONS[self.activation]
        leaves = jax.tree_util.tree_flatten_with_path(obs)[0]
        if not leaves:
            raise ValueError("obs must hold at least one array leaf [B, ...], got an empty pytree.")
        batch = {jnp.shape(leaf)[:1] for _, leaf in leaves}
        if len(batch) != 1 or () in batch:
            shapes = {jax.tree_util.keystr(p): jnp.shape(x) for p, x in leaves}
            raise ValueError(f"obs leaves must share one leading batch axis [B, ...], got shapes {shapes}.")
        for name in ("one_hot", "pixels"):
            if getattr(self, name) and len(getattr(self, name)) != len(leaves):
                raise ValueError(f"{name} has {len(getattr(self, name))} entries for an observation of {len(leaves)} "
                                 "leaves; it needs one per leaf, in the pytree's leaf order.")
        features, mask = [], None
        for i, (path, leaf) in enumerate(leaves):
            where = f"obs{jax.tree_util.keystr(path)}"
            if leaf_name(path) in self.mask_keys:
                mask = self._check_mask(jnp.asarray(leaf), where)
                continue
            if self.one_hot and self.one_hot[i]:
                if jnp.ndim(leaf) != 1 or not jnp.issubdtype(jnp.result_type(leaf), jnp.integer):
                    raise ValueError(f"{where} is read one-hot (a Discrete leaf), so it must be integer indices [B], "
                                     f"got {jnp.result_type(leaf)}{list(jnp.shape(leaf))}.")
                leaf = jax.nn.one_hot(leaf, self.one_hot[i], dtype=jnp.float32)
            x = _as_float(leaf, where, 1, "[B, ...]", bool(self.pixels) and self.pixels[i])
            label = _param_label(path)
            if x.ndim == 4 and min(x.shape[1:3]) >= NATURE_CNN_MIN_SIZE:
                x = _nature_convs(x, act, f"conv_{label}_")
            elif x.ndim == 4:
                k = min(self.kernel_size, *x.shape[1:3])
                x = nn.Conv(
                    self.conv_features,
                    (k, k),
                    padding="VALID",
                    kernel_init=orthogonal(HIDDEN_GAIN),
                    bias_init=nn.initializers.zeros,
                    name=f"conv_{label}",
                )(x)
                x = act(x)
            elif x.ndim > 4:
                raise ValueError(
                    f"{where} has shape {x.shape}: ActorCriticMultiInput encodes leaves of shape [B], [B, O], "
                    "[B, H, W] or [B, H, W, C] (channels-last images); flatten or split larger ones in the env."
                )
            x = x.reshape(x.shape[0], -1)
            features.append(act(orthogonal_dense(self.hidden_sizes[0], HIDDEN_GAIN, f"encoder_{label}")(x)))
        if not features:
            raise ValueError(f"obs holds only action masks ({', '.join(self.mask_keys)}), no features to encode.")
        x = jnp.concatenate(features, axis=-1)
        actor_x = _mlp(x, self.hidden_sizes[1:], self.activation, "actor_hidden")
        critic_x = _mlp(x, self.hidden_sizes[1:], self.activation, "critic_hidden")
        if mask is not None:
            # No allowed action at all: leave the row unmasked (see the class docstring).
            mask = mask | ~jnp.any(mask, axis=-1, keepdims=True)
        return _heads(self, actor_x, critic_x, mask)

    @nn.nowrap
    def _check_mask(self, mask: jax.Array, where: str) -> jax.Array:
        if self.continuous:
            raise ValueError(f"{where} is an action mask, but masks need discrete actions (continuous=True).")
        if mask.dtype != jnp.bool_ or mask.ndim != 2 or mask.shape[-1] != self.action_dim:
            raise ValueError(
                f"{where} is an action mask and must be bool [B, A] with A=action_dim={self.action_dim}, "
                f"got {mask.dtype}{mask.shape}."
            )
        return mask


class ActorCriticGRU(nn.Module):
    """One step of a recurrent actor-critic (PureJaxRL `ppo_rnn`).

    Dense(`embed_size`) -> activation -> GRUCell(`hidden_size`) -> for each
    of actor and critic, Dense(`head_sizes`) -> activation -> head. The carry
    is used as given: zeroing it at episode starts is the caller's job
    (`jaxrl_rollout.rollout` does it, and so does `networks.unroll`).

    Attributes:
      action_dim: A.
      continuous: as in `ActorCriticMLP`.
      hidden_size: H, the GRU state size.
      embed_size: width of the observation embedding.
      head_sizes: hidden widths of each head after the GRU (empty: heads read
        the GRU output directly).
      activation: one of `ACTIVATIONS`, for the embedding and head layers.

    Parameter names: `embed`, `gru`, `actor_hidden_{i}`, `critic_hidden_{i}`,
    `actor_head`, `critic_head` (`log_std`).
    """

    action_dim: int
    continuous: bool = False
    hidden_size: int = 128
    embed_size: int = 128
    head_sizes: Sequence[int] = (128,)
    activation: str = "relu"

    def __post_init__(self) -> None:
        _check_head_config(self)
        _check_positive_int("hidden_size", self.hidden_size)
        _check_positive_int("embed_size", self.embed_size)
        _check_sizes("head_sizes", self.head_sizes)
        super().__post_init__()

    @nn.nowrap
    def initial_carry(self, batch_size: int) -> jax.Array:
        """Zeros [B, H] float32: the carry to pass to `rollout_init(initial_carry=...)`."""
        _check_positive_int("batch_size", batch_size)
        return jnp.zeros((batch_size, self.hidden_size), jnp.float32)

    @nn.compact
    def __call__(self, carry: jax.Array, obs: jax.Array) -> tuple[jax.Array, tuple[Distribution, jax.Array]]:
        """One recurrent step.

        Args:
          carry: [B, H] float GRU state (already reset where an episode starts).
          obs: [B, ...] observations; trailing axes are flattened.

        Returns:
          `(new_carry [B, H], (dist, value [B]))`, dist with batch shape [B].
        """
        carry = jnp.asarray(carry)
        if carry.shape[-1:] != (self.hidden_size,) or carry.ndim != 2:
            raise ValueError(
                f"carry must have shape [B, H] with H=hidden_size={self.hidden_size}, got {carry.shape}."
            )
        obs = _as_float(obs, "obs", 1, "[B, ...]")
        if obs.shape[0] != carry.shape[0]:
            raise ValueError(
                f"obs [B, ...] and carry [B, H] must share B, got obs {obs.shape} and carry {carry.shape}."
            )
        x = obs.reshape(obs.shape[0], -1)
        x = ACTIVATIONS[self.activation](orthogonal_dense(self.embed_size, HIDDEN_GAIN, "embed")(x))
        # flax's default recurrent init (orthogonal), built without LAPACK (see `householder_q` in init.py).
        new_carry, h = nn.GRUCell(self.hidden_size, recurrent_kernel_init=orthogonal(), name="gru")(carry, x)
        actor_x = _mlp(h, self.head_sizes, self.activation, "actor_hidden")
        critic_x = _mlp(h, self.head_sizes, self.activation, "critic_hidden")
        return new_carry, _heads(self, actor_x, critic_x)
