"""compat recipes on rollout trajectories: conventions that the golden fixtures do not pin."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_rollout as jr
from jaxrl_rollout import advantages
from jaxrl_rollout.compat import a2c, arena, cleanrl, ilpyt, rlplay, sb3, torch_ac
from tests.toy_envs import CountingEnv, scripted_policy

G, L = 0.9, 0.8


@functools.cache
def toy(bootstrap_truncated=True, num_steps=9):
    # Env 0 terminates every 3 steps; env 1 is truncated every 5 (see toy_envs).
    env = CountingEnv()
    state = jr.rollout_init(jax.random.key(0), env, env.default_params, 2)
    return jr.rollout(env, env.default_params, scripted_policy([2, 99]), None, state, num_steps,
                      bootstrap_truncated=bootstrap_truncated)


def test_cleanrl_treats_truncation_as_termination():
    _, traj = toy()
    adv_c, ret_c = cleanrl.from_trajectory(traj, G, L)
    as_termination = advantages.gae(traj.reward, traj.value, traj.next_value, traj.done, traj.done, G, L)
    ends = traj.done
    following = jnp.concatenate([traj.value[1:], traj.next_value[-1:]])
    manual = advantages.gae(traj.reward, traj.value, following, ends, ends, G, L)
    np.testing.assert_allclose(adv_c, manual[0], rtol=1e-6)
    np.testing.assert_allclose(ret_c, manual[1], rtol=1e-6)
    # Apart from the truncated step, bootstrapping from V(final obs) is irrelevant.
    np.testing.assert_allclose(adv_c[5:], as_termination[0][5:], rtol=1e-6)
    assert bool(traj.truncated[4, 1]) and not np.isclose(adv_c[4, 1], advantages.trajectory_gae(traj, G, L)[0][4, 1])
    # Either rollout setting gives CleanRL the same numbers.
    _, traj_off = toy(bootstrap_truncated=False)
    np.testing.assert_allclose(cleanrl.from_trajectory(traj_off, G, L)[0], adv_c, rtol=1e-6)


def test_sb3_timeout_bootstrap_equals_truncation_aware_gae():
    _, traj = toy()
    rewards, adv_s, ret_s = sb3.from_trajectory(traj, G, L)
    adv_t, ret_t = advantages.trajectory_gae(traj, G, L)
    np.testing.assert_allclose(adv_s, adv_t, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret_s, ret_t, rtol=1e-5, atol=1e-5)
    # The stored reward carries gamma * V(terminal obs) at the time limit, and only there.
    bonus = np.array(rewards - traj.reward)
    np.testing.assert_allclose(bonus[4, 1], G * traj.next_value[4, 1], rtol=1e-6)
    bonus[4, 1] = 0.0
    assert not bonus.any()


def test_arena_play_steps_flags_terminations_only_and_minibatches_flatten_time_major():
    env = CountingEnv()
    state = jr.rollout_init(jax.random.key(0), env, env.default_params, 2)
    state, memory, next_value, next_term = arena.play_steps(
        env, env.default_params, scripted_policy([2, 99]), None, state, 8, jnp.zeros(2, bool)
    )
    # Start flags: env 0 terminated at t = 2 and 5; env 1's time limit at t = 4 is ignored.
    np.testing.assert_array_equal(np.where(memory.terminated[:, 0])[0], [3, 6])
    assert not memory.terminated[:, 1].any()
    assert not bool(next_term[0]) and not bool(next_term[1])
    idx = arena.get_minibatch_indices(jax.random.key(1), 16, 4)
    assert idx.shape == (4, 4) and sorted(np.asarray(idx).ravel()) == list(range(16))
    indices = jnp.stack([idx, idx[::-1]])  # two passes (batches_per_learning_phase = 2)
    mbs = arena.get_minibatches(memory, next_value, next_term, G, L, indices)
    adv = arena.compute_advantages(next_value, next_term, memory.rewards, memory.values, memory.terminated, G, L)
    flat = np.asarray(adv).reshape(-1)  # torch flatten(0, 1): time-major
    np.testing.assert_allclose(mbs["advantages"], flat[np.asarray(indices)], rtol=1e-6)
    np.testing.assert_allclose(mbs["returns"], (flat + np.asarray(memory.values).reshape(-1))[np.asarray(indices)], rtol=1e-6)
    assert mbs["obs"].shape == (2, 4, 4, 2)
    with pytest.raises(ValueError, match="batch_size=10 is not a multiple of minibatch_size=4"):
        arena.get_minibatch_indices(jax.random.key(0), 10, 4)


def test_a2c_never_reads_the_bootstrap_when_the_last_step_is_done():
    rewards = jnp.ones((2, 3))
    dones = jnp.array([[0, 0, 1], [0, 0, 0]], bool)
    out = a2c.runner_returns(rewards, dones, jnp.array([jnp.nan, 2.0]), 0.5)
    np.testing.assert_allclose(out[0], [1.75, 1.5, 1.0])
    np.testing.assert_allclose(out[1], [2.0, 2.0, 2.0])
    np.testing.assert_allclose(a2c.discount_with_dones(jnp.ones(3), jnp.array([0, 0, 0]), 0.5), [1.75, 1.5, 1.0])
    with pytest.raises(ValueError, match=r"rewards and dones \[N, T\] and last_values \[N\]"):
        a2c.runner_returns(rewards, dones, jnp.zeros(3), 0.5)


def test_rlplay_select_masking_drops_nan_where_masked():
    rew = jnp.array([[0.0], [1.0], [1.0]])
    fin = jnp.array([[True], [True], [False]])
    value = jnp.array([[0.5], [jnp.nan], [1.0]])
    # delta_0 = where(fin_1, 0, gamma v_1) + (r_1 - v_0): v_1 is NaN but masked by fin_1.
    g = rlplay.gae(rew, fin, value, 0.9, 0.9)
    assert np.isfinite(g[0, 0])
    # The multiplicative masks of the torch-style estimators propagate it, as torch does.
    ends = fin[1:]
    mult = advantages.gae(rew[1:], value[:-1], value[1:], ends, ends, 0.9, 0.9)[0]
    assert np.isnan(mult[0, 0])
    with pytest.raises(ValueError, match=r"fragment shape \[T \+ 1, ...\]"):
        rlplay.gae(rew[:1], fin[:1], value[:1], 0.9, 0.9)


def test_ilpyt_episode_rewards_ignore_a_trailing_partial_episode():
    rewards = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])
    dones = jnp.array([0, 1, 0, 1, 0])
    assert ilpyt.episode_rewards_list(rewards, dones) == [3.0, 7.0]
    assert ilpyt.episode_rewards_list(rewards, jnp.zeros(5)) == []


def test_ilpyt_generate_episodes_reports_too_few_steps():
    env = CountingEnv()
    state = jr.rollout_init(jax.random.key(0), env, env.default_params, 2)
    _, eps = ilpyt.generate_episodes(env, None, scripted_policy([99, 99]), None, jax.random.key(1), state, 3, 4)
    assert int(eps.num_completed) == 0
    with pytest.raises(ValueError, match="only 0 of num_episodes=3 episodes completed; raise max_steps"):
        ilpyt.episodes_to_lists(eps, 3)


def test_a_bootstrap_of_the_wrong_shape_is_named_in_the_recipe_s_own_words():
    """A [T] bootstrap was jnp.concatenate's "Cannot concatenate arrays with shapes that differ", and a wrong
    last flag was reported as starts_to_ends' next_start. SB3's own [B, 1] critic output is flattened, as SB3
    flattens it."""
    from jaxrl_rollout.compat import arena, cleanrl, ilpyt, sb3, torch_ac

    T, B = 4, 3
    r = np.ones((T, B), np.float32)
    f = np.zeros((T, B), np.float32)
    with pytest.raises(ValueError, match=r"^cleanrl.compute_gae: next_value must be one value per env, the batch "
                                         r"shape of values \(3,\), got \(4,\)\.$"):
        cleanrl.compute_gae(r, r, f, np.zeros(T), np.zeros(B), 0.99, 0.95)
    with pytest.raises(ValueError, match=r"^cleanrl.compute_gae: next_done must be one value per env"):
        cleanrl.compute_gae(r, r, f, np.zeros(B), np.zeros(T), 0.99, 0.95)
    with pytest.raises(ValueError, match=r"^torch_ac.compute_gae: next_value must be one value per env"):
        torch_ac.compute_gae(r, r, 1 - f, np.zeros((B, 2)), np.ones(B), 0.99, 0.95)
    with pytest.raises(ValueError, match=r"^arena.compute_advantages: next_terminated must be one value per env"):
        arena.compute_advantages(np.zeros(B), np.zeros(T), r, r, f, 0.99, 0.95)
    with pytest.raises(ValueError, match=r"^ilpyt.compute_target: next_value must be one value per env, the batch "
                                         r"shape of rewards"):
        ilpyt.compute_target(r, f, np.zeros(T), 0.99)
    with pytest.raises(ValueError, match=r"^sb3.compute_returns_and_advantage: dones must be one value per env"):
        sb3.compute_returns_and_advantage(r, r, f, np.zeros(B), np.zeros(T), 0.99, 0.95)
    last = np.arange(B, dtype=np.float32)
    flat = sb3.compute_returns_and_advantage(r, r, f, last, np.zeros(B), 0.99, 0.95)
    column = sb3.compute_returns_and_advantage(r, r, f, last[:, None], np.zeros(B), 0.99, 0.95)
    np.testing.assert_array_equal(flat[0], column[0])


def test_lower_level_functions_refuse_what_they_would_get_wrong():
    """Each case below returned a wrong number, or failed deep inside JAX, before it was refused."""
    from gymnax.environments import spaces

    from jaxrl_rollout import actor_critic_losses as acl
    from jaxrl_rollout import losses, normalization, stepping

    env = CountingEnv()
    state = jr.rollout_init(jax.random.key(0), env, env.default_params, 2)
    t2 = jnp.zeros((3, 2))
    cases = [
        # fin of 0.5 was read as True; gamma 5.0 went into rlplay's recursion
        (lambda: rlplay.returns(t2, jnp.full((3, 2), 0.5), t2, 0.9), r"^fin must be bool or \{0, 1\}, got the value 0.5"),
        (lambda: rlplay.returns(t2, t2 > 1, t2, 5.0), r"^gamma must be in \[0, 1\]"),
        (lambda: rlplay.gae(t2, t2 > 1, t2, 0.9, 1.5), r"^gae_lambda must be in \[0, 1\]"),
        # T = 0 gave T = 1; a scalar an IndexError
        (lambda: advantages.starts_to_ends(jnp.zeros((0, 2), bool), jnp.ones(2, bool)), r"^starts has no steps"),
        (lambda: advantages.ends_to_starts(jnp.bool_(True), jnp.bool_(True)), r"^ends must be time-major"),
        (lambda: cleanrl.compute_gae(t2, t2, t2 > 1, jnp.zeros(2), jnp.full(2, 0.5), 0.9, 0.9),
         r"^next_done must be bool or \{0, 1\}"),
        # an empty batch made the statistics NaN for good
        (lambda: normalization.rms_update(normalization.rms_init((2,)), jnp.zeros((0, 2))), r"^batch must be .* N >= 1"),
        (lambda: normalization.scale_rewards(normalization.reward_scale_init(2), t2, jnp.full((3, 2), 0.5), 0.99),
         r"^done must be bool"),
        # a [1] mask zeroed both rows; 0.5 read as True
        (lambda: jr.reset_carry(jnp.ones((2, 2)), jnp.array([True])), r"^carry has shape \(2, 2\), which does not "
                                                                      r"begin with first's shape \(1,\)"),
        (lambda: jr.reset_carry(jnp.ones((2, 2)), jnp.array([0.5, 1.0])), r"^first must be bool or \{0, 1\}"),
        (lambda: stepping.batch_where(jnp.ones((2, 2), bool), jnp.ones(2), jnp.zeros(2)), r"^on_true has shape \(2,\)"),
        (lambda: stepping.batch_where(jnp.bool_(True), jnp.ones(2), jnp.zeros(2)), r"^mask must be one flag per env"),
        # an int key failed inside JAX
        (lambda: rlplay.context(0, env, None, 2), r"^rlplay\.context's key must be a PRNG key"),
        (lambda: rlplay.evaluate(env, None, scripted_policy([0, 0]), None, 0, 2, 3), r"^rlplay\.evaluate's key"),
        (lambda: ilpyt.generate_episodes(env, None, scripted_policy([0, 0]), None, 0, state, 3, 20),
         r"^ilpyt\.generate_episodes' key"),
        # ARENA's carried flags of the wrong batch were named by the internal function's argument
        (lambda: arena.play_steps(env, None, scripted_policy([0, 0]), None, state, 3, jnp.zeros(3, bool)),
         r"^terminated must be one value per env"),
        # 0.5 flags: read as 0 (no episode ended) or as True
        (lambda: ilpyt.get_episode_rewards(jnp.ones(3), jnp.array([0.5, 0.5, 1.0])), r"^dones must be bool"),
        (lambda: a2c.runner_returns(jnp.ones((2, 3)), jnp.full((2, 3), 0.5), jnp.zeros(2), 0.9), r"^dones must be bool"),
        (lambda: acl.bootstrap_done(jnp.array([0.5]), jnp.array([0.0])), r"^terminated must be bool"),
        # one row of noise broadcast to every sample; an unbounded Box gave NaN actions
        (lambda: acl.td3_target_actions(jnp.zeros((3, 2)), jnp.ones(2), 1.0, 0.2, 0.5, -1.0, 1.0),
         r"^noise must have the shape of next_actions \(3, 2\), got \(2,\)"),
        (lambda: jr.uniform_random_policy(spaces.Box(-jnp.inf, jnp.inf, (2,))), r"^uniform_random_policy needs a bounded Box"),
        # coefficients out of range ran silently
        (lambda: acl.sac_critic_target(*(jnp.zeros(2),) * 4, jnp.zeros(2, bool), jnp.zeros(2, bool), 2.0, 0.2),
         r"^gamma must be in \[0, 1\]"),
        (lambda: acl.polyak_update({"w": jnp.ones(2)}, {"w": jnp.zeros(2)}, 2.0), r"^tau must be in \[0, 1\]"),
        (lambda: losses.ppo_loss(*(jnp.zeros(4),) * 7, -0.2, 0.5, 0.01), r"^clip_eps must be"),
        (lambda: advantages.vtrace(*(jnp.zeros((3, 2)),) * 3, t2 > 1, t2 > 1, -jnp.ones((3, 2)), 0.9, 0.9), r"^rhos must be"),
        # SB3's time-limit bonus checked nothing: [B] flags gave every step the bonus, 0.5 flags read as True
        (lambda: sb3.timeout_rewards(t2, jnp.array([True, False]), t2, 0.99),
         r"^sb3.timeout_rewards: truncated has shape \(2,\), but rewards has shape \(3, 2\)"),
        (lambda: sb3.timeout_rewards(t2, jnp.full((3, 2), 0.5), t2, 0.99), r"^truncated must be bool or \{0, 1\}"),
        (lambda: sb3.timeout_rewards(t2, t2 > 1, t2, 5.0), r"^gamma must be in \[0, 1\]"),
        # torch-ac's masks were checked as end flags made from them: named terminated, 2 reported as -1.0
        (lambda: torch_ac.compute_gae(t2, t2, jnp.full((3, 2), 0.5), jnp.zeros(2), jnp.ones(2), 0.9, 0.9),
         r"^masks must be bool or \{0, 1\}, got the value 0.5"),
        (lambda: torch_ac.compute_gae(t2, t2, t2, jnp.zeros(2), jnp.full(2, 2.0), 0.9, 0.9),
         r"^next_mask must be bool or \{0, 1\}, got the value 2.0"),
        # rlplay's discount is one float: a [B] one was read per env, a [T] one failed in a broadcast
        (lambda: rlplay.returns(t2, t2 > 1, t2, jnp.full(2, 0.9)), r"^gamma must be a float, as rlplay's is"),
        (lambda: rlplay.gae(jnp.zeros((5, 3)), jnp.zeros((5, 3), bool), jnp.zeros((5, 3)), jnp.full(4, 0.9), 0.9),
         r"^gamma must be a float, as rlplay's is .* got an array of shape \(4,\)"),
    ]
    for call, message in cases:
        with pytest.raises((TypeError, ValueError), match=message):  # a key of the wrong type is a TypeError
            call()
    # rlplay with int rewards: gamma was cast to int 0 (no discount, no bootstrap); gae failed in lax.scan
    fin, val = jnp.zeros((3, 1), bool), jnp.array([[0.0], [0.0], [10.0]])
    np.testing.assert_allclose(rlplay.returns(jnp.array([[0], [1], [1]]), fin, val, 0.9), [[10.0], [10.0]], rtol=1e-6)
    np.testing.assert_allclose(rlplay.gae(jnp.array([[0], [1], [1]]), fin, val, 0.9, 0.95),
                               rlplay.gae(jnp.array([[0.0], [1.0], [1.0]]), fin, val, 0.9, 0.95))
    # SB3's bonus with int rewards: V(terminal) was cast to the rewards' int (0.75 -> 0), the bonus lost
    np.testing.assert_allclose(sb3.timeout_rewards(jnp.array([[1], [0]]), jnp.array([[True], [False]]),
                                                   jnp.array([[0.75], [0.5]]), 0.99), [[1.7425], [0.0]], rtol=1e-6)
    # sizes from NumPy (np.prod(shape)) are the ints they hold
    assert jr.batching.minibatch_indices(jax.random.key(0), np.int64(8), np.int64(2)).shape == (1, 2, 4)
    assert arena.get_minibatch_indices(jax.random.key(0), np.int64(8), np.int64(4)).shape == (2, 4)


def test_half_precision_estimators_compute_in_float32():
    """bfloat16 rounded gamma=0.99 to 0.98828 and carried the sum in 8 bits: 57.75 for 63.40."""
    T = 100
    z = np.zeros((T, 1), bool)
    for dtype in (jnp.bfloat16, jnp.float16):
        ones, zeros = jnp.ones((T, 1), dtype), jnp.zeros((T, 1), dtype)
        adv, ret = advantages.gae(ones, zeros, zeros, z, z, 0.99, 1.0)
        assert adv.dtype == ret.dtype == jnp.float32
        np.testing.assert_allclose(adv[0, 0], sum(0.99 ** k for k in range(T)), rtol=1e-5)
        np.testing.assert_allclose(advantages.discounted_returns(ones, z, jnp.zeros(1, dtype), 0.999)[0, 0],
                                   sum(0.999 ** k for k in range(T)), rtol=1e-5)
