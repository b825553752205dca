"""Unit tests of jaxrl_rollout.actor_critic_losses (docs/semantics.md §21): target updates, flags, predicates, jit/vmap."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout import actor_critic_losses as acl

HAS_TORCH = importlib.util.find_spec("torch") is not None
TAUS = (0.005, 0.01, 0.1, 0.5, 1.0)


def tree(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"fc1": {"w": rng.normal(size=(64, 17)).astype(np.float32), "b": rng.normal(size=64).astype(np.float32) * 1e-3},
            "fc2": {"w": (rng.normal(size=(8, 64)) * 100).astype(np.float32)}}


def assert_within_rounding(got, expected, params, target, tau, ulps=1):
    """|got - expected| <= ulps * 2^-23 * (|tau p| + |(1 - tau) t|): the rounding of the terms, whatever the sum's size."""

    def check(a, b, p, t):
        bound = ulps * 2.0**-23 * (np.abs(np.float32(tau) * p) + np.abs(np.float32(1 - tau) * t))
        assert np.all(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)) <= bound)

    jax.tree.map(check, got, expected, params, target)


@pytest.mark.parametrize("tau", TAUS)
def test_polyak_update_is_cleanrls_formula_up_to_rounding(tau):
    params, target = tree(0), tree(1)
    # CleanRL: tau * param + (1 - tau) * target_param, each product rounded to float32
    expected = jax.tree.map(lambda p, t: np.float32(tau) * p + np.float32(1 - tau) * t, params, target)
    eager = acl.polyak_update(params, target, tau)
    jitted = jax.jit(lambda p, t: acl.polyak_update(p, t, tau))(params, target)
    for got in (eager, jitted):  # XLA may contract the multiply-add (one rounding fewer)
        assert_within_rounding(got, expected, params, target, tau)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-7 * max(1.0, np.abs(b).max())), jitted, expected)


@pytest.mark.parametrize("tau", TAUS)
def test_polyak_update_matches_sb3s_in_place_form_up_to_rounding(tau):
    params, target = tree(0), tree(1)
    got = acl.polyak_update(params, target, tau)
    # SB3: target.mul_(1 - tau); add(target, param, alpha=tau)
    sb3 = jax.tree.map(lambda p, t: np.float32(1 - tau) * t + np.float32(tau) * p, params, target)
    assert_within_rounding(got, sb3, params, target, tau, ulps=2)


def test_polyak_update_with_a_traced_tau_stays_within_rounding():
    params, target = tree(0), tree(1)
    got = jax.jit(acl.polyak_update)(params, target, jnp.float32(0.005))
    expected = acl.polyak_update(params, target, 0.005)
    assert_within_rounding(got, expected, params, target, 0.005, ulps=2)


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
@pytest.mark.parametrize("tau", (0.005, 0.3))
def test_polyak_update_against_torch(tau):
    import torch

    params, target = tree(0), tree(1)
    got = acl.polyak_update(params, target, tau)
    for layer in params:
        for k in params[layer]:
            p, t = torch.tensor(params[layer][k]), torch.tensor(target[layer][k])
            cleanrl = (tau * p + (1 - tau) * t).numpy()
            assert_within_rounding(got[layer][k], cleanrl, params[layer][k], target[layer][k], tau)
            sb3 = t.clone()
            sb3.mul_(1 - tau)
            torch.add(sb3, p, alpha=tau, out=sb3)
            assert_within_rounding(got[layer][k], sb3.numpy(), params[layer][k], target[layer][k], tau, ulps=2)


def test_hard_update_copies_every_period_steps():
    params, target = tree(0), tree(1)
    update = jax.jit(lambda s: acl.hard_update(params, target, s, 4))
    for step in range(9):
        expected = params if step % 4 == 0 else target
        jax.tree.map(np.testing.assert_array_equal, update(step), expected)


def test_delayed_update_due_is_cleanrls_modulo_and_traces():
    steps = jnp.arange(10)
    np.testing.assert_array_equal(jax.jit(jax.vmap(lambda s: acl.delayed_update_due(s, 2)))(steps), np.arange(10) % 2 == 0)
    np.testing.assert_array_equal(jax.vmap(acl.delayed_update_due)(steps, jnp.full(10, 3)), np.arange(10) % 3 == 0)


def test_bootstrap_done_conventions():
    term = np.array([True, True, False, False])
    trunc = np.array([True, False, True, False])
    np.testing.assert_array_equal(acl.bootstrap_done(term, trunc), [1, 1, 0, 0])
    np.testing.assert_array_equal(acl.bootstrap_done(term, trunc, bootstrap_on_truncation=False), [1, 1, 1, 0])
    assert acl.bootstrap_done(term, trunc).dtype == jnp.float32


def test_targets_bootstrap_through_time_limits_only_when_asked():
    q1, q2 = jnp.array([1.0, 2.0, 3.0]), jnp.array([2.0, 1.0, 5.0])
    logp, r = jnp.array([-1.0, 0.5, 0.0]), jnp.array([0.1, 0.2, 0.3])
    term, trunc = jnp.array([False, True, False]), jnp.array([True, False, False])
    sac = acl.sac_critic_target(q1, q2, logp, r, term, trunc, 0.9, 0.2)
    np.testing.assert_allclose(sac, [0.1 + 0.9 * (1.0 + 0.2), 0.2, 0.3 + 0.9 * 3.0], rtol=1e-6)
    sac_done = acl.sac_critic_target(q1, q2, logp, r, term, trunc, 0.9, 0.2, bootstrap_on_truncation=False)
    np.testing.assert_allclose(sac_done, [0.1, 0.2, 0.3 + 0.9 * 3.0], rtol=1e-6)
    td3 = acl.td3_critic_target(q1, q2, r, term, trunc, 0.9)
    np.testing.assert_allclose(td3, [0.1 + 0.9, 0.2, 0.3 + 2.7], rtol=1e-6)


def test_temperature_loss_forms_and_gradients():
    log_prob = jnp.array([-1.0, -3.0, 0.5])
    la = jnp.array([np.log(0.5)], jnp.float32)
    g_cleanrl = jax.grad(lambda x: acl.sac_temperature_loss(x, log_prob, -2.0)[0])(la)
    g_sb3 = jax.grad(lambda x: acl.sac_temperature_loss(x, log_prob, -2.0, form="sb3")[0])(la)
    mean = float(jnp.mean(log_prob - 2.0))
    np.testing.assert_allclose(g_cleanrl, [-0.5 * mean], rtol=1e-6)
    np.testing.assert_allclose(g_sb3, [-mean], rtol=1e-6)
    # log_prob is detached in both
    for form in ("cleanrl", "sb3"):
        g = jax.grad(lambda lp, f=form: acl.sac_temperature_loss(la, lp, -2.0, form=f)[0])(log_prob)
        np.testing.assert_array_equal(g, 0)
    with pytest.raises(ValueError, match="form"):
        acl.sac_temperature_loss(la, log_prob, -2.0, form="paper")


def test_td3_target_actions_clip_noise_in_scaled_units_then_the_bounds():
    noise = jnp.array([[10.0, -10.0, 0.5]])
    next_actions = jnp.array([[0.0, 0.0, 1.9]])
    got = acl.td3_target_actions(next_actions, noise, jnp.array([2.0, 2.0, 2.0]), 0.2, 0.5, -2.0, 2.0)
    np.testing.assert_allclose(got, [[1.0, -1.0, 2.0]], rtol=1e-6)  # 0.5 * scale 2, then the bound


def test_tanh_gaussian_sample_shapes_bounds_mode_and_jit_vmap():
    rng = np.random.default_rng(0)
    mean, raw, noise = (jnp.asarray(rng.normal(size=(5, 7, 3)), jnp.float32) for _ in range(3))
    scale, bias = acl.action_scale_and_bias(np.array([-1.0, 0.0, -3.0]), np.array([1.0, 2.0, 1.0]))

    def f(m, r, n):
        return acl.tanh_gaussian_sample(m, acl.tanh_squash_log_std(r), n, scale, bias)

    out = jax.jit(jax.vmap(f))(mean, raw, noise)
    assert out.action.shape == (5, 7, 3) and out.log_prob.shape == (5, 7) and out.mean_action.shape == (5, 7, 3)
    assert np.all(out.action >= np.array([-1.0, 0.0, -3.0])) and np.all(out.action <= np.array([1.0, 2.0, 1.0]))
    np.testing.assert_allclose(out.mean_action, acl.tanh_gaussian_mode(mean, scale, bias), rtol=1e-6)
    # the two reduction orders agree up to rounding, away from tanh's saturation (docs/semantics.md §21.1)
    eager = acl.tanh_gaussian_sample(mean, acl.tanh_squash_log_std(raw), noise, scale, bias)
    sep = acl.tanh_gaussian_sample(mean, acl.tanh_squash_log_std(raw), noise, scale, bias, sum_correction_separately=True)
    unsaturated = np.all(np.abs(np.tanh(np.asarray(mean + jnp.exp(acl.tanh_squash_log_std(raw)) * noise))) < 0.99, axis=-1)
    assert unsaturated.mean() > 0.3
    np.testing.assert_allclose(sep.log_prob[unsaturated], eager.log_prob[unsaturated], rtol=1e-5, atol=1e-5)
    log_std = acl.tanh_squash_log_std(raw)
    assert float(log_std.min()) >= acl.LOG_STD_MIN and float(log_std.max()) <= acl.LOG_STD_MAX
    with pytest.raises(ValueError, match="noise"):
        acl.tanh_gaussian_sample(mean, log_std, noise[..., :2])


def test_critic_and_actor_losses():
    q1, q2, y = jnp.array([1.0, 2.0]), jnp.array([0.0, 4.0]), jnp.array([1.0, 1.0])
    loss, parts = acl.twin_critic_loss(q1, q2, y)
    np.testing.assert_allclose(loss, 0.5 + 5.0)
    np.testing.assert_allclose(acl.twin_critic_loss(q1, q2, y, scale=0.5)[0], 0.5 * 5.5)
    np.testing.assert_array_equal(jax.grad(lambda t: acl.twin_critic_loss(q1, q2, t)[0])(y), 0)
    assert set(parts) == {"qf1_loss", "qf2_loss", "qf1_values", "qf2_values"}
    loss, _ = acl.sac_actor_loss(jnp.array([-1.0, 1.0]), q1, q2, 0.5)
    np.testing.assert_allclose(loss, np.mean([-0.5 - 0.0, 0.5 - 2.0]))
    np.testing.assert_allclose(acl.td3_actor_loss(q1)[0], -1.5)


def test_targets_vmap_over_hyperparameters_and_jit():
    rng = np.random.default_rng(1)
    q1, q2, logp, r = (jnp.asarray(rng.normal(size=6), jnp.float32) for _ in range(4))
    term, trunc = jnp.asarray(rng.random(6) < 0.3), jnp.asarray(rng.random(6) < 0.3)
    gammas, alphas = jnp.array([0.9, 0.99, 0.999]), jnp.array([0.05, 0.2, 1.0])
    batched = jax.jit(jax.vmap(lambda g, a: acl.sac_critic_target(q1, q2, logp, r, term, trunc, g, a)))(gammas, alphas)
    for i in range(3):
        single = acl.sac_critic_target(q1, q2, logp, r, term, trunc, float(gammas[i]), float(alphas[i]))
        np.testing.assert_allclose(batched[i], single, rtol=1e-6, atol=1e-6)


def test_state_independent_log_std_broadcasts():
    mean, noise = jnp.zeros((4, 2)), jnp.ones((4, 2))
    a = acl.tanh_gaussian_sample(mean, jnp.array([-1.0, 0.5]), noise)
    b = acl.tanh_gaussian_sample(mean, jnp.broadcast_to(jnp.array([-1.0, 0.5]), (4, 2)), noise)
    np.testing.assert_array_equal(a.log_prob, b.log_prob)
    with pytest.raises(ValueError, match="log_std"):
        acl.tanh_gaussian_sample(mean, jnp.zeros(3), noise)


def test_per_sample_inputs_of_different_shapes_are_refused_not_broadcast():
    """A critic head left at [N, 1] beside [N] returns broadcast to [N, N]: ppo_loss's value_loss read 1.056 for
    0.548, a2c_loss 2.11 for 1.09, and sac_critic_target returned [4, 4] targets, with no error."""
    from jaxrl_rollout import losses

    n = jnp.arange(8, dtype=jnp.float32) / 8
    col = n[:, None]
    with pytest.raises(ValueError, match=r"^ppo_loss: value has shape \(8, 1\), but log_prob has shape \(8,\); "
                                         r"these are per-sample arrays of one shape \(squeeze"):
        losses.ppo_loss(n, n, n, col, n, n, n, 0.2, 0.5, 0.01)
    with pytest.raises(ValueError, match=r"^a2c_loss: log_prob has shape \(8, 1\), but"):
        losses.a2c_loss(col, n, n, n, 0.5, 0.01)
    with pytest.raises(ValueError, match=r"^sac_critic_target: next_q2 has shape \(8, 1\)"):
        acl.sac_critic_target(n, col, n, n, n > 2, n > 3, 0.99, 0.2)
    with pytest.raises(ValueError, match=r"^twin_critic_loss: target has shape \(8, 1\)"):
        acl.twin_critic_loss(n, n, col)
    with pytest.raises(ValueError, match=r"^sac_actor_loss: q1_pi has shape \(8, 1\)"):
        acl.sac_actor_loss(n, col, n, 0.2)
    with pytest.raises(ValueError, match=r"^td3_critic_target: rewards has shape \(8, 1\)"):
        acl.td3_critic_target(n, n, col, n > 2, n > 3, 0.99)
    # one shape throughout, [T, B] as well as [N], is what they take
    losses.ppo_loss(*(jnp.ones((4, 2)),) * 7, 0.2, 0.5, 0.01)
