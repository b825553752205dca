"""DQN and its replay buffer: the true final observation, the bootstrap option, vmap, checks, and learning."""

from __future__ import annotations

import dataclasses
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout import algorithms, stepping
from jaxrl_rollout.algorithms import dqn, replay, stack_hparams
from tests.grids import grid_point, shared_train
from tests.toy_envs import CountingEnv

SMALL = dqn.DQNConfig(total_timesteps=2_000, buffer_size=500, batch_size=32, learning_starts=100,
                      train_frequency=10, target_network_frequency=50, hidden_sizes=(16, 16),
                      log_interval=10)
# The schedule and single-run tests train SMALL through one compiled program (`shared_train`), their
# hyperparameters given as grid points.


def test_transitions_keep_the_true_final_observation_and_the_bootstraps_differ():
    env, params = CountingEnv(), CountingEnv().default_params  # time limit 5; action 1 terminates
    B = 2
    obs, state = stepping.env_reset(env, jax.random.split(jax.random.key(0), B), params)
    rb = replay.make_replay_buffer(16, 4)
    buf = rb.init(jax.tree.map(lambda x: x[0], replay.Transition(obs, jnp.zeros(B, jnp.int32), jnp.zeros(B),
                                                                  obs, jnp.zeros(B, bool), jnp.zeros(B, bool))))
    rows = []
    for t in range(7):  # env 0 runs into the time limit; env 1 terminates at its third step
        action = jnp.array([0, 1 if t == 2 else 0], jnp.int32)
        step = stepping.env_step(env, params, jax.random.split(jax.random.key(t + 1), B), state, action, B)
        tr = replay.transitions(obs, action, step)
        buf = rb.add(buf, tr)
        rows.append(jax.tree.map(np.asarray, tr))
        obs, state = step.obs, step.env_state
    assert int(rb.size(buf)) == 14
    env0 = [jax.tree.map(lambda x: x[0], r) for r in rows]
    trunc = env0[4]
    assert trunc.truncated and not trunc.terminated
    assert trunc.next_obs[0] == 5.0 and trunc.next_obs[1] == trunc.obs[1]  # the final obs, not the reset one
    assert env0[5].obs[0] == 0.0  # the next transition starts from the reset observation
    term = jax.tree.map(lambda x: x[1], rows[2])
    assert term.terminated and term.next_obs[0] == 3.0
    stored = buf.experience  # [1, capacity, ...]: every stored transition steps time by one within its episode
    n = int(rb.size(buf))
    np.testing.assert_array_equal(stored.next_obs[0, :n, 0], stored.obs[0, :n, 0] + 1)
    np.testing.assert_array_equal(stored.next_obs[0, :n, 1], stored.obs[0, :n, 1])
    # "time_limits" bootstraps through the truncation and stops at the termination; "done" stops at both
    terminated, truncated = jnp.array([False, True, False]), jnp.array([True, False, False])
    np.testing.assert_array_equal(replay.discount_mask(terminated, truncated, "time_limits"), [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(replay.discount_mask(terminated, truncated, "done"), [0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="bootstrap"):
        replay.discount_mask(terminated, truncated, "never")


def test_dqn_buffer_holds_true_final_observations_and_targets_bootstrap_time_limits():
    """A whole DQN run on the counting env: the stored next_obs is the final one; time_limits bootstraps it."""
    env = CountingEnv()
    cfg = dataclasses.replace(SMALL, total_timesteps=301, learning_starts=50, num_envs=1)
    algo = dqn.make_dqn(cfg, env=env)
    state, _ = jax.jit(algo.train)(jax.random.key(0))
    stored = state.buffer.experience
    n = int(algo.buffer.size(state.buffer))
    assert n == 300  # 30 learner steps of 10 iterations; the 301st iteration makes no whole update
    np.testing.assert_array_equal(stored.next_obs[0, :n, 0], stored.obs[0, :n, 0] + 1)
    truncated = np.asarray(stored.truncated[0, :n]) & ~np.asarray(stored.terminated[0, :n])
    assert truncated.any() and np.asarray(stored.terminated[0, :n]).any()
    batch = jax.tree.map(lambda x: x[0, :n], stored)
    q = lambda p, o: jnp.ones((o.shape[0], 2))  # noqa: E731  Q' = 1 everywhere: the target is r + gamma * mask
    for bootstrap, want in (("time_limits", 1.0), ("done", 0.0)):
        _, (_, target) = dqn.dqn_loss(q, None, None, batch, 0.5, bootstrap)
        np.testing.assert_allclose(np.asarray(target)[truncated], np.asarray(batch.reward)[truncated] + 0.5 * want)


def test_vmapped_seeds_and_hparams_equal_single_runs():
    train, train_one = shared_train(dqn.make_train, SMALL)
    keys = jax.random.split(jax.random.key(1), 2)
    grid = stack_hparams([dqn.DQNHParams(lr=1e-3, tau=0.5), dqn.DQNHParams(lr=3e-4, exploration_fraction=0.2)])
    _, batched = jax.jit(jax.vmap(train))(keys, grid)
    for i in range(2):
        hp = jax.tree.map(lambda x: x[i], grid)
        _, single = train_one(keys[i], hp)
        for name in dqn.DQNMetrics._fields:
            np.testing.assert_allclose(np.asarray(getattr(batched, name)[i]), np.asarray(getattr(single, name)),
                                       rtol=1e-5, atol=1e-6, err_msg=name)
    assert batched.trained.any() and np.isfinite(np.asarray(batched.loss)[np.asarray(batched.trained)]).all()
    assert int(batched.nonfinite.max()) == 0
    assert np.isnan(np.asarray(batched.loss)[~np.asarray(batched.trained)]).all()
    np.testing.assert_array_equal(batched.env_steps[0], 10 * np.arange(1, SMALL.num_updates + 1))


def test_metrics_shapes_and_schedule():
    cfg = SMALL
    _, train_one = shared_train(dqn.make_train, cfg)
    state, m = train_one(jax.random.key(0), grid_point(dqn.DQNHParams()))
    assert m.loss.shape == (cfg.num_updates,) == (200,)
    # CleanRL trains after iteration g when g > learning_starts and g % train_frequency == 0; update k takes
    # g = 10k, ..., 10k + 9 and trains after its first
    np.testing.assert_array_equal(np.asarray(m.trained), 10 * np.arange(200) > 100)
    assert int(state.iteration) == 10 * 200
    ret = np.asarray(m.episode_return)
    assert np.isnan(ret[np.asarray(m.num_episodes) == 0]).all() and np.isfinite(ret[np.asarray(m.num_episodes) > 0]).all()
    np.testing.assert_allclose(m.epsilon[0], 1.0 - 0.95 * 9 / (0.5 * 2000), rtol=1e-6)  # its last iteration, g = 9
    np.testing.assert_allclose(m.epsilon[-1], 0.05, rtol=1e-6)


def test_epsilon_schedule_falls_as_cleanrls_and_a_rising_one_stops_at_end_e():
    """A falling schedule is CleanRL's formula value for value; a rising one (end_e > start_e, which CleanRL's
    formula would take past 1) ramps to end_e and stays, as PQN's does."""
    ts = jnp.asarray([0, 25, 50, 100, 200, 999], jnp.int32)
    at = jax.vmap(dqn.epsilon_schedule, in_axes=(None, None, None, 0))
    falling = np.asarray(at(1.0, 0.05, 100.0, ts))
    want = np.maximum(np.float32(0.05 - 1.0) / np.float32(100.0) * ts.astype(np.float32) + np.float32(1.0),
                      np.float32(0.05))
    np.testing.assert_array_equal(falling, want.astype(np.float32))
    np.testing.assert_allclose(np.asarray(at(0.1, 0.5, 100.0, ts)), [0.1, 0.2, 0.3, 0.5, 0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(at(0.3, 0.3, 100.0, ts)), 0.3, rtol=1e-7)


@pytest.mark.parametrize("train_frequency, target_frequency", [(3, 5), (2, 4)])
def test_the_target_moves_on_cleanrls_schedule_with_or_without_a_gradient_step(train_frequency, target_frequency):
    """CleanRL's loop: after iteration g > learning_starts, a gradient step when g % train_frequency == 0, then,
    not nested in that test, a target update when g % target_network_frequency == 0 (tau = 1: a copy of Q as it
    stands). With 3 and 5 the target moves at g = 10, 15, 20, ... although only g = 12, 15, 18, ... train; with
    2 and 4 (a multiple, the defaults' case) the update goes inside the gradient step."""
    cfg = dqn.DQNConfig(total_timesteps=90, num_envs=1, buffer_size=64, batch_size=8, learning_starts=6,
                        train_frequency=train_frequency, target_network_frequency=target_frequency,
                        hidden_sizes=(8,), log_interval=train_frequency)  # an update is one learner step
    algo = dqn.make_dqn(cfg)
    state = algo.init(jax.random.key(3))
    update = jax.jit(algo.update)
    q_after = [state.params]  # Q after each update's gradient step (update k trains after iteration k * tf)
    targets = [state.target_params]
    for _ in range(cfg.num_updates):
        state, _ = update(state)
        q_after.append(state.params)
        targets.append(state.target_params)
    for k in range(1, cfg.num_updates + 1):
        last_g = k * train_frequency - 1  # update k took iterations (k - 1) * tf .. k * tf - 1
        moved = [g for g in range(last_g + 1) if g > cfg.learning_starts and g % target_frequency == 0]
        # the target is Q as it stood after the latest due g: Q after update g // tf + 1, whose gradient step
        # (after its first iteration) is the last one at or before g
        want = q_after[moved[-1] // train_frequency + 1] if moved else q_after[0]
        jax.tree.map(np.testing.assert_array_equal, targets[k], want)
    assert cfg.num_updates * train_frequency >= 80 and len(moved) >= 8


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="tau"):
        dqn.make_train(SMALL)(jax.random.key(0), dqn.DQNHParams(tau=0.0))  # checked before it traces
    with pytest.raises(ValueError, match="end_e"):
        dqn.make_dqn(SMALL).init(jax.random.key(0), dqn.DQNHParams(end_e=1.5))
    with pytest.raises(ValueError, match="exploration_fraction"):
        dqn.check_hparams(dqn.DQNHParams(exploration_fraction=0.0))
    with pytest.raises(TypeError, match="DQNHParams"):
        dqn.make_train(SMALL)(jax.random.key(0), dict(lr=1.0))
    with pytest.raises(ValueError, match="bootstrap"):
        dqn.DQNConfig(bootstrap="truncation")
    with pytest.raises(ValueError, match=r"^adam_eps must be a number >= 0 and finite, got inf"):
        dqn.DQNConfig(adam_eps=float("inf"))  # failed as the run traced, inside optax
    # whole updates: 1,999 steps trained 1,000 and said nothing
    with pytest.warns(algorithms.PartialRunWarning, match=r"^total_timesteps=1999 trains 1,000 env steps: a run takes whole updates "
                                         r"of 1,000 env steps"):
        dqn.DQNConfig(total_timesteps=1999, learning_starts=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dqn.DQNConfig(total_timesteps=2000, learning_starts=100)
    # the warning names the line that built the config, directly or through dataclasses.replace (it named
    # dataclasses.py's line inside replace)
    with pytest.warns(algorithms.PartialRunWarning) as warned:
        built = dqn.DQNConfig(total_timesteps=1999, learning_starts=100)
        dataclasses.replace(built, total_timesteps=2999)
    assert [w.filename for w in warned] == [__file__, __file__], [(w.filename, w.lineno) for w in warned]
    # an update of one learner step: the way out is a multiple of it (log_interval is already as low as it goes)
    with pytest.warns(UserWarning, match=r"updates of 30 env steps \(1 learner step \(log_interval=1\) of 10 "
                                         r"iterations of num_envs=3\); for all of them make total_timesteps a "
                                         r"multiple of 30\.$"):
        partial = dqn.DQNConfig(num_envs=3, total_timesteps=21002, learning_starts=100, log_interval=1)
    from jaxrl_rollout import cli, runner

    with warnings.catch_warnings():  # a saved run's config, read back, is not the reader's to change
        warnings.simplefilter("error")
        spec = runner.RunSpec("dqn", partial, grid=(dqn.DQNHParams(),), num_seeds=1)
        assert runner.RunSpec.from_json(spec.to_json()) == spec
    # the command line hides the warning (its header says the steps) only while it runs
    with pytest.raises(SystemExit):
        cli.main(["train", "--algo", "nope"])
    with pytest.warns(algorithms.PartialRunWarning, match=r"^total_timesteps=1999 trains"):
        dqn.DQNConfig(total_timesteps=1999, learning_starts=100)
    with pytest.raises(ValueError, match="buffer_size"):
        dqn.DQNConfig(buffer_size=0)
    with pytest.raises(ValueError, match=r"batch_size=8 is more than buffer_size=7"):  # flashbax's own words before
        dqn.DQNConfig(buffer_size=7, batch_size=8, num_envs=1)
    with pytest.raises(ValueError, match=r"num_envs=10 is more than buffer_size=8"):  # a chex assertion at trace time
        dqn.DQNConfig(buffer_size=8, batch_size=8, num_envs=10)
    with pytest.raises(ValueError, match=r"batch_size=4 is more than buffer_size=3"):
        replay.make_replay_buffer(3, 4)
    with pytest.raises(ValueError, match=r"^buffer_size=2147483648 is more than 2,147,483,647 \(2\*\*31 - 1\)"):
        replay.make_replay_buffer(2**31, 4)  # (2**31 - 1 is allowed: its int32 positions hold it)
    replay.check_sizes(2**31 - 1, 4, 4)
    # CleanRL's 500,000-step defaults with a short run: no gradient step at all, an error rather than silence
    with pytest.raises(ValueError, match=r"learning_starts=10000 leaves no gradient step: the first comes after "
                                         r"iteration 10010.*takes iterations 0 to 9999"):
        dqn.DQNConfig(total_timesteps=10_000)
    with pytest.raises(ValueError, match=r"first comes after iteration 20, .* 0 to 19;"):
        dqn.DQNConfig(total_timesteps=20, num_envs=1, learning_starts=10, train_frequency=10, log_interval=10)
    dqn.DQNConfig(total_timesteps=30, num_envs=1, learning_starts=10, train_frequency=10, log_interval=10,
                  target_network_frequency=20)  # g = 20: a gradient step and a target update
    # a remainder of iterations short of a whole update is not taken, and the message says so
    with pytest.raises(ValueError, match=r"0 to 999 \(whole updates of 1000 iterations, log_interval=1000; the last "
                                         r"500 are not taken\)"):
        dqn.DQNConfig(total_timesteps=1500, num_envs=1, learning_starts=1000)
    with pytest.raises(ValueError, match="learning_starts"):
        dqn.DQNConfig(learning_starts=-1)
    # a run that ends before the target's first update would learn against the random initial target throughout
    with pytest.raises(ValueError, match=r"^target_network_frequency=600 leaves the target network as initialised: "
                                         r"its first update comes after iteration 600 .*takes iterations 0 to 399"):
        dqn.DQNConfig(total_timesteps=400, num_envs=1, learning_starts=0, target_network_frequency=600,
                      log_interval=10)
    dqn.DQNConfig(total_timesteps=610, num_envs=1, learning_starts=0, target_network_frequency=600, log_interval=10)
    with pytest.raises(ValueError, match="total_timesteps"):
        dqn.DQNConfig(total_timesteps=5)
    with pytest.raises(ValueError, match="Discrete"):
        dqn.make_dqn(dqn.DQNConfig(env_id="Pendulum-v1"))
    with pytest.raises(ValueError, match="network"):
        dqn.make_dqn(SMALL, network=nn.Dense(3))
    # a module that cannot run on the observation: named as the network, its own error chained
    with pytest.raises(ValueError, match=r"^network _WrongWidth: __call__\(obs\) failed on a sample observation "
                                         r"\(float32\[2, 4\]\): TypeError: dot_general requires contracting .*"
                                         r"network must be a flax linen Module with __call__\(obs \[B, \.\.\.\]\) "
                                         r"-> Q \[B, A\]\.") as raised:
        dqn.make_dqn(SMALL, network=_WrongWidth())
    assert isinstance(raised.value.__cause__, TypeError)


class _WrongWidth(nn.Module):
    """Written for a 7-wide observation; CartPole's is 4 wide."""

    @nn.compact
    def __call__(self, obs, *rest):
        return obs @ jnp.ones((7, 2))


def test_own_network():
    class Tiny(nn.Module):
        @nn.compact
        def __call__(self, obs):
            return nn.Dense(2)(nn.tanh(nn.Dense(8)(obs)))

    with pytest.raises(ValueError, match=r"^network: a module of your own is given, and config.hidden_sizes="):
        dqn.make_train(SMALL, network=Tiny())  # the sizes would not be read
    _, m = jax.jit(dqn.make_train(dataclasses.replace(SMALL, hidden_sizes=dqn.DQNConfig.hidden_sizes),
                                  network=Tiny()))(jax.random.key(0))
    assert int(m.nonfinite.max()) == 0


def test_learns_cartpole_quickly():
    """20k steps (about 10 s on 2 CPU cores): the last episodes return well above a random policy's ~22."""
    cfg = dqn.DQNConfig(total_timesteps=20_000, learning_starts=1_000, target_network_frequency=500, log_interval=10)
    hp = dqn.DQNHParams(lr=1e-3, exploration_fraction=0.2)
    _, m = jax.jit(jax.vmap(dqn.make_train(cfg), in_axes=(0, None)))(jax.random.split(jax.random.key(0), 2), hp)
    final = np.nanmean(np.asarray(m.episode_return)[:, -300:], axis=1)
    assert (final > 100).all(), final
