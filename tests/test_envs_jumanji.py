"""The jumanji adapter on a 4x4 Snake and on a toy jumanji env, checked by hand.

Snake ends an episode with discount 0 when the snake leaves the grid, and also
at its own `time_limit` (a termination in jumanji), so the rollout here uses
time_limit=50 and the adapter's `max_episode_steps=6` for the truncation.
Env 0 always moves up: it leaves the grid (terminated) on the step it takes
from row 0, within 4 steps, so it is never truncated. Env 1 takes its first
legal move: it never leaves the grid, so it is truncated on its 6th step.
"""

import re
import subprocess
import sys
from functools import cached_property
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jumanji  # noqa: E402  (the test extra installs it: a missing suite fails here, never skips)
import numpy as np
import pytest
from jumanji import specs  # noqa: E402
from jumanji.types import StepType, TimeStep  # noqa: E402

import jaxrl_rollout as jr
from jaxrl_rollout import envs
from jaxrl_rollout.envs.jumanji import JumanjiEnv  # noqa: E402

# Connector, whose reward is one per agent: "Connector-v2" in jumanji 1.1.1, "Connector-v3" in 1.1.2
CONNECTOR = next(name for name in jumanji.registered_environments() if name.startswith("Connector-v"))

T, B = 8, 2
SIZE = 4
MAX_STEPS = 6
UP = 0
CELLS = np.arange(SIZE * SIZE, dtype=np.float32).reshape(SIZE, SIZE)


def snake_value(obs):
    """V(obs) = 100 * step_count + index of the head's cell: a known function of the observation.

    Written with array methods, so it runs on jax arrays in the policy and on
    numpy arrays in the checks.
    """
    return 100.0 * obs.step_count.astype(np.float32) + (obs.grid[..., 1] * CELLS).sum(axis=(-2, -1))


def snake_policy(params, obs, key):
    """Env 0 moves up (into the wall); env 1 takes its first legal move."""
    del params, key
    first_legal = jnp.argmax(obs.action_mask, axis=-1)
    action = jnp.where(jnp.arange(B) == 0, UP, first_legal).astype(jnp.int32)
    return jr.PolicyOutput(action, jnp.zeros(B), snake_value(obs))


@pytest.fixture(scope="module")
def snake():
    env, params = envs.make(
        "jumanji/Snake-v1", num_rows=SIZE, num_cols=SIZE, time_limit=50, max_episode_steps=MAX_STEPS
    )
    return env, params


@pytest.fixture(scope="module")
def result(snake):
    """A rollout, and env 1's first episode replayed by the raw Snake (never reset), under one jit.

    Returns numpy (last observation, trajectory, raw observations of env 1 [6, ...]).
    """
    env, params = snake

    def run(key):
        init = jr.rollout_init(key, env, params, B)
        state, traj = jr.rollout(env, params, snake_policy, None, init, T)

        def raw_step(env_state, action):
            env_state, timestep = env.env.step(env_state, action)
            return env_state, timestep.observation

        start = jax.tree.map(lambda x: x[1], init.env_state.env_state)
        _, raw_obs = jax.lax.scan(raw_step, start, traj.action[:MAX_STEPS, 1])
        return state.obs, traj, raw_obs

    return jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(0)))


def test_truncation_flags_and_bootstrap_from_the_true_final_observation(result):
    last_obs, traj, raw_obs = result
    expected_truncated = np.arange(T) == MAX_STEPS - 1
    np.testing.assert_array_equal(traj.truncated[:, 1], expected_truncated)
    np.testing.assert_array_equal(traj.terminated[:, 1], False)
    np.testing.assert_array_equal(traj.first[:, 1], np.isin(np.arange(T), [0, MAX_STEPS]))
    assert traj.completed_length[MAX_STEPS - 1, 1] == MAX_STEPS
    # The raw env's observations match the stored ones up to the time limit ...
    jax.tree.map(lambda r, o: np.testing.assert_array_equal(r[:-1], o[1:MAX_STEPS, 1]), raw_obs, traj.obs)
    # ... and its 6th, never stored (the env was reset), is what next_value bootstraps from.
    final = jax.tree.map(lambda r: r[-1], raw_obs)
    reset = jax.tree.map(lambda o: o[MAX_STEPS, 1], traj.obs)
    assert final.step_count == MAX_STEPS and reset.step_count == 0
    np.testing.assert_allclose(traj.next_value[MAX_STEPS - 1, 1], snake_value(final))
    assert snake_value(final) != snake_value(reset)
    # Everywhere else in env 1, next_value is V of the next stored observation.
    following = jax.tree.map(lambda o, s: np.concatenate([o[1:, 1], s[None, 1]]), traj.obs, last_obs)
    keep = ~expected_truncated
    np.testing.assert_allclose(traj.next_value[keep, 1], snake_value(following)[keep])


def test_termination_when_the_snake_leaves_the_grid(result):
    last_obs, traj, _ = result
    head_rows = traj.obs.grid[:, 0, :, :, 1].max(axis=-1).argmax(axis=-1)
    terminated = head_rows == 0  # moving up from row 0 leaves the grid
    assert terminated.any()
    np.testing.assert_array_equal(traj.terminated[:, 0], terminated)
    np.testing.assert_array_equal(traj.truncated[:, 0], False)
    np.testing.assert_array_equal(traj.first[1:, 0], terminated[:-1])
    # Not bootstrapped from the final observation: next_value is V(reset observation),
    # which estimators multiply by zero.
    following = jax.tree.map(lambda o, s: np.concatenate([o[1:, 0], s[None, 0]]), traj.obs, last_obs)
    np.testing.assert_allclose(traj.next_value[:, 0], snake_value(following))
    np.testing.assert_array_equal(following.step_count[terminated], 0)


def test_pytree_observations_are_stored(snake, result):
    env, _ = snake
    _, traj, _ = result
    assert type(traj.obs).__name__ == "Observation"
    assert traj.obs.grid.shape == (T, B, SIZE, SIZE, 5) and traj.obs.grid.dtype == jnp.float32
    assert traj.obs.step_count.shape == (T, B) and traj.obs.step_count.dtype == jnp.int32
    assert traj.obs.action_mask.shape == (T, B, 4) and traj.obs.action_mask.dtype == jnp.bool_
    np.testing.assert_array_equal(traj.obs.step_count[:, 1], [0, 1, 2, 3, 4, 5, 0, 1])
    space = env.observation_space()
    assert list(space.spaces) == list(traj.obs._fields)
    assert space.spaces["grid"].shape == (SIZE, SIZE, 5) and space.spaces["step_count"].n == 50
    assert env.action_space().n == 4


def test_step_puts_the_pre_reset_observation_in_info(snake):
    """Each adapter step against a raw step from the same state: final_observation is the raw one."""
    env, params = snake

    def run(key):
        def step(state, key):
            obs = state[0]
            action = jnp.argmax(obs.action_mask).astype(jnp.int32)
            _, raw = env.env.step(state[1].env_state, action)
            obs, env_state, _, terminated, truncated, info = env.step(key, state[1], action, params)
            return (obs, env_state), (raw.observation, info["final_observation"], obs, terminated, truncated)

        return jax.lax.scan(step, env.reset(key, params), jax.random.split(key, MAX_STEPS + 1))[1]

    raw, final, obs, terminated, truncated = jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(3)))
    jax.tree.map(np.testing.assert_array_equal, final, raw)
    np.testing.assert_array_equal(terminated, False)
    np.testing.assert_array_equal(truncated, np.arange(MAX_STEPS + 1) == MAX_STEPS - 1)
    np.testing.assert_array_equal(raw.step_count, [1, 2, 3, 4, 5, 6, 1])
    np.testing.assert_array_equal(obs.step_count, [1, 2, 3, 4, 5, 0, 1])


def test_snakes_own_time_limit_is_a_termination():
    """Jumanji's Snake ends its time limit with discount 0; the adapter keeps that as terminated."""
    env, _ = envs.make("jumanji/Snake-v1", num_rows=SIZE, num_cols=SIZE, time_limit=2)

    def run(key):
        def step(carry, key):
            obs, state = carry
            action = jnp.argmax(obs.action_mask).astype(jnp.int32)
            obs, state, _, terminated, truncated, _ = env.step(key, state, action)
            return (obs, state), (terminated, truncated)

        return jax.lax.scan(step, env.reset(key), jax.random.split(key, 2))[1]

    terminated, truncated = jax.jit(run)(jax.random.key(0))
    np.testing.assert_array_equal(terminated, [False, True])
    np.testing.assert_array_equal(truncated, [False, False])


# --- a toy jumanji env: truncation with discount 1, and the action spaces ---------------


class EchoObservation(NamedTuple):
    t: jax.Array  # int32 [], steps since the reset
    action: jax.Array  # the last action, as the env received it


class EchoState(NamedTuple):
    key: jax.Array
    t: jax.Array
    action: jax.Array


class EchoEnv(jumanji.env.Environment):
    """Echoes the action it receives. The spec's maximum action terminates (discount 0);
    step `time_limit` truncates (jumanji's `truncation`, discount 1); reward 1 a step."""

    def __init__(self, action_spec, time_limit=3):
        self._spec = action_spec
        self.time_limit = time_limit
        super().__init__()

    @cached_property
    def observation_spec(self):
        return specs.Spec(
            EchoObservation,
            "EchoObservation",
            t=specs.Array((), jnp.int32, "t"),
            action=specs.Array(self._spec.shape, self._spec.dtype, "action"),
        )

    @cached_property
    def action_spec(self):
        return self._spec

    def reset(self, key):
        state = EchoState(key, jnp.int32(0), jnp.zeros(self._spec.shape, self._spec.dtype))
        observation = EchoObservation(state.t, state.action)
        timestep = TimeStep(
            step_type=StepType.FIRST, reward=jnp.float32(0), discount=jnp.float32(1), observation=observation
        )
        return state, timestep

    def step(self, state, action):
        state = EchoState(state.key, state.t + 1, action)
        at_max = jnp.all(action == self._spec.maximum)
        last = at_max | (state.t >= self.time_limit)
        timestep = TimeStep(
            step_type=jnp.where(last, StepType.LAST, StepType.MID),
            reward=jnp.float32(1),
            discount=jnp.where(at_max, 0.0, 1.0).astype(jnp.float32),
            observation=EchoObservation(state.t, state.action),
        )
        return state, timestep


def run_echo(env, actions):
    """Steps `env` eagerly; returns [(obs, terminated, truncated, final_observation)] per step."""
    _, state = env.reset(jax.random.key(0))
    out = []
    for t, action in enumerate(actions):
        obs, state, reward, terminated, truncated, info = env.step(jax.random.key(t), state, action)
        assert reward == 1.0
        out.append((obs, bool(terminated), bool(truncated), info["final_observation"]))
    return out


def test_truncation_discount_one_is_truncated_and_zero_terminated():
    env = JumanjiEnv(EchoEnv(specs.DiscreteArray(3)))
    steps = run_echo(env, [jnp.int32(0), jnp.int32(1), jnp.int32(0), jnp.int32(2), jnp.int32(1), jnp.int32(2)])
    assert [(te, tr) for _, te, tr, _ in steps] == [
        (False, False), (False, False), (False, True),  # step 3: the time limit, discount 1
        (True, False),  # the maximum action: discount 0
        (False, False), (True, False),  # the time limit and the maximum action together: terminated
    ]
    obs, _, _, final = steps[2]
    assert int(final.t) == 3 and int(final.action) == 0 and int(obs.t) == 0


def test_max_episode_steps_truncates_before_the_env_does():
    env = JumanjiEnv(EchoEnv(specs.DiscreteArray(3)), max_episode_steps=2)
    steps = run_echo(env, [jnp.int32(0)] * 4)
    assert [(te, tr) for _, te, tr, _ in steps] == [(False, False), (False, True)] * 2
    with pytest.raises(ValueError, match="max_episode_steps=3 must be below the env's own time_limit=3"):
        JumanjiEnv(EchoEnv(specs.DiscreteArray(3)), max_episode_steps=3)


def test_multi_discrete_actions_as_a_tuple_or_flat():
    spec = specs.MultiDiscreteArray(jnp.array([2, 3], jnp.int32))
    tuple_env = JumanjiEnv(EchoEnv(spec))
    assert [s.n for s in tuple_env.action_space().spaces] == [2, 3]
    (obs, terminated, _, _), = run_echo(tuple_env, [(jnp.int32(1), jnp.int32(2))])
    np.testing.assert_array_equal(obs.t, 0)  # terminated at the maximum: reset
    assert terminated
    flat_env = JumanjiEnv(EchoEnv(spec), multi_discrete="flat")
    assert flat_env.action_space().n == 6
    # Row-major: flat action 5 = (1, 2), 3 = (1, 0).
    steps = run_echo(flat_env, [jnp.int32(3), jnp.int32(5)])
    np.testing.assert_array_equal(steps[0][0].action, [1, 0])
    np.testing.assert_array_equal(steps[1][3].action, [1, 2])
    assert steps[1][1]


def test_flat_actions_come_with_a_flat_joint_action_mask():
    """With multi_discrete='flat' Tetris's [4, 6] action mask stayed [4, 6] beside Discrete(24) actions, and
    network='auto' refused it ("must be bool [A=24]"): the option the library itself recommends could not train."""
    from jaxrl_rollout.algorithms import ppo

    env, _ = envs.make("jumanji/Tetris-v0", num_rows=6, num_cols=6, multi_discrete="flat")
    raw, _ = envs.make("jumanji/Tetris-v0", num_rows=6, num_cols=6)
    assert env.action_space().n == 24 and env.observation_space().spaces["action_mask"].shape == (24,)
    assert raw.observation_space().spaces["action_mask"].shape == (4, 6)  # the tuple actions keep the joint mask
    key = jax.random.key(3)
    obs, state = env.reset(key)
    raw_obs, _ = raw.reset(key)
    np.testing.assert_array_equal(obs.action_mask, np.asarray(raw_obs.action_mask).reshape(-1))
    for a in range(24):  # flat action a is (rotation, column) = divmod(a, 6): the mask's row-major entry a
        np.testing.assert_array_equal(env._to_env_action(jnp.int32(a)), divmod(a, 6))
    step_obs = env.step(key, state, jnp.int32(int(np.argmax(obs.action_mask))))[0]
    assert step_obs.action_mask.shape == (24,)
    config = ppo.PPOConfig(num_envs=2, num_steps=4, total_timesteps=8, num_minibatches=1, update_epochs=1,
                           hidden_sizes=(8, 8))
    algo = ppo.make_ppo(config, env=env)
    assert algo.module.one_hot[-1] == 400  # step_count, read one-hot, last in the observation's field order


def test_the_suites_auto_reset_and_vmap_wrappers_are_refused():
    """After jumanji's AutoResetWrapper the final observation was silently the next episode's first (step_count
    0 where the raw env ended at 3); BraxEnv refused brax's own, JumanjiEnv did not."""
    from jumanji.wrappers import AutoResetWrapper, JumanjiToDMEnvWrapper, JumanjiToGymWrapper, VmapWrapper

    class MyAutoReset(AutoResetWrapper):  # a subclass is refused as its base is
        pass

    base = jumanji.make("Snake-v1", num_rows=6, num_cols=6, time_limit=3)
    # (the gym and dm_env wrappers are no jumanji Wrapper: they failed on a missing reward_spec, a shape)
    for wrapper in (AutoResetWrapper, VmapWrapper, JumanjiToGymWrapper, JumanjiToDMEnvWrapper, MyAutoReset):
        with pytest.raises(ValueError, match=rf"^env is wrapped in {wrapper.__name__}; pass the env without it: "
                                             "JumanjiEnv takes one raw env"):
            JumanjiEnv(wrapper(base))
    env = JumanjiEnv(base)
    obs, state = env.reset(jax.random.key(0))
    for _ in range(3):
        obs, state, _, terminated, truncated, info = env.step(jax.random.key(1), state, jnp.int32(0))
    assert bool(terminated | truncated) and int(info["final_observation"].step_count) == 3


def test_integer_bounded_actions_count_from_the_minimum_and_floats_are_boxes():
    env = JumanjiEnv(EchoEnv(specs.BoundedArray((2,), jnp.int16, minimum=1, maximum=[2, 4])))
    assert [s.n for s in env.action_space().spaces] == [2, 4]
    (obs, _, _, _), = run_echo(env, [(jnp.int32(0), jnp.int32(2))])
    assert obs.action.dtype == jnp.int16
    np.testing.assert_array_equal(obs.action, [1, 3])
    box = JumanjiEnv(EchoEnv(specs.BoundedArray((2,), jnp.float32, -1.0, 1.0))).action_space()
    assert box.shape == (2,) and box.low == -1.0 and box.high == 1.0 and box.dtype == jnp.float32


def test_unsupported_specs_are_named():
    with pytest.raises(NotImplementedError, match="BoundedArray.*bool"):
        JumanjiEnv(EchoEnv(specs.BoundedArray((2,), bool, False, True)))
    with pytest.raises(NotImplementedError, match=r"reward of shape \(10,\)"):
        envs.make(f"jumanji/{CONNECTOR}")


def test_make_default_snake():
    env, params = envs.make("jumanji/Snake-v1")
    assert isinstance(env, JumanjiEnv) and params is None and env.default_params is None
    assert env.name == "jumanji/Snake-v1" and env.max_episode_steps is None
    assert env.action_space(params).n == 4
    obs, state = jax.eval_shape(env.reset, jax.random.key(0))
    assert obs.grid.shape == (12, 12, 5) and state.step_count.dtype == jnp.int32


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"foo": 1}, r"does not take the options \['foo'\]"),
        ({"multi_discrete": "joint"}, "multi_discrete must be one of"),
        ({"max_episode_steps": 0}, "max_episode_steps must be a positive int"),
        ({"max_episode_steps": 4000}, "must be below the env's own time_limit=4000"),
        # a value of the wrong type was reported as an option Snake does not take
        ({"num_rows": "6"}, r"^jumanji 'Snake-v1' could not be built with the options \{'num_rows': '6'\} \(a value "
                            r"of the wrong type\?\): TypeError: "),
        ({"time_limit": "100"}, r"^jumanji 'Snake-v1' could not be built with the options \{'time_limit': '100'\}"),
    ],
)
def test_bad_options_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        envs.make("jumanji/Snake-v1", **kwargs)


def test_unknown_name_lists_close_matches_and_known_names():
    with pytest.raises(ValueError, match=r"Did you mean Snake-v1.*Known names: .*Tetris-v0"):
        envs.make("jumanji/Snake")


def test_missing_suite_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jumanji", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxrl-rollout\[jumanji\]'"):
        envs.make("jumanji/Snake-v1")


def test_importing_the_package_does_not_import_jumanji():
    code = (
        "import sys, jaxrl_rollout, jaxrl_rollout.envs, jaxrl_rollout.envs.jumanji; "
        "assert 'jumanji' not in sys.modules, 'jumanji was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("argv, message", [
    # no time limit: train wrote its folder, trained, then failed at its closing evaluation
    (["train", "--env", "jumanji/Game2048-v1"], r"--env jumanji/Game2048-v1: the env has no time limit, and the "
     r"command line evaluates whole episodes .*; give it one: --env-option max_episode_steps=N\."),
    (["rollout", "--env", "jumanji/Knapsack-v1"], r"--env jumanji/Knapsack-v1: the env has no time limit"),
    # a multi-agent reward: a traceback ending in NotImplementedError
    (["train", "--env", f"jumanji/{CONNECTOR}"],
     rf"--env jumanji/{CONNECTOR}: Connector has a reward of shape \(10,\) \(one per agent\)"),
    # a Tuple of Discrete actions: "uniform_random_policy supports Discrete and Box action spaces", a traceback
    (["rollout", "--env", "jumanji/RubiksCube-partly-scrambled-v0"],
     r"--env jumanji/RubiksCube-partly-scrambled-v0: rollout draws Discrete or Box actions, got Tuple\(.*\)\. A "
     r"jumanji env gives its Tuple of Discrete actions as one Discrete .* --env-option multi_discrete=flat on the "
     r"command line\."),
])
def test_the_command_line_refuses_what_it_cannot_run_in_one_line(tmp_path, capsys, argv, message):
    from jaxrl_rollout import cli

    out = ["--out", str(tmp_path / "run")] if argv[0] == "train" else []
    assert cli.main([*argv, *out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxrl-rollout: error: ") and err.count("\n") == 1 and re.search(message, err), err
    assert not (tmp_path / "run").exists()


def test_the_command_line_takes_the_options_its_refusals_advise(capsys):
    from jaxrl_rollout import cli

    assert cli.main(["rollout", "--env", "jumanji/RubiksCube-partly-scrambled-v0", "--env-option",
                     "multi_discrete=flat", "--num-envs", "2", "--num-steps", "8", "--num-eval", "1"]) == 0
    assert cli.main(["rollout", "--env", "jumanji/Knapsack-v1", "--env-option", "max_episode_steps=4", "--num-envs",
                     "2", "--num-steps", "8", "--num-eval", "2"]) == 0
    out = capsys.readouterr().out
    assert "on jumanji/RubiksCube-partly-scrambled-v0 (multi_discrete=flat)" in out, out
    assert "evaluate: 2 episodes" in out and "2 completed" in out, out
