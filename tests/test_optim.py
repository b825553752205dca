"""Unit tests for jaxrl_rollout.optim: hand-worked steps, clipping, schedules, tracing, errors.

The comparisons with PyTorch itself are in tests/golden/test_optim_golden.py.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl_rollout import optim

F32 = np.float32


def scan_steps(tx, stacked_grads, params):
    """Applies `tx` to stacked_grads[0], [1], ... in one jitted scan; returns the stacked parameters."""

    @jax.jit
    def run(params, grads):
        def body(carry, g):
            p, state = carry
            updates, state = tx.update(g, state, p)
            p = optax.apply_updates(p, updates)
            return (p, state), p

        return jax.lax.scan(body, (params, tx.init(params)), grads)[1]

    return run(params, stacked_grads)


def steps(tx, grads, params):
    """`scan_steps` on a list of gradients; returns the parameters after every step."""
    history = scan_steps(tx, jax.tree.map(lambda *g: jnp.stack(g), *grads), params)
    return [jax.tree.map(lambda x, i=i: x[i], history) for i in range(len(grads))]


def np_torch_adam(p, grads, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False):
    """torch.optim.Adam / AdamW written from the equations in float64."""
    p = np.asarray(p, np.float64)
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = np.asarray(g, np.float64)
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr / (1 - b1**t) * m / (np.sqrt(v) / np.sqrt(1 - b2**t) + eps)
    return p


# --- Adam -------------------------------------------------------------------------------


def test_adam_first_step_is_eps_sensitive():
    # t = 1: m = (1 - b1) g and v = (1 - b2) g^2, so the bias corrections cancel and
    # p1 = p0 - lr * g / (|g| + eps). For g = 1e-6 (docs/semantics.md §10.1):
    #   eps = 1e-5: -lr * 1e-6 / 1.1e-5  = -0.0909 lr
    #   eps = 1e-8: -lr * 1e-6 / 1.01e-6 = -0.9901 lr
    params = {"w": jnp.zeros(2)}
    g = {"w": jnp.array([1e-6, -1e-6])}
    for eps, expected in ((1e-5, 1e-6 / 1.1e-5), (1e-8, 1e-6 / 1.01e-6)):
        (p1,) = steps(optim.torch_adam(0.1, eps=eps), [g], params)
        np.testing.assert_allclose(p1["w"], [-0.1 * expected, 0.1 * expected], rtol=1e-6)
    (p1,) = steps(optim.torch_adam(0.1, eps=optim.REFERENCE_EPS), [g], params)
    np.testing.assert_allclose(p1["w"], [-0.1 / 11, 0.1 / 11], rtol=1e-6)


def test_adam_two_steps_by_hand():
    # g1 = 1, g2 = 3, lr = 0.1, b1 = 0.5, b2 = 0.75, eps = 0:
    #   t=1: m = 0.5, v = 0.25, m/(1-.5) = 1, v/(1-.75) = 1      -> p = -0.1
    #   t=2: m = 0.25 + 1.5 = 1.75, v = 0.1875 + 2.25 = 2.4375,
    #        m/(1-.25) = 2.3333, v/(1-.5625) = 5.5714            -> p = -0.1 - 0.1 * 2.3333 / 2.3604
    tx = optim.torch_adam(0.1, b1=0.5, b2=0.75, eps=0.0)
    p1, p2 = steps(tx, [jnp.array([1.0]), jnp.array([3.0])], jnp.array([0.0]))
    np.testing.assert_allclose(p1, [-0.1], rtol=1e-6)
    np.testing.assert_allclose(p2, [-0.1 - 0.1 * (1.75 / 0.75) / math.sqrt(2.4375 / 0.4375)], rtol=1e-6)


def test_adam_with_constant_gradient_steps_exactly_lr():
    # With g constant and eps = 0, m_t / (1 - b1^t) = g and v_t / (1 - b2^t) = g^2 in exact
    # arithmetic, so every step is -lr (float32 rounding in v adds ~1e-8 per step, as in
    # torch). optax computes 1 - b2^t in float32, which inherits float32(0.999)'s 1.3e-8
    # error: its first step is -(1 - 6.4e-6) lr.
    def first_updates(tx, n=10):
        p = jnp.zeros(1)

        def body(state, _):
            updates, state = tx.update(jnp.ones(1), state, p)
            return state, updates[0]

        return np.asarray(jax.lax.scan(body, tx.init(p), None, length=n)[1])

    ours = first_updates(optim.torch_adam(1.0, eps=0.0))
    plain = first_updates(optax.adam(1.0, eps=0.0))
    assert np.max(np.abs(ours + 1.0)) < 5e-7
    assert np.max(np.abs(plain + 1.0)) > 5e-6


def test_adam_matches_float64_equations():
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=(3, 2)).astype(F32)
    grads = [(rng.normal(size=(3, 2)) * 10.0 ** rng.uniform(-6, 0)).astype(F32) for _ in range(20)]
    for kwargs, decoupled in (({"eps": 1e-5, "weight_decay": 0.1}, False), ({"weight_decay": 0.05}, True)):
        factory = optim.torch_adamw if decoupled else optim.torch_adam
        got = steps(factory(3e-3, **kwargs), [jnp.asarray(g) for g in grads], jnp.asarray(p0))[-1]
        eps, wd = kwargs.get("eps", 1e-8), kwargs["weight_decay"]
        want = np_torch_adam(p0, grads, 3e-3, eps=eps, wd=wd, decoupled=decoupled)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_adamw_decay_is_multiplicative_and_rounded_like_torch():
    # Zero gradients: m = v = 0, the Adam step is 0 / eps = 0, and only the decay acts:
    # p1 = p0 * float32(1 - lr * wd).
    p0 = jnp.array([2.0, -3.0, 0.5])
    (p1,) = steps(optim.torch_adamw(0.1, weight_decay=0.5), [jnp.zeros(3)], p0)
    np.testing.assert_array_equal(p1, np.asarray(p0) * F32(0.95))
    # lr * wd = 1e-5 (torch's defaults at lr=1e-3): float32(1 - 1e-5) = 1 - 1.0013e-5, so
    # torch decays 0.13% faster than the exact lr * wd * p of optax.adamw. One step cannot
    # show it (1.3e-8 relative is below half an ulp); 1000 steps give 1.3e-5.
    n = 1000
    history = scan_steps(optim.torch_adamw(1e-3), jnp.zeros((n, 3)), p0)
    torch_way = np.asarray(p0)
    for _ in range(n):
        torch_way = torch_way * F32(1 - 1e-5)  # float32 multiply, rounded every step
    np.testing.assert_array_equal(history[-1], torch_way)
    exact = np.asarray(p0, np.float64) * (1 - 1e-5) ** n
    assert np.max(np.abs(torch_way / exact - 1)) > 1e-5


def test_adam_l2_decay_goes_through_the_moments():
    # Adam's weight_decay is added to the gradient: from g = 0, p = 1, wd = 0.1 the first
    # step is -lr * 0.1 / (0.1 + eps), not a decay of the parameter by lr * wd.
    (p1,) = steps(optim.torch_adam(0.01, eps=0.0, weight_decay=0.1), [jnp.zeros(1)], jnp.ones(1))
    np.testing.assert_allclose(p1, [1.0 - 0.01], rtol=1e-6)


def test_decay_needs_params():
    # Checked while tracing, so eval_shape shows it without running anything.
    for tx in (optim.torch_adamw(1e-3), optim.torch_adam(1e-3, weight_decay=0.1)):
        with pytest.raises(ValueError, match="needs params"):
            jax.eval_shape(tx.update, jnp.ones(2), tx.init(jnp.zeros(2)))
    tx = optim.torch_adam(1e-3)  # no decay: params are optional, as in optax.adam
    updates, state = jax.eval_shape(tx.update, jnp.ones(2), tx.init(jnp.zeros(2)))
    assert updates.dtype == state.mu.dtype == state.nu.dtype == jnp.float32


# --- RMSprop ----------------------------------------------------------------------------


def test_rmsprop_two_steps_by_hand():
    # alpha = 0.5, eps = 0, lr = 0.1, g1 = 2, g2 = 1:
    #   v1 = 0.5 * 4 = 2,          p1 = -0.1 * 2 / sqrt(2)
    #   v2 = 1 + 0.5 * 1 = 1.5,    p2 = p1 - 0.1 * 1 / sqrt(1.5)
    tx = optim.torch_rmsprop(0.1, alpha=0.5, eps=0.0)
    p1, p2 = steps(tx, [jnp.array([2.0]), jnp.array([1.0])], jnp.array([0.0]))
    np.testing.assert_allclose(p1, [-0.2 / math.sqrt(2.0)], rtol=1e-6)
    np.testing.assert_allclose(p2, [-0.2 / math.sqrt(2.0) - 0.1 / math.sqrt(1.5)], rtol=1e-6)


def test_rmsprop_eps_outside_the_sqrt():
    # First step from v0 = 0: p1 = -lr g / (sqrt(1 - alpha) |g| + eps). With g = 1e-6,
    # alpha = 0.99, eps = 1e-5: -lr * 1e-6 / (1e-7 + 1e-5). eps inside the sqrt (optax's
    # default) would give -lr * 1e-6 / sqrt(1e-14 + 1e-5), about 300x smaller.
    (p1,) = steps(optim.torch_rmsprop(1.0, eps=1e-5), [jnp.array([1e-6])], jnp.zeros(1))
    np.testing.assert_allclose(p1, [-1e-6 / (1e-7 + 1e-5)], rtol=1e-5)


def test_rmsprop_equals_optax_recipe():
    # docs/semantics.md §10.3: optax.rmsprop(decay=alpha, eps_in_sqrt=False, initial_scale=0).
    rng = np.random.default_rng(1)
    grads = [jnp.asarray((rng.normal(size=5) * 10.0 ** rng.uniform(-7, 0)).astype(F32)) for _ in range(30)]
    ours = steps(optim.torch_rmsprop(7e-4, eps=1e-5), grads, jnp.ones(5))[-1]
    recipe = optax.rmsprop(7e-4, decay=0.99, eps=1e-5, initial_scale=0.0, eps_in_sqrt=False)
    np.testing.assert_allclose(ours, steps(recipe, grads, jnp.ones(5))[-1], rtol=1e-6)


# --- clip_grad_norm ---------------------------------------------------------------------

clip = jax.jit(optim.clip_grad_norm)  # max_norm traced: one compile per gradient structure


def optax_clip(max_norm, grads):
    return jax.jit(optax.clip_by_global_norm(max_norm).update)(grads, optax.EmptyState())



def test_clip_grad_norm_by_hand():
    # Leaves [3, 4] and [12]: per-leaf norms 5 and 12, total sqrt(25 + 144) = 13.
    # max_norm 6.5: coef = 6.5 / (13 + 1e-6).
    grads = {"a": jnp.array([3.0, 4.0]), "b": {"c": jnp.array([12.0])}}
    clipped, total = clip(grads, 6.5)
    np.testing.assert_allclose(total, 13.0, rtol=1e-7)
    coef = 6.5 / (13.0 + 1e-6)
    np.testing.assert_allclose(clipped["a"], [3.0 * coef, 4.0 * coef], rtol=1e-7)
    np.testing.assert_allclose(clipped["b"]["c"], [12.0 * coef], rtol=1e-7)


def test_clip_coefficient_is_exactly_one_below_the_threshold():
    grads = {"a": jnp.array([0.3, -0.4])}  # norm 0.5
    clipped, total = clip(grads, 1.0)
    np.testing.assert_array_equal(clipped["a"], grads["a"])  # multiplied by exactly 1
    np.testing.assert_allclose(total, 0.5, rtol=1e-7)


def test_clip_differs_from_optax_at_and_just_below_the_threshold():
    # norm exactly 5 = max_norm: torch scales by 5 / (5 + 1e-6) = 1 - 2e-7, optax by 1.
    grads = {"a": jnp.array([3.0, 4.0])}
    clipped, _ = clip(grads, 5.0)
    np.testing.assert_allclose(clipped["a"], np.array([3.0, 4.0]) * (5.0 / (5.0 + 1e-6)), rtol=1e-7)
    assert float(clipped["a"][1]) < 4.0
    plain, _ = optax_clip(5.0, grads)
    np.testing.assert_array_equal(plain["a"], grads["a"])
    # Just below: 0.5 - 2.5e-7 < max_norm = 0.5 still gives coef = 0.5 / (0.5 + 7.5e-7) < 1.
    grads = {"a": jnp.array([0.5 - 2.5e-7])}
    clipped, _ = clip(grads, 0.5)
    assert float(clipped["a"][0]) < float(grads["a"][0])
    plain, _ = optax_clip(0.5, grads)
    np.testing.assert_array_equal(plain["a"], grads["a"])


def test_clip_edge_cases():
    zeros = {"a": jnp.zeros(3)}
    clipped, total = clip(zeros, 0.5)
    assert float(total) == 0.0
    np.testing.assert_array_equal(clipped["a"], zeros["a"])
    empty, total = clip({}, 0.5)
    assert empty == {} and float(total) == 0.0
    # Non-finite gradients give a NaN coefficient, as in torch (error_if_nonfinite=False).
    clipped, total = clip({"a": jnp.array([1.0, jnp.nan])}, 0.5)
    assert np.isnan(float(total)) and np.all(np.isnan(clipped["a"]))


def _mlp_shaped_grads(seed=0):
    """Gradients shaped as PQN's CartPole network: three dense layers and two LayerNorms (10 tensors)."""
    rng = np.random.default_rng(seed)
    shapes = [(4, 64), (64,), (64,), (64,), (64, 64), (64,), (64,), (64,), (64, 2), (2,)]
    return [jnp.asarray(rng.normal(size=s) * 10.0 ** rng.uniform(-3, 1), jnp.float32) for s in shapes]


def test_clip_stacked_norms_equal_the_per_leaf_norms():
    leaves = _mlp_shaped_grads()
    reference = np.array([np.linalg.norm(np.asarray(g, np.float64)) for g in leaves])
    stacked = np.asarray(jax.jit(optim._stacked_norms)(leaves))
    np.testing.assert_allclose(stacked, np.asarray(jax.jit(optim._per_leaf_norms)(leaves)), rtol=1e-6)
    np.testing.assert_allclose(stacked, reference, rtol=1e-6)
    # A NaN in one leaf gives a NaN for that leaf only; the zero padding adds nothing.
    leaves[3] = leaves[3].at[5].set(jnp.nan)
    stacked = np.asarray(optim._stacked_norms(leaves))
    assert np.isnan(stacked[3]) and np.all(np.isfinite(np.delete(stacked, 3)))


def _reductions_for(platform, leaves):
    text = jax.export.export(jax.jit(lambda g: optim.clip_grad_norm(g, 1.0)), platforms=(platform,))(leaves)
    return text.mlir_module().count("stablehlo.reduce")


def test_clip_stacks_its_reductions_off_the_cpu_only():
    leaves = _mlp_shaped_grads()
    # CPU: one reduction per leaf plus the total; an accelerator: the stacked one plus the total.
    assert _reductions_for("cpu", leaves) == len(leaves) + 1
    assert _reductions_for("cuda", leaves) == 2
    # One big tensor beside small ones (a CNN's dense layer): the stack would hold 12 copies of it, so not stacked.
    big = [jnp.zeros((3136, 512))] + [jnp.zeros((32,))] * 11
    assert not optim._stacks(big)
    assert _reductions_for("cuda", big) == len(big) + 1
    # One leaf: nothing to stack.
    assert _reductions_for("cuda", leaves[:1]) == 2


def test_clip_grad_norm_torch_in_a_chain():
    grads = {"a": jnp.array([3.0, 4.0]), "b": jnp.array([12.0])}
    tx = optax.chain(optim.clip_grad_norm_torch(1.0), optax.sgd(1.0))
    state = tx.init(grads)
    assert float(state[0].total_norm) == 0.0
    updates, state = jax.jit(tx.update)(grads, state)
    clipped, total = clip(grads, 1.0)
    assert float(state[0].total_norm) == float(total) == 13.0
    for k in grads:
        np.testing.assert_array_equal(updates[k], -clipped[k])


# --- linear_annealing -------------------------------------------------------------------


def test_linear_annealing_at_iteration_boundaries():
    # 10 iterations of 4 updates: counts 0-3 use lr, 4-7 use 0.9 lr, ..., 36-39 use 0.1 lr
    # (CleanRL: frac = 1 - (iteration - 1) / num_iterations, iteration from 1). From
    # count 40 on the rate stays 0.
    schedule = optim.linear_annealing(2.5e-4, num_iterations=10, updates_per_iteration=4)
    counts = jnp.array([0, 3, 4, 7, 8, 35, 36, 39, 40, 1000])
    expected = 2.5e-4 * np.array([1.0, 1.0, 0.9, 0.9, 0.8, 0.2, 0.1, 0.1, 0.0, 0.0])
    np.testing.assert_allclose(jax.jit(jax.vmap(schedule))(counts), expected, rtol=1e-6, atol=0)
    assert schedule(0).dtype == jnp.float32


def test_annealed_adam_uses_the_schedule_per_update():
    # With g = 1 every step is -lr(count) when eps = 0 (see the constant-gradient test).
    schedule = optim.linear_annealing(1.0, num_iterations=2, updates_per_iteration=2)
    p = steps(optim.torch_adam(schedule, eps=0.0), [jnp.ones(1)] * 5, jnp.zeros(1))
    np.testing.assert_allclose(np.concatenate(p), [-1.0, -2.0, -2.5, -3.0, -3.0], rtol=1e-6)


# --- traced learning rates --------------------------------------------------------------


def _three_steps(make_tx):
    """A function of a traced lr: three steps of make_tx(lr) on fixed gradients."""
    grads = jnp.array([[0.5, -1e-6], [0.1, 2e-6], [-0.3, 1e-6]])
    p0 = jnp.array([1.0, -2.0])

    def train(lr):
        tx = make_tx(lr)

        def body(carry, g):
            p, state = carry
            updates, state = tx.update(g, state, p)
            return (optax.apply_updates(p, updates), state), None

        return jax.lax.scan(body, (p0, tx.init(p0)), grads)[0][0]

    return train


@pytest.mark.parametrize(
    "make_tx",
    [
        lambda lr: optim.torch_adam(lr, eps=1e-5),
        lambda lr: optim.torch_adamw(lr, weight_decay=0.1),
        lambda lr: optim.torch_adamw(lr, weight_decay=lr * 10.0),  # traced weight decay too
        lambda lr: optim.torch_rmsprop(lr),
        lambda lr: optim.torch_adam(optim.linear_annealing(lr, 2, 2)),
        lambda lr: optax.chain(optim.clip_grad_norm_torch(lr * 100.0), optim.torch_adam(lr)),
    ],
    ids=["adam", "adamw", "adamw_traced_wd", "rmsprop", "annealed_adam", "clipped_adam"],
)
def test_jit_vmap_over_a_traced_learning_rate(make_tx):
    # A sweep over lr under jit(vmap) equals the run with lr as a Python float.
    train = _three_steps(make_tx)
    swept = jax.jit(jax.vmap(train))(jnp.array([1e-3, 3e-2], jnp.float32))
    np.testing.assert_allclose(swept[1], train(3e-2), rtol=1e-6, atol=1e-9)
    assert not np.allclose(swept[0], swept[1])


# --- argument errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,name",
    [
        (lambda: optim.torch_adam(-1e-3), "learning_rate"),
        (lambda: optim.torch_adam(float("nan")), "learning_rate"),
        (lambda: optim.torch_adam(jnp.ones(2)), "learning_rate"),
        (lambda: optim.torch_adam(1e-3, b1=1.0), "b1"),
        (lambda: optim.torch_adam(1e-3, b2=-0.1), "b2"),
        (lambda: optim.torch_adam(1e-3, b1=jnp.float32(0.9)), "b1"),
        (lambda: optim.torch_adam(1e-3, eps=-1e-8), "eps"),
        (lambda: optim.torch_adam(1e-3, weight_decay=-0.1), "weight_decay"),
        (lambda: optim.torch_adamw(1e-3, eps=float("inf")), "eps"),
        (lambda: optim.torch_adamw(1e-3, weight_decay=-1e-2), "weight_decay"),
        (lambda: optim.torch_rmsprop(-1.0), "learning_rate"),
        (lambda: optim.torch_rmsprop(1e-3, alpha=1.5), "alpha"),
        (lambda: optim.torch_rmsprop(1e-3, eps=-1.0), "eps"),
        (lambda: optim.clip_grad_norm_torch(0.0), "max_norm"),
        (lambda: optim.clip_grad_norm({"a": jnp.ones(2)}, -1.0), "max_norm"),
        (lambda: optim.clip_grad_norm_torch(float("nan")), "max_norm"),
        (lambda: optim.clip_grad_norm_torch(-float("inf")), "max_norm"),
        (lambda: optim.linear_annealing(1e-3, 0, 4), "num_iterations"),
        (lambda: optim.linear_annealing(1e-3, 2.5, 4), "num_iterations"),
        (lambda: optim.linear_annealing(1e-3, 10, 0), "updates_per_iteration"),
        (lambda: optim.linear_annealing(-1e-3, 10, 4), "learning_rate"),
    ],
)
def test_argument_errors_name_the_argument(build, name):
    with pytest.raises(ValueError, match=name):
        build()


def test_an_infinite_max_norm_is_no_clipping_eager_and_jitted():
    # torch's clip_grad_norm_(p, inf) scales by min(inf / (norm + 1e-6), 1) = 1; the algorithms' ranges say
    # max_grad_norm=inf is "no limit", and an eager PPO init refused it (naming max_norm) where jit took it.
    grads = {"a": jnp.array([3.0, 4.0e6]), "b": jnp.array([-1.0])}
    for clip_fn in (optim.clip_grad_norm, jax.jit(optim.clip_grad_norm)):
        clipped, norm = clip_fn(grads, float("inf"))
        assert jax.tree.all(jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), clipped, grads))
        assert float(norm) == pytest.approx(4.0e6)
    tx = optim.clip_grad_norm_torch(float("inf"))
    updates, _ = tx.update(grads, tx.init(grads))
    assert jax.tree.all(jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), updates, grads))
    from jaxrl_rollout.algorithms import ppo

    algo = ppo.make_ppo(ppo.PPOConfig(total_timesteps=512, num_envs=4, num_steps=128))
    algo.init(jax.random.key(0), ppo.PPOHParams(max_grad_norm=float("inf")))  # eager: no error
