"""The brax adapter on inverted_pendulum, pinned down step by step through the rollout.

Two envs, episode_length 5, constant actions: env 0 pushes with 0 and keeps
the pole up (|angle| stays near its reset noise, 0.01), so it is truncated
on its 5th step; env 1 pushes with +1 and the pole passes 0.2 rad on its 2nd
step, so it terminates every 2 steps. The value is a known function of the
observation, V(obs) = obs . (1, 10, 100, 1000), so `next_value` shows which
observation the rollout bootstrapped from. Everything runs in one jitted
program (one compile, about 20 s on a 2-core CPU).
"""

import subprocess
import sys

import brax  # noqa: E402,F401  (the test extra installs it: a missing suite fails here, never skips)
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_rollout as jr
from jaxrl_rollout import envs
from jaxrl_rollout.envs.brax import BraxEnv

EPISODE_LENGTH = 5
T, B = 8, 2
ACTIONS = jnp.array([[0.0], [1.0]])
W = jnp.array([1.0, 10.0, 100.0, 1000.0])
RESET_NOISE = 0.01  # brax's inverted_pendulum resets q and qd uniformly in [-0.01, 0.01]

# Worked out by hand: columns are env 0 and env 1, rows are t = 0..7.
TRUNCATED = np.array([[0, 0], [0, 0], [0, 0], [0, 0], [1, 0], [0, 0], [0, 0], [0, 0]], bool)
TERMINATED = np.array([[0, 0], [0, 1], [0, 0], [0, 1], [0, 0], [0, 1], [0, 0], [0, 1]], bool)
FIRST = np.array([[1, 1], [0, 0], [0, 1], [0, 0], [0, 1], [1, 0], [0, 1], [0, 0]], bool)
COMPLETED_LENGTH = np.zeros((T, B), np.int32)
COMPLETED_LENGTH[4, 0] = 5
COMPLETED_LENGTH[[1, 3, 5, 7], 1] = 2


def value_of(obs):
    return obs @ W


def pushing_policy(params, obs, key):
    del params, key
    return jr.PolicyOutput(ACTIONS, jnp.zeros((B,)), value_of(obs))


@pytest.fixture(scope="module")
def env():
    env, env_params = envs.make("brax/inverted_pendulum", episode_length=EPISODE_LENGTH)
    assert env_params is None
    return env


@pytest.fixture(scope="module")
def result(env):
    def scenario(key):
        state0 = jr.rollout_init(key, env, None, B)
        state, traj = jr.rollout(env, None, pushing_policy, None, state0, T)
        # The reference: the raw brax env from the same reset states, never reset.
        raw_step = jax.vmap(env.brax_env.step)

        def step(brax_state, _):
            brax_state = raw_step(brax_state, ACTIONS)
            return brax_state, (brax_state.obs, brax_state.done)

        raw4, (raw_obs, raw_done) = jax.lax.scan(
            step, state0.env_state.brax_state, None, length=EPISODE_LENGTH - 1
        )
        raw5 = raw_step(raw4, ACTIONS)
        # The adapter stepped directly at the time limit (both envs have taken 4 steps).
        at_limit = state0.env_state._replace(brax_state=raw4, steps=jnp.full((B,), EPISODE_LENGTH - 1, jnp.int32))
        direct = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(key, B), at_limit, ACTIONS, None)
        return dict(
            state0=state0, state=state, traj=traj, direct=direct,
            raw_obs=jnp.concatenate([raw_obs, raw5.obs[None]]),
            raw_done=jnp.concatenate([raw_done, raw5.done[None]]),
        )

    return jax.jit(scenario)(jax.random.key(0))


def test_make_gives_single_env_spaces(env):
    space = env.action_space(None)
    assert space.shape == (1,) and float(space.low) == -1.0 and float(space.high) == 1.0
    obs_space = env.observation_space(None)
    assert tuple(obs_space.shape) == (4,) and obs_space.dtype == jnp.float32
    assert env.episode_length == EPISODE_LENGTH and env.name == "brax/inverted_pendulum"


def test_flags_first_and_rewards_step_by_step(result):
    traj = result["traj"]
    np.testing.assert_array_equal(traj.truncated, TRUNCATED)
    np.testing.assert_array_equal(traj.terminated, TERMINATED)
    np.testing.assert_array_equal(traj.done, TRUNCATED | TERMINATED)
    np.testing.assert_array_equal(traj.first, FIRST)
    np.testing.assert_array_equal(traj.completed_length, COMPLETED_LENGTH)
    np.testing.assert_array_equal(traj.completed_return, COMPLETED_LENGTH.astype(np.float32))
    np.testing.assert_array_equal(traj.reward, np.ones((T, B), np.float32))  # 1 per step, the fall included
    assert traj.reward.dtype == jnp.float32


def test_episodes_follow_the_raw_brax_env(result):
    traj, raw_obs, raw_done = result["traj"], result["raw_obs"], result["raw_done"]
    # Env 0 runs its whole first episode exactly as the raw env does.
    np.testing.assert_allclose(traj.obs[1:EPISODE_LENGTH, 0], raw_obs[: EPISODE_LENGTH - 1, 0], rtol=1e-5, atol=1e-6)
    # Env 1: brax's own `done` is the fall (|angle| > 0.2) on the 2nd step, and that is `terminated`.
    np.testing.assert_array_equal(raw_done[:2, 1], [0.0, 1.0])
    assert abs(float(raw_obs[1, 1, 1])) > 0.2 > abs(float(raw_obs[0, 1, 1]))
    np.testing.assert_allclose(traj.obs[1, 1], raw_obs[0, 1], rtol=1e-5, atol=1e-6)
    # Env 0 never falls within the episode.
    np.testing.assert_array_equal(raw_done[:, 0], np.zeros(EPISODE_LENGTH))


def test_after_a_done_the_next_observation_is_a_fresh_reset(result):
    traj = result["traj"]
    first = np.asarray(traj.first)
    assert np.all(np.abs(np.asarray(traj.obs)[first]) <= RESET_NOISE)
    # The reset at t = 5 of env 0 is not the final observation of its episode.
    assert not np.allclose(traj.obs[EPISODE_LENGTH, 0], result["raw_obs"][EPISODE_LENGTH - 1, 0])
    # Every reset draws a new start (brax's AutoResetWrapper would replay the first one).
    starts = np.asarray(traj.obs)[first[:, 1], 1]
    assert len(np.unique(starts, axis=0)) == len(starts) == 4


def test_next_value_bootstraps_from_the_true_final_observation(result):
    traj, state, raw_obs = result["traj"], result["state"], result["raw_obs"]
    np.testing.assert_allclose(traj.value, value_of(traj.obs), rtol=1e-6)
    following = np.concatenate([np.asarray(traj.value[1:]), np.asarray(value_of(state.obs))[None]])
    expected = following.copy()
    final_value = float(value_of(raw_obs[EPISODE_LENGTH - 1, 0]))
    expected[EPISODE_LENGTH - 1, 0] = final_value
    np.testing.assert_allclose(traj.next_value, expected, rtol=1e-5, atol=1e-5)
    assert following[EPISODE_LENGTH - 1, 0] != pytest.approx(final_value, abs=1e-3)
    # Terminated steps keep V(reset obs); estimators multiply it by zero.
    np.testing.assert_allclose(traj.next_value[1, 1], traj.value[2, 1], rtol=1e-6)


def test_step_at_the_time_limit_reports_the_final_observation(result):
    obs, state, reward, terminated, truncated, info = result["direct"]
    raw_obs, state0 = result["raw_obs"], result["state0"]
    # Env 0 reaches the limit upright: truncated; env 1 has fallen: terminated wins over the limit.
    np.testing.assert_array_equal(truncated, [True, False])
    np.testing.assert_array_equal(terminated, [False, True])
    np.testing.assert_array_equal(info["truncation"], [1.0, 0.0])
    np.testing.assert_allclose(info["final_observation"], raw_obs[EPISODE_LENGTH - 1], rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(np.asarray(obs)) <= RESET_NOISE)
    np.testing.assert_array_equal(state.steps, [0, 0])
    np.testing.assert_array_equal(reward, [1.0, 1.0])
    # The state after a step has the structure and dtypes of the state after reset.
    spec = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), tree)  # noqa: E731
    assert spec(state) == spec(state0.env_state)


def test_unknown_name_lists_close_matches():
    with pytest.raises(ValueError, match=r"'inverted_pendulm'.*inverted_pendulum.*Known names: .*ant"):
        envs.make("brax/inverted_pendulm")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(episode_length=0), "episode_length must be a positive int"),
        (dict(episode_length=2.5), "episode_length must be a positive int"),
        (dict(backend="physx"), "backend must be None or one of generalized"),
        (dict(n_frame=2), r"'inverted_pendulum' does not take the option\(s\) \['n_frame'\]"),
    ],
)
def test_bad_options_raise_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        envs.make("brax/inverted_pendulum", **kwargs)


def test_wrapped_training_env_is_refused(env):
    import brax.envs

    with pytest.raises(ValueError, match="AutoResetWrapper"):
        BraxEnv(brax.envs.training.AutoResetWrapper(env.brax_env))


def test_missing_brax_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "brax", None)
    monkeypatch.setitem(sys.modules, "brax.envs", None)
    with pytest.raises(ImportError, match=r"envs.make\('brax/inverted_pendulum'\).*`brax` extra.*jaxrl-rollout\[brax\]"):
        envs.make("brax/inverted_pendulum")


def test_importing_the_package_does_not_import_brax():
    code = (
        "import sys, jaxrl_rollout, jaxrl_rollout.envs, jaxrl_rollout.envs.brax; "
        "assert 'brax' not in sys.modules, 'brax was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_making_a_brax_env_prints_nothing_of_mujocos_absent_gpu_backend():
    """mujoco.mjx prints "Failed to import warp: ..." (NVIDIA Warp, a GPU backend brax never uses here) to stdout
    when brax is imported; users took it for an error. `envs.make` leaves those lines out."""
    code = "from jaxrl_rollout import envs; envs.make('brax/inverted_pendulum'); print('made')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "made\n", done.stdout + done.stderr


def test_a_suites_import_notices_go_and_anything_else_it_prints_stays(tmp_path, monkeypatch, capsys):
    from jaxrl_rollout.envs import _base

    (tmp_path / "noisy_suite.py").write_text(
        "print('Failed to import warp: No module named warp')\nprint('a line of its own')\nVALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _base.require("noisy_suite", "noisy").VALUE == 3
    assert capsys.readouterr().out == "a line of its own\n"


def test_ant_steps_with_the_dtypes_of_its_reset_state():
    """brax's ant updates its state's metrics dict in place with Python floats: the adapter steps a copy, so the
    state it was given keeps its arrays and the step traces (this failed with an AttributeError on `.dtype`).
    The reset is abstract too: run, brax's ant reset compiled for 25 s, and the dtypes are all this checks."""
    env, env_params = envs.make("brax/ant")
    _, state = jax.eval_shape(lambda k: env.reset(k, env_params), jax.random.key(0))
    before = jax.tree.map(lambda x: x.dtype, state)
    _, next_state, *_ = jax.eval_shape(lambda s: env.step(jax.random.key(1), s, jnp.zeros(8), env_params), state)
    assert jax.tree.map(lambda x: x.dtype, state) == before == jax.tree.map(lambda x: x.dtype, next_state)


def test_swimmer_is_refused_in_one_line_where_brax_calls_a_dropped_jax_api():
    import inspect

    if "a_min" in inspect.signature(jnp.clip).parameters:
        pytest.skip("this jax still takes jnp.clip(a_min=...): brax/swimmer runs")
    with pytest.raises(ValueError, match=r"brax/swimmer cannot run on jax .*jnp.clip\(a_min"):
        envs.make("brax/swimmer")


def test_braxs_notice_that_it_is_not_maintained_is_given_once():
    """brax warns that it is not maintained each time it loads a model after any change to the warning filters, and
    `train --env brax/...` makes its env twice with other libraries' filter changes between: the notice came twice.
    After the first, it is left out."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # each warning shown once per place, as without filters of one's own
        envs.make("brax/inverted_pendulum")
        warnings.filterwarnings("ignore", message="an unrelated warning")  # another library changes the filters
        envs.make("brax/inverted_pendulum")
    notices = [w for w in caught if "not actively being maintained" in str(w.message)]
    assert len(notices) == 1 and notices[0].category is UserWarning
