"""The craftax adapter on Craftax-Classic-Symbolic, pinned down step by step through the rollout.

Two envs, always NOOP (action 0), 5 steps. Env 0 lives. Env 1 has its
health set to 0 after the reset, so it dies on its first step (craftax checks
`health <= 0` after the step, and one step cannot heal), then plays a fresh
world. The same rollout runs under three time limits at once, vmapped over
craftax's EnvParams (which also shows they are traced):

  LIMIT_3   max_timesteps=3: env 0 is truncated on its 3rd step, env 1 dies,
            then is truncated 3 steps later;
  LIMIT_1   max_timesteps=1: every step ends an episode; env 1's death on the
            limit step counts as terminated, not truncated;
  NO_LIMIT  craftax's default (10000): no time-out; env 1 still dies.

The three runs share keys and actions, so until a run resets they take the
same steps: NO_LIMIT's next observation is what the env gives when stepped on
without a reset, the reference for the final observations of the others.
The value V(obs) = obs . w (fixed weights) tells observations apart. The
light level, the observation's second-to-last entry, tells the step count t
of an observation: craftax sets it to L(t) = 1 - |cos(pi (t / 300 + 0.3))|^3.
Everything runs in one jitted program (one compile, about 30 s on a 2-core
CPU).
"""

import subprocess
import sys

import craftax  # noqa: E402,F401  (the test extra installs it: a missing suite fails here, never skips)
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_rollout as jr
from jaxrl_rollout import envs, stepping

NAME = "craftax/Craftax-Classic-Symbolic-v1"
T, B = 5, 2
LIMIT_3, LIMIT_1, NO_LIMIT = 0, 1, 2
LIGHT, HEALTH = -2, -10  # indices in the flat symbolic observation; health is stored / 10
WEIGHTS = jnp.sin(jnp.arange(1345.0))


def light(t, day_length=300):
    return 1.0 - np.abs(np.cos(np.pi * (np.asarray(t) / day_length + 0.3))) ** 3


# Worked out by hand for LIMIT_3: columns are env 0 and env 1, rows are t = 0..4.
STEP_COUNT = np.array([[0, 0], [1, 0], [2, 1], [0, 2], [1, 0]])  # craftax's timestep of obs[t]
TERMINATED = np.array([[0, 1], [0, 0], [0, 0], [0, 0], [0, 0]], bool)
TRUNCATED = np.array([[0, 0], [0, 0], [1, 0], [0, 1], [0, 0]], bool)
FIRST = np.array([[1, 1], [0, 1], [0, 0], [1, 0], [0, 1]], bool)
COMPLETED_LENGTH = np.array([[0, 1], [0, 0], [3, 0], [0, 3], [0, 0]])


def value_of(obs):
    return obs @ WEIGHTS


def noop_policy(params, obs, key):
    del params, key
    return jr.PolicyOutput(jnp.zeros((B,), jnp.int32), jnp.zeros((B,)), value_of(obs))


@pytest.fixture(scope="module")
def made():
    return envs.make(NAME, max_timesteps=3)


@pytest.fixture(scope="module")
def result(made):
    env, params = made
    limits = [params, params.replace(max_timesteps=1), envs.make(NAME)[1]]
    batched = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *limits)

    def scenario(key, params):
        state0 = jr.rollout_init(key, env, params, B)
        dying = state0.env_state.replace(player_health=state0.env_state.player_health.at[1].set(0))
        state0 = state0._replace(env_state=dying)
        state, traj = jr.rollout(env, params, noop_policy, None, state0, T)
        return state0, state, traj

    run = jax.jit(jax.vmap(scenario, in_axes=(None, 0)))
    return run(jax.random.key(0), batched)


def test_make_returns_craftax_params_and_gymnax_spaces(made):
    from gymnax.environments import spaces

    env, params = made
    assert int(params.max_timesteps) == 3 and env.default_params is params
    assert int(envs.make(NAME)[1].max_timesteps) == 10000
    assert isinstance(env.action_space(params), spaces.Discrete) and env.action_space(params).n == 17
    obs_space = env.observation_space(None)
    assert isinstance(obs_space, spaces.Box) and tuple(obs_space.shape) == (1345,)
    # the rollout computes only the done envs' resets (worlds): the scenarios below step through that path
    assert stepping._resets_only_done(env)


def test_flags_first_and_step_counts_step_by_step(result):
    state0, state, traj = jax.tree.map(lambda x: x[LIMIT_3], result)
    np.testing.assert_array_equal(state0.env_state.player_health, [9, 0])
    np.testing.assert_array_equal(traj.terminated, TERMINATED)
    np.testing.assert_array_equal(traj.truncated, TRUNCATED)
    np.testing.assert_array_equal(traj.done, TERMINATED | TRUNCATED)
    np.testing.assert_array_equal(traj.first, FIRST)
    np.testing.assert_allclose(traj.obs[..., LIGHT], light(STEP_COUNT), rtol=1e-6)
    np.testing.assert_array_equal(state.env_state.timestep, [2, 1])
    np.testing.assert_array_equal(traj.completed_length, COMPLETED_LENGTH)
    assert traj.reward.dtype == jnp.float32


def test_death_on_the_limit_step_is_terminated_and_no_limit_never_truncates(result):
    _, _, traj = result
    # LIMIT_1: env 0 is truncated at every step; env 1 dies on the limit step, then is truncated.
    np.testing.assert_array_equal(traj.terminated[LIMIT_1], [[0, 1], [0, 0], [0, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(traj.truncated[LIMIT_1], [[1, 0], [1, 1], [1, 1], [1, 1], [1, 1]])
    np.testing.assert_array_equal(traj.first[LIMIT_1], np.ones((T, B), bool))
    # NO_LIMIT: only the death ends an episode.
    np.testing.assert_array_equal(traj.terminated[NO_LIMIT], TERMINATED)
    np.testing.assert_array_equal(traj.truncated[NO_LIMIT], np.zeros((T, B), bool))


def test_reset_observations_start_a_new_world(result):
    obs = np.asarray(result[2].obs[LIMIT_3])
    # Episodes start at step 0 with full health (9 / 10; env 1's first observation was
    # rendered before its health was set to 0).
    np.testing.assert_allclose(obs[FIRST][:, LIGHT], light(0), rtol=1e-6)
    np.testing.assert_allclose(obs[FIRST][:, HEALTH], 0.9, rtol=1e-3)
    # Each reset draws a new world: no two episode starts of env 1 look the same.
    starts = obs[FIRST[:, 1], 1]
    assert len(np.unique(starts, axis=0)) == len(starts) == 3


def test_next_value_bootstraps_from_the_observation_stepped_without_reset(result):
    _, _, traj = result
    reference = np.asarray(traj.value[NO_LIMIT])
    # The runs coincide until their first reset (env 1's death resets all of them alike).
    np.testing.assert_array_equal(traj.obs[LIMIT_3, :3], traj.obs[NO_LIMIT, :3])
    np.testing.assert_array_equal(traj.obs[LIMIT_1, :2, 1], traj.obs[NO_LIMIT, :2, 1])
    # (run, t, env) of a truncation -> NO_LIMIT's value at t + 1 is V(final observation).
    for run, t, b in [(LIMIT_3, 2, 0), (LIMIT_3, 3, 1), (LIMIT_1, 0, 0), (LIMIT_1, 1, 1)]:
        assert traj.truncated[run, t, b]
        np.testing.assert_allclose(traj.next_value[run, t, b], reference[t + 1, b], rtol=1e-5)
        # The reset observation that follows in the run would give another value.
        assert float(traj.value[run, t + 1, b]) != pytest.approx(reference[t + 1, b], abs=1e-3)
    # Elsewhere next_value is V(obs[t + 1]): after a death, V of the reset observation.
    np.testing.assert_allclose(traj.next_value[LIMIT_3, 0, 1], traj.value[LIMIT_3, 1, 1], rtol=1e-6)
    np.testing.assert_allclose(traj.next_value[NO_LIMIT, :-1], traj.value[NO_LIMIT, 1:], rtol=1e-6)


def test_state_keeps_its_dtypes_through_steps(result):
    state0, state, _ = result
    spec = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype), tree)  # noqa: E731
    assert spec(state.env_state) == spec(state0.env_state)


def test_unknown_name_lists_close_matches():
    with pytest.raises(ValueError, match=r"'Craftax-Clasic-Symbolic-v1'.*Craftax-Classic-Symbolic-v1.*Known names"):
        envs.make("craftax/Craftax-Clasic-Symbolic-v1")


def test_unknown_param_field_is_named():
    with pytest.raises(ValueError, match=r"\['max_steps'\].*max_timesteps"):
        envs.make(NAME, max_steps=3)


def test_auto_reset_env_is_refused():
    from craftax.craftax_env import make_craftax_env_from_name

    from jaxrl_rollout.envs.craftax import CraftaxEnv

    with pytest.raises(ValueError, match="auto_reset=False"):
        CraftaxEnv(make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=True))


def test_missing_craftax_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "craftax", None)
    monkeypatch.setitem(sys.modules, "craftax.craftax_env", None)
    with pytest.raises(ImportError, match=r"envs.make\('craftax/Craftax-Symbolic-v1'\).*`craftax` extra.*\[craftax\]"):
        envs.make("craftax/Craftax-Symbolic-v1")


def test_importing_the_package_does_not_import_craftax():
    code = (
        "import sys, jaxrl_rollout, jaxrl_rollout.envs, jaxrl_rollout.envs.craftax; "
        "assert 'craftax' not in sys.modules, 'craftax was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _cache_module(path, content):
    """A stand-in for a craftax constants module: its TEXTURE_CACHE_FILE holding `content`, and a cached loader."""
    import functools
    import types

    path.write_bytes(content)
    calls = []

    @functools.cache
    def load_all_textures():
        calls.append(1)

    return types.SimpleNamespace(TEXTURE_CACHE_FILE=str(path), load_all_textures=load_all_textures)


def test_a_truncated_texture_cache_is_removed_and_the_call_made_again(tmp_path):
    """A texture cache cut short (Ctrl-C during craftax's first build) made every pixels env fail with an EOFError
    until the file was deleted by hand: it is removed, the call made once more (craftax rebuilds it) with a warning."""
    import bz2
    import pickle

    from jaxrl_rollout.envs.craftax import remove_broken_texture_caches, with_texture_caches

    whole = bz2.compress(pickle.dumps({"textures": list(range(1000))}))
    good = _cache_module(tmp_path / "good.pbz2", whole)
    bad = _cache_module(tmp_path / "bad.pbz2", whole[: len(whole) // 2])
    assert remove_broken_texture_caches([good, bad]) == [str(tmp_path / "bad.pbz2")]
    assert (tmp_path / "good.pbz2").exists() and not (tmp_path / "bad.pbz2").exists()

    bad = _cache_module(tmp_path / "bad.pbz2", whole[:100])
    attempts = []

    def make():
        attempts.append(1)
        if len(attempts) == 1:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        return "env"

    with pytest.warns(UserWarning, match=r"bad.pbz2 could not be read \(EOFError"):
        assert with_texture_caches(make, [good, bad]) == "env"
    assert len(attempts) == 2 and not (tmp_path / "bad.pbz2").exists()

    def fails():
        raise EOFError("not the cache")

    with pytest.raises(EOFError, match="not the cache"):  # no broken cache explains it: raised as it is
        with_texture_caches(fails, [good])


@pytest.mark.parametrize("options, message", [
    # accepted, then a TypeError at the first traced step; or every step truncated
    ({"max_timesteps": "10"}, r"EnvParams field max_timesteps must be an int \(its default is 10000\), got '10'"),
    ({"max_timesteps": 0}, r"EnvParams field max_timesteps must be a positive int .* got 0"),
    ({"always_diamond": 1}, r"EnvParams field always_diamond must be a bool"),
    ({"spawn_cow_chance": "0.1"}, r"EnvParams field spawn_cow_chance must be a number"),
])
def test_a_bad_env_params_override_is_refused_naming_the_field(options, message):
    with pytest.raises(ValueError, match=r"^craftax 'Craftax-Classic-Symbolic-v1': " + message):
        envs.make("craftax/Craftax-Classic-Symbolic-v1", **options)
    env, params = envs.make("craftax/Craftax-Classic-Symbolic-v1", max_timesteps=50, spawn_cow_chance=0.2)
    assert params.max_timesteps == 50
    # a NumPy int is taken as the Python int it checks as (it reached craftax's EnvParams as given)
    env, params = envs.make("craftax/Craftax-Classic-Symbolic-v1", max_timesteps=np.int64(50))
    assert type(params.max_timesteps) is int and params.max_timesteps == 50
