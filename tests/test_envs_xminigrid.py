"""The xminigrid adapter on MiniGrid-Empty-5x5, worked out by hand.

The 5x5 room has walls on its border, the agent starts at (1, 1) facing right
and the goal is at (3, 3). Env 0 walks forward until a wall is ahead, then
turns right: forward, forward, turn, forward, forward reaches the goal on its
5th step (terminated, reward 1 - 0.9 * 5 / max_steps). Env 1 turns left on
the spot and never reaches the goal, so with max_steps = 6 it is truncated on
its 6th step.
"""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xminigrid  # noqa: E402,F401  (the test extra installs it: a missing suite fails here, never skips)

import jaxrl_rollout as jr
from jaxrl_rollout import envs
from jaxrl_rollout.envs.xminigrid import XMiniGridEnv  # noqa: E402

T, B = 8, 2
MAX_STEPS = 6
VIEW = 7  # the default view_size: the agent sits at [VIEW - 1, VIEW // 2], facing up
FORWARD, RIGHT, LEFT = 0, 1, 2
WALL = 2  # xminigrid's tile id
WEIGHTS = np.arange(VIEW * VIEW, dtype=np.float32).reshape(VIEW, VIEW)


def grid_value(obs):
    """V(obs): the tile ids weighted by cell index, a known function of the view ([..., 7, 7, 2] -> [...]).

    Written with array methods, so it runs on jax arrays in the policy and on
    numpy arrays in the checks.
    """
    return (obs[..., 0].astype(np.float32) * WEIGHTS).sum(axis=(-2, -1))


def scripted_policy(params, obs, key):
    """Env 0 heads for the goal (forward unless a wall is ahead, then turn right); env 1 turns left."""
    del params, key
    wall_ahead = obs[:, VIEW - 2, VIEW // 2, 0] == WALL
    seek = jnp.where(wall_ahead, RIGHT, FORWARD)
    action = jnp.where(jnp.arange(obs.shape[0]) == 0, seek, LEFT).astype(jnp.int32)
    return jr.PolicyOutput(action, jnp.zeros(obs.shape[0]), grid_value(obs))


# Rows are t = 0..7, columns env 0 and env 1.
ACTION = np.array([[0, 2], [0, 2], [1, 2], [0, 2], [0, 2], [0, 2], [0, 2], [1, 2]])
TERMINATED = np.zeros((T, B), bool)
TERMINATED[4, 0] = True
TRUNCATED = np.zeros((T, B), bool)
TRUNCATED[5, 1] = True
FIRST = np.zeros((T, B), bool)
FIRST[0] = FIRST[5, 0] = FIRST[6, 1] = True
REWARD = np.zeros((T, B), np.float32)
REWARD[4, 0] = 1 - 0.9 * 5 / MAX_STEPS  # 0.25


@pytest.fixture(scope="module")
def empty():
    env, params = envs.make("xminigrid/MiniGrid-Empty-5x5")
    params = params.replace(max_steps=MAX_STEPS)
    return env, params


@pytest.fixture(scope="module")
def stepped(empty):
    """Left turns from the start, under one jit: 7 through the adapter's `step` and 6 through the raw env.

    Returns:
      (first observation, adapter outputs [7, ...], raw views [6, 7, 7, 2] of
      the raw env, which is never reset).
    """
    env, params = empty

    def run(key):
        def adapter_step(state, key):
            obs, state, _, terminated, truncated, info = env.step(key, state, LEFT, params)
            return state, (obs, terminated, truncated, info["final_observation"], state.state.step_num)

        def raw_step(timestep, action):
            timestep = env.env.step(params, timestep, action)
            return timestep, timestep.observation

        start, state = env.reset(key, params)
        _, outputs = jax.lax.scan(adapter_step, state, jax.random.split(key, MAX_STEPS + 1))
        _, raw = jax.lax.scan(raw_step, env.env.reset(params, key), jnp.full((MAX_STEPS,), LEFT))
        return start, outputs, raw

    return jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(1)))


@pytest.fixture(scope="module")
def raw_views(stepped):
    return stepped[2]


@pytest.fixture(scope="module")
def result(empty):
    """The rollout, as numpy: (last observation, trajectory)."""
    env, params = empty

    def run(key):
        state, traj = jr.rollout(env, params, scripted_policy, None, jr.rollout_init(key, env, params, B), T)
        return state.obs, traj

    return jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(0)))


def test_flags_rewards_and_first_step_by_step(result):
    _, traj = result
    np.testing.assert_array_equal(traj.action, ACTION)
    np.testing.assert_array_equal(traj.terminated, TERMINATED)
    np.testing.assert_array_equal(traj.truncated, TRUNCATED)
    np.testing.assert_array_equal(traj.first, FIRST)
    np.testing.assert_allclose(traj.reward, REWARD, rtol=1e-6)
    assert traj.completed_length[4, 0] == 5 and traj.completed_length[5, 1] == MAX_STEPS
    np.testing.assert_allclose(traj.completed_return[4, 0], 0.25, rtol=1e-6)


def test_truncation_bootstraps_from_the_true_final_observation(result, raw_views):
    last_obs, traj = result
    final = raw_views[MAX_STEPS - 1]  # facing left after six left turns, no reset
    reset = traj.obs[6, 1]  # the next episode's first view, facing right
    assert not np.array_equal(final, reset)
    np.testing.assert_allclose(traj.next_value[5, 1], grid_value(final))
    assert grid_value(final) != grid_value(reset)
    # Before the time limit the env's views are the raw env's.
    np.testing.assert_array_equal(traj.obs[1:6, 1], raw_views[:5])
    # Elsewhere next_value is V of the next stored observation.
    following = np.concatenate([traj.obs[1:], last_obs[None]])
    expected = grid_value(following)
    expected[5, 1] = grid_value(final)
    np.testing.assert_allclose(traj.next_value, expected)


def test_termination_is_not_bootstrapped_from_the_goal(result):
    _, traj = result
    # At the goal (t = 4, env 0) next_value is V(reset view), which estimators multiply by zero.
    np.testing.assert_allclose(traj.next_value[4, 0], grid_value(traj.obs[5, 0]))
    np.testing.assert_array_equal(traj.obs[5, 0], traj.obs[0, 0])


def test_observations_keep_their_dtype_and_fit_the_space(empty, result):
    env, params = empty
    _, traj = result
    space = env.observation_space(params)
    assert traj.obs.shape == (T, B, VIEW, VIEW, 2) and traj.obs.dtype == jnp.uint8
    assert space.shape == (VIEW, VIEW, 2) and space.dtype == jnp.uint8
    assert bool(space.contains(traj.obs))
    assert env.action_space(params).n == 6


def test_step_puts_the_pre_reset_view_in_info(stepped):
    start, (obs, terminated, truncated, final_obs, step_num), raw = stepped
    # Every step's final observation is the raw env's view; the 7th step is the
    # first of the episode after the reset, so it matches the raw env's first.
    np.testing.assert_array_equal(final_obs, raw[np.arange(MAX_STEPS + 1) % MAX_STEPS])
    np.testing.assert_array_equal(terminated, False)
    np.testing.assert_array_equal(truncated, np.arange(MAX_STEPS + 1) == MAX_STEPS - 1)
    # The truncated step returns the reset view and state; the others the step's own view.
    np.testing.assert_array_equal(obs[MAX_STEPS - 1], start)
    assert not np.array_equal(final_obs[MAX_STEPS - 1], start)
    np.testing.assert_array_equal(step_num, [1, 2, 3, 4, 5, 0, 1])
    keep = np.arange(MAX_STEPS + 1) != MAX_STEPS - 1
    np.testing.assert_array_equal(obs[keep], final_obs[keep])


def test_make_options_and_default():
    env, params = envs.make("xminigrid/MiniGrid-Empty-5x5")
    assert isinstance(env, XMiniGridEnv) and env.name == "xminigrid/MiniGrid-Empty-5x5"
    assert params.max_steps == 4 * 5 * 5 and env.default_params is params
    _, params = envs.make("xminigrid/MiniGrid-Empty-5x5", max_steps=3, view_size=5)
    assert params.max_steps == 3 and params.view_size == 5


def test_xland_layouts_build_offline_with_the_placeholder_ruleset():
    env, params = envs.make("xminigrid/XLand-MiniGrid-R1-9x9")
    assert params.ruleset is not None
    assert env.observation_space(params).shape == (5, 5, 2)


def test_unknown_name_lists_close_matches_and_known_names():
    with pytest.raises(ValueError, match=r"MiniGrid-Empty-5x5.*Known names: .*MiniGrid-DoorKey-8x8"):
        envs.make("xminigrid/MiniGrid-Empty-5")


@pytest.mark.parametrize("as_name", [True, False])
def test_benchmarks_need_a_download_and_are_refused(as_name):
    """A benchmark's name is refused as an env and as a param, and the message's example is one this xminigrid
    has (the smallest was "trivial-1m" before xminigrid 0.9.2, "trivial-21k" since)."""
    import xminigrid

    first = xminigrid.registered_benchmarks()[0]
    name, kwargs = (first, {}) if as_name else ("XLand-MiniGrid-R1-9x9", {"benchmark": first})
    with pytest.raises(ValueError, match=rf"downloads from Hugging Face.*load_benchmark\('{first}'\).*ruleset="):
        envs.make(f"xminigrid/{name}", **kwargs)


def test_bad_params_are_named():
    with pytest.raises(ValueError, match=r"no params \['max_step'\].*'max_steps'"):
        envs.make("xminigrid/MiniGrid-Empty-5x5", max_step=3)
    with pytest.raises(ValueError, match="max_steps must be a positive int"):
        envs.make("xminigrid/MiniGrid-Empty-5x5", max_steps=0)


@pytest.mark.parametrize("value, kind", [("5", "an int"), (2.5, "an int"), (0, "a positive int")])
def test_a_params_override_of_the_wrong_kind_names_its_field(value, kind):
    """view_size="5" or 2.5 failed inside make_train ("`pad_width` must be of integral type", from jax.numpy);
    view_size=0 built a [0, 0] view, refused by the network ("kernel_size must be a positive int")."""
    with pytest.raises(ValueError, match=rf"^xminigrid 'MiniGrid-Empty-5x5': EnvParams field view_size must be "
                                         rf"{kind} \(its default is 7\), got {value!r}\.$"):
        envs.make("xminigrid/MiniGrid-Empty-5x5", view_size=value)
    with pytest.raises(ValueError, match=r"field render_mode must be a str"):
        envs.make("xminigrid/MiniGrid-Empty-5x5", render_mode=3)
    _, params = envs.make("xminigrid/MiniGrid-Empty-5x5", view_size=np.int64(5))
    assert type(params.view_size) is int and params.view_size == 5


def test_auto_reset_wrappers_are_refused_and_image_views_are_described(tmp_path, monkeypatch):
    """GymAutoResetWrapper made the truncated step's final observation the reset view, silently; the RGB image
    wrapper's observation_space failed in a broadcast ("uint8[2] ... uint8[224,224,3]")."""
    if "xminigrid.experimental.img_obs" not in sys.modules:
        # Importing img_obs renders xminigrid's tile cache into ~/.xland_minigrid when it is not there: 24 s of
        # the suite on 2 cores (a fresh machine has none), and a file written to the user's home. The
        # wrapper's shapes, all this test reads, need only the cache's array shapes: a blank cache of those (jax
        # arrays, as xminigrid saves it), in a folder of this test's (img_obs reads XLAND_MINIGRID_CACHE on import).
        from xminigrid.benchmarks import save_bz2_pickle
        from xminigrid.core.constants import TILES_REGISTRY

        blank = jnp.zeros((np.prod(np.shape(TILES_REGISTRY)[:2]), 32, 32, 3), jnp.uint8)  # TILE_SIZE 32, as xminigrid
        save_bz2_pickle({"tile_cache": blank, "tile_agent_cache": blank}, str(tmp_path / "render_cache"))
        monkeypatch.setenv("XLAND_MINIGRID_CACHE", str(tmp_path))
    from xminigrid.experimental.img_obs import TILE_SIZE, RGBImgObservationWrapper

    assert TILE_SIZE == 32
    from xminigrid.wrappers import DmEnvAutoResetWrapper, GymAutoResetWrapper

    env, params = xminigrid.make("MiniGrid-Empty-5x5")
    for wrapper in (GymAutoResetWrapper, DmEnvAutoResetWrapper):
        with pytest.raises(ValueError, match=rf"^env is wrapped in {wrapper.__name__}; pass the env without it"):
            XMiniGridEnv(wrapper(env), params)
    images = XMiniGridEnv(RGBImgObservationWrapper(env), params)
    space = images.observation_space(params)
    obs = jax.eval_shape(images.reset, jax.random.key(0), params)[0]  # its shape and dtype (eager: 21 s in the suite)
    assert space.shape == obs.shape == (224, 224, 3) and space.dtype == obs.dtype == jnp.uint8
    assert int(space.low) == 0 and int(space.high) == 255


def test_missing_suite_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "xminigrid", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxrl-rollout\[xminigrid\]'"):
        envs.make("xminigrid/MiniGrid-Empty-5x5")


def test_importing_the_package_does_not_import_xminigrid():
    code = (
        "import sys, jaxrl_rollout, jaxrl_rollout.envs, jaxrl_rollout.envs.xminigrid; "
        "assert 'xminigrid' not in sys.modules, 'xminigrid was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_evaluate_takes_its_default_bound_from_the_adapter(empty):
    """xminigrid params have no max_steps_in_episode; `evaluate` asks the env (params.max_steps)."""
    env, params = empty
    assert env.max_steps_in_episode(params) == MAX_STEPS
    spin = lambda p, obs, key: jr.PolicyOutput(  # noqa: E731
        jnp.full((obs.shape[0],), LEFT, jnp.int32), jnp.zeros(obs.shape[0]), jnp.zeros(obs.shape[0])
    )
    result = jr.evaluate(env, params, spin, None, jax.random.key(0), 2)
    np.testing.assert_array_equal(result.lengths, [MAX_STEPS, MAX_STEPS])
    assert result.completed.all()
