"""Smoke test for every declared Python and jax (#26): import, a tiny rollout, a tiny PPO and DQN train.

It needs only `pip install -e . pytest`. CI runs it, besides the whole suite on the
tested versions, on Python 3.12 and 3.13 and with the lowest version pyproject declares of each dependency.
"""

import sys

import gymnax
import jax
import jax.numpy as jnp
import numpy as np


def test_import_says_which_versions_and_keeps_the_fast_path():
    import jaxrl_rollout
    from jaxrl_rollout import prng

    print(f"python {sys.version.split()[0]}, jax {jax.__version__}, jaxrl_rollout from {jaxrl_rollout.__file__}")
    # Every jax in the declared range builds the fused CPU threefry; it draws JAX's own bits.
    assert prng.FUSED_THREEFRY is not None
    key = jax.random.key(3)
    for view in (prng.fused(key), key):
        np.testing.assert_array_equal(jax.random.key_data(prng.split(view, 3)),
                                      jax.random.key_data(jax.random.split(key, 3)))
    np.testing.assert_array_equal(jax.random.normal(prng.fused(key), (5,)), jax.random.normal(key, (5,)))


def test_a_tiny_rollout():
    import flax.linen as nn

    import jaxrl_rollout as jr

    class ActorCritic(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.tanh(nn.Dense(16)(x))
            return nn.Dense(2)(h), nn.Dense(1)(h)[:, 0]

    net = ActorCritic()
    params = net.init(jax.random.key(0), jnp.zeros((1, 4)))
    env, env_params = gymnax.make("CartPole-v1")

    @jax.jit
    def run(key):
        state = jr.rollout_init(key, env, env_params, 3)
        return jr.rollout(env, env_params, jr.categorical_policy(net.apply), params, state, 40)

    _, traj = run(jax.random.key(1))
    assert traj.action.shape == (40, 3) and traj.reward.shape == (40, 3)
    assert np.isfinite(np.asarray(traj.value)).all() and np.isfinite(np.asarray(traj.log_prob)).all()
    assert np.asarray(traj.done).any()  # CartPole under a random policy ends an episode within 40 steps
    _, again = run(jax.random.key(1))
    np.testing.assert_array_equal(np.asarray(again.obs), np.asarray(traj.obs))


def test_a_tiny_ppo_train():
    from jaxrl_rollout.algorithms import ppo

    config = ppo.PPOConfig(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 2, update_epochs=1, num_minibatches=2)
    train = jax.jit(jax.vmap(ppo.make_train(config)))
    state, metrics = train(jax.random.split(jax.random.key(0), 2))
    leaves = jax.tree.leaves(state.params)
    assert leaves and all(np.isfinite(np.asarray(leaf)).all() for leaf in leaves)
    first = jax.tree.leaves(state.params)[0]
    assert not np.array_equal(np.asarray(first[0]), np.asarray(first[1]))  # two seeds, two runs
    assert np.asarray(metrics.num_episodes).shape[0] == 2


def test_a_tiny_dqn_train():
    """The off-policy learners' replay buffer is flashbax's, whose state is a chex dataclass: chex before 0.1.90
    flattened it with jax.util, which jax 0.8.0 removed (every off-policy train failed there)."""
    from jaxrl_rollout.algorithms import dqn

    config = dqn.DQNConfig(total_timesteps=200, buffer_size=64, batch_size=8, learning_starts=20, train_frequency=2,
                           target_network_frequency=20, log_interval=50, hidden_sizes=(8,))
    state, metrics = jax.jit(jax.vmap(dqn.make_train(config)))(jax.random.split(jax.random.key(0), 2))
    leaves = jax.tree.leaves(state.params)
    assert leaves and all(np.isfinite(np.asarray(leaf)).all() for leaf in leaves)
    assert not np.array_equal(np.asarray(leaves[0][0]), np.asarray(leaves[0][1]))  # two seeds, two runs
    assert np.isfinite(np.asarray(metrics.loss)).all() and np.asarray(metrics.loss).shape[0] == 2


def test_a_saved_state_is_donated_to_the_next_program(tmp_path):
    """Saving a state leaves nothing on its arrays that keeps them from being donated: from jax 0.11 (what pip
    installs on Python 3.12 and 3.13) an array keeps the host copy Orbax's save makes of it and is then copied, not
    donated, so a run's chunk after a checkpoint held two train states (tests/test_runner.py's donation test failed
    there). A leaf of a MiB or more with a unit axis (a replay buffer's [runs, 1 env, ...]) is saved through a
    view of its memory (`checkpoint._without_unit_axes`), a small one as it is."""
    from jaxrl_rollout import checkpoint

    state = {"buffer": jnp.zeros((2, 1, 1 << 18)) + 1, "weights": jnp.ones((2, 3)) + 1}
    checkpoint.save(tmp_path, 1, state, {}, {"chunks_done": 1})
    out = jax.jit(lambda s: jax.tree.map(lambda x: x + 1, s), donate_argnums=(0,))(state)
    assert {name: x.is_deleted() for name, x in state.items()} == {"buffer": True, "weights": True}
    np.testing.assert_array_equal(np.asarray(out["weights"]), 3.0)


_CACHED_EVALUATION = """
import json, jax, gymnax, jax.numpy as jnp
import jaxrl_rollout as jr

w1, w2 = jax.random.normal(jax.random.key(1), (4, 16)), jax.random.normal(jax.random.key(2), (16, 2))
policy = jr.categorical_policy(lambda params, obs: (jnp.tanh(obs @ params[0]) @ params[1], jnp.zeros(obs.shape[0])),
                               deterministic=True)
env, env_params = gymnax.make("CartPole-v1")
run = lambda key: jr.evaluate(env, env_params, policy, (w1, w2), key, 4)
keys = jax.random.split(jax.random.key(8), 2)
print(json.dumps([[int(n) for n in r.lengths] for r in (jax.jit(run)(keys[0]), run(keys[0]), run(keys[1]))]))
"""


def test_programs_loaded_from_the_persistent_compilation_cache_compute_what_compiling_does(tmp_path):
    """The command line keeps JAX's persistent compilation cache (`--compile-cache auto`), so a user's second run
    loads its programs. On jax 0.6.0 a loaded CPU program could compute something else: this evaluation's episode
    lengths came back as zeros, eagerly in the process that wrote the cache and in every later one (jax 0.6.1, 0.6.2,
    0.7.0 and 0.8.0 were right), so pyproject asks for jax >= 0.6.1. Two processes share a fresh cache folder: the
    first writes it, the second loads from it; both agree with a process without the cache."""
    import json
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.pop("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", None)

    def lengths(cache):
        extra = {} if cache is None else {"JAX_COMPILATION_CACHE_DIR": str(cache),
                                          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
        out = subprocess.run([sys.executable, "-c", _CACHED_EVALUATION], env={**env, **extra}, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    compiled = lengths(None)
    assert all(n > 0 for run in compiled for n in run), compiled
    assert compiled[0] == compiled[1]  # jitted and eager
    assert lengths(tmp_path / "cache") == compiled  # the process that writes the cache
    assert any((tmp_path / "cache").iterdir())
    assert lengths(tmp_path / "cache") == compiled  # one that loads from it
