"""PQN: jit and vmap over seeds and hyperparameters, metrics, the epsilon schedule, checks, your own env and
network, and a short CartPole learning run (the longer solve check is benchmarks/pqn_learning.py)."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.classic_control import CartPole, Pendulum

from jaxrl_rollout.algorithms import pqn, stack_hparams
from jaxrl_rollout.collect import evaluate
from tests.grids import grid_point, shared_train

SMALL = pqn.PQNConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3, update_epochs=2, num_minibatches=2,
                      hidden_sizes=(16, 16))
# The seed, sweep and same-key tests' single runs of SMALL share one compiled program (`shared_train`), their
# hyperparameters given as grid points.


def tree_close(a, b, **kw):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), **kw), a, b)


def test_seed_i_of_a_vmapped_call_equals_a_single_call():
    train, train_one = shared_train(pqn.make_train, SMALL)
    keys = jax.random.split(jax.random.key(3), 3)
    batched_state, batched = jax.jit(jax.vmap(train))(keys)  # the default hyperparameters
    for i in range(3):
        state, metrics = train_one(keys[i], grid_point(pqn.PQNHParams()))
        tree_close(jax.tree.map(lambda x: x[i], batched_state.params), state.params, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(batched.num_episodes[i], metrics.num_episodes)
        np.testing.assert_allclose(batched.episode_return[i], metrics.episode_return, rtol=1e-6)
        np.testing.assert_allclose(batched.loss[i], metrics.loss, rtol=1e-4, atol=1e-6)


def test_vmapped_hyperparameter_sweep_equals_single_runs():
    points = [pqn.PQNHParams(lr=1e-3, q_lambda=0.65), pqn.PQNHParams(lr=3e-4, q_lambda=0.95, epsilon_finish=0.05)]
    grid = stack_hparams(points)
    key = jax.random.key(1)
    train, train_one = shared_train(pqn.make_train, SMALL)
    _, metrics = jax.jit(jax.vmap(train, in_axes=(None, 0)))(key, grid)
    for i, hp in enumerate(points):
        _, single = train_one(key, grid_point(hp))
        np.testing.assert_allclose(metrics.loss[i], single.loss, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(metrics.epsilon[i], single.epsilon, rtol=1e-6)
    assert not np.allclose(metrics.loss[0], metrics.loss[1])


def test_same_key_same_run_and_different_keys_differ():
    _, train_one = shared_train(pqn.make_train, SMALL)
    hp = grid_point(pqn.PQNHParams())
    a, b, c = train_one(jax.random.key(0), hp), train_one(jax.random.key(0), hp), train_one(jax.random.key(1), hp)
    jax.tree.map(np.testing.assert_array_equal, a[0].params, b[0].params)
    assert not np.allclose(a[1].loss, c[1].loss)


def test_metrics_are_per_update_and_nan_without_episodes():
    config = pqn.PQNConfig(num_envs=2, num_steps=4, total_timesteps=2 * 4 * 2, num_minibatches=2,
                           hidden_sizes=(8,))
    state, m = jax.jit(pqn.make_train(config))(jax.random.key(0))
    assert m.loss.shape == m.epsilon.shape == m.nonfinite.shape == (2,)
    np.testing.assert_array_equal(m.env_steps, [8, 16])
    assert np.all(np.isnan(m.episode_return)) and np.all(m.num_episodes == 0)  # CartPole lasts > 4 steps
    assert np.all(m.nonfinite == 0) and np.all(np.isfinite(m.loss))
    assert int(state.update_count) == 2 and float(state.epsilon) == float(m.epsilon[-1])


def test_loss_and_q_mean_metrics_are_means_over_every_gradient_step():
    # With a vanishing learning rate the params stay put, so the mean over the 2 epochs x 2 equal minibatches of
    # the per-step loss and chosen-Q mean is the loss and mean chosen Q of the whole batch at the initial params.
    from jaxrl_rollout.collect import rollout

    agent = pqn.make_pqn(SMALL)
    hp = pqn.PQNHParams(lr=1e-30)
    state = agent.init(jax.random.key(4), hp)
    _, m = jax.jit(agent.update)(state, hp)
    epsilon = pqn.epsilon_at(hp, state.update_count, SMALL.num_updates)
    _, traj = rollout(agent.env, agent.env_params, agent.policy_fn, (state.params, epsilon), state.rollout,
                      SMALL.num_steps, bootstrap_truncated=SMALL.bootstrap_on_truncation)
    targets = pqn.q_lambda_targets(traj.reward * hp.reward_scale, traj.next_value, traj.terminated, traj.truncated, hp.gamma,
                                   hp.q_lambda, bootstrap_on_truncation=SMALL.bootstrap_on_truncation)
    loss, chosen = pqn.q_loss(agent.module, state.params, traj.obs.reshape(SMALL.batch_size, -1),
                              traj.action.reshape(-1), targets.reshape(-1))
    np.testing.assert_allclose(m.loss, loss, rtol=1e-5)
    np.testing.assert_allclose(m.q_mean, jnp.mean(chosen), rtol=1e-5, atol=1e-7)
    assert float(m.grad_norm) > 0 and m.nonfinite == 0


def test_epsilon_schedule_is_purejaxqls_linear_schedule():
    hp = pqn.PQNHParams(epsilon_start=1.0, epsilon_finish=0.2, epsilon_decay=0.25)
    got = [float(pqn.epsilon_at(hp, u, 40)) for u in range(0, 40, 2)]
    want = [1.0 + (0.2 - 1.0) * min(u / 10, 1.0) for u in range(0, 40, 2)]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_nonfinite_is_flagged():
    """A huge learning rate blows the Q-values up; the bitmask says so instead of a silent NaN."""
    config = pqn.PQNConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6, num_minibatches=2,
                           hidden_sizes=(8,), optimizer="adam", anneal_lr=False, layer_norm=False)
    _, m = jax.jit(pqn.make_train(config))(jax.random.key(0), pqn.PQNHParams(lr=1e30, max_grad_norm=1e30))
    assert np.any(m.nonfinite != 0)


@pytest.mark.parametrize("field, value, match", [
    ("lr", 0.0, "lr must be > 0"),
    ("gamma", 1.5, r"gamma must be in \[0, 1\]"),
    ("q_lambda", -0.1, r"q_lambda must be in \[0, 1\]"),
    ("epsilon_finish", 2.0, r"epsilon_finish must be in \[0, 1\]"),
    ("epsilon_decay", 0.0, "epsilon_decay must be > 0"),
    ("reward_scale", -1.0, "reward_scale must be > 0"),
    ("max_grad_norm", 0.0, "max_grad_norm must be > 0"),
    ("lr", np.inf, "lr must be > 0 and finite, got inf"),  # an all-NaN run
    ("reward_scale", np.inf, "reward_scale must be > 0 and finite, got inf"),
])
def test_hparams_out_of_range_name_the_field(field, value, match):
    alg = pqn.make_pqn(SMALL)
    with pytest.raises(ValueError, match=match):
        alg.init(jax.random.key(0), pqn.PQNHParams(**{field: value}))
    with pytest.raises(ValueError, match=match):
        pqn.check_hparams(pqn.PQNHParams(**{field: np.array([0.5, value])}))


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_minibatches=3), "num_minibatches=3"),
    (dict(network="gru"), "network must be one of 'auto', 'mlp', 'cnn', got 'gru'"),  # only the names PQN takes
    (dict(network="foo"), "network must be one of 'auto', 'mlp', 'cnn', got 'foo'"),
    (dict(anneal_lr="no"), "anneal_lr must be a bool, got 'no'"),
    (dict(optimizer="sgd"), "optimizer must be one of"),
    (dict(layer_norm=1), "layer_norm must be a bool"),
    (dict(update_epochs=0), "update_epochs must be a positive int"),
    (dict(total_timesteps=10), "less than one batch"),
])
def test_config_errors_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pqn.PQNConfig(**kwargs)


def test_hparams_of_the_wrong_type():
    with pytest.raises(TypeError, match="PQNHParams"):
        pqn.make_pqn(SMALL).init(jax.random.key(0), {"lr": 1e-3})


def test_continuous_actions_are_refused_naming_env():
    with pytest.raises(ValueError, match="env Pendulum: PQN needs Discrete actions"):
        pqn.make_pqn(SMALL, env=Pendulum())


def test_a_two_player_game_of_your_own_is_refused_naming_env_not_the_configs_id():
    """PQN and DQN have no self-play: a pgx game passed as env is refused by its type (the config's env_id,
    CartPole-v1 here, is not the env), and neither learner sends the user to the other."""
    from jaxrl_rollout import envs
    from jaxrl_rollout.algorithms import dqn

    game, game_params = envs.make("pgx/tic_tac_toe")
    for module, config in ((pqn.make_pqn, SMALL), (dqn.make_dqn, dqn.DQNConfig())):
        name = module.__name__.removeprefix("make_").upper()
        with pytest.raises(ValueError) as refused:
            module(config, env=game, env_params=game_params)
        assert str(refused.value) == (f"env {type(game).__name__}: a two-player game trains by self-play, which "
                                      f"{name} does not do; train it with ppo or a2c."), refused.value


class TinyQ(nn.Module):
    """A user's Q-network: obs [B, O] -> Q [B, A]."""

    action_dim: int

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(self.action_dim)(nn.tanh(nn.Dense(8)(obs)))


class MyCartPole(CartPole):
    """A user's env: gymnax's CartPole under another class."""


def test_your_own_env_and_network():
    own = dataclasses.replace(SMALL, hidden_sizes=pqn.PQNConfig.hidden_sizes)  # the built-in network's fields unset
    state, m = jax.jit(pqn.make_train(own, env=MyCartPole(), network=TinyQ(2)))(jax.random.key(0))
    assert set(state.params["params"]) == {"Dense_0", "Dense_1"}
    assert np.all(np.isfinite(m.loss))
    # The id route and a user's copy of the same env give the same run.
    a = jax.jit(pqn.make_train(own, network=TinyQ(2)))(jax.random.key(0))[1]
    np.testing.assert_array_equal(a.loss, m.loss)


class _Fails(nn.Module):
    """A Q-network whose own code cannot run on CartPole's [2, 4] observations."""

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(2)(obs.reshape(1, 2, 3))


@pytest.mark.parametrize("network, error, match", [
    (TinyQ(3), ValueError, r"must return Q-values float \[B, A\] = \[2, 2\]"),
    ("mlp", TypeError, "network must be a flax linen Module"),
    # the module's own error, named as the network with the observation it was given and the contract
    (_Fails(), ValueError, r"^network _Fails: __call__\(obs\) failed on a sample observation \(float32\[2, 4\]\): "
                           r"TypeError: .*network must be a flax linen Module"),
])
def test_a_network_that_breaks_the_contract_is_named(network, error, match):
    with pytest.raises(error, match=match):
        pqn.make_pqn(SMALL, network=network)


def test_network_and_config_network_together_are_refused():
    with pytest.raises(ValueError, match="leave config.network='auto'"):
        pqn.make_pqn(pqn.PQNConfig(network="mlp", num_minibatches=2, num_envs=4, num_steps=8,
                                   total_timesteps=64), network=TinyQ(2))
    # the built-in network's fields were dropped silently with a network of one's own
    for field, value in (("hidden_sizes", (16, 16)), ("activation", "tanh"), ("layer_norm", False)):
        with pytest.raises(ValueError, match=rf"^network: a module of your own is given, and config.{field}="
                                             rf".* shapes only the built-in network"):
            base = dataclasses.replace(SMALL, hidden_sizes=pqn.PQNConfig.hidden_sizes)
            pqn.make_pqn(dataclasses.replace(base, **{field: value}), network=TinyQ(2))


def test_policies_act_epsilon_greedy_and_greedy():
    alg = pqn.make_pqn(SMALL)
    state = alg.init(jax.random.key(0))
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(512, 4)), jnp.float32)
    q = alg.module.apply(state.params, obs)
    greedy = np.asarray(jnp.argmax(q, -1))
    out = alg.eval_policy_fn(alg.policy_params(state), obs, jax.random.key(1))
    np.testing.assert_array_equal(out.action, greedy)
    np.testing.assert_allclose(out.value, np.asarray(q).max(-1))
    sampled = alg.policy_fn((state.params, jnp.float32(0.5)), obs, jax.random.key(1))
    # With epsilon = 0.5 and 2 actions, 75% of actions are greedy.
    assert 0.65 < np.mean(np.asarray(sampled.action) == greedy) < 0.85
    probs = np.exp(np.asarray(sampled.log_prob))
    np.testing.assert_allclose(probs, np.where(np.asarray(sampled.action) == greedy, 0.75, 0.25), rtol=1e-6)


@pytest.mark.parametrize("action_dim", [2, 3, 7])
def test_epsilon_draws_are_uniform_actions_and_an_epsilon_coin(action_dim):
    """The one-draw coin and action (shared by PQN and DQN): coin rate epsilon, actions uniform in [0, A)."""
    from jaxrl_rollout.algorithms._common import epsilon_draws

    n, eps = 200_000, 0.3
    explore, action = jax.jit(lambda k: epsilon_draws(k, (n,), jnp.float32(eps), action_dim))(jax.random.key(3))
    explore, action = np.asarray(explore), np.asarray(action)
    assert explore.dtype == bool and action.dtype == np.int32 and action.shape == (n,)
    assert abs(explore.mean() - eps) < 4 * np.sqrt(eps * (1 - eps) / n)
    counts = np.bincount(action, minlength=action_dim)
    assert counts.size == action_dim  # nothing at A or above
    p = 1 / action_dim
    np.testing.assert_allclose(counts / n, p, atol=4 * np.sqrt(p * (1 - p) / n))
    # the action does not depend on the coin (two rows of one draw)
    np.testing.assert_allclose(np.bincount(action[explore], minlength=action_dim) / explore.sum(), p,
                               atol=4 * np.sqrt(p * (1 - p) / explore.sum()))


def test_learns_cartpole_quickly():
    """50k env steps on 2 seeds: the greedy policy clearly beats a random one (about 22 on CartPole-v1)."""
    config = pqn.PQNConfig(num_envs=16, num_steps=32, total_timesteps=50_000, update_epochs=2, num_minibatches=4,
                           hidden_sizes=(64, 64))
    hp = pqn.PQNHParams(lr=1e-3)
    alg = pqn.make_pqn(config)

    def run(key):
        state, metrics = alg.train(key, hp)
        result = evaluate(alg.env, alg.env_params, alg.eval_policy_fn, alg.policy_params(state),
                          jax.random.key(9), 32)
        return metrics, result.returns.mean()

    metrics, greedy = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), 2))
    first = np.nanmean(np.asarray(metrics.episode_return)[:, :10])
    last = np.nanmean(np.asarray(metrics.episode_return)[:, -10:])
    assert np.all(np.asarray(metrics.nonfinite) == 0)
    assert last > 2 * first, (first, last)
    assert float(np.mean(greedy)) >= 100.0 and float(np.min(greedy)) >= 50.0, greedy


class TimeQ(nn.Module):
    """Q(s) = [time + w, -1000 + w] with w = 0 at init: continuing (action 0) is always greedy."""

    @nn.compact
    def __call__(self, obs):
        w = self.param("w", nn.initializers.zeros, ())
        return jnp.stack([obs[:, 0] + w, jnp.full_like(obs[:, 0], -1000.0) + w], -1)


@pytest.mark.parametrize("bootstrap, want", [(True, 4.5), (False, 4.0)])
def test_time_limit_targets_bootstrap_from_the_final_observation(bootstrap, want):
    """CountingEnv (tests/toy_envs.py): reward = time, truncated at time 5, never terminated by a greedy policy.

    With gamma 0.5 and lambda 0 the targets of one 5-step episode are r + 0.5 max Q(next) = 1.5, 3, 4.5, 6 and,
    at the time limit, 5 + 0.5 * 5 = 7.5 from the final observation (time 5); purejaxql's `done` gives 5 there.
    """
    from tests.toy_envs import CountingEnv

    config = pqn.PQNConfig(num_envs=3, num_steps=5, total_timesteps=15, num_minibatches=1, update_epochs=1,
                           bootstrap_on_truncation=bootstrap)
    hp = pqn.PQNHParams(gamma=0.5, q_lambda=0.0, reward_scale=1.0, epsilon_start=0.0, epsilon_finish=0.0)
    _, m = jax.jit(pqn.make_train(config, env=CountingEnv(), network=TimeQ()))(jax.random.key(0), hp)
    np.testing.assert_allclose(m.target_mean, [want], rtol=1e-6)
    np.testing.assert_array_equal(m.num_episodes, [3])
    np.testing.assert_allclose(m.episode_return, [15.0])
