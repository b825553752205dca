"""SAC: CleanRL's update schedule, the true final observation, vmap, checks, your own networks, and learning."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout import actor_critic_losses as acl
from jaxrl_rollout.algorithms import sac, stack_hparams
from tests.grids import grid_point, shared_train
from tests.toy_envs import BoxCountingEnv, CountingEnv
from tests.trees import host_leaves

SMALL = sac.SACConfig(total_timesteps=400, buffer_size=400, batch_size=32, learning_starts=100,
                      hidden_sizes=(16, 16), log_interval=2)
# A short run (50 of its 70 updates trained) that the vmap and fused-hashing tests train through one compiled
# program (`shared_train`), their hyperparameters given as grid points.
SHORT = dataclasses.replace(SMALL, total_timesteps=140, learning_starts=40)


def _leaves_equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_cleanrl_schedule_critic_every_step_actor_delayed_targets_periodic():
    """Critic after every g > learning_starts; pf actor steps when g % pf == 0; targets when g % tnf == 0."""
    cfg = dataclasses.replace(SMALL, total_timesteps=121, learning_starts=100, policy_frequency=2,
                              target_network_frequency=4)
    algo = sac.make_sac(cfg)
    hp = sac.SACHParams(tau=1.0)  # a target update copies the critics
    state = jax.jit(algo.init)(jax.random.key(0), hp)
    step = jax.jit(algo.update)
    assert cfg.num_updates == 60 and int(state.iteration) == 0  # init takes no env step
    for k in range(cfg.num_updates):
        before = state
        state, m = step(state, hp)
        first, last = 2 * k, 2 * k + 1  # the update's iterations g; the actor steps are due after the first
        assert int(state.iteration) == last + 1
        assert bool(m.trained) == (last > 100)
        assert int(state.critic_opt_state.count) == max(0, last - 100)  # one critic step per g > learning_starts
        actor_due = first > 100  # and first % pf == 0
        assert int(state.actor_opt_state.count) == 2 * max(0, k - 50)  # pf = 2 actor steps per due iteration
        assert int(state.alpha_opt_state.count) == int(state.actor_opt_state.count)  # one temperature step each
        assert _leaves_equal(before.actor_params, state.actor_params) == (not actor_due)
        target_due = first > 100 and first % 4 == 0  # (the odd g = last never is)
        assert _leaves_equal(before.target_critic_params, state.target_critic_params) == (not target_due)
        if last <= 100:
            assert _leaves_equal(state.target_critic_params, state.critic_params)  # targets start as the critics
        assert np.isfinite(float(m.critic_loss)) == (last > 100)
        assert np.isfinite(float(m.actor_loss)) == actor_due
        assert (float(m.alpha) != float(jnp.exp(before.log_alpha[0]))) == actor_due
        assert int(m.nonfinite) == 0


def test_random_actions_in_bounds_true_final_observation_and_time_limit_targets():
    env = BoxCountingEnv()
    cfg = dataclasses.replace(SMALL, total_timesteps=301, learning_starts=150)
    algo = sac.make_sac(cfg, env=env)
    np.testing.assert_array_equal(algo.action_scale, [2.0])
    np.testing.assert_array_equal(algo.action_bias, [1.0])
    assert algo.target_entropy == -1.0
    state, m = jax.jit(algo.train)(jax.random.key(0))
    stored = jax.tree.map(lambda x: x[0, :300], state.buffer.experience)
    assert int(algo.buffer.size(state.buffer)) == cfg.num_updates * cfg.steps_per_update == 300
    action = np.asarray(stored.action[:, 0])
    assert (action >= -1).all() and (action <= 3).all()
    assert action[:150].min() < -0.5 and action[:150].max() > 2.5  # uniform over the bounds before learning_starts
    np.testing.assert_array_equal(stored.next_obs[:, 0], stored.obs[:, 0] + 1)  # the final obs, not the reset one
    truncated = np.asarray(stored.truncated) & ~np.asarray(stored.terminated)
    assert truncated.any() and np.asarray(stored.terminated).any()
    np.testing.assert_array_equal(np.asarray(stored.terminated), action > 2.5)
    for bootstrap, want in ((True, 1.0), (False, 0.0)):  # Q' = 1, log pi = 0: the target is r + gamma * (1 - done)
        ones = jnp.ones(300)
        y = acl.sac_critic_target(ones, ones, 0 * ones, stored.reward, stored.terminated, stored.truncated, 0.5, 0.2,
                                  bootstrap_on_truncation=bootstrap)
        np.testing.assert_allclose(np.asarray(y)[truncated], np.asarray(stored.reward)[truncated] + 0.5 * want)
    ret = np.asarray(m.episode_return)
    assert np.isnan(ret[np.asarray(m.num_episodes) == 0]).all() and np.isfinite(ret[np.asarray(m.num_episodes) > 0]).all()
    np.testing.assert_array_equal(m.env_steps, 2 * np.arange(1, cfg.num_updates + 1))


def test_vmapped_seeds_and_hparams_equal_single_runs():
    # Short: batched and single matmuls round differently and training amplifies it (50 of 70 updates trained here);
    # atol 1e-5 as the actor loss is a near-zero mean of O(1) terms.
    train, train_one = shared_train(sac.make_train, SHORT)
    keys = jax.random.split(jax.random.key(1), 2)
    grid = stack_hparams([sac.SACHParams(q_lr=3e-4, tau=0.01), sac.SACHParams(policy_lr=1e-3, gamma=0.9)])
    _, batched = jax.jit(jax.vmap(train))(keys, grid)
    for i in range(2):
        hp = jax.tree.map(lambda x: x[i], grid)
        _, single = train_one(keys[i], hp)
        for name in sac.SACMetrics._fields:
            np.testing.assert_allclose(np.asarray(getattr(batched, name)[i]), np.asarray(getattr(single, name)),
                                       rtol=1e-5, atol=1e-5, err_msg=name)
    trained = np.asarray(batched.trained)
    assert trained.any() and np.isfinite(np.asarray(batched.critic_loss)[trained]).all()
    assert np.isnan(np.asarray(batched.actor_loss)[~trained]).all()
    assert int(batched.nonfinite.max()) == 0


def test_errors_name_the_argument():
    # a run whose delayed actor step never comes kept its initial actor and alpha (actor_loss NaN throughout)
    with pytest.raises(ValueError, match=r"^policy_frequency=20 leaves the actor as initialised"):
        sac.SACConfig(total_timesteps=60, learning_starts=45, policy_frequency=20, target_network_frequency=1,
                      log_interval=20, buffer_size=60, batch_size=8, hidden_sizes=(8,))
    with pytest.raises(ValueError, match="tau"):
        sac.make_train(SMALL)(jax.random.key(0), sac.SACHParams(tau=0.0))  # checked before it traces
    with pytest.raises(ValueError, match="q_lr"):
        sac.make_sac(SMALL).init(jax.random.key(0), sac.SACHParams(q_lr=-1.0))
    with pytest.raises(ValueError, match="alpha"):
        sac.check_hparams(sac.SACHParams(alpha=-0.1))
    with pytest.raises(ValueError, match="gamma"):
        sac.check_hparams(sac.SACHParams(gamma=1.5))
    with pytest.raises(TypeError, match="SACHParams"):
        sac.make_train(SMALL)(jax.random.key(0), dict(q_lr=1.0))
    for field, value in (("bootstrap", "truncation"), ("temperature_loss", "sb4"), ("buffer_size", 0),
                         ("policy_frequency", 0), ("learning_starts", -1), ("total_timesteps", 2),
                         ("autotune", 1), ("target_entropy", float("nan")), ("hidden_sizes", ())):
        with pytest.raises(ValueError, match=field):
            sac.SACConfig(**{field: value})
    with pytest.raises(ValueError, match=r"batch_size=256 is more than buffer_size=10"):
        sac.SACConfig(buffer_size=10)
    with pytest.raises(ValueError, match=r"num_envs=4 is more than buffer_size=3"):
        sac.SACConfig(buffer_size=3, batch_size=2, num_envs=4)
    with pytest.raises(ValueError, match=r"learning_starts=5000 leaves no gradient step"):
        sac.SACConfig(total_timesteps=5_000)
    with pytest.raises(ValueError, match=r"^policy_frequency=2 leaves the actor as initialised"):
        sac.SACConfig(total_timesteps=5_002, log_interval=1)  # one critic step, after iteration 5,001, no actor step
    sac.SACConfig(total_timesteps=5_004, log_interval=1)  # critic steps after 5,001 to 5,003, an actor step after 5,002
    with pytest.raises(ValueError, match=r"target_entropy=-2.0 is read only when the temperature is learned"):
        sac.SACConfig(autotune=False, target_entropy=-2.0)
    with pytest.raises(ValueError, match=r"temperature_loss='sb3' is read only when the temperature is learned"):
        sac.SACConfig(autotune=False, temperature_loss="sb3")
    for eps in (float("inf"), -1.0, float("nan")):  # inf failed only as the run traced, inside optax
        with pytest.raises(ValueError, match=r"^adam_eps must be a number >= 0 and finite"):
            sac.SACConfig(adam_eps=eps)
    # a learned temperature never reads alpha: another alpha trained the default's run under its own label
    with pytest.raises(ValueError, match=r"^hparams.alpha=0.5 is not read: with config.autotune=True"):
        sac.make_train(SMALL)(jax.random.key(0), sac.SACHParams(alpha=0.5))
    with pytest.raises(ValueError, match=r"^hparams.alpha=0.05 is not read"):
        sac.make_sac(SMALL).init(jax.random.key(0), stack_hparams([sac.SACHParams(), sac.SACHParams(alpha=0.05)]))
    with pytest.raises(ValueError, match=r"^hparams.alpha=0.1 is not read"):
        sac.check_hparams_read(SMALL, sac.SACHParams(alpha=0.1))
    with pytest.raises(ValueError, match=r"^hparams.alpha=0.21 is not read.* leave alpha at its default 0.2\.$"):
        sac.check_hparams_read(SMALL, sac.SACHParams(alpha=0.21))
    for default in (jnp.bfloat16(0.2), np.float16(0.2), np.float32(0.2), jnp.full(3, 0.2)):  # its roundings
        sac.check_hparams_read(SMALL, sac.SACHParams(alpha=default))
    sac.check_hparams_read(dataclasses.replace(SMALL, autotune=False), sac.SACHParams(alpha=0.1))
    from jaxrl_rollout import runner

    with pytest.raises(ValueError, match=r"^hparams.alpha=0.1 is not read"):
        runner.RunSpec("sac", SMALL, grid=(sac.SACHParams(), sac.SACHParams(alpha=0.1)), num_seeds=1)
    runner.RunSpec("sac", dataclasses.replace(SMALL, autotune=False), grid=(sac.SACHParams(alpha=0.1),), num_seeds=1)
    # the built-in networks' sizes are not read with a network of one's own
    with pytest.raises(ValueError, match=r"^network: a module of your own is given, and config.hidden_sizes=\(16, "
                                         r"16\) shapes only the built-in network"):
        sac.make_sac(SMALL, network=(_Actor(), _Critic()))
    with pytest.raises(ValueError, match=r"target_network_frequency=10000000 leaves the target network as "
                                         r"initialised"):
        sac.SACConfig(target_network_frequency=10**7)
    with pytest.raises(TypeError, match="SACConfig"):
        sac.make_sac(dict(SMALL.__dict__))
    with pytest.raises(ValueError, match="env .*continuous"):
        sac.make_sac(dataclasses.replace(SMALL, env_id="CartPole-v1"))
    with pytest.raises(ValueError, match="env .*continuous"):
        sac.make_sac(SMALL, env=CountingEnv())

    class MatrixActions(BoxCountingEnv):
        def action_space(self, params=None):
            return gymnax.environments.spaces.Box(-1.0, 3.0, (2, 2), jnp.float32)

    # a Box of the wrong shape: refused without the learners of Box actions (SAC is one of them)
    with pytest.raises(ValueError, match=r"^env MatrixActions: SAC needs continuous actions, a 1-D Box, got "
                                         r"Box\(2x2 float32\)\.$"):
        sac.make_sac(SMALL, env=MatrixActions())
    with pytest.raises(ValueError, match="env_params"):
        sac.make_sac(SMALL, env_params=object())
    with pytest.raises(TypeError, match="network"):
        sac.make_sac(SMALL, network=nn.Dense(3))
    with pytest.raises(ValueError, match="network: actor"):
        sac.make_sac(SMALL, network=(nn.Dense(1), sac.SACCritic()))
    with pytest.raises(ValueError, match="network: critic"):
        sac.make_sac(SMALL, network=(sac.SACActor(1), _BadCritic()))
    # modules that cannot run on the observation: named as the network's actor or critic, their own error chained
    with pytest.raises(ValueError, match=r"^network: the actor _WrongWidth's __call__\(obs\) failed on a sample "
                                         r"observation \(float32\[2, 3\]\): TypeError: dot_general .*network must "
                                         r"be a pair \(actor, critic\)"):
        sac.make_sac(SMALL, network=(_WrongWidth(), sac.SACCritic()))
    with pytest.raises(ValueError, match=r"^network: the critic _WrongWidth's __call__\(obs, action \[B, A\]\) "
                                         r"failed on a sample observation .*TypeError: dot_general"):
        sac.make_sac(SMALL, network=(sac.SACActor(1), _WrongWidth()))


class _WrongWidth(nn.Module):
    """Written for a 7-wide observation; Pendulum's is 3 wide."""

    @nn.compact
    def __call__(self, obs, *rest):
        return obs @ jnp.ones((7, 1))


class _BadCritic(nn.Module):
    @nn.compact
    def __call__(self, obs, action):
        return nn.Dense(3)(obs)


class _Actor(nn.Module):
    @nn.compact
    def __call__(self, obs):
        x = nn.tanh(nn.Dense(8)(obs))
        return nn.Dense(1)(x), jnp.clip(nn.Dense(1)(x), -5.0, 2.0)


class _Critic(nn.Module):
    @nn.compact
    def __call__(self, obs, action):
        return nn.Dense(1)(nn.tanh(nn.Dense(8)(jnp.concatenate([obs, action], -1))))  # [B, 1] is squeezed


def test_own_network_and_fixed_alpha():
    cfg = dataclasses.replace(SMALL, autotune=False, hidden_sizes=sac.SACConfig.hidden_sizes)
    algo = sac.make_sac(cfg, network=(_Actor(), _Critic()))
    state, m = jax.jit(algo.train)(jax.random.key(0), sac.SACHParams(alpha=0.05))
    assert int(m.nonfinite.max()) == 0 and np.asarray(m.trained).any()
    np.testing.assert_allclose(np.asarray(m.alpha), 0.05, rtol=1e-6)
    assert np.isnan(np.asarray(m.alpha_loss)).all() and int(state.alpha_opt_state.count) == 0
    out = algo.eval_policy_fn(state.actor_params, state.obs, jax.random.key(1))
    assert out.action.shape == (1, 1) and (np.abs(np.asarray(out.action)) <= 2).all()


def test_learns_pendulum_quickly():
    """6,000 steps (about 20 s on 2 CPU cores): episodes end far above a random policy's ~-1200..-1500."""
    cfg = sac.SACConfig(total_timesteps=6_000, buffer_size=6_000, learning_starts=1_000, batch_size=128,
                        hidden_sizes=(64, 64), log_interval=2)
    _, m = jax.jit(jax.vmap(sac.make_train(cfg)))(jax.random.split(jax.random.key(0), 2))
    ret = np.asarray(m.episode_return)
    first = np.nanmean(ret[:, :250], axis=1)  # random actions: the first 500 steps
    final = np.nanmean(ret[:, -250:], axis=1)  # the last 500 steps (2-3 episodes)
    assert (first < -900).all(), first
    assert (final > -700).all(), final


def test_fused_hashing_changes_no_value(monkeypatch):
    """Init, acting, the env's own draws and the learner's splits hash through prng's fused kernel, bit for bit."""
    from jaxrl_rollout import prng
    from tests.jaxprs import random_ops

    train, train_one = shared_train(sac.make_train, SHORT)
    key, hp = jax.random.key(5), grid_point(sac.SACHParams())  # SHORT: random actions, then 50 trained updates
    ops = random_ops(jax.make_jaxpr(train)(key, hp).jaxpr)
    assert ops and all(key_type == "key<fyf>" for _, key_type in ops), ops  # every split, fold_in and draw
    fused = train_one(key, hp)
    monkeypatch.setattr(prng, "_enabled", lambda: False)  # every key JAX's own threefry
    plain = jax.jit(sac.make_train(SHORT))(key, hp)
    for x, y in zip(host_leaves(fused), host_leaves(plain), strict=True):
        np.testing.assert_array_equal(x, y)  # NaN where the other has NaN (metrics without an episode)


def test_twin_critics_run_batched_each_on_its_own_params():
    # `_common.twin_q_values` runs both critics as one batched product per layer: each row is that critic's own
    # Q-values, and its gradients are the two critics' own.
    from jaxrl_rollout.algorithms import _common

    critic = _common.ObsActionCritic((16, 8))
    obs = jax.random.normal(jax.random.key(0), (32, 3))
    act = jax.random.uniform(jax.random.key(1), (32, 1), minval=-2.0, maxval=2.0)
    params = jax.vmap(lambda k: critic.init(k, obs[:1], act[:1]))(jax.random.split(jax.random.key(2)))
    one = [jax.tree.map(lambda x, i=i: x[i], params) for i in (0, 1)]
    each = [critic.apply(p, obs, act) for p in one]
    assert not np.allclose(each[0], each[1])
    q = _common.twin_q_values(critic, params, obs, act)
    assert q.shape == (2, 32)
    np.testing.assert_allclose(q, np.stack(each), rtol=1e-5, atol=1e-6)
    grads = jax.grad(lambda p: jnp.sum(jnp.min(_common.twin_q_values(critic, p, obs, act), 0) ** 2))(params)
    apart = jax.grad(lambda ps: jnp.sum(jnp.minimum(*(critic.apply(p, obs, act) for p in ps)) ** 2))(one)
    for i in (0, 1):
        for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x, i=i: x[i], grads)), jax.tree.leaves(apart[i]),
                        strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
