"""Actor-critic modules, policies built from them, and `DiagGaussian`.

Init is tested by its properties (docs/semantics.md §12): torch's
`orthogonal_(W, gain)` makes the smaller Gram matrix of W (out, in) equal to
gain^2 I, i.e. W^T W = gain^2 I when W is square or tall. The rollout tests
run each policy through `jaxrl_rollout.rollout` on gymnax envs, and the GRU
test replays the trajectory with `unroll` to recover the rollout's log-probs
and values.

Compile time dominates these tests (each orthogonal kernel costs a QR and a
threefry draw to compile), so the four initialised modules share one jitted
`init`, and the other tests use random parameters of the right shapes drawn
with NumPy from `jax.eval_shape(module.init, ...)`, which compiles nothing.
"""

from __future__ import annotations

import functools
import math

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_rollout as jr
from jaxrl_rollout import networks
from jaxrl_rollout.distributions import Categorical, DiagGaussian, categorical_from_logits, diag_gaussian
from jaxrl_rollout.networks import ActorCriticCNN, ActorCriticGRU, ActorCriticMLP
from tests.conftest import run_compiled

B = 4
SMALL_GRU = dict(hidden_size=16, embed_size=16, head_sizes=(16,))

# name -> (module, observation shape). The first three also run in rollouts:
# CartPole (obs 4, 2 actions) and Pendulum (obs 3, one action dimension).
MLP = ActorCriticMLP(2)
MLP_CONT_SHARED = ActorCriticMLP(1, continuous=True, shared_trunk=True, hidden_sizes=(32,), activation="relu")
MLP_64_32 = ActorCriticMLP(2, hidden_sizes=(64, 32))
GRU = ActorCriticGRU(2, **SMALL_GRU)
CNN = ActorCriticCNN(3)
INIT_MODULES = {
    "mlp": (MLP, (4,)),
    "mlp_cont_shared": (MLP_CONT_SHARED, (3,)),
    "gru": (GRU, (4,)),
    "cnn": (CNN, (10, 10, 4)),
}


def _init(module, key, obs_shape):
    obs = jnp.zeros((1,) + obs_shape)
    if isinstance(module, ActorCriticGRU):
        return module.init(key, module.initial_carry(1), obs)
    return module.init(key, obs)


def _init_all(key):
    out = {n: _init(m, key, s) for n, (m, s) in INIT_MODULES.items()}
    for name in ("mlp", "mlp_cont_shared", "cnn"):
        module, shape = INIT_MODULES[name]
        out[f"{name}_batched"] = networks.batched_init(module, key, jnp.zeros((1,) + shape))
    out["mlp_batched_key1"] = networks.batched_init(MLP, jax.random.key(1), jnp.zeros((1, 4)))
    # Kernels of different heights (64 and 32 rows), so some are padded to the common 64 x 64.
    out["mlp_64_32_batched"] = networks.batched_init(MLP_64_32, key, jnp.zeros((1, 4)))
    return out


def run_once(fn, *args):
    """`jax.jit(fn)(*args)` compiled without XLA's optimisation passes.

    Every program here runs once on tiny arrays, so optimising it only costs
    time: this halves the compiles (e.g. the init below, 4.7 s -> 1.9 s on 2
    CPU cores). Values agree with an optimised build to float32 rounding.
    """
    return run_compiled(fn, *args, compiler_options={"xla_backend_optimization_level": 0})


class _InitOnFirstUse(dict):
    """`_init_all`'s parameters, computed by the first test that reads one, not when the module is imported:
    every worker of a `-n 2` run imports every test module to collect it, and the compile (8 s on 2 cores) was
    paid by both, once for nothing."""

    def __missing__(self, name):
        self.update(run_once(_init_all, jax.random.key(0)))
        return self[name]


INIT = _InitOnFirstUse()


def random_params(module, obs_shape, seed=0, scale=0.5):
    """Parameters of `module`'s shapes with N(0, scale^2) entries, drawn by NumPy (no compile)."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(lambda key: _init(module, key, obs_shape), jax.random.key(0))
    return jax.tree.map(lambda s: (scale * rng.standard_normal(s.shape)).astype(np.float32), shapes)


def torch_gram(kernel: np.ndarray) -> np.ndarray:
    """The Gram matrix torch's orthogonal_ makes gain^2 I, from a flax kernel (..., out)."""
    w = np.asarray(kernel, np.float64).reshape(-1, kernel.shape[-1]).T  # torch layout (out, fan_in)
    return w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T


def expected_gain(layer: str) -> float:
    return {"actor_head": 0.01, "critic_head": 1.0}.get(layer, math.sqrt(2.0))


def check_init(params: dict) -> list[str]:
    """Asserts orthogonal kernels with the layer's gain and zero biases; returns the layers seen."""
    seen = []
    for layer, leaves in params["params"].items():
        if layer == "gru":  # flax's own GRUCell init (no layer_init counterpart)
            continue
        if layer == "log_std":
            np.testing.assert_array_equal(leaves, 0.0)
            continue
        gain = expected_gain(layer)
        gram = torch_gram(leaves["kernel"])
        np.testing.assert_allclose(gram, gain**2 * np.eye(len(gram)), atol=1e-5, err_msg=layer)
        np.testing.assert_array_equal(leaves["bias"], 0.0, err_msg=layer)
        seen.append(layer)
    return sorted(seen)


# --------------------------------------------------------------------------
# Init
# --------------------------------------------------------------------------


def test_mlp_init_is_torch_orthogonal_with_cleanrl_gains():
    # Wide (4 -> 64), square (64 -> 64) and tall (64 -> 2, 64 -> 1) kernels.
    assert check_init(INIT["mlp"]) == [
        "actor_head", "actor_hidden_0", "actor_hidden_1", "critic_head", "critic_hidden_0", "critic_hidden_1",
    ]
    assert check_init(INIT["mlp_cont_shared"]) == ["actor_head", "critic_head", "shared_hidden_0"]
    assert INIT["mlp_cont_shared"]["params"]["log_std"].shape == (1,)


def test_fused_init_is_module_init_with_fused_hashes(monkeypatch):
    """The same variables as module.init, its fold_ins and draws on prng's fused key; a module that needs raw
    uint32 keys is initialised with the key as given."""
    import flax.linen as nn

    from jaxrl_rollout import prng

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(8, kernel_init=nn.initializers.lecun_uniform())(x))
            return nn.Dense(2, bias_init=nn.initializers.normal(1.0))(x)

    def raw_uniform(key, shape, dtype=jnp.float32):  # reads the key as an array: only a raw key is one
        return jax.random.uniform(jnp.asarray(key, jnp.uint32), shape, dtype)

    class RawKeyNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2, kernel_init=raw_uniform)(x)

    key, obs = jax.random.PRNGKey(3), jnp.ones((1, 5))
    for module in (Net(), RawKeyNet()):
        jax.tree.map(np.testing.assert_array_equal, jax.jit(lambda k: networks.fused_init(module, k, obs))(key),
                     jax.jit(lambda k: module.init(k, obs))(key))
    draws = [e for e in jax.make_jaxpr(lambda k: networks.fused_init(Net(), k, obs))(key).jaxpr.eqns
             if e.primitive.name in ("random_bits", "random_fold_in", "random_split")]
    assert draws and all(str(e.invars[0].aval.dtype) == "key<fyf>" for e in draws), draws
    monkeypatch.setattr(prng, "_enabled", lambda: False)  # fusing off: module.init itself
    draws = [e for e in jax.make_jaxpr(lambda k: networks.fused_init(Net(), k, obs))(key).jaxpr.eqns
             if e.primitive.name in ("random_bits", "random_fold_in", "random_split")]
    assert not any(str(e.invars[0].aval.dtype) == "key<fyf>" for e in draws), draws


def test_batched_init_is_module_inits_distribution_in_one_draw():
    # Same structure, shapes and recipe (orthogonal kernels with CleanRL's gains, zero biases and
    # log_std) as module.init; other values, since the key is used differently.
    for name in ("mlp", "mlp_cont_shared"):
        batched, reference = INIT[f"{name}_batched"], INIT[name]
        assert jax.tree.structure(batched) == jax.tree.structure(reference)
        assert jax.tree.map(jnp.shape, batched) == jax.tree.map(jnp.shape, reference)
        assert check_init(batched) == check_init(reference)
    assert check_init(INIT["mlp_64_32_batched"]) == check_init(INIT["mlp"])
    assert INIT["mlp_64_32_batched"]["params"]["actor_head"]["kernel"].shape == (32, 2)
    a, b = INIT["mlp_batched"]["params"], INIT["mlp_batched_key1"]["params"]
    assert not np.allclose(a["actor_hidden_1"]["kernel"], b["actor_hidden_1"]["kernel"])
    assert not np.allclose(a["actor_hidden_1"]["kernel"], a["critic_hidden_1"]["kernel"])
    # Modules other than the MLP fall back to module.init: the same draws and arithmetic, which XLA may round
    # apart in the last bit where it fuses the two copies differently (with the CPU fusion emitters off, as the
    # suite runs: tests/conftest.py `_faster_cpu_compiles`, 2 of the 128 conv kernel entries by 1.5e-8).
    jax.tree.map(functools.partial(np.testing.assert_allclose, rtol=1e-6, atol=1e-7), INIT["cnn_batched"], INIT["cnn"])


def test_cnn_and_gru_init():
    # conv kernel (3, 3, 4, 16) is torch's (16, 36) weight; dense (1024, 128).
    assert INIT["cnn"]["params"]["conv"]["kernel"].shape == (3, 3, 4, 16)
    assert INIT["cnn"]["params"]["dense"]["kernel"].shape == (1024, 128)
    assert check_init(INIT["cnn"]) == ["actor_head", "conv", "critic_head", "dense"]
    assert check_init(INIT["gru"]) == [
        "actor_head", "actor_hidden_0", "critic_head", "critic_hidden_0", "embed",
    ]


@pytest.mark.parametrize("shape", [(4, 64), (64, 64), (64, 2), (3, 3, 4, 16), (1024, 128)])
def test_orthogonal_equals_jax_initializer_without_lapack(shape):
    # Same normal draw, same sign-fixed Q: equal to jax's QR-based initializer up to float rounding.
    key, gain = jax.random.key(shape[0] + shape[-1]), 2.0**0.5
    ours = networks.orthogonal(gain)(key, shape)
    np.testing.assert_allclose(ours, jax.nn.initializers.orthogonal(gain)(key, shape), atol=2e-5 * gain)
    # Batched (what vmap over seeds makes of an init), it emits no LAPACK custom call: jaxlib's
    # CPU geqrf kernel can deadlock XLA's intra-op pool on a 2-core machine when two run at once.
    hlo = jax.jit(jax.vmap(lambda k: networks.orthogonal(gain)(k, shape))).lower(
        jax.random.split(key, 2)).as_text()
    assert "lapack" not in hlo and "custom_call" not in hlo


def test_vmapped_network_inits_have_no_lapack_calls():
    obs = {"mlp": jnp.zeros((1, 4)), "cnn": jnp.zeros((1, 10, 10, 4))}
    for name, module in (("mlp", networks.ActorCriticMLP(action_dim=2)),
                         ("cnn", networks.ActorCriticCNN(action_dim=3))):
        hlo = jax.jit(jax.vmap(lambda k: module.init(k, obs[name]))).lower(jax.random.split(jax.random.key(0), 2))
        assert "lapack" not in hlo.as_text(), name
    mlp = networks.ActorCriticMLP(action_dim=2)
    hlo = jax.jit(jax.vmap(lambda k: networks.batched_init(mlp, k, obs["mlp"]))).lower(
        jax.random.split(jax.random.key(0), 2))
    assert "lapack" not in hlo.as_text() and "custom_call" not in hlo.as_text()
    gru = networks.ActorCriticGRU(action_dim=2)
    hlo = jax.jit(jax.vmap(lambda k: gru.init(k, gru.initial_carry(1), obs["mlp"]))).lower(
        jax.random.split(jax.random.key(0), 2))
    assert "lapack" not in hlo.as_text()


def test_householder_q_batches_without_vmap_and_matches_one_matrix_at_a_time():
    # The batched QR (batched_init's padded kernels) is the per-matrix QR, bit for bit.
    a = jax.random.normal(jax.random.key(3), (3, 8, 5))
    batched = networks.householder_q(a)
    one_by_one = jnp.stack([networks.householder_q(a[i]) for i in range(3)])
    np.testing.assert_array_equal(batched, one_by_one)
    np.testing.assert_array_equal(batched, jax.vmap(networks.householder_q)(a))
    np.testing.assert_allclose(jnp.einsum("bmi,bmj->bij", batched, batched), np.broadcast_to(np.eye(5), (3, 5, 5)),
                               atol=1e-5)


def test_a_tall_kernels_q_is_accumulated_thin():
    """Past THIN_Q_ROWS rows only Q's n columns are built: an Atari CNN's flattened Dense kernel (107,584 x 128)
    asked for a 46 GB [m, m] Q, and PPO on envpool/Pong ran out of memory at init."""
    from jaxrl_rollout.networks import init

    a = jax.random.normal(jax.random.key(4), (2, init.THIN_Q_ROWS + 500, 6))
    q = networks.householder_q(a)
    for i in range(2):  # the QR's Q with R's diagonal made non-negative, as LAPACK's gives it
        want, r = np.linalg.qr(np.asarray(a[i], np.float64))
        np.testing.assert_allclose(q[i], want * np.sign(np.diagonal(r)), atol=2e-6)
    kernel = networks.orthogonal(2.0)(jax.random.key(5), (60_000, 16))  # its [m, m] Q: 14 GB
    np.testing.assert_allclose(kernel.T @ kernel, 4.0 * np.eye(16), atol=1e-4)


def test_dense_layers_match_flax_dense_and_check_shapes_without_the_initializer(monkeypatch):
    # The layers' parameters and outputs are nn.Dense's with the same initializers.
    obs = jax.random.normal(jax.random.key(1), (3, 4))
    ours = networks.OrthogonalDense(8, 2.0**0.5)
    flax_dense = networks.nn.Dense(8, kernel_init=networks.orthogonal(2.0**0.5),
                                   bias_init=networks.nn.initializers.zeros)
    params = ours.init(jax.random.key(2), obs)
    jax.tree.map(np.testing.assert_array_equal, params, flax_dense.init(jax.random.key(2), obs))
    np.testing.assert_array_equal(ours.apply(params, obs), flax_dense.apply(params, obs))
    # apply reads the stored parameters without running the initializer again (flax's param does).
    mlp_params = INIT["mlp"]  # (computed on first use: before the draw is patched out, as the test run alone did)
    calls = []
    monkeypatch.setattr(networks.init, "_orthogonal_draw", lambda *a: calls.append(a))
    jax.make_jaxpr(lambda p: MLP.apply(p, jnp.zeros((B, 4))))(mlp_params)
    # batched_init asks flax for the shapes only, with no orthogonal draw traced for them.
    jax.make_jaxpr(lambda k: networks.batched_init(MLP, k, jnp.zeros((1, 4))))(jax.random.key(0))
    assert calls == []
    # A stored parameter of the wrong shape is a clear error naming it.
    with pytest.raises(ValueError, match=r"actor_hidden_0/kernel has shape \(4, 64\), but this layer needs \(5, 64\)"):
        MLP.apply(INIT["mlp"], jnp.zeros((B, 5)))


def _dot(x, w):
    return jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())))


@pytest.mark.parametrize("features", [1, 2, 4])
def test_narrow_products_derivatives_are_the_dots_to_rounding(features):
    """narrow_product: the dot's values, and its derivatives (reverse, forward, second order, vmapped)."""
    from jaxrl_rollout.networks.init import narrow_product

    kx, kw, kg = jax.random.split(jax.random.key(features), 3)
    x, w = jax.random.normal(kx, (8, 128, 64)), jax.random.normal(kw, (8, 64, features))
    g = jax.random.normal(kg, (8, 128, features))
    y, vjp = jax.vjp(jax.vmap(narrow_product), x, w)
    y_dot, vjp_dot = jax.vjp(jax.vmap(_dot), x, w)
    np.testing.assert_array_equal(y, y_dot)  # the product itself is the dot
    for ours, theirs in zip(vjp(g), vjp_dot(g)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    # One argument differentiated, the other a symbolic zero; forward mode; a Hessian.
    np.testing.assert_allclose(jax.grad(lambda w: jnp.sum(narrow_product(x[0], w) ** 2))(w[0]),
                               jax.grad(lambda w: jnp.sum(_dot(x[0], w) ** 2))(w[0]), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(narrow_product(x, w[0]) ** 2))(x[0]),
                               jax.grad(lambda x: jnp.sum(_dot(x, w[0]) ** 2))(x[0]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jvp(narrow_product, (x[0], w[0]), (x[1], w[1]))[1],
                               jax.jvp(_dot, (x[0], w[0]), (x[1], w[1]))[1], rtol=1e-5, atol=1e-4)
    hess = jax.hessian(lambda w: jnp.sum(jnp.tanh(narrow_product(x[0, :5, :3], w))))(w[0, :3])
    np.testing.assert_allclose(hess, jax.hessian(lambda w: jnp.sum(jnp.tanh(_dot(x[0, :5, :3], w))))(w[0, :3]),
                               rtol=1e-5, atol=1e-6)


def _dots_in(hlo_text):
    """The result shapes of the dot instructions of a compiled CPU program."""
    import re

    return re.findall(r"= (f32\[[\d,]*\])(?:\{[\d,]*\})? dot\(", hlo_text)


def test_heads_gradients_have_no_narrow_dot_on_the_cpu():
    """With narrow_product the actor head's (64 x 2) gradients compile to no dot on the CPU.

    `NARROW_FEATURES` is 4 on jax >= 0.11 and 0 below (where these forms are
    slower); both settings are compiled here whatever the installed jax.
    """
    from jaxrl_rollout.networks import init as init_module

    params = INIT["mlp"]
    obs = jax.random.normal(jax.random.key(0), (128, 4))

    def loss(p):
        dist, value = MLP.apply(p, obs)
        return jnp.sum(dist.logits ** 2) + jnp.sum(value ** 2)

    def compiled_dots_and_grads():
        return _dots_in(jax.jit(jax.grad(loss)).lower(params).compile().as_text()), jax.jit(jax.grad(loss))(params)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(init_module, "NARROW_FEATURES", 4)
        dots, grads = compiled_dots_and_grads()
        mp.setattr(init_module, "NARROW_FEATURES", 0)  # every layer a plain dot, autodiff's derivatives
        plain_dots, plain_grads = compiled_dots_and_grads()
    assert "f32[64,2]" in plain_dots and "f32[64,2]" not in dots  # the head's weight gradient
    assert dots.count("f32[128,64]") < plain_dots.count("f32[128,64]")  # the head's input gradient
    assert dots.count("f32[64,64]") == plain_dots.count("f32[64,64]") == 2  # the hidden layers keep theirs
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), grads, plain_grads)


def test_orthogonal_rejects_a_vector_shape():
    with pytest.raises(ValueError, match=r"rank >= 2, got shape \(5,\)"):
        networks.orthogonal()(jax.random.key(0), (5,))


def test_gram_check_catches_a_wrong_gain():
    kernel = np.linalg.qr(np.random.default_rng(0).standard_normal((64, 64)))[0]  # gain 1
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(torch_gram(kernel), 2.0 * np.eye(64), atol=1e-5)


# --------------------------------------------------------------------------
# Shapes, dtypes and validation
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module, obs_shape",
    [
        (MLP, (4,)),
        (ActorCriticMLP(3, continuous=True), (5,)),
        (ActorCriticMLP(4, shared_trunk=True, hidden_sizes=(8,), activation="relu"), (6,)),
        (ActorCriticMLP(2, continuous=True, hidden_sizes=()), (3,)),
        (CNN, (10, 10, 4)),
    ],
)
def test_feedforward_output_shapes_and_dtypes(module, obs_shape):
    # Traced only (eval_shape): shapes and dtypes need no compile.
    params = random_params(module, obs_shape)
    obs = jax.ShapeDtypeStruct((B,) + obs_shape, jnp.float32)
    dist, value = jax.eval_shape(module.apply, params, obs)
    assert isinstance(dist, DiagGaussian if module.continuous else Categorical)
    assert value.shape == (B,) and value.dtype == jnp.float32
    for field in dist:
        assert field.shape == (B, module.action_dim) and field.dtype == jnp.float32
    out = jax.eval_shape(networks.feedforward_policy(module), params, obs, jax.random.key(1))
    assert out.log_prob.shape == (B,) and out.value.shape == (B,)
    assert out.log_prob.dtype == out.value.dtype == jnp.float32
    if module.continuous:
        assert out.action.shape == (B, module.action_dim) and out.action.dtype == jnp.float32
    else:
        assert out.action.shape == (B,) and out.action.dtype == jnp.int32


def test_extra_batch_axes_and_bool_images():
    dist, value = jax.eval_shape(MLP.apply, INIT["mlp"], jax.ShapeDtypeStruct((3, B, 4), jnp.float32))
    assert dist.logits.shape == (3, B, 2) and value.shape == (3, B)  # [T, B, O] works too
    obs = jax.random.bernoulli(jax.random.key(1), 0.3, (B, 10, 10, 4))  # MinAtar's dtype
    params = random_params(CNN, (10, 10, 4), scale=0.1)
    def logits(obs):
        return [CNN.apply(params, o)[0].logits for o in (obs, obs.astype(jnp.float32))]

    from_bool, from_float = run_once(logits, obs)
    np.testing.assert_array_equal(from_bool, from_float)


def test_gru_step_shapes_and_carry_is_not_reset():
    gru = ActorCriticGRU(2, continuous=True, **SMALL_GRU)
    carry = gru.initial_carry(B)
    assert carry.shape == (B, 16) and carry.dtype == jnp.float32 and not carry.any()
    params = random_params(gru, (3,))

    def two_steps(carry, obs):
        new_carry, (dist, value) = gru.apply(params, carry, obs)
        again, (_, value_again) = gru.apply(params, new_carry, obs)
        return new_carry, dist, value, again, value_again

    new_carry, dist, value, again, value_again = run_once(two_steps, carry, jnp.ones((B, 3)))
    assert new_carry.shape == (B, 16) and value.shape == (B,)
    assert dist.mean.shape == dist.log_std.shape == (B, 2)
    # The module steps from the carry it is given, never from zeros.
    assert not np.allclose(again, new_carry) and not np.allclose(value_again, value)


def test_invalid_arguments_are_rejected_with_their_names():
    with pytest.raises(ValueError, match=r"activation must be one of \['relu', 'tanh'\], got 'gelu'"):
        ActorCriticMLP(2, activation="gelu")
    with pytest.raises(ValueError, match="action_dim"):
        ActorCriticMLP(0)
    with pytest.raises(ValueError, match=r"hidden_sizes\[1\]"):
        ActorCriticMLP(2, hidden_sizes=(8, -1))
    with pytest.raises(ValueError, match=r"hidden_sizes\[0\] must be at most 2,147,483,647 \(2\*\*31 - 1\) units"):
        ActorCriticMLP(2, hidden_sizes=(2**31,))  # (the orthogonal init's int32 indices overflowed)
    with pytest.raises(ValueError, match="kernel_size"):
        ActorCriticCNN(2, kernel_size=0)
    with pytest.raises(ValueError, match="continuous must be a bool"):
        ActorCriticGRU(2, continuous="yes")
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"obs must have shape \[B, O\]"):
        jax.eval_shape(MLP.init, key, jnp.zeros((4,)))
    with pytest.raises(ValueError, match="at least kernel_size"):
        jax.eval_shape(CNN.init, key, jnp.zeros((1, 2, 2, 4)))
    with pytest.raises(ValueError, match="hidden_size=16"):
        jax.eval_shape(GRU.init, key, jnp.zeros((B, 8)), jnp.zeros((B, 3)))
    with pytest.raises(ValueError, match="must share B"):
        jax.eval_shape(GRU.init, key, GRU.initial_carry(B), jnp.zeros((B + 1, 3)))
    with pytest.raises(TypeError, match="linen Module or a callable"):
        networks.feedforward_policy(3)
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        networks.recurrent_policy(GRU, deterministic="yes")


def test_policy_rejects_logits_and_column_values():
    obs = jax.ShapeDtypeStruct((B, 2), jnp.float32)
    logits_net = networks.feedforward_policy(lambda p, obs: (obs, obs[:, 0]))
    with pytest.raises(TypeError, match="categorical_policy"):
        jax.eval_shape(logits_net, None, obs, jax.random.key(0))
    column = networks.feedforward_policy(lambda p, obs: (categorical_from_logits(obs), obs[:, :1]))
    with pytest.raises(ValueError, match=r"batch shape \(4,\).*got \(4, 1\)"):
        jax.eval_shape(column, None, obs, jax.random.key(0))
    no_step = lambda p, c, o: None  # noqa: E731 -- never called: the shapes are checked first
    with pytest.raises(ValueError, match="first must have shape"):
        networks.unroll(no_step, None, jnp.zeros((B, 2)), jnp.zeros((3, B, 1)), jnp.zeros((3,)))
    with pytest.raises(ValueError, match=r"obs must have shape \[T, B, ...\]"):
        networks.unroll(no_step, None, jnp.zeros((B, 2)), jnp.zeros((3, B + 1)), jnp.zeros((3, B)))
    with pytest.raises(ValueError, match=r"initial_carry must have shape \[B, ...\]"):
        networks.unroll(no_step, None, jnp.zeros((B + 1, 2)), jnp.zeros((3, B)), jnp.zeros((3, B)))


def test_diag_gaussian_validation():
    with pytest.raises(ValueError, match="log_std of shape"):
        diag_gaussian(jnp.zeros((B, 2)), jnp.zeros((3,)))
    with pytest.raises(ValueError, match="without enlarging"):
        diag_gaussian(jnp.zeros((2,)), jnp.zeros((B, 2)))
    with pytest.raises(ValueError, match="mean must be a floating array"):
        diag_gaussian(jnp.zeros((B, 2), jnp.int32), jnp.zeros((2,)))
    with pytest.raises(ValueError, match="log_std must be a floating array"):
        diag_gaussian(jnp.zeros((B, 2)), jnp.zeros((2,), jnp.int32))
    with pytest.raises(ValueError, match=r"x must have the distribution's event shape"):
        diag_gaussian(jnp.zeros((B, 2)), jnp.zeros((2,))).log_prob(jnp.zeros((B,)))


# --------------------------------------------------------------------------
# Distributions
# --------------------------------------------------------------------------


def test_categorical_log_prob_picks_the_logit_without_a_gather():
    logits = jnp.array([[0.0, 1.0, 2.0], [0.0, -jnp.inf, 1.0]])
    dist = categorical_from_logits(logits)
    # -inf logits stay -inf (no 0 * inf NaN), out-of-range actions give NaN rather than a wrapped index.
    np.testing.assert_array_equal(dist.log_prob(jnp.array([2, 1])), [dist.logits[0, 2], -jnp.inf])
    assert np.isnan(dist.log_prob(jnp.array([3, 0]))[0]) and np.isnan(dist.log_prob(jnp.array([0, -1]))[1])
    # The gradient is the one-hot minus the probabilities, with no NaN from the -inf logit.
    grad = jax.grad(lambda z: categorical_from_logits(z).log_prob(jnp.array([2, 2])).sum())(logits)
    np.testing.assert_allclose(grad, jnp.eye(3)[2] - dist.probs, atol=1e-6)
    hlo = jax.jit(jax.grad(lambda z: categorical_from_logits(z).log_prob(jnp.array([2, 2])).sum())).lower(logits)
    assert "scatter" not in hlo.as_text() and "gather" not in hlo.as_text()
    # Whole-number floats read as torch's value.long() (ilpyt stores discrete actions as floats); 1.5 picked no
    # logit and summed to log p = 0 (probability 1). A bool was jax's "iota does not accept dtype bool", and a
    # uint8 action against 300 logits overflowed the index range.
    np.testing.assert_array_equal(dist.log_prob(jnp.array([2.0, 0.0])), dist.log_prob(jnp.array([2, 0])))
    assert np.isnan(dist.log_prob(jnp.array([1.5, 0.0]))[0])
    with pytest.raises(TypeError, match=r"^action must hold action indices \(integers\), got bool\.$"):
        dist.log_prob(jnp.array([True, False]))
    wide = categorical_from_logits(jnp.tile(jnp.arange(300.0), (2, 1)))
    np.testing.assert_array_equal(wide.log_prob(jnp.array([255, 3], jnp.uint8)),
                                  wide.log_prob(jnp.array([255, 3], jnp.int32)))
    # 64-bit actions past the int32 range were cast first: 2**32 + 1 picked logit 1
    with jax.enable_x64(True):
        big = categorical_from_logits(jnp.zeros((3, 3), jnp.float32))
        for dtype in (jnp.int64, jnp.uint64, jnp.uint32):
            got = big.log_prob(jnp.array([2**32 + 1 if dtype != jnp.uint32 else 2**31 + 1, 1, 0], dtype))
            assert np.isnan(got[0]) and np.all(np.isfinite(got[1:])), (dtype, got)


def test_diag_gaussian_by_hand():
    # Standard normal at x = 1, two dims: per dim -1/2 - 0 - log sqrt(2 pi) = -1.4189385;
    # entropy per dim 1/2 + log(2 pi)/2 = 1.4189385. With sigma = e, the log-density at
    # the mean is -1 - 0.9189385 and the entropy is 1 + 1.4189385.
    def by_hand():
        standard = diag_gaussian(jnp.zeros((1, 2)), jnp.zeros((2,)))
        wide = diag_gaussian(jnp.zeros((1, 1)), jnp.ones((1,)))
        return jnp.concatenate([standard.log_prob(jnp.ones((1, 2))), standard.entropy(),
                                wide.log_prob(jnp.zeros((1, 1))), wide.entropy()])

    np.testing.assert_allclose(run_once(by_hand), [-2.837877, 2.837877, -1.9189385, 2.4189385], rtol=1e-6)


def test_diag_gaussian_sample_is_reparameterised():
    """sample = mean + exp(log_std) * noise, differentiable in both (computed_once passes the tangent)."""
    key = jax.random.PRNGKey(3)
    mean, log_std = jnp.array([[0.5, -1.0], [2.0, 0.0]]), jnp.array([0.3, -0.2])
    noise = jax.random.normal(key, (2, 2))
    np.testing.assert_allclose(diag_gaussian(mean, log_std).sample(key), mean + jnp.exp(log_std) * noise, rtol=1e-6)
    d_mean, d_log_std = jax.grad(lambda m, s: diag_gaussian(m, s).sample(key).sum(), argnums=(0, 1))(mean, log_std)
    np.testing.assert_allclose(d_mean, jnp.ones_like(mean))
    np.testing.assert_allclose(d_log_std, (jnp.exp(log_std) * noise).sum(0), rtol=1e-6)


def _sample_stats(key):
    n = 20_000
    gauss_key, cat_key = jax.random.split(key)
    dist = diag_gaussian(jnp.broadcast_to(jnp.array([2.0, -1.0]), (n, 2)), jnp.array([0.5, -1.0]))
    x = dist.sample(gauss_key)
    cat = categorical_from_logits(jnp.broadcast_to(jnp.log(jnp.array([0.1, 0.2, 0.7])), (n, 3)))
    a = cat.sample(cat_key)
    return dict(
        x_dtype=jnp.zeros((), x.dtype), x_mean=x.mean(0), x_std=x.std(0),
        # Monte-Carlo entropy: E[-log p(x)] = H.
        gauss_nll=-dist.log_prob(x).mean(), gauss_entropy=dist.entropy()[0],
        mode_is_mean=jnp.all(dist.mode() == dist.mean),
        a_dtype=jnp.zeros((), a.dtype), freq=jnp.bincount(a, length=3) / n,
        cat_nll=-cat.log_prob(a).mean(), cat_entropy=cat.entropy()[0], cat_mode=cat.mode()[0],
    )


def test_sample_statistics():
    s = run_once(_sample_stats, jax.random.key(0))
    assert s["x_dtype"].dtype == jnp.float32 and s["a_dtype"].dtype == jnp.int32
    np.testing.assert_allclose(s["x_mean"], [2.0, -1.0], atol=0.05)
    np.testing.assert_allclose(s["x_std"], np.exp([0.5, -1.0]), rtol=0.03)
    np.testing.assert_allclose(s["gauss_nll"], s["gauss_entropy"], rtol=0.02)
    assert bool(s["mode_is_mean"])
    np.testing.assert_allclose(s["freq"], [0.1, 0.2, 0.7], atol=0.015)
    np.testing.assert_allclose(s["cat_nll"], s["cat_entropy"], rtol=0.03)
    assert int(s["cat_mode"]) == 2


# --------------------------------------------------------------------------
# Policies through the rollout
# --------------------------------------------------------------------------


def rollout_and_replay(env_name: str, module, params, num_steps: int, initial_carry=None):
    """One jitted rollout of `module`'s policy, plus the learner's recomputation from the trajectory.

    Returns `(traj, dist, value, stale)`: dist and value come from applying
    the module to `traj.obs` (feedforward) or from `unroll` over the
    trajectory (recurrent); `stale` is, for recurrent modules, the values of
    an unroll that ignores every episode start after t = 0 (None otherwise).
    """
    env, env_params = gymnax.make(env_name)
    recurrent = initial_carry is not None
    policy_fn = (networks.recurrent_policy if recurrent else networks.feedforward_policy)(module)

    def run(params, key):
        state = jr.rollout_init(key, env, env_params, B, initial_carry=initial_carry)
        _, traj = jr.rollout(env, env_params, policy_fn, params, state, num_steps, bootstrap_truncated=False)
        if not recurrent:
            return traj, *module.apply(params, traj.obs), None
        dist, value = networks.unroll(module, params, traj.carry[0], traj.obs, traj.first)
        _, stale = networks.unroll(module, params, traj.carry[0], traj.obs, traj.first.at[1:].set(False))
        return traj, dist, value, stale

    return run_once(run, params, jax.random.key(1))


def test_mlp_policy_on_cartpole():
    traj, dist, value, _ = rollout_and_replay("CartPole-v1", MLP, INIT["mlp"], 24)
    assert traj.action.shape == (24, B) and traj.action.dtype == jnp.int32
    np.testing.assert_allclose(dist.log_prob(traj.action), traj.log_prob, atol=1e-6)
    np.testing.assert_allclose(value, traj.value, atol=1e-6)


def test_continuous_policy_on_pendulum_keeps_the_raw_sample():
    params = jax.tree.map(lambda x: x, INIT["mlp_cont_shared"])
    params["params"]["log_std"] = jnp.full((1,), 1.5)  # sigma 4.5: many samples beyond the +-2 bound
    traj, dist, value, _ = rollout_and_replay("Pendulum-v1", MLP_CONT_SHARED, params, 24)
    assert traj.action.shape == (24, B, 1) and traj.action.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(traj.action))) > 2.0  # not clipped to the action space
    np.testing.assert_allclose(dist.log_prob(traj.action), traj.log_prob, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(value, traj.value, atol=1e-6)


def test_gru_unroll_reproduces_the_rollout():
    # Random weights (not the init's 0.01 actor head) so log-probs vary; a
    # non-zero initial carry, which the rollout and unroll must both reset at t = 0.
    carry = jnp.full((B, 16), 3.0)
    traj, dist, value, stale = rollout_and_replay("CartPole-v1", GRU, random_params(GRU, (4,)), 64, carry)
    assert bool(traj.first[1:].any()), "the rollout should cross episode boundaries"
    assert dist.logits.shape == (64, B, 2) and value.shape == (64, B)
    np.testing.assert_allclose(dist.log_prob(traj.action), traj.log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, traj.value, rtol=1e-5, atol=1e-5)
    # Without the resets after t = 0 the replay would not match.
    assert not np.allclose(stale, traj.value, atol=1e-3)


def test_continuous_gru_unroll_stacks_the_gaussian():
    module = ActorCriticGRU(2, continuous=True, **SMALL_GRU)
    obs = jax.ShapeDtypeStruct((5, B, 3), jnp.float32)
    first = jax.ShapeDtypeStruct((5, B), bool)
    params = random_params(module, (3,))
    dist, value = jax.eval_shape(
        lambda obs, first: networks.unroll(module, params, module.initial_carry(B), obs, first), obs, first
    )
    assert dist.mean.shape == dist.log_std.shape == (5, B, 2) and value.shape == (5, B)
    assert jax.eval_shape(lambda d: d.log_prob(d.mean), dist).shape == (5, B)


def test_deterministic_policies_return_the_mode():
    discrete = ActorCriticMLP(3, hidden_sizes=(8,))
    continuous = ActorCriticMLP(2, continuous=True, hidden_sizes=(8,))
    gru = ActorCriticGRU(3, **SMALL_GRU)
    params = {name: random_params(m, (3,)) for name, m in (("d", discrete), ("c", continuous), ("g", gru))}
    obs = np.random.default_rng(1).standard_normal((B, 3)).astype(np.float32)
    carry = np.random.default_rng(2).standard_normal((B, 16)).astype(np.float32)

    def run(params, key):  # one deterministic step of each policy
        out = {}
        for name, module in (("d", discrete), ("c", continuous)):
            policy = networks.feedforward_policy(module, deterministic=True)
            dist, _ = module.apply(params[name], obs)
            out[name] = (policy(params[name], obs, key), dist.mode(), dist.log_prob(dist.mode()))
        gru_out, new_carry = networks.recurrent_policy(gru, deterministic=True)(params["g"], obs, key, carry)
        expected_carry, (dist, _) = gru.apply(params["g"], carry, obs)
        out["g"] = (gru_out, jnp.argmax(dist.logits, -1), new_carry, expected_carry)
        return out

    first, second = run_once(lambda p: [run(p, jax.random.key(i)) for i in (1, 2)], params)
    for name in ("d", "c"):
        (policy_out, mode, mode_log_prob), (other, _, _) = first[name], second[name]
        np.testing.assert_array_equal(policy_out.action, other.action)  # the key is ignored
        np.testing.assert_array_equal(policy_out.action, mode)
        np.testing.assert_allclose(policy_out.log_prob, mode_log_prob, rtol=1e-6)
    gru_out, argmax, new_carry, expected_carry = first["g"]
    np.testing.assert_array_equal(gru_out.action, argmax)
    np.testing.assert_allclose(new_carry, expected_carry, rtol=1e-6, atol=1e-6)


def test_bring_your_own_apply_fn_and_nnx_module():
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.actor, self.critic = nnx.Linear(3, 2, rngs=rngs), nnx.Linear(3, 1, rngs=rngs)

        def __call__(self, obs):
            return categorical_from_logits(self.actor(obs)), self.critic(obs)[:, 0]

    # Abstract init plus NumPy values: an eager nnx init would compile every initializer.
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Net(nnx.Rngs(0))))
    rng = np.random.default_rng(0)
    state = jax.tree.map(lambda s: rng.standard_normal(s.shape).astype(np.float32), state)
    policy_fn = networks.feedforward_policy(lambda state, obs: nnx.merge(graphdef, state)(obs))
    obs = jnp.ones((B, 3))

    def run(state, key):
        dist, value = nnx.merge(graphdef, state)(obs)
        return policy_fn(state, obs, key), dist, value

    out, dist, value = run_once(run, state, jax.random.key(0))
    np.testing.assert_array_equal(out.value, value)
    np.testing.assert_array_equal(out.log_prob, dist.log_prob(out.action))
