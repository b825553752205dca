"""TD3: the delayed actor/target schedule, vmap, checks, your own networks, and learning Pendulum-v1."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout.algorithms import stack_hparams, td3
from tests.grids import grid_point, shared_train

SMALL = td3.TD3Config(total_timesteps=400, buffer_size=500, batch_size=32, learning_starts=100, policy_frequency=3,
                      hidden_sizes=(16, 16), log_interval=1)
# The schedule, exploration and single-run tests train SMALL through one compiled program (`shared_train`), their
# hyperparameters given as grid points.


def _changed(a, b) -> bool:
    return any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_delayed_schedule_and_metrics():
    cfg = SMALL  # policy_frequency 3
    _, train_one = shared_train(td3.make_train, SMALL)
    state, m = train_one(jax.random.key(0), grid_point(td3.TD3HParams()))
    g = np.arange(cfg.num_updates)  # update k is iteration g = k
    trained, actor = np.asarray(m.trained), np.asarray(m.actor_updated)
    np.testing.assert_array_equal(trained, g > 100)
    np.testing.assert_array_equal(actor, (g > 100) & (g % 3 == 0))  # CleanRL: global_step % policy_frequency == 0
    assert np.isnan(np.asarray(m.critic_loss)[~trained]).all() and np.isfinite(np.asarray(m.critic_loss)[trained]).all()
    assert np.isnan(np.asarray(m.actor_loss)[~actor]).all() and np.isfinite(np.asarray(m.actor_loss)[actor]).all()
    assert int(m.nonfinite.max()) == 0 and int(state.iteration) == cfg.num_iterations
    ret = np.asarray(m.episode_return)
    assert np.isnan(ret[np.asarray(m.num_episodes) == 0]).all() and np.isfinite(ret[np.asarray(m.num_episodes) > 0]).all()
    np.testing.assert_array_equal(m.env_steps, g + 1)

    # step by step: the critics move on every trained update; the actor and all targets only on delayed ones
    algo = td3.make_td3(dataclasses.replace(SMALL, learning_starts=3, policy_frequency=2))
    update = jax.jit(algo.update)
    s = jax.jit(algo.init)(jax.random.key(1))
    for _ in range(8):
        new, mi = update(s)
        g = int(new.iteration) - 1
        assert bool(mi.trained) == (g > 3) == _changed(s.critic_params, new.critic_params)
        due = g > 3 and g % 2 == 0
        assert bool(mi.actor_updated) == due
        assert _changed(s.actor_params, new.actor_params) == due
        assert _changed(s.target_actor_params, new.target_actor_params) == due
        assert _changed(s.target_critic_params, new.target_critic_params) == due
        s = new


def test_exploration_stays_in_the_box_and_random_before_learning_starts():
    assert (SMALL.total_timesteps, SMALL.learning_starts) == (400, 100) and SMALL.buffer_size >= 400
    _, train_one = shared_train(td3.make_train, SMALL)
    state, _ = train_one(jax.random.key(2), grid_point(td3.TD3HParams(exploration_noise=5.0)))
    actions = np.asarray(state.buffer.experience.action[0, :400, 0])
    assert (np.abs(actions) <= 2.0).all()  # Pendulum's Box [-2, 2]; large noise is clipped
    assert np.abs(actions[100:]).max() == 2.0 and np.abs(actions[:100]).max() < 2.0  # uniform, then clipped noise


def test_vmapped_seeds_and_hparams_equal_single_runs():
    train, train_one = shared_train(td3.make_train, SMALL)
    keys = jax.random.split(jax.random.key(1), 2)
    grid = stack_hparams([td3.TD3HParams(lr=1e-3, tau=0.01), td3.TD3HParams(lr=3e-4, policy_noise=0.3)])
    _, batched = jax.jit(jax.vmap(train))(keys, grid)
    for i in range(2):
        hp = jax.tree.map(lambda x: x[i], grid)
        _, single = train_one(keys[i], hp)
        for name in td3.TD3Metrics._fields:
            np.testing.assert_allclose(np.asarray(getattr(batched, name)[i]), np.asarray(getattr(single, name)),
                                       rtol=1e-5, atol=1e-6, err_msg=name)
    assert batched.actor_updated.any() and int(batched.nonfinite.max()) == 0


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="tau"):
        td3.make_train(SMALL)(jax.random.key(0), td3.TD3HParams(tau=0.0))  # checked before it traces
    with pytest.raises(ValueError, match="noise_clip"):
        td3.make_td3(SMALL).init(jax.random.key(0), td3.TD3HParams(noise_clip=-0.1))
    with pytest.raises(ValueError, match="gamma"):
        td3.check_hparams(td3.TD3HParams(gamma=1.5))
    with pytest.raises(ValueError, match="lr"):
        stack_hparams([td3.TD3HParams(lr=0.0)])
    with pytest.raises(TypeError, match="TD3HParams"):
        td3.make_train(SMALL)(jax.random.key(0), dict(lr=1.0))
    with pytest.raises(ValueError, match="bootstrap"):
        td3.TD3Config(bootstrap="truncation")
    with pytest.raises(ValueError, match="policy_frequency"):
        td3.TD3Config(policy_frequency=0)
    with pytest.raises(ValueError, match=r"batch_size=256 is more than buffer_size=100"):
        td3.TD3Config(buffer_size=100)
    with pytest.raises(ValueError, match=r"learning_starts=25000 leaves no gradient step"):
        td3.TD3Config(total_timesteps=20_000)
    # a delayed actor step that never comes: the actor and the targets stayed as initialised, and nothing said so
    with pytest.raises(ValueError, match=r"^policy_frequency=5000 leaves the actor as initialised: its first update "
                                         r"comes after iteration 5000 .*takes iterations 0 to 2999"):
        td3.TD3Config(total_timesteps=3000, learning_starts=100, policy_frequency=5000, log_interval=100)
    td3.TD3Config(total_timesteps=3000, learning_starts=100, policy_frequency=2000, log_interval=100)
    with pytest.raises(ValueError, match="learning_starts"):
        td3.TD3Config(learning_starts=-1)
    with pytest.raises(ValueError, match="total_timesteps"):
        td3.TD3Config(total_timesteps=1)
    with pytest.raises(ValueError, match="env .*Box"):
        td3.make_td3(td3.TD3Config(env_id="CartPole-v1"))
    with pytest.raises(TypeError, match="network"):
        td3.make_td3(SMALL, network=nn.Dense(3))
    with pytest.raises(ValueError, match="network.*actor"):
        td3.make_td3(SMALL, network=(nn.Dense(3), td3.TD3Critic((8,))))

    class JoinsOnTheBatchAxis(nn.Module):
        @nn.compact
        def __call__(self, obs, action):
            return nn.Dense(1)(jnp.concatenate([obs, action], axis=0))

    # the critic's own error is named as the critic, with the observation it was given and the contract
    with pytest.raises(ValueError, match=r"^network: the critic JoinsOnTheBatchAxis's __call__\(obs, action \[B, A\]\) "
                                         r"failed on a sample observation \(float32\[2, 3\]\): TypeError: .*"
                                         r"network must be a pair \(actor, critic\)"):
        td3.make_td3(SMALL, network=(td3.TD3Actor(1, (2.0,), (0.0,), (8,)), JoinsOnTheBatchAxis()))
    with pytest.raises(TypeError, match="config"):
        td3.make_td3(dataclasses.asdict(SMALL))


def test_own_networks():
    class Actor(nn.Module):
        @nn.compact
        def __call__(self, obs):
            return 2.0 * jnp.tanh(nn.Dense(1)(nn.tanh(nn.Dense(8)(obs))))

    class Critic(nn.Module):
        @nn.compact
        def __call__(self, obs, action):
            return nn.Dense(1)(nn.tanh(nn.Dense(8)(jnp.concatenate([obs, action], -1))))  # [B, 1] is accepted

    with pytest.raises(ValueError, match=r"^network: a module of your own is given, and config.hidden_sizes=\(16, "
                                         r"16\) shapes only the built-in network"):
        td3.make_td3(SMALL, network=(Actor(), Critic()))  # the sizes would not be read
    algo = td3.make_td3(dataclasses.replace(SMALL, hidden_sizes=td3.TD3Config.hidden_sizes), network=(Actor(), Critic()))
    state, m = jax.jit(algo.train)(jax.random.key(0))
    assert int(m.nonfinite.max()) == 0 and np.isfinite(np.asarray(m.actor_loss)[np.asarray(m.actor_updated)]).all()
    assert state.critic_params[0]["params"]["Dense_1"]["kernel"].shape == (4, 8)


def test_learns_pendulum_quickly():
    """10k steps (about 20 s on 2 CPU cores), small networks and lr 1e-3: last episodes far above random (~-1200).

    The full-size check (CleanRL's 256-256 networks and lr 3e-4, >= -200) is
    `benchmarks/offpolicy_learning.py --algo td3`.
    """
    cfg = td3.TD3Config(total_timesteps=10_000, buffer_size=10_000, batch_size=128, learning_starts=1_000,
                        hidden_sizes=(64, 64), log_interval=1)
    _, m = jax.jit(jax.vmap(td3.make_train(cfg), in_axes=(0, None)))(jax.random.split(jax.random.key(0), 2),
                                                                        td3.TD3HParams(lr=1e-3))
    ret = np.asarray(m.episode_return)
    random_phase, final = np.nanmean(ret[:, :1_000], axis=1), np.nanmean(ret[:, -1_000:], axis=1)
    assert (random_phase < -900).all() and (final > -400).all(), (random_phase, final)
