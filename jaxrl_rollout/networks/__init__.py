"""Flax linen actor-critics with PyTorch's orthogonal init, and policies built from them.

This is the only part of the package that imports `flax.linen`; the rollout
itself only sees plain callables. Everything is reachable as
`jaxrl_rollout.networks.X`; the files hold, by kind:

- `init.py`: initialisation with PyTorch's numbers. `orthogonal(gain)` (torch's
  `orthogonal_`, on a Householder QR without LAPACK), the Dense layer with an
  orthogonal kernel and zero bias that the modules use, `batched_init`
  (an `ActorCriticMLP`'s parameters drawn in one batch) and `fused_init`
  (`module.init`'s values, its hashes fused).
- `modules.py`: the actor-critics `ActorCriticMLP`, `ActorCriticCNN`,
  `ActorCriticNatureCNN` (Atari-sized images), `ActorCriticMultiInput` and `ActorCriticGRU`, `QNetworkCNN`
  (DQN's and PQN's Q-network for images) with its torso `cnn_torso` (SAC's and TD3's too, `CNNTorso`),
  `OneHotObservation` (a Discrete observation one-hot encoded), their construction checks,
  the layer gains (`HIDDEN_GAIN`, `ACTOR_HEAD_GAIN`, `CRITIC_HEAD_GAIN`),
  `ACTIVATIONS`, `ACTION_MASK_KEYS` and `leaf_name`.
- `adapters.py`: rollout policies from any network, `feedforward_policy` and
  `recurrent_policy`, and `unroll`, which replays a recurrent network over a
  trajectory for a learner.

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

# `nn`, `OrthogonalDense` and `householder_q` are reachable here too (tests/test_networks.py
# uses them as `networks.X`).
import flax.linen as nn  # noqa: F401

from jaxrl_rollout.networks.adapters import feedforward_policy, recurrent_policy, unroll
from jaxrl_rollout.networks.init import OrthogonalDense, batched_init, fused_init, householder_q, orthogonal  # noqa: F401
from jaxrl_rollout.networks.modules import (
    ACTION_MASK_KEYS,
    ACTIVATIONS,
    ACTOR_HEAD_GAIN,
    CRITIC_HEAD_GAIN,
    HIDDEN_GAIN,
    NATURE_CNN_MIN_SIZE,
    ActorCriticCNN,
    ActorCriticGRU,
    ActorCriticMLP,
    ActorCriticMultiInput,
    ActorCriticNatureCNN,
    CNNTorso,
    OneHotObservation,
    OneHotRecurrentObservation,
    QNetworkCNN,
    cnn_torso,
    leaf_name,
)

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
    "CNNTorso",
    "OneHotObservation",
    "OneHotRecurrentObservation",
    "QNetworkCNN",
    "batched_init",
    "cnn_torso",
    "feedforward_policy",
    "fused_init",
    "leaf_name",
    "recurrent_policy",
    "unroll",
]
