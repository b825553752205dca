"""PPO and A2C: pure make_train functions, determinism, one compile, sweeps and bad configs."""

import chex
import jax
import numpy as np
import pytest

from jaxrl_rollout.algorithms import a2c, ppo, stack_hparams
from tests.jaxprs import random_ops

SMALL = ppo.PPOConfig(total_timesteps=4 * 512)


def tree_close(a, b, **tol):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), **tol), a, b)


def params_of(state):
    return state.params


def test_seed_i_of_a_vmapped_call_equals_a_single_call():
    train = ppo.make_train(SMALL)
    keys = jax.random.split(jax.random.key(3), 3)
    batched_state, batched = jax.jit(jax.vmap(train))(keys)
    single = jax.jit(train)
    for i in range(3):
        state, metrics = single(keys[i])
        tree_close(jax.tree.map(lambda x: x[i], params_of(batched_state)), params_of(state), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(batched.num_episodes[i], metrics.num_episodes)
        np.testing.assert_allclose(batched.episode_return[i], metrics.episode_return, rtol=1e-6)


def test_same_key_same_run_and_different_keys_differ():
    train = jax.jit(ppo.make_train(SMALL))
    a, b, c = train(jax.random.key(0)), train(jax.random.key(0)), train(jax.random.key(1))
    jax.tree.map(np.testing.assert_array_equal, params_of(a[0]), params_of(b[0]))
    assert not np.array_equal(a[1].policy_loss, c[1].policy_loss)


def test_update_compiles_once():
    made = ppo.make_ppo(SMALL)
    update = jax.jit(chex.assert_max_traces(made.update, n=1))
    state = made.init(jax.random.key(0), ppo.PPOHParams())
    for lr in (2.5e-4, 1e-3, 3e-4):  # new hyperparameter values must not retrace
        state, metrics = update(state, ppo.PPOHParams(lr=lr))
    assert int(metrics.env_steps) == SMALL.batch_size
    chex.clear_trace_counter()


def test_vmapped_hyperparameter_sweep_equals_single_runs():
    train = ppo.make_train(SMALL)
    points = [ppo.PPOHParams(lr=1e-3, ent_coef=0.0), ppo.PPOHParams(lr=3e-4, ent_coef=0.01)]
    grid = stack_hparams(points)
    assert grid.lr.shape == (2,) and grid.gamma.shape == (2,)
    key = jax.random.key(1)
    states, metrics = jax.jit(jax.vmap(train, in_axes=(None, 0)))(key, grid)
    for i, hp in enumerate(points):
        state, single = jax.jit(train)(key, hp)
        np.testing.assert_allclose(metrics.policy_loss[i], single.policy_loss, rtol=1e-4, atol=1e-6)
    assert not np.allclose(metrics.entropy[0], metrics.entropy[1])


def test_metrics_are_per_update_and_nan_without_episodes():
    _, m = jax.jit(ppo.make_train(SMALL))(jax.random.key(0))
    assert m.episode_return.shape == (4,)
    np.testing.assert_array_equal(m.env_steps, [512, 1024, 1536, 2048])
    assert np.all(np.isfinite(m.approx_kl)) and np.all(np.isfinite(m.explained_variance))
    # Pendulum episodes last 200 steps: the first 32-step rollout completes none.
    _, mp = jax.jit(ppo.make_train(ppo.PPOConfig(env_id="Pendulum-v1", num_steps=8, total_timesteps=32 * 4)))(
        jax.random.key(0)
    )
    assert int(mp.num_episodes[0]) == 0 and np.isnan(mp.episode_return[0])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_minibatches=3), r"num_envs \* num_steps = 512 does not divide into num_minibatches=3"),
        (dict(network="gru", num_envs=4, num_minibatches=8), r"keeps env sequences whole, so num_envs=4"),
        # one transition per minibatch: its advantages' std (ddof=1) is NaN, and so was every update
        (dict(num_minibatches=512), r"num_minibatches=512 leaves one transition per minibatch .* every update would "
                                    r"be NaN; use fewer minibatches or normalize_advantages=False"),
        (dict(network="gru", num_envs=4, num_steps=1, num_minibatches=4), r"num_minibatches=4 leaves one transition"),
        (dict(env_id="CartPole-v2"), r"unknown env_id 'CartPole-v2'. Did you mean CartPole-v1"),
        # another suite's name without its prefix: the SUITE/NAME form was never said
        (dict(env_id="ant"), r"unknown env_id 'ant'\. Known ids: .* another suite's env is named SUITE/NAME "
                             r"\(suites: brax, jumanji, craftax, xminigrid, navix, pgx, gymnasium, envpool; e\.g\. brax/ant"),
        (dict(num_envs=0), r"num_envs must be a positive int, got 0"),
        (dict(update_epochs=-1), r"update_epochs must be a positive int"),
        (dict(total_timesteps=100), r"total_timesteps=100 is less than one batch"),
        (dict(network="transformer"), r"network must be one of 'auto', 'mlp', 'cnn', 'gru'"),
        (dict(activation="gelu"), r"activation must be one of 'tanh', 'relu'"),
        (dict(hidden_sizes=()), r"hidden_sizes must be a non-empty tuple"),
        (dict(hidden_sizes=(64, 2**31)), r"hidden_sizes must be at most 2,147,483,647 \(2\*\*31 - 1\) units a layer"),
        # a string is truthy: "no" would have left each of these on
        (dict(anneal_lr="no"), r"anneal_lr must be a bool, got 'no'"),
        (dict(clip_value_loss="false"), r"clip_value_loss must be a bool, got 'false'"),
        (dict(normalize_advantages=0), r"normalize_advantages must be a bool, got 0"),
        (dict(bootstrap_on_truncation=None), r"bootstrap_on_truncation must be a bool, got None"),
    ],
)
def test_bad_configs_are_rejected_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ppo.PPOConfig(**kwargs)


def test_one_transition_per_minibatch_is_taken_without_advantage_normalisation():
    assert ppo.PPOConfig(num_minibatches=512, normalize_advantages=False).minibatch_size == 1


@pytest.mark.parametrize("value", ["3e-4", None, True, [1e-3, "x"]])
def test_a_hyperparameter_that_is_not_a_number_is_named(value):
    """A string converted silently to a float before (optax then named its own argument), None became NaN."""
    from jaxrl_rollout.algorithms import dqn, sac

    for record in (ppo.PPOHParams(lr=value), dqn.DQNHParams(lr=value), sac.SACHParams(q_lr=value)):
        field = "q_lr" if isinstance(record, sac.SACHParams) else "lr"
        with pytest.raises(TypeError, match=rf"^{field} must be a number or an array of numbers, got "):
            stack_hparams([record])
    with pytest.raises(TypeError, match=r"^lr must be a number or an array of numbers"):
        ppo.make_train(SMALL)(jax.random.key(0), ppo.PPOHParams(lr=value))


def test_bad_a2c_config_and_hparams():
    with pytest.raises(ValueError, match=r"rms_alpha must be a number in \[0, 1\], got 1.5"):
        a2c.A2CConfig(rms_alpha=1.5)
    for field, value in (("rms_alpha", "0.9"), ("rms_alpha", True), ("rms_eps", None), ("rms_eps", float("inf"))):
        with pytest.raises(ValueError, match=rf"^{field} must be a number .*, got {value!r}\.$"):
            a2c.A2CConfig(**{field: value})
    with pytest.raises(ValueError, match=r"^bootstrap_on_truncation must be a bool, got 'no'\.$"):
        a2c.A2CConfig(bootstrap_on_truncation="no")
    with pytest.raises(TypeError, match="hparams must be a PPOHParams"):
        ppo.make_train(SMALL)(jax.random.key(0), {"lr": 1e-3})
    with pytest.raises(TypeError, match="config must be a PPOConfig"):
        ppo.make_train(a2c.A2CConfig())


def _small_config(name):
    from jaxrl_rollout.algorithms import dqn, pqn, sac, td3

    return {"ppo": SMALL, "a2c": a2c.A2CConfig(total_timesteps=1024),
            "dqn": dqn.DQNConfig(total_timesteps=2000, learning_starts=500),
            "pqn": pqn.PQNConfig(total_timesteps=2048),
            "sac": sac.SACConfig(total_timesteps=2000, learning_starts=500),
            "td3": td3.TD3Config(total_timesteps=2000, learning_starts=500)}[name]


def _small_train(name):
    from jaxrl_rollout import algorithms

    return algorithms.get(name).make(_small_config(name)).train


@pytest.mark.parametrize("name", ["ppo", "a2c", "dqn", "pqn", "sac", "td3"])
def test_init_names_its_key_and_train_a_field_that_is_not_one_number(name):
    """init(0) was an AttributeError ('int' object has no attribute 'dtype'); a stacked grid passed to train
    without vmap, or a field of shape [1] or [T], failed deep inside the update (PPO: "Gradient only defined for
    scalar-output functions") or broadcast silently (PPO's gamma of shape [num_steps], DQN's of [batch_size])."""
    from jaxrl_rollout import algorithms

    entry = algorithms.get(name)
    algo = entry.make(_small_config(name))
    with pytest.raises(TypeError, match=r"^init's key must be a PRNG key, .*got int"):
        algo.init(0)
    with pytest.raises(ValueError, match=r"^init's key must be one PRNG key, got a batch of shape \(2,\); for several "
                                         r"seeds, vmap init over jax.random.split\(key, n\)"):
        algo.init(jax.random.split(jax.random.key(0), 2))
    default = entry.hparams()
    field = "gamma"
    for shape in ((2,), (1,), (7,)):
        bad = default._replace(**{field: np.full(shape, getattr(default, field), np.float32)})
        message = rf"^hparams\.gamma must be a scalar \(shape \(\)\), got shape \({shape[0]},\); .*jax\.vmap\(train"
        with pytest.raises(ValueError, match=message):
            jax.eval_shape(algo.train, jax.random.key(0), bad)
        with pytest.raises(ValueError, match=message):
            algo.update(algo.init(jax.random.key(0)), bad)


@pytest.mark.parametrize("name", ["ppo", "a2c", "dqn", "pqn", "sac", "td3"])
def test_train_names_a_key_that_is_not_one_prng_key(name):
    """A seed in place of a key, or a batch of keys without vmap, is one error naming the key and the fix,
    raised before anything is traced; one key, typed or raw, passes the check."""
    train = _small_train(name)
    for bad, got in ((0, "got int"), (np.zeros(2, np.float32), r"got float32 array of shape \(2,\)")):
        with pytest.raises(TypeError, match=r"train's key must be a PRNG key, jax.random.key\(seed\) or "
                                            r"jax.random.PRNGKey\(seed\), " + got):
            train(bad)
    hint = r"jax.vmap\(train\)\(jax.random.split\(key, n\)\)"
    with pytest.raises(ValueError, match=r"must be one PRNG key, got a batch of shape \(3,\); .*" + hint):
        train(jax.random.split(jax.random.key(0), 3))
    with pytest.raises(ValueError, match=r"must be one raw PRNG key .* got uint32 of shape \(3, 2\); .*" + hint):
        jax.jit(train)(jax.random.split(jax.random.PRNGKey(0), 3))
    from jaxrl_rollout.algorithms import _common

    for good in (jax.random.key(0), jax.random.PRNGKey(0), np.array([0, 1], np.uint32)):
        assert _common.check_train_key(good) is None
    jax.vmap(lambda k: _common.check_train_key(k) or k)(jax.random.split(jax.random.key(0), 3))  # one key per seed


def test_configs_are_frozen_and_derive_sizes():
    cfg = ppo.PPOConfig()
    assert (cfg.batch_size, cfg.minibatch_size, cfg.num_updates) == (512, 128, 976)
    with pytest.raises(Exception):
        cfg.num_envs = 8


def test_learner_gathers_per_epoch_or_all_at_once_with_the_same_result():
    """[E, M, mb] indices (one gather per epoch) and the same rows as [E*M, mb] (one gather) agree bit for bit."""
    made = ppo.make_ppo(SMALL)
    hp = ppo.PPOHParams()
    state = made.init(jax.random.key(0), hp)
    obs = jax.random.normal(jax.random.key(1), (64, 4))
    data = {"obs": obs, "action": (obs[:, 0] > 0).astype(np.int32), "log_prob": np.full(64, -0.69, np.float32),
            "value": obs[:, 1], "advantage": obs[:, 2], "returns": obs[:, 3]}
    indices = jax.random.permutation(jax.random.key(2), np.tile(np.arange(64), (3, 1)), axis=1, independent=True)
    indices = indices.reshape(3, 4, 16)
    tx = ppo.make_optimizer(SMALL, hp)
    learn = jax.jit(lambda idx: ppo.learn_minibatches(made.module, tx, state.params, state.opt_state, data, idx, hp))
    per_epoch, at_once = learn(indices), learn(indices.reshape(12, 16))
    jax.tree.map(np.testing.assert_array_equal, per_epoch, at_once)
    _, opt_state, parts = per_epoch
    assert parts["loss"].shape == (12,)
    # grad_norm is the clip's pre-clip norm, the last step's kept in the optimiser state.
    assert float(parts["grad_norm"][-1]) == float(opt_state[0].total_norm) > 0
    with pytest.raises(ValueError, match=r"indices must be int \[E, M, mb\] or \[U, mb\], got shape \(192,\)"):
        ppo.learn_minibatches(made.module, tx, state.params, state.opt_state, data, indices.reshape(-1), hp)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_init_hashes_its_keys_fused_with_the_same_values(env_id, monkeypatch):
    """The init's own splits, its weight draw and the envs' reset draws go through prng's fused hash, which
    changes no value."""
    from jaxrl_rollout import prng

    made = ppo.make_ppo(ppo.PPOConfig(env_id=env_id, total_timesteps=4 * 128, normalize_observations=True))
    init = lambda k: made.init(k, ppo.PPOHParams())  # noqa: E731
    key = jax.random.PRNGKey(7)
    ops = random_ops(jax.make_jaxpr(init)(key).jaxpr)
    plain = {op: n for op, n in ops.items() if op[0] == "random_split" and op[1] != "key<fyf>"}
    assert not plain and ops.get(("random_split", "key<fyf>")) == 3, ops  # split 3, then reset key, then B envs
    assert ops.get(("random_bits", "key<fyf>")) == 2, ops  # the initial weights, the envs' reset draw
    assert not any(op[1] != "key<fyf>" for op in ops), ops
    fused = jax.jit(init)(key)
    monkeypatch.setattr(prng, "_enabled", lambda: False)  # every key left as it is: JAX's own threefry
    init_plain = lambda k: made.init(k, ppo.PPOHParams())  # noqa: E731  (a new function: traced afresh)
    assert not any(op[1] == "key<fyf>" for op in random_ops(jax.make_jaxpr(init_plain)(key).jaxpr))
    jax.tree.map(np.testing.assert_array_equal, fused, jax.jit(init_plain)(key))


@pytest.mark.parametrize("name", ["ppo", "a2c", "dqn", "pqn", "sac", "td3"])
def test_numpy_scalars_in_a_config_are_the_numbers_they_hold(name):
    """total_timesteps=np.int64(...) was "must be a positive int", SAC's target_entropy=np.float32(-1.0) "must
    be a finite number or None"; a config also goes to config.json, which takes Python numbers only."""
    import dataclasses
    import json

    from jaxrl_rollout import algorithms

    base = _small_config(name)
    numbers = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)
               if type(getattr(base, f.name)) in (int, float) and not isinstance(getattr(base, f.name), bool)}
    as_numpy = dataclasses.replace(base, **{k: (np.int64(v) if isinstance(v, int) else np.float32(v))
                                            for k, v in numbers.items()})
    json.dumps(dataclasses.asdict(as_numpy))  # NumPy scalars are not JSON
    assert all(type(getattr(as_numpy, k)) in (int, float) for k in numbers)
    assert as_numpy.total_timesteps == base.total_timesteps and isinstance(as_numpy.total_timesteps, int)
    algorithms.get(name).make(as_numpy)
