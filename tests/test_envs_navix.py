"""The navix adapter on Navix-Empty-5x5-v0, worked out by hand.

navix 4 needs Python >= 3.12. On an older interpreter the tests that need
navix are skipped (saying so), and one test checks the error `make` raises
there. On Python >= 3.12 a missing navix is a failure, not a skip.

The room is 5 x 5 with walls around it. The player starts at (row 1, col 1)
facing east (direction 0; 1 south, 2 west, 3 north) and the goal is at (3, 3).
`seek` walks forward, forward, turns clockwise, forward, forward: the goal is
reached on the 5th step with reward 1. `spin` always turns counter-clockwise,
so it never terminates and is truncated at navix's `max_steps`.
"""

import functools
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_rollout as jr
from jaxrl_rollout import envs

PYTHON_OK = sys.version_info >= (3, 12)
try:
    import navix  # noqa: F401

    HAVE_NAVIX = True
except ImportError:
    HAVE_NAVIX = False

INTERPRETER = f"{sys.version_info.major}.{sys.version_info.minor}"
# Skip only where navix cannot exist; on Python >= 3.12 a missing navix fails the tests below.
needs_navix = pytest.mark.skipif(
    not HAVE_NAVIX and not PYTHON_OK,
    reason=f"navix 4 needs Python >= 3.12; this interpreter is {INTERPRETER}",
)

ENV_ID = "navix/Navix-Empty-5x5-v0"
PLAYER, GOAL = 10, 8  # navix entity tags in the symbolic observation's channel 0
SEEK_ACTIONS = [2, 2, 1, 2, 2]


def player(obs):
    """(row, col, direction) of the player in symbolic observations [..., 5, 5, 3]."""
    is_player = obs[..., 0] == PLAYER
    rows = jnp.sum(jnp.any(is_player, axis=-1) * jnp.arange(5), axis=-1)
    cols = jnp.sum(jnp.any(is_player, axis=-2) * jnp.arange(5), axis=-1)
    direction = jnp.sum(jnp.where(is_player, obs[..., 2], 0), axis=(-2, -1))
    return rows, cols, direction


def toy_value(obs):
    """V(obs) = direction + 10 row + 100 col of the player."""
    row, col, direction = player(obs)
    return (direction + 10 * row + 100 * col).astype(jnp.float32)


def scripted_policy(spin):
    """Env b spins (action 0) where spin[b], else walks to the goal."""
    spin = jnp.asarray(spin)

    def policy_fn(params, obs, key):
        del params, key
        _, col, direction = player(obs)
        seek = jnp.where((direction == 0) & (col == 3), 1, 2)  # turn south at the goal's column
        action = jnp.where(spin, 0, seek).astype(jnp.int32)
        return jr.PolicyOutput(action, jnp.zeros(action.shape), toy_value(obs))

    return policy_fn


@functools.cache
def cached_env(max_steps):
    env, params = envs.make(ENV_ID, max_steps=max_steps)
    return env, params, jax.jit(env.reset), jax.jit(env.step)


def play(actions, max_steps):
    _, params, reset, step = cached_env(max_steps)
    obs, state = reset(jax.random.key(0), params)
    results = []
    for i, a in enumerate(actions):
        obs, state, reward, terminated, truncated, info = step(jax.random.key(1 + i), state, jnp.int32(a), params)
        results.append((obs, state, float(reward), bool(terminated), bool(truncated), info))
    return results


@functools.cache
def scripted_rollout():
    env, params, _, _ = cached_env(6)

    @jax.jit
    def run(key):
        state = jr.rollout_init(key, env, params, 2)
        return jr.rollout(env, params, scripted_policy([False, True]), None, state, 8)

    return run(jax.random.key(0))


@needs_navix
def test_spaces():
    env, params = envs.make(ENV_ID)
    assert params is None
    assert env.action_space(params).n == 7
    space = env.observation_space(params)
    assert space.shape == (5, 5, 3) and space.dtype == jnp.uint8
    assert env.max_steps == 4 * 5 * 5  # navix's default horizon
    assert env.name == ENV_ID


@needs_navix
def test_evaluate_is_bounded_by_the_env_horizon():
    """`evaluate` (and so the CLI's evaluation) finds navix's time limit without a `max_steps`."""
    env, params = envs.make(ENV_ID)
    assert env.max_steps_in_episode(params) == env.max_steps
    spin = lambda p, obs, key: jr.PolicyOutput(jnp.zeros(obs.shape[0], jnp.int32), jnp.zeros(obs.shape[0]),  # noqa: E731
                                               jnp.zeros(obs.shape[0]))
    result = jax.jit(lambda key: jr.evaluate(env, params, spin, None, key, 2))(jax.random.key(0))
    np.testing.assert_array_equal(result.lengths, [env.max_steps] * 2)  # truncated at the horizon, then stopped
    assert bool(result.completed.all())


@needs_navix
def test_termination_and_truncation_through_rollout():
    _, traj = scripted_rollout()
    # Env 0 reaches the goal on its 5th step (t = 4); env 1 is truncated on its 6th (t = 5).
    np.testing.assert_array_equal(traj.reward[:, 0], [0, 0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(traj.reward[:, 1], np.zeros(8))
    np.testing.assert_array_equal(traj.terminated[:, 0], [0, 0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(traj.truncated[:, 1], [0, 0, 0, 0, 0, 1, 0, 0])
    assert not traj.truncated[:, 0].any() and not traj.terminated[:, 1].any()
    np.testing.assert_array_equal(traj.first[:, 0], [1, 0, 0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(traj.first[:, 1], [1, 0, 0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(traj.action[:, 0], SEEK_ACTIONS + [2, 2, 1])
    np.testing.assert_array_equal(traj.action[:, 1], np.zeros(8))
    np.testing.assert_array_equal(traj.completed_return[:, 0], [0, 0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(traj.completed_length[:, 0], [0, 0, 0, 0, 5, 0, 0, 0])
    np.testing.assert_array_equal(traj.completed_length[:, 1], [0, 0, 0, 0, 0, 6, 0, 0])
    # Spinning counter-clockwise from east: directions 0, 3, 2, 1, 0, 3, then the reset.
    np.testing.assert_allclose(traj.value[:, 1], 110 + np.array([0, 3, 2, 1, 0, 3, 0, 3]))
    # Truncated at t = 5 after six turns: the final board faces west (2): V = 2 + 10 + 100.
    np.testing.assert_allclose(traj.next_value[5, 1], 112.0)
    # Terminated at t = 4: V(reset obs) = 110, which estimators multiply by zero.
    np.testing.assert_allclose(traj.next_value[4, 0], 110.0)
    np.testing.assert_allclose(traj.next_value[3, 0], traj.value[4, 0])


@needs_navix
def test_truncation_keeps_the_final_observation_and_resets():
    results = play([0] * 6, max_steps=6)
    assert [r[4] for r in results] == [False] * 5 + [True]
    assert not any(r[3] for r in results)
    obs, state, reward, terminated, truncated, info = results[-1]
    row, col, direction = player(info["final_observation"])
    assert (int(row), int(col), int(direction)) == (1, 1, 2)
    row, col, direction = player(obs)
    assert (int(row), int(col), int(direction)) == (1, 1, 0)
    assert int(state.t) == 0  # the same-step reset


@needs_navix
def test_goal_on_the_last_allowed_step_is_termination_not_truncation():
    results = play(SEEK_ACTIONS, max_steps=5)
    obs, state, reward, terminated, truncated, info = results[-1]
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert [r[3] or r[4] for r in results[:-1]] == [False] * 4
    final = np.asarray(info["final_observation"])
    assert final[3, 3, 0] == PLAYER  # the player stands on the goal
    assert np.asarray(obs)[3, 3, 0] == GOAL and np.asarray(obs)[1, 1, 0] == PLAYER


@needs_navix
def test_unknown_name_and_bad_options():
    unknown = r"unknown navix env name 'Navix-Empty-5x5-v1'.*Navix-Empty-5x5-v0.*Known names"
    with pytest.raises(ValueError, match=unknown):
        envs.make("navix/Navix-Empty-5x5-v1")
    with pytest.raises(ValueError, match=r"does not take the options \['bogus'\]"):
        envs.make(ENV_ID, bogus=1)


def test_gating_error_names_python_3_12_and_the_extra(monkeypatch):
    """Runs everywhere: the real error on Python < 3.12, a missing navix on >= 3.12."""
    if PYTHON_OK:
        monkeypatch.setitem(sys.modules, "navix", None)
    with pytest.raises(ImportError, match=r"navix 4 needs Python >= 3\.12") as raised:
        envs.make(ENV_ID)
    message = str(raised.value)
    assert "pip install 'jaxrl-rollout[navix]'" in message
    assert f"this interpreter is {INTERPRETER}" in message


def test_importing_the_package_does_not_import_navix():
    code = (
        "import sys, jaxrl_rollout, jaxrl_rollout.envs, jaxrl_rollout.envs.navix; "
        "assert 'navix' not in sys.modules, 'navix was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
