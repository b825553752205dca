"""Estimators against plain NumPy loops, hand-worked examples and each other."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrl_rollout import advantages as adv

# --- plain NumPy loops, float64, written straight from the equations ---------------------


def np_gae(r, v, nv, term, done, gamma, lam):
    T = len(r)
    gamma, lam = np.broadcast_to(gamma, r.shape), np.broadcast_to(lam, r.shape)
    a = np.zeros_like(r, dtype=np.float64)
    last = np.zeros(r.shape[1:])
    for t in reversed(range(T)):
        delta = r[t] + gamma[t] * (1 - term[t]) * nv[t] - v[t]
        last = delta + gamma[t] * lam[t] * (1 - done[t]) * last
        a[t] = last
    return a, a + v


def np_lambda_returns(r, nv, term, done, gamma, lam):
    T = len(r)
    g = np.zeros_like(r, dtype=np.float64)
    for t in reversed(range(T)):
        nxt = g[t + 1] if t < T - 1 else nv[t]
        cont = (1 - done[t]) if t < T - 1 else 0.0
        g[t] = r[t] + gamma * (1 - term[t]) * (nv[t] + lam * cont * (nxt - nv[t]))
    return g


def np_n_step(r, nv, term, done, gamma, n):
    T = len(r)
    out = np.zeros_like(r, dtype=np.float64)
    for t in range(T):
        for b in np.ndindex(r.shape[1:]):
            g, disc, k = 0.0, 1.0, t
            while True:
                g += disc * r[(k, *b)]
                ended = done[(k, *b)] or k == T - 1 or k - t + 1 == n
                if ended:
                    g += disc * gamma * (1 - term[(k, *b)]) * nv[(k, *b)]
                    break
                disc *= gamma
                k += 1
            out[(t, *b)] = g
    return out


def np_vtrace(r, v, nv, term, done, rho, gamma, lam, rbar, cbar, pgbar):
    T = len(r)
    rho_c, c = np.minimum(rbar, rho), lam * np.minimum(cbar, rho)
    delta = rho_c * (r + gamma * (1 - term) * nv - v)
    acc = np.zeros(r.shape[1:])
    vs = np.zeros_like(r, dtype=np.float64)
    for t in reversed(range(T)):
        acc = delta[t] + gamma * (1 - done[t]) * c[t] * acc
        vs[t] = v[t] + acc
    pg = np.zeros_like(vs)
    for t in range(T):
        nxt = np.where((t < T - 1) & (done[t] == 0), vs[min(t + 1, T - 1)], nv[t])
        pg[t] = np.minimum(pgbar, rho[t]) * (r[t] + gamma * (1 - term[t]) * nxt - v[t])
    return vs, pg


# --- random episodes ---------------------------------------------------------------------


@st.composite
def episodes(draw, shapes=((1, 1), (2, 3), (7, 2), (16, 4), (5, 2, 3))):
    shape = draw(st.sampled_from(shapes))
    seed = draw(st.integers(0, 2**31 - 1))
    pattern = draw(st.sampled_from(["random", "all_done", "no_done", "last_done", "truncation"]))
    rng = np.random.default_rng(seed)
    r = rng.normal(size=shape).astype(np.float32)
    v = rng.normal(size=shape).astype(np.float32)
    nv = np.concatenate([v[1:], rng.normal(size=(1, *shape[1:]))]).astype(np.float32)
    done = {
        "random": rng.random(shape) < 0.3,
        "all_done": np.ones(shape, bool),
        "no_done": np.zeros(shape, bool),
        "last_done": np.zeros(shape, bool) | (np.arange(shape[0]) == shape[0] - 1).reshape(-1, *[1] * (len(shape) - 1)),
        "truncation": rng.random(shape) < 0.3,
    }[pattern]
    term = done & (rng.random(shape) < (0.5 if pattern == "truncation" else 1.0))
    # Where truncated, next_values is V(final observation), not values[t + 1].
    trunc = done & ~term
    nv = np.where(trunc, rng.normal(size=shape), nv).astype(np.float32)
    gamma = draw(st.sampled_from([0.0, 0.9, 0.99, 1.0]))
    lam = draw(st.sampled_from([0.0, 0.5, 0.95, 1.0]))
    return r, v, nv, term, done, np.float32(gamma), np.float32(lam)


def tol(ref):
    scale = max(1.0, float(np.max(np.abs(ref))))
    return dict(rtol=1e-5, atol=1e-5 * scale)


@settings(max_examples=40, deadline=None)
@given(episodes())
def test_gae_matches_numpy_loop(case):
    r, v, nv, term, done, gamma, lam = case
    a, ret = adv.gae(r, v, nv, term, done, gamma, lam)
    ra, rret = np_gae(r, v, nv, term, done, gamma, lam)
    np.testing.assert_allclose(a, ra, **tol(ra))
    np.testing.assert_allclose(ret, rret, **tol(rret))
    assert a.dtype == jnp.float32


@settings(max_examples=30, deadline=None)
@given(episodes())
def test_lambda_returns_match_loop_and_gae(case):
    r, v, nv, term, done, gamma, lam = case
    g = adv.lambda_returns(r, nv, term, done, gamma, lam)
    ref = np_lambda_returns(r, nv, term, done, gamma, lam)
    np.testing.assert_allclose(g, ref, **tol(ref))
    # Where next_values[t] = values[t + 1] inside episodes, GAE returns are lambda-returns.
    _, ret = adv.gae(r, v, nv, term, done, gamma, lam)
    np.testing.assert_allclose(ret, g, **tol(ref))


@settings(max_examples=30, deadline=None)
@given(episodes(), st.sampled_from([1, 2, 3, 50]))
def test_n_step_returns_match_loop(case, n):
    r, v, nv, term, done, gamma, _ = case
    g = adv.n_step_returns(r, nv, term, done, gamma, n)
    ref = np_n_step(r, nv, term, done, gamma, n)
    np.testing.assert_allclose(g, ref, **tol(ref))
    if n == 1:
        np.testing.assert_allclose(g, r + gamma * (1 - term) * nv, **tol(ref))
    if n >= len(r):
        np.testing.assert_allclose(g, adv.lambda_returns(r, nv, term, done, gamma, 1.0), **tol(ref))


@settings(max_examples=30, deadline=None)
@given(episodes(), st.sampled_from([0.5, 1.0, 2.0]))
def test_vtrace_matches_loop_and_reduces_to_gae_on_policy(case, rho_scale):
    r, v, nv, term, done, gamma, lam = case
    rng = np.random.default_rng(0)
    rho = (rho_scale * rng.uniform(0.2, 2.0, size=r.shape)).astype(np.float32)
    vs, pg = adv.vtrace(r, v, nv, term, done, rho, gamma, lam, 1.0, 0.9, 1.2)
    rvs, rpg = np_vtrace(r, v, nv, term, done, rho, gamma, lam, 1.0, 0.9, 1.2)
    np.testing.assert_allclose(vs, rvs, **tol(rvs))
    np.testing.assert_allclose(pg, rpg, **tol(rpg))
    vs1, _ = adv.vtrace(r, v, nv, term, done, np.ones_like(r), gamma, lam)
    a, _ = adv.gae(r, v, nv, term, done, gamma, lam)
    np.testing.assert_allclose(vs1 - v, a, **tol(np.asarray(a)))


@settings(max_examples=30, deadline=None)
@given(episodes())
def test_discounted_returns_match_loop(case):
    r, v, _, _, done, gamma, _ = case
    boot = v[-1] * 3.0
    g = adv.discounted_returns(r, done, boot, gamma)
    ref = np.zeros_like(r, dtype=np.float64)
    acc = boot.astype(np.float64)
    for t in reversed(range(len(r))):
        acc = r[t] + gamma * (1 - done[t]) * acc
        ref[t] = acc
    np.testing.assert_allclose(g, ref, **tol(ref))


def test_gae_by_hand_3x2():
    # Env 0 runs on; env 1 terminates at t = 1. gamma = 0.5, lambda = 0.5.
    r = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 1.0]])
    v = np.array([[2.0, 0.0], [2.0, 1.0], [2.0, 4.0]])
    nv = np.array([[2.0, 1.0], [2.0, 4.0], [4.0, 8.0]])
    done = np.array([[0, 0], [0, 1], [0, 0]], bool)
    a, ret = adv.gae(r, v, nv, done, done, 0.5, 0.5)
    # deltas: env0 t0: 1+1-2=0, t1: 0, t2: 1+2-2=1;  env1 t0: 1+.5-0=1.5, t1: 2-1=1 (terminal),
    # t2: 1+4-4=1.  A env0: t2=1, t1=0+.25*1=.25, t0=.0625;  env1: t2=1, t1=1 (cut), t0=1.5+.25=1.75
    np.testing.assert_allclose(a, [[0.0625, 1.75], [0.25, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(ret, a + v)


def test_per_step_gamma_and_lambda():
    rng = np.random.default_rng(1)
    r, v = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    nv = np.concatenate([v[1:], v[:1]])
    done = rng.random((6, 3)) < 0.3
    gamma_t = np.linspace(0.8, 0.99, 6)
    lam_tb = rng.uniform(0, 1, size=(6, 3))
    a, _ = adv.gae(r, v, nv, done, done, gamma_t, lam_tb)
    ra, _ = np_gae(r, v, nv, done, done, gamma_t[:, None], lam_tb)
    np.testing.assert_allclose(a, ra, rtol=1e-5, atol=1e-5)


def test_jit_vmap_and_eager_agree():
    rng = np.random.default_rng(2)
    r, v, nv = (rng.normal(size=(4, 9, 3)).astype(np.float32) for _ in range(3))
    done = rng.random((4, 9, 3)) < 0.2
    f = lambda r, v, nv, d: adv.gae(r, v, nv, d, d, 0.99, 0.95)  # noqa: E731
    batched = jax.vmap(f)(r, v, nv, done)
    jitted = jax.jit(jax.vmap(f))(r, v, nv, done)
    for i in range(4):
        single = f(r[i], v[i], nv[i], done[i])
        np.testing.assert_allclose(batched[0][i], single[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(jitted[0][i], single[0], rtol=1e-6, atol=1e-6)


def test_nan_in_a_masked_value_propagates_like_torch():
    r = np.zeros((2, 1), np.float32)
    v = np.zeros((2, 1), np.float32)
    nv = np.array([[np.nan], [0.0]], np.float32)
    done = np.array([[1], [0]], bool)
    a, _ = adv.gae(r, v, nv, done, done, 0.99, 0.95)
    assert np.isnan(a[0, 0])


def test_normalize_advantages_ddof():
    x = jnp.arange(8.0)
    unbiased = adv.normalize_advantages(x)
    np.testing.assert_allclose(unbiased, (x - x.mean()) / (np.std(np.arange(8.0), ddof=1) + 1e-8), rtol=1e-6)
    np.testing.assert_allclose(adv.normalize_advantages(x, ddof=0), (x - x.mean()) / (x.std() + 1e-8), rtol=1e-6)
    assert np.isnan(adv.normalize_advantages(jnp.ones(1))[0])  # torch's std of one element
    with pytest.raises(ValueError, match="ddof"):
        adv.normalize_advantages(x, ddof=-1)
    # a NumPy int (as the sizes and counts elsewhere) is the int it holds; it was refused
    np.testing.assert_array_equal(adv.normalize_advantages(x, ddof=np.int64(1)), unbiased)


def test_start_and_end_flag_conversions():
    starts = np.array([[1, 1], [0, 1], [1, 0], [0, 0]], bool)
    next_start = np.array([1, 0], bool)
    ends = adv.starts_to_ends(starts, next_start)
    np.testing.assert_array_equal(ends, [[0, 1], [1, 0], [0, 0], [1, 0]])
    np.testing.assert_array_equal(adv.ends_to_starts(ends, starts[0]), starts)


def test_coefficients_and_flags_are_checked_where_their_values_are_known():
    """gamma 1.5, -1, NaN or "0.99", a lambda of 2, done given as the truncations alone (the trace then ran
    through a terminal state), a flag of 2 (a mask of -1) and T = 0 were all accepted (or an IndexError)."""
    r = np.ones((3, 2), np.float32)
    f = np.zeros((3, 2), bool)
    for gamma, lam, error, message in ((1.5, 0.95, ValueError, r"^gamma must be in \[0, 1\], got 1.5\.$"),
                                       (-1.0, 0.95, ValueError, r"^gamma must be in \[0, 1\], got -1\.$"),
                                       (np.nan, 0.95, ValueError, r"^gamma must be in \[0, 1\], got nan\.$"),
                                       (0.99, 2.0, ValueError, r"^gae_lambda must be in \[0, 1\], got 2\.$"),
                                       ("0.99", 0.95, TypeError, r"^gamma must be a number .*got '0.99'\.$"),
                                       (np.array([0.9, 1.2, 0.9]), 0.95, ValueError, r"got 1.2")):
        with pytest.raises(error, match=message):
            adv.gae(r, r, r, f, f, gamma, lam)
    with pytest.raises(ValueError, match=r"^lambda_ must be in \[0, 1\]"):
        adv.lambda_returns(r, r, f, f, 0.99, 1.5)
    with pytest.raises(ValueError, match=r"^clip_rho_threshold must be >= 0, got -1\.$"):
        adv.vtrace(r, r, r, f, f, r, 0.99, clip_rho_threshold=-1.0)
    terminated = f.copy()
    terminated[1, 0] = True
    with pytest.raises(ValueError, match=r"^terminated is set where done is not \(at index \(1, 0\)\): done is every "
                                         r"episode end, terminated \| truncated\.$"):
        adv.gae(r, r, r, terminated, f, 0.99, 0.95)
    with pytest.raises(ValueError, match=r"^done must be bool or \{0, 1\}, got the value 2\.0\.$"):
        adv.discounted_returns(r, np.full((3, 2), 2.0), r[0], 0.99)
    with pytest.raises(ValueError, match=r"^rewards has no steps \(T = 0, shape \(0, 2\)\); the estimators need T >= 1"):
        adv.lambda_returns(r[:0], r[:0], f[:0], f[:0], 0.99, 0.95)
    # traced values are not known at trace time: jit and vmap over gamma still trace
    assert jax.jit(lambda g: adv.gae(r, r, r, f, f, g, 0.95)[0])(0.9).shape == (3, 2)
    assert jax.vmap(lambda g: adv.gae(r, r, r, f, f, g, 0.95)[0])(jnp.array([0.9, 0.8])).shape == (2, 3, 2)


def test_shape_errors_name_the_argument():
    x = jnp.zeros((4, 2))
    with pytest.raises(ValueError, match=r"next_values must have the shape of rewards \(4, 2\)"):
        adv.gae(x, x, jnp.zeros((4, 3)), x, x, 0.9, 0.9)
    with pytest.raises(ValueError, match=r"gamma must be a scalar or a per-step array of shape \[T\]=\(4,\)"):
        adv.gae(x, x, x, x, x, jnp.ones(3), 0.9)
    with pytest.raises(ValueError, match="bootstrap_value must be one value per env, the batch shape"):
        adv.discounted_returns(x, x, jnp.zeros(3), 0.9)
    with pytest.raises(ValueError, match="n must be a positive Python int"):
        adv.n_step_returns(x, x, x, x, 0.9, 0)
    with pytest.raises(ValueError, match="rank >= 1"):
        adv.gae(jnp.float32(1.0), 1.0, 1.0, 0, 0, 0.9, 0.9)


ESTIMATORS = {
    "gae": lambda r, v, nv, term, done, g, lam: adv.gae(r, v, nv, term, done, g, lam),
    "lambda_returns": lambda r, v, nv, term, done, g, lam: adv.lambda_returns(r, nv, term, done, g, lam),
    "n_step_returns": lambda r, v, nv, term, done, g, lam: adv.n_step_returns(r, nv, term, done, g, 3),
    "discounted_returns": lambda r, v, nv, term, done, g, lam: adv.discounted_returns(r, done, nv[-1], g),
    "vtrace": lambda r, v, nv, term, done, g, lam: adv.vtrace(r, v, nv, term, done, jnp.exp(v - nv), g, lam),
}


@settings(max_examples=15, deadline=None)
@given(episodes(shapes=((6, 2), (9, 3))), st.sampled_from(sorted(ESTIMATORS)))
def test_jit_vmap_and_eager_agree_for_every_estimator(case, name):
    f = ESTIMATORS[name]
    eager = f(*case)
    jitted = jax.jit(f)(*case)
    # vmap over a leading axis of two copies, the second with rewards doubled.
    r2 = np.stack([case[0], 2 * case[0]])
    stacked = (r2,) + tuple(np.stack([x, x]) for x in case[1:5]) + case[5:]
    batched = jax.vmap(f, in_axes=(0, 0, 0, 0, 0, None, None))(*stacked)
    second = f(2 * case[0], *case[1:])
    for e, j, b, s in zip(*(jax.tree.leaves(x) for x in (eager, jitted, batched, second))):
        np.testing.assert_allclose(j, e, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(b[0], e, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(b[1], s, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("T", [1, 5, 16, 128, 131])
def test_reverse_accumulation_is_unrolled_off_the_cpu_only(T):
    """The recursion's scan takes 16 steps a trip where the program is lowered for a GPU (a trip is a launch there)
    and one on the CPU; the arithmetic is the same step by step, so the values equal the plain loop's exactly."""
    rng = np.random.default_rng(T)
    deltas, coefs = (jnp.asarray(rng.normal(size=(T, 3)), jnp.float32) for _ in range(2))
    init = jnp.asarray(rng.normal(size=3), jnp.float32)
    f = jax.jit(adv._reverse_accumulate)

    def plain(deltas, coefs, init):
        return jax.lax.scan(lambda c, x: (x[0] + x[1] * c,) * 2, init, (deltas, coefs), reverse=True)[1]

    np.testing.assert_array_equal(f(deltas, coefs, init), jax.jit(plain)(deltas, coefs, init))
    loops = {}
    for platform in ("cpu", "cuda"):
        text = f.trace(deltas, coefs, init).lower(lowering_platforms=(platform,)).as_text()
        # one step a trip: one while loop; 16 a trip: a loop over a [T // 16, 16, ...] reshape of the inputs,
        # or no loop at all where the whole scan fits in one trip
        unrolled = f"tensor<{T // 16}x16x3xf32>" in text
        loops[platform] = (text.count("stablehlo.while"), unrolled)
    want_cuda = (1, False) if T == 1 else (0, False) if T <= 16 else (1, True)
    assert loops == {"cpu": (1, False), "cuda": want_cuda}, loops
