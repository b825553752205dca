"""Flax linen actor-critics with PyTorch's orthogonal init, and policies built from them.

This is the only module of the package that imports `flax.linen`; the rollout
itself only sees plain callables.

Modules (all return a distribution from `jaxrl_rollout.distributions` and a
value of the batch shape):

- `ActorCriticMLP`: `obs [B, O] -> (dist, value [B])`, separate actor and
  critic trunks (CleanRL `ppo.py` / `ppo_continuous_action.py`, PureJaxRL) or
  a shared one; `Categorical` logits or a `DiagGaussian` with a
  state-independent learned `log_std` initialised to 0.
- `ActorCriticCNN`: MinAtar-style images `[B, H, W, C] -> (dist, value [B])`.
- `ActorCriticMultiInput`: pytree observations (dicts, tuples, NamedTuples)
  `{leaf: [B, ...]} -> (dist, value [B])`, one encoder per leaf (a conv
  torso for images, a dense torso for flattened vectors and scalars), the
  features concatenated, then actor and critic trunks; a leaf named in
  `ACTION_MASK_KEYS` masks the logits instead of being a feature.
- `ActorCriticGRU`: one recurrent step
  `(carry [B, H], obs [B, ...]) -> (new_carry, (dist, value [B]))`. It never
  resets its carry: the rollout zeroes it at episode starts
  (`jaxrl_rollout.reset_carry`) and `unroll` replays that rule for a learner.

Every Dense (and Conv) kernel is `orthogonal(gain)` with zero bias, which on a
flax (in, out) kernel mirrors torch's `orthogonal_(W, gain)` on the (out, in)
weight (../SEMANTICS.md section 11):
gain sqrt(2) for hidden layers, 0.01 for the actor head and 1.0 for the critic
head (ARENA / CleanRL `layer_init`). The GRU cell keeps flax's own init
(torch's `nn.GRU` has no `layer_init` counterpart in the references).
The MLP and head layers are `_Dense`: `nn.Dense`'s parameters and numbers,
without flax's re-run of the initializer on every `apply`.

Policies:

- `feedforward_policy(module)` -> `policy_fn(params, obs, key) -> PolicyOutput`
- `recurrent_policy(module)` -> `policy_fn(params, obs, key, carry) ->
  (PolicyOutput, new_carry)`
- `unroll(module, params, initial_carry, obs, first)` replays a recurrent
  module over a `[T, B, ...]` trajectory to recompute log-probs and values.

Bringing your own network: `module` may be any flax linen module (its `apply`
is used) or any plain function `apply_fn(params, obs) -> (dist, value)`
(recurrent: `apply_fn(params, carry, obs) -> (new_carry, (dist, value))`),
where `dist` has `sample(key)`, `mode()` and `log_prob(action)` (build it with
`distributions.categorical_from_logits` or `distributions.diag_gaussian`) and
`value` has the batch shape [B]. A flax nnx model plugs in through
`nnx.split` / `nnx.merge`::

    graphdef, state = nnx.split(model)          # model(obs) -> (dist, value)
    policy_fn = feedforward_policy(lambda state, obs: nnx.merge(graphdef, state)(obs))
    # pass `state` as the rollout's params

A network that returns logits rather than a distribution can be wrapped the
same way (`lambda p, obs: (categorical_from_logits(l), v)` after calling it),
or used directly with `jaxrl_rollout.categorical_policy`.
"""

from __future__ import annotations

import contextvars
import functools
import math
import numbers
from collections.abc import Sequence
from typing import Any, Callable, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import prng
from jaxrl_rollout.distributions import (
    Categorical,
    DiagGaussian,
    categorical_from_logits,
    diag_gaussian,
    masked_logits,
)
from jaxrl_rollout.stepping import reset_carry
from jaxrl_rollout.types import PolicyOutput, PyTree

__all__ = [
    "ACTION_MASK_KEYS",
    "ACTIVATIONS",
    "ACTOR_HEAD_GAIN",
    "CRITIC_HEAD_GAIN",
    "HIDDEN_GAIN",
    "ActorCriticCNN",
    "ActorCriticGRU",
    "ActorCriticMLP",
    "ActorCriticMultiInput",
    "batched_init",
    "leaf_name",
    "feedforward_policy",
    "recurrent_policy",
    "unroll",
]

HIDDEN_GAIN = math.sqrt(2.0)
ACTOR_HEAD_GAIN = 0.01
CRITIC_HEAD_GAIN = 1.0
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"tanh": nn.tanh, "relu": nn.relu}
ACTION_MASK_KEYS = ("action_mask", "legal_action_mask")
"""Observation leaves with these names are action masks (jumanji's `action_mask`, pgx's `legal_action_mask`)."""

Distribution = Union[Categorical, DiagGaussian]


# --------------------------------------------------------------------------
# Construction checks and layers
# --------------------------------------------------------------------------


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")


def _check_sizes(name: str, sizes: Any) -> None:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise ValueError(f"{name} must be a sequence of positive ints, got {sizes!r}.")
    for i, size in enumerate(sizes):
        _check_positive_int(f"{name}[{i}]", size)


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


@jax.jit
def _householder_q(a: jax.Array) -> jax.Array:
    """Q [..., m, n] of the QR decompositions of a [..., m, n] (m >= n) whose R has a non-negative diagonal.

    Householder reflections in plain jnp ops (a `fori_loop` over columns), so
    no LAPACK custom call is emitted. jaxlib's CPU `geqrf` kernel splits a
    batched QR (what `vmap` over seeds makes of an init) into tasks on XLA's
    intra-op thread pool and blocks a pool thread until they finish; with two
    such kernels running at once on a 2-thread pool the process deadlocks
    (seen on this project's 2-core CI machine). The Q of a full-rank matrix
    with R's diagonal made non-negative is unique, so this equals
    `jnp.linalg.qr` followed by the sign fix up to float rounding.

    Leading axes are a batch, handled by the ops themselves: the operations
    `vmap` would produce, without `vmap` batching the loop body again at each
    trace (py-spy put `batched_init`'s vmapped QR at 12% of the trace and
    lowering samples of a PPO train over 8 vmapped seeds). Jitted so that it
    is traced once per shape.
    """
    *batch, m, n = a.shape
    rows = jnp.arange(m)
    hi = jax.lax.Precision.HIGHEST
    nb = len(batch)
    batch_dims = tuple(range(nb))
    # v [..., m] . r [..., m, n] -> [..., n], and q [..., m, m] . v [..., m] -> [..., m]
    vr_dims = (((nb,), (nb,)), (batch_dims, batch_dims))
    qv_dims = (((nb + 1,), (nb,)), (batch_dims, batch_dims))

    def reflect(k, carry):
        r, q = carry
        x = jnp.where(rows >= k, jax.lax.dynamic_index_in_dim(r, k, axis=nb + 1, keepdims=False), 0.0)
        norm = jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))
        x_k = jax.lax.dynamic_index_in_dim(x, k, axis=nb, keepdims=True)
        alpha = jnp.where(x_k >= 0, -norm, norm)  # the sign that avoids cancellation
        v = x - alpha * (rows == k)
        v_norm = jnp.sqrt(jnp.sum(v * v, axis=-1, keepdims=True))
        v = jnp.where(v_norm > 0, v / jnp.where(v_norm > 0, v_norm, 1.0), 0.0)
        vr = jax.lax.dot_general(v, r, vr_dims, precision=hi)
        r = r - 2.0 * (v[..., :, None] * vr[..., None, :])
        qv = jax.lax.dot_general(q, v, qv_dims, precision=hi)
        q = q - 2.0 * (qv[..., :, None] * v[..., None, :])
        return r, q

    eye = jnp.broadcast_to(jnp.eye(m, dtype=a.dtype), (*batch, m, m))
    r, q = jax.lax.fori_loop(0, n, reflect, (a, eye))
    q = q[..., :, :n]
    diag = jnp.diagonal(r, axis1=-2, axis2=-1)[..., :n]
    return q * jnp.where(diag < 0, -1.0, 1.0).astype(a.dtype)[..., None, :]


# Set only while `batched_init` asks flax for the parameter shapes (under `eval_shape`):
# the orthogonal draws would be traced for nothing there.
_SHAPES_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("jaxrl_rollout_shapes_only", default=False)


def orthogonal(scale: float = 1.0, column_axis: int = -1) -> Callable:
    """Orthogonal kernel initializer (torch's `orthogonal_`), with no LAPACK call.

    The same construction as `jax.nn.initializers.orthogonal`: a standard
    normal matrix shaped (rows, cols), transposed when wide, its QR's Q with
    sign(diag R) applied, transposed back and scaled. Only the QR differs
    (`_householder_q`), which keeps vmapped inits off the CPU LAPACK kernel.
    """
    scale, column_axis = float(scale), int(column_axis)

    def init(key, shape, dtype=jnp.float32):
        if len(shape) < 2:
            raise ValueError(f"orthogonal init needs a kernel of rank >= 2, got shape {tuple(shape)}.")
        if _SHAPES_ONLY.get():
            return jnp.zeros(shape, dtype)
        return _orthogonal_draw(key, tuple(int(d) for d in shape), jnp.dtype(dtype), scale, column_axis)

    return init


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _orthogonal_draw(key, shape, dtype, scale, column_axis):
    """`orthogonal(scale, column_axis)(key, shape, dtype)`.

    Jitted, so it is traced once per shape: flax's own layers (the conv of
    `ActorCriticCNN`, the GRU cell's recurrent kernel) evaluate their
    initializer again on every `apply` to check the stored parameter's shape.
    """
    cols = shape[column_axis]
    rows = math.prod(shape) // cols
    wide = rows < cols
    a = jax.random.normal(key, (cols, rows) if wide else (rows, cols), jnp.float32)
    q = _householder_q(a)
    if wide:
        q = q.T
    other = tuple(d for i, d in enumerate(shape) if i != column_axis % len(shape))
    q = jnp.moveaxis(q.reshape(other + (cols,)), -1, column_axis)
    return (scale * q).astype(dtype)


class _Dense(nn.Module):
    """`nn.Dense(features)` with an `orthogonal(gain)` kernel and zero bias, the same parameters and numbers.

    The one difference is in `apply`: flax's `Module.param` evaluates the
    initializer again on every call to check the stored parameter's shape,
    which for an orthogonal kernel means tracing a normal draw and a QR loop
    per layer per `apply` (py-spy: a fifth of the trace and lowering samples
    of a one-seed PPO train). Here a stored parameter's shape is checked
    directly, and the initializer runs only when the parameter is created.
    """

    features: int
    gain: float

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        kernel = self._param("kernel", orthogonal(self.gain), (jnp.shape(inputs)[-1], self.features))
        bias = self._param("bias", nn.initializers.zeros, (self.features,))
        dtype = jnp.result_type(inputs, kernel, bias)
        inputs, kernel, bias = (jnp.asarray(x, dtype) for x in (inputs, kernel, bias))
        y = jax.lax.dot_general(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())))
        return y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))

    def _param(self, name: str, init: Callable, shape: tuple[int, ...]) -> jax.Array:
        if self.has_variable("params", name):
            value = self.get_variable("params", name)
            if tuple(jnp.shape(value)) != shape:
                raise ValueError(
                    f"parameter {'/'.join(self.path)}/{name} has shape {tuple(jnp.shape(value))}, "
                    f"but this layer needs {shape} (input features {shape[0]}, features {self.features}); "
                    "were the params initialised for another observation shape or module config?"
                )
            return value
        return self.param(name, init, shape, jnp.float32)


def _dense(features: int, gain: float, name: str) -> nn.Module:
    """torch `layer_init(nn.Linear(in, features), std=gain)`: orthogonal kernel, zero bias."""
    return _Dense(features, gain, name=name)


def _mlp(x: jax.Array, sizes: Sequence[int], activation: str, prefix: str) -> jax.Array:
    act = ACTIVATIONS[activation]
    for i, size in enumerate(sizes):
        x = act(_dense(size, HIDDEN_GAIN, f"{prefix}_{i}")(x))
    return x


def _heads(
    module: nn.Module, actor_x: jax.Array, critic_x: jax.Array, action_mask: Union[jax.Array, None] = None
) -> tuple[Distribution, jax.Array]:
    """The actor head (logits or mean, plus log_std) and the critic head of `module`.

    Called inside the module's compact `__call__`, so the layers and the
    `log_std` parameter belong to it. `action_mask` ([B, A] bool, discrete
    only) sets the logits of masked actions to -inf (`masked_logits`).
    """
    head = _dense(module.action_dim, ACTOR_HEAD_GAIN, "actor_head")(actor_x)
    if action_mask is not None:
        head = masked_logits(head, action_mask)
    if module.continuous:
        # CleanRL: a state-independent nn.Parameter(torch.zeros(1, A)), expanded to the mean.
        log_std = module.param("log_std", nn.initializers.zeros, (module.action_dim,), jnp.float32)
        dist: Distribution = diag_gaussian(head, log_std)
    else:
        dist = categorical_from_logits(head)
    value = _dense(1, CRITIC_HEAD_GAIN, "critic_head")(critic_x)[..., 0]
    return dist, value


def _as_float(x: Any, name: str, min_rank: int, expected: str) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim < min_rank:
        raise ValueError(f"{name} must have shape {expected}, got shape {x.shape}.")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)  # MinAtar observations are bool, discrete ones int
    return x


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


# The largest padded kernel `batched_init` handles; larger MLPs use module.init (the
# batched QR costs P^3 per kernel).
_BATCHED_INIT_MAX_SIZE = 256


def _mlp_layer_gain(layer: str) -> Union[float, None]:
    """The orthogonal gain of an `ActorCriticMLP` layer by name, or None for an unknown name."""
    if layer == "actor_head":
        return ACTOR_HEAD_GAIN
    if layer == "critic_head":
        return CRITIC_HEAD_GAIN
    prefix, _, index = layer.rpartition("_")
    if prefix in ("actor_hidden", "critic_hidden", "shared_hidden") and index.isdigit():
        return HIDDEN_GAIN
    return None


def batched_init(module: nn.Module, key: jax.Array, obs: jax.Array) -> PyTree:
    """Initial parameters of `module`, drawn in one batch for an `ActorCriticMLP`.

    `module.init(key, obs)` draws and orthogonalises each kernel on its own:
    a key derivation, a normal draw and a QR loop per layer, which XLA
    compiles separately (about 200 kernels for the 64x64 actor-critic, over
    a second of a PPO train's compile time on 2 CPU cores). For an
    `ActorCriticMLP` this function gives the same initialisation (orthogonal
    kernels with the layer's gain, zero biases and `log_std`) from one normal
    draw and one batched Householder loop over all kernels, each zero-padded
    to a common square size. The padding changes only rounding: no reflection
    touches a zero row and a zero column reflects nothing, so the top-left
    block of each padded Q is the Q of the kernel's own normal matrix.

    The distribution is module.init's, the values are not: the key is used
    differently. Any other module, or an MLP wider than 256 units, gets
    `module.init(key, obs)`.

    Args:
      module: a flax module.
      key: PRNG key.
      obs: a sample observation batch, as for `module.init`.

    Returns:
      The variables dict `module.init` would return.
    """
    if not isinstance(module, ActorCriticMLP):
        return module.init(key, obs)
    token = _SHAPES_ONLY.set(True)
    try:
        shapes = jax.eval_shape(module.init, key, obs)
    finally:
        _SHAPES_ONLY.reset(token)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(shapes)
    kernels = []  # (leaf index, tall shape (m, n), wide, gain)
    for i, (path, leaf) in enumerate(leaves):
        names = [getattr(entry, "key", None) for entry in path]
        if names[-1] == "kernel" and len(names) == 3:
            gain = _mlp_layer_gain(names[-2])
            if gain is None or len(leaf.shape) != 2:
                return module.init(key, obs)
            rows, cols = leaf.shape
            kernels.append((i, (max(rows, cols), min(rows, cols)), rows < cols, gain))
        elif names[-1] not in ("bias", "log_std"):
            return module.init(key, obs)
    size = 1 << max(max(m for _, (m, _), _, _ in kernels) - 1, 1).bit_length()
    if size > _BATCHED_INIT_MAX_SIZE:
        return module.init(key, obs)
    mask = np.zeros((len(kernels), size, size), np.float32)
    for j, (_, (m, n), _, _) in enumerate(kernels):
        mask[j, :m, :n] = 1.0
    # One 1-D draw: rank-1 random draws compile faster on CPU than rank-3 ones.
    normal = jax.random.normal(prng.fused(key), (mask.size,), jnp.float32).reshape(mask.shape) * mask
    q = _householder_q(normal)
    values = [jnp.zeros(leaf.shape, leaf.dtype) for _, leaf in leaves]
    for j, (i, (m, n), wide, gain) in enumerate(kernels):
        kernel = q[j, :m, :n]
        values[i] = (gain * (kernel.T if wide else kernel)).astype(leaves[i][1].dtype)
    return jax.tree_util.tree_unflatten(treedef, values)


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
        x = act(_dense(self.hidden_size, HIDDEN_GAIN, "dense")(x))
        return _heads(self, x, x)


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
      work (a 2x2 image gets a 2x2 kernel);
    - scalars [B], vectors [B, O] and rank-2 arrays without channels
      [B, H, W] (flattened): Dense(hidden_sizes[0]) -> activation.

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

    Parameter names: `conv_<leaf>` and `encoder_<leaf>` per leaf (the leaf's
    path joined by "_"), `actor_hidden_{i}`, `critic_hidden_{i}`,
    `actor_head`, `critic_head` (`log_std`).
    """

    action_dim: int
    continuous: bool = False
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    conv_features: int = 16
    kernel_size: int = 3
    mask_keys: Sequence[str] = ACTION_MASK_KEYS

    def __post_init__(self) -> None:
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
        features, mask = [], None
        for path, leaf in leaves:
            where = f"obs{jax.tree_util.keystr(path)}"
            if leaf_name(path) in self.mask_keys:
                mask = self._check_mask(jnp.asarray(leaf), where)
                continue
            x = _as_float(leaf, where, 1, "[B, ...]")
            label = _param_label(path)
            if x.ndim == 4:
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
            features.append(act(_dense(self.hidden_sizes[0], HIDDEN_GAIN, f"encoder_{label}")(x)))
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
    (`jaxrl_rollout.rollout` does it, and so does `unroll`).

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
        x = ACTIVATIONS[self.activation](_dense(self.embed_size, HIDDEN_GAIN, "embed")(x))
        # flax's default recurrent init (orthogonal), built without LAPACK (see `_householder_q`).
        new_carry, h = nn.GRUCell(self.hidden_size, recurrent_kernel_init=orthogonal(), name="gru")(carry, x)
        actor_x = _mlp(h, self.head_sizes, self.activation, "actor_hidden")
        critic_x = _mlp(h, self.head_sizes, self.activation, "critic_hidden")
        return new_carry, _heads(self, actor_x, critic_x)


# --------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------


def _as_apply_fn(module: Any) -> Callable:
    if isinstance(module, nn.Module):
        return module.apply
    if callable(module):
        return module
    raise TypeError(
        "module must be a flax linen Module or a callable apply_fn(params, ...), got "
        f"{type(module).__name__}."
    )


def _check_dist(dist: Any, where: str) -> None:
    missing = [m for m in ("sample", "mode", "log_prob") if not callable(getattr(dist, m, None))]
    if missing:
        raise TypeError(
            f"{where} must return a distribution with sample(key), mode() and log_prob(action) "
            f"(e.g. distributions.categorical_from_logits(logits)); got {type(dist).__name__} "
            f"without {missing}. For a network returning (logits, value) use "
            "jaxrl_rollout.categorical_policy."
        )


def _split_output(out: Any, where: str) -> tuple[Any, jax.Array]:
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"{where} must return (dist, value), got {type(out).__name__}.")
    dist, value = out
    _check_dist(dist, where)
    return dist, value


def _act(dist: Any, value: jax.Array, key: jax.Array, deterministic: bool, where: str) -> PolicyOutput:
    action = dist.mode() if deterministic else dist.sample(key)
    log_prob = dist.log_prob(action)
    if jnp.shape(value) != jnp.shape(log_prob):
        raise ValueError(
            f"{where} must return a value of the distribution's batch shape "
            f"{jnp.shape(log_prob)} ([B]), got {jnp.shape(value)}; squeeze a critic output [B, 1]."
        )
    return PolicyOutput(action=action, log_prob=log_prob, value=value)


def _check_deterministic(deterministic: Any) -> None:
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {deterministic!r}.")


def feedforward_policy(
    module: Any, deterministic: bool = False
) -> Callable[[PyTree, PyTree, jax.Array], PolicyOutput]:
    """A rollout policy from a module returning `(dist, value)`.

    Args:
      module: a flax linen module with `__call__(obs) -> (dist, value)` (e.g.
        `ActorCriticMLP`, `ActorCriticCNN`), or any function
        `apply_fn(params, obs) -> (dist, value)`.
      deterministic: act with `dist.mode()` (argmax, or the mean) instead of
        sampling; `log_prob` is then that of the mode.

    Returns:
      `policy_fn(params, obs [B, ...], key) -> PolicyOutput(action, log_prob [B],
      value [B])`. For continuous actions the action is the raw, unclipped
      sample and `log_prob` is its density (CleanRL); clip only when sending it
      to the env.
    """
    _check_deterministic(deterministic)
    apply_fn = _as_apply_fn(module)

    def policy_fn(params: PyTree, obs: PyTree, key: jax.Array) -> PolicyOutput:
        dist, value = _split_output(apply_fn(params, obs), "apply_fn(params, obs)")
        return _act(dist, value, key, deterministic, "apply_fn(params, obs)")

    return policy_fn


def _split_recurrent(out: Any, where: str) -> tuple[PyTree, Any, jax.Array]:
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"{where} must return (new_carry, (dist, value)), got {type(out).__name__}.")
    new_carry, dist_value = out
    dist, value = _split_output(dist_value, where)
    return new_carry, dist, value


def recurrent_policy(
    module: Any, deterministic: bool = False
) -> Callable[[PyTree, PyTree, jax.Array, PyTree], tuple[PolicyOutput, PyTree]]:
    """A recurrent rollout policy from a module stepping `(carry, obs)`.

    Args:
      module: a flax linen module with `__call__(carry, obs) -> (new_carry,
        (dist, value))` (e.g. `ActorCriticGRU`), or any function
        `apply_fn(params, carry, obs) -> (new_carry, (dist, value))`.
      deterministic: act with `dist.mode()` instead of sampling.

    Returns:
      `policy_fn(params, obs [B, ...], key, carry) -> (PolicyOutput, new_carry)`,
      the rollout's recurrent signature. The carry it receives has already been
      reset by the rollout where an episode starts.
    """
    _check_deterministic(deterministic)
    apply_fn = _as_apply_fn(module)
    where = "apply_fn(params, carry, obs)"

    def policy_fn(params: PyTree, obs: PyTree, key: jax.Array, carry: PyTree) -> tuple[PolicyOutput, PyTree]:
        new_carry, dist, value = _split_recurrent(apply_fn(params, carry, obs), where)
        return _act(dist, value, key, deterministic, where), new_carry

    return policy_fn


def unroll(
    module: Any,
    params: PyTree,
    initial_carry: PyTree,
    obs: PyTree,
    first: jax.Array,
) -> tuple[Any, jax.Array]:
    """Replays a recurrent module over a time-major sequence, as the rollout ran it.

    Before step t the carry is `reset_carry(carry, first[t])`, exactly the
    rollout's rule, so with `initial_carry = traj.carry[0]` (the raw carry at
    the start of the rollout), `obs = traj.obs` and `first = traj.first`,
    `dist.log_prob(traj.action)` and `value` reproduce `traj.log_prob` and
    `traj.value` (torch-ac's recurrent `evaluate` with `memory * mask`).

    Args:
      module: a recurrent linen module or `apply_fn(params, carry, obs) ->
        (new_carry, (dist, value))`, as in `recurrent_policy`.
      params: the module's parameters.
      initial_carry: pytree of [B, ...] arrays, the carry before the reset for
        `first[0]`.
      obs: pytree of [T, B, ...] observations.
      first: [T, B] bool, obs[t] starts an episode.

    Returns:
      `(dist, value)`: the distributions stacked over time (batch shape
      [T, B], e.g. logits [T, B, A]) and values [T, B].
    """
    apply_fn = _as_apply_fn(module)
    first = jnp.asarray(first)
    if first.ndim != 2:
        raise ValueError(f"first must have shape [T, B], got {first.shape}.")
    num_steps, batch_size = first.shape
    for path, leaf in jax.tree_util.tree_leaves_with_path(obs):
        if jnp.shape(leaf)[:2] != (num_steps, batch_size):
            raise ValueError(
                f"obs{jax.tree_util.keystr(path)} must have shape [T, B, ...] with "
                f"[T, B]={first.shape} from first, got {jnp.shape(leaf)}."
            )
    for path, leaf in jax.tree_util.tree_leaves_with_path(initial_carry):
        if jnp.shape(leaf)[:1] != (batch_size,):
            raise ValueError(
                f"initial_carry{jax.tree_util.keystr(path)} must have shape [B, ...] with "
                f"B={batch_size} from first, got {jnp.shape(leaf)}."
            )
    where = "apply_fn(params, carry, obs)"

    def step(carry, inputs):
        obs_t, first_t = inputs
        new_carry, dist, value = _split_recurrent(apply_fn(params, reset_carry(carry, first_t), obs_t), where)
        return new_carry, (dist, value)

    _, (dist, value) = jax.lax.scan(step, initial_carry, (obs, first))
    return dist, value
