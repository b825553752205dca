"""Host envs (gymnasium, envpool) stepped from the jitted rollout through io_callback.

The gymnasium test is the end-to-end check of the issue: a CartPole rollout
through `GymnasiumEnv` against the same envs stepped one at a time in plain
Python (same seeds, the rollout's actions replayed): observations, rewards
and flags exactly, values, bootstrap values and GAE to float32 rounding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import subprocess
import sys

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_rollout as jr
from jaxrl_rollout import envs
from jaxrl_rollout.advantages import trajectory_gae
from jaxrl_rollout.envs.gymnasium import GymnasiumEnv

B, T, LIMIT = 3, 70, 20
GAMMA, LAMBDA = 0.99, 0.95


def _params(obs_dim=4, hidden=16, actions=2):
    k1, k2, k3 = jax.random.split(jax.random.key(42), 3)
    return {
        "w1": jax.random.normal(k1, (obs_dim, hidden)) * 0.8,
        "b1": jnp.linspace(-0.1, 0.1, hidden),
        "wpi": jax.random.normal(k2, (hidden, actions)) * 0.5,
        "wv": jax.random.normal(k3, (hidden,)),
    }


def _apply(params, obs):
    h = jnp.tanh(obs @ params["w1"] + params["b1"])
    return h @ params["wpi"], h @ params["wv"]


def _value_np(params, obs):
    p = jax.tree.map(np.asarray, params)
    h = np.tanh(np.asarray(obs, np.float32) @ p["w1"] + p["b1"])
    return (h @ p["wv"]).astype(np.float32)


class SeedRecordingEnv(GymnasiumEnv):
    def _host_open(self, seeds):
        self.seeds = [int(s) for s in seeds.flat]
        return super()._host_open(seeds)


@pytest.fixture(scope="module")
def cartpole_run():
    env = SeedRecordingEnv(lambda: gymnasium.make("CartPole-v1", max_episode_steps=LIMIT))
    params = _params()
    policy = jr.policies.categorical_policy(_apply)
    state = jr.rollout_init(jax.random.key(3), env, None, B)
    _, traj = jax.jit(lambda p, s: jr.rollout(env, None, policy, p, s, T))(params, state)
    return env, params, jax.tree.map(np.asarray, traj)


def _python_loop(seeds, actions):
    """The same CartPoles stepped one at a time with hand-made same-step resets."""
    py_envs = [gymnasium.make("CartPole-v1", max_episode_steps=LIMIT) for _ in range(B)]
    obs = [e.reset(seed=s)[0] for e, s in zip(py_envs, seeds)]
    out = {k: np.zeros((T, B, 4) if "obs" in k else (T, B), np.float32 if k == "reward" or "obs" in k else bool)
           for k in ("obs", "reward", "terminated", "truncated", "next_obs")}
    for t in range(T):
        for i, e in enumerate(py_envs):
            out["obs"][t, i] = obs[i]
            o, r, term, trunc, _ = e.step(int(actions[t, i]))
            out["reward"][t, i], out["terminated"][t, i], out["truncated"][t, i] = r, term, trunc
            # The true next state: the final observation where the episode ended by truncation.
            out["next_obs"][t, i] = o
            if term or trunc:
                o, _ = e.reset()
                if term:
                    out["next_obs"][t, i] = o  # not bootstrapped; the rollout stores V(reset obs) there
            obs[i] = o
    return out


def test_gymnasium_rollout_equals_the_same_envs_stepped_in_python(cartpole_run):
    env, params, traj = cartpole_run
    ref = _python_loop(env.seeds, traj.action)
    assert traj.truncated.sum() >= B and traj.terminated.sum() >= B  # both kinds of episode end occur
    np.testing.assert_array_equal(traj.obs, ref["obs"])
    np.testing.assert_array_equal(traj.reward, ref["reward"])
    np.testing.assert_array_equal(traj.terminated, ref["terminated"])
    np.testing.assert_array_equal(traj.truncated, ref["truncated"] & ~ref["terminated"])
    np.testing.assert_array_equal(traj.done, ref["terminated"] | ref["truncated"])
    np.testing.assert_array_equal(traj.first[1:], traj.done[:-1])
    assert traj.first[0].all()

    value = _value_np(params, ref["obs"])
    np.testing.assert_allclose(traj.value, value, rtol=1e-5, atol=1e-6)
    next_value = _value_np(params, ref["next_obs"])
    next_value[-1] = np.where(ref["truncated"][-1] & ~ref["terminated"][-1], next_value[-1], traj.next_value[-1])
    np.testing.assert_allclose(traj.next_value, next_value, rtol=1e-5, atol=1e-6)

    # GAE with truncation bootstrapped from V(final observation) (docs/semantics.md §4, §5), as a reverse loop.
    adv_ref = np.zeros((T, B), np.float64)
    following = np.zeros(B)
    for t in reversed(range(T)):
        delta = ref["reward"][t] + GAMMA * (1 - ref["terminated"][t]) * next_value[t] - value[t]
        following = delta + GAMMA * LAMBDA * (1 - (ref["terminated"][t] | ref["truncated"][t])) * following
        adv_ref[t] = following
    adv, ret = trajectory_gae(jax.tree.map(jnp.asarray, traj), GAMMA, LAMBDA)
    np.testing.assert_allclose(adv, adv_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ret, adv_ref + value, rtol=1e-4, atol=1e-5)


def test_final_observation_is_the_pre_reset_one(cartpole_run):
    env, params, traj = cartpole_run
    ref = _python_loop(env.seeds, traj.action)
    truncated = traj.truncated
    # Where truncated, the stored bootstrap is V(final obs), not V(reset obs) that the policy saw next.
    t, i = np.nonzero(truncated[:-1])
    assert not np.allclose(ref["next_obs"][t, i], traj.obs[t + 1, i])
    np.testing.assert_allclose(traj.next_value[t, i], _value_np(params, ref["next_obs"][t, i]), rtol=1e-5, atol=1e-6)


def test_same_key_same_trajectory_and_another_key_differs():
    env, _ = envs.make("gymnasium/CartPole-v1", max_episode_steps=LIMIT)
    policy = jr.policies.uniform_random_policy(env.action_space())
    run = jax.jit(lambda s: jr.rollout(env, None, policy, None, s, 30)[1])
    first = run(jr.rollout_init(jax.random.key(0), env, None, 2))
    again = run(jr.rollout_init(jax.random.key(0), env, None, 2))
    other = run(jr.rollout_init(jax.random.key(1), env, None, 2))
    np.testing.assert_array_equal(first.obs, again.obs)
    np.testing.assert_array_equal(first.action, again.action)
    assert not np.array_equal(first.obs, other.obs)


def test_vmapped_rollouts_step_one_pool_and_each_run_equals_its_key_alone():
    env, _ = envs.make("gymnasium/CartPole-v1", max_episode_steps=LIMIT)
    policy = jr.policies.categorical_policy(_apply)
    params = _params()

    def run(key):
        return jr.rollout(env, None, policy, params, jr.rollout_init(key, env, None, 2), 30)[1]

    keys = jax.random.split(jax.random.key(0), 6).reshape(2, 3)
    before = env.stats()
    nested = jax.jit(jax.vmap(jax.vmap(run)))(keys)  # two vmapped axes: one host pool of 2 x 3 x 2 envs
    assert nested.obs.shape == (2, 3, 30, 2, 4)
    assert env.stats().env_steps - before.env_steps == 2 * 3 * 30 * 2
    alone = jax.jit(jax.vmap(run))(keys[1, 2][None])
    for name in ("obs", "action", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(nested, name)[1, 2], getattr(alone, name)[0])
    assert not np.array_equal(nested.obs[0, 0], nested.obs[0, 1])


def test_a_vmapped_evaluate_steps_its_runs_in_lockstep_and_each_equals_its_evaluation_alone():
    """Under a plain vmap, evaluate's while_loop kept a finished run's env state while the host pool stepped on, and
    the host env refused the stale state; a host env's evaluate now runs the runs of any vmap (nested too, with
    arguments batched on some axes only) in one pool and one loop, and each run's episodes are its own key's."""
    env, _ = envs.make("gymnasium/CartPole-v1")
    policy = jr.policies.categorical_policy(_apply)  # stochastic: the policy keys must be each run's own too
    params = jax.tree.map(lambda x: jnp.stack([x, 2 * x, -x]), _params())
    keys = jax.random.split(jax.random.key(4), 6).reshape(2, 3)

    def one(p, k):
        return jr.evaluate(env, None, policy, p, k, 4)

    before = env.stats()
    grid = jax.jit(jax.vmap(lambda p, ks: jax.vmap(lambda k: one(p, k))(ks)))(jax.tree.map(lambda x: x[:2], params),
                                                                           keys)
    steps = env.stats().env_steps - before.env_steps
    assert grid.returns.shape == (2, 3, 4) and steps == 2 * 3 * 4 * int(grid.lengths.max())  # one pool of 24 envs
    alone = jax.jit(one)
    for g in range(2):
        for s in range(3):
            solo = alone(jax.tree.map(lambda x: x[g], params), keys[g, s])
            for name in ("returns", "lengths", "completed"):
                np.testing.assert_array_equal(getattr(grid, name)[g, s], getattr(solo, name))
    assert len(set(np.asarray(grid.lengths).flat)) > 1  # episodes of different lengths: runs finished apart
    runs = jax.jit(jax.vmap(one))(params, keys[0])  # one vmap, every argument batched
    np.testing.assert_array_equal(runs.returns[1], alone(jax.tree.map(lambda x: x[1], params), keys[0, 1]).returns)


def test_stepping_a_stale_state_is_an_error_not_a_silent_continuation():
    env, _ = envs.make("gymnasium/CartPole-v1")
    policy = jr.policies.uniform_random_policy(env.action_space())
    run = jax.jit(lambda s: jr.rollout(env, None, policy, None, s, 3))
    state = jr.rollout_init(jax.random.key(0), env, None, 2)
    run(state)
    with pytest.raises(Exception, match="stale env state"):
        jax.block_until_ready(run(state))


@pytest.mark.parametrize("action", [-1, 2])
def test_discrete_actions_outside_the_space_are_an_error(action):
    """A host env sees the actions' values on the host, so it checks them there at every step, at no cost to the
    program: an action outside [0, n) (which envpool's envs, unlike gymnasium's CartPole, take without a word) is an
    error naming the env, the actions' range and the space."""
    env, _ = envs.make("gymnasium/CartPole-v1")

    def policy_fn(params, obs, key):
        b = obs.shape[0]
        return jr.PolicyOutput(jnp.where(jnp.arange(b) == 1, action, 0).astype(jnp.int32), jnp.zeros(b), jnp.zeros(b))

    state = jr.rollout_init(jax.random.key(0), env, None, 3)
    with pytest.raises(Exception, match=rf"GymnasiumEnv\('CartPole-v1', envs=3\) was given actions from "
                                        rf"{min(action, 0)} to {max(action, 0)}, outside \[0, n\) for its "
                                        rf"Discrete\(n=2\) action space"):
        jax.block_until_ready(jax.jit(lambda s: jr.rollout(env, None, policy_fn, None, s, 2))(state))


def test_box_actions_and_evaluate_with_the_env_time_limit():
    env, env_params = envs.make("gymnasium/Pendulum-v1")
    assert env_params.max_steps_in_episode == 200
    space = env.action_space()
    assert space.shape == (1,) and float(space.high[0]) == 2.0
    policy = jr.policies.uniform_random_policy(space)
    _, traj = jr.rollout(env, None, policy, None, jr.rollout_init(jax.random.key(0), env, None, 2), 4)
    assert traj.obs.shape == (4, 2, 3) and traj.obs.dtype == jnp.float32 and traj.action.shape == (4, 2, 1)
    result = jr.evaluate(env, env_params, policy, None, jax.random.key(1), 2)
    np.testing.assert_array_equal(result.lengths, [200, 200])


def test_ppo_trains_through_a_host_env_in_one_jit():
    from jaxrl_rollout.algorithms import ppo

    config = ppo.PPOConfig(env_id="gymnasium/CartPole-v1", num_envs=2, num_steps=16, total_timesteps=64,
                           num_minibatches=2, update_epochs=1)
    _, metrics = jax.jit(ppo.make_train(config))(jax.random.key(0))
    assert np.all(np.isfinite(np.asarray(metrics.policy_loss)))
    assert np.asarray(metrics.env_steps)[-1] == 64


def test_a_sweep_with_one_unbatched_key_is_refused_when_traced_and_stacked_keys_train():
    """`jax.vmap(train, in_axes=(None, 0))(key, grid)` opened one pool for every grid point (the reset was not
    batched), then failed at run time on a 'stale env state'; it is refused when traced, naming the way that
    works, which is checked to train run r as `train(key, grid[r])` alone."""
    from jaxrl_rollout.algorithms import ppo, stack_hparams

    config = ppo.PPOConfig(env_id="gymnasium/CartPole-v1", num_envs=2, num_steps=16, total_timesteps=64,
                           num_minibatches=2, update_epochs=1)
    train = ppo.make_train(config)
    points = [ppo.PPOHParams(lr=lr) for lr in (1e-3, 2.5e-4)]
    grid, key = stack_hparams(points), jax.random.key(2)
    with pytest.raises(ValueError, match=r"^GymnasiumEnv\('CartPole-v1'\) is stepped under jax.vmap with one env "
                                         r"state for a batch of 2 runs' "
                                         r"actions.*\(jax.vmap\(train\)\(jnp.stack\(\[key\] \* 2\)"):
        jax.jit(jax.vmap(train, in_axes=(None, 0))).lower(key, grid)  # traced only: nothing ran
    _, swept = jax.jit(jax.vmap(train))(jnp.stack([key] * 2), grid)
    _, alone = jax.jit(train)(key, points[1])
    np.testing.assert_array_equal(np.asarray(swept.episode_return)[1], np.asarray(alone.episode_return))
    np.testing.assert_array_equal(np.asarray(swept.num_episodes)[1], np.asarray(alone.num_episodes))
    assert int(np.asarray(alone.num_episodes).sum()) > 0


def test_unknown_ids_and_a_missing_extra(monkeypatch):
    with pytest.raises(ValueError, match="CartPole-v1"):
        envs.make("gymnasium/CartPoel-v1")
    with pytest.raises(ValueError, match="unknown env suite 'gymnasum'.*gymnasium"):
        envs.make("gymnasum/CartPole-v1")
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxrl-rollout\[gymnasium\]'"):
        envs.make("gymnasium/CartPole-v1")


def test_an_env_missing_a_package_of_gymnasium_s_is_one_line(monkeypatch, capsys):
    """LunarLander without Box2D: gymnasium's DependencyNotInstalled was two chained tracebacks and exit 1."""
    from jaxrl_rollout import cli

    def make(name, **kwargs):
        raise gymnasium.error.DependencyNotInstalled('Box2D is not installed, run `pip install "gymnasium[box2d]"`')

    monkeypatch.setattr(gymnasium, "make", make)
    with pytest.raises(ImportError, match=r"^gymnasium/LunarLander-v3 needs a package gymnasium did not find: Box2D"):
        envs.make("gymnasium/LunarLander-v3")
    assert cli.main(["rollout", "--env", "gymnasium/LunarLander-v3", "--num-steps", "4"]) == 2
    assert capsys.readouterr().err == ("jaxrl-rollout: error: gymnasium/LunarLander-v3 needs a package gymnasium did "
                                       'not find: Box2D is not installed, run `pip install "gymnasium[box2d]"`\n')


def test_importing_the_package_imports_no_suite():
    # gymnasium is left out: gymnax itself imports it.
    code = ("import sys, jaxrl_rollout, jaxrl_rollout.envs; "
            "bad = [m for m in ('envpool', 'brax', 'jumanji', 'craftax', 'xminigrid', 'navix', 'pgx') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _small_spec(env_id, num_seeds=3, **kwargs):
    from jaxrl_rollout import runner
    from jaxrl_rollout.algorithms import ppo

    config = ppo.PPOConfig(env_id=env_id, num_envs=2, num_steps=8, total_timesteps=64, num_minibatches=2,
                           update_epochs=1)
    return runner.RunSpec("ppo", config, (ppo.PPOHParams(),), num_seeds=num_seeds, chunk_updates=2, **kwargs)


def assert_seed_i_equals_its_run_alone(env_id):
    """runner.train's last run of 3 against its key trained alone (a 1-run vmap).

    The episode returns bit for bit: each run steps its own pool, seeded from its own key. The params bit for
    bit on jax 0.10.2; jax 0.11's XLA compiles a batch of one run into sums ordered otherwise than a batch of
    three (the same key three times in a batch of three gives the sweep's params exactly), so they are
    compared to float32 rounding: a run that met another run's episodes would differ in its returns and far
    more in its params."""
    from jaxrl_rollout import runner

    spec = _small_spec(env_id)
    swept = runner.train(spec, progress=None)
    keys, hparams = spec.run_keys(), spec.run_hparams()
    for i in [spec.num_runs - 1]:  # one run keeps the test small; its pool neighbours are runs 0 and 1
        algorithm = runner.make_algorithm(spec)  # a host env object per run trained alone
        one = jax.tree.map(lambda x: x[i:i + 1], hparams)
        chunk = jax.jit(jax.vmap(lambda s, h: jax.lax.scan(lambda s, _: algorithm.update(s, h), s, None, length=2)))
        state, returns = jax.jit(jax.vmap(algorithm.init))(keys[i:i + 1], one), []
        for _ in spec.chunk_lengths:
            state, metrics = chunk(state, one)
            returns.append(np.asarray(metrics.episode_return)[0])
        np.testing.assert_array_equal(np.concatenate(returns), swept.metrics["episode_return"][i])
        for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(swept.state.params)):
            np.testing.assert_allclose(np.asarray(a)[0], np.asarray(b)[i], rtol=1e-6, atol=1e-7)


def test_gymnasium_seed_i_of_a_sweep_equals_its_run_alone():
    assert_seed_i_equals_its_run_alone("gymnasium/CartPole-v1")


def test_resume_restarts_the_host_envs_deterministically(tmp_path):
    import shutil

    from jaxrl_rollout import runner

    spec = _small_spec("gymnasium/CartPole-v1", num_seeds=2)
    (tmp_path / "a").mkdir()
    stopped = runner.train(spec, tmp_path / "a", stop_after_chunks=1, progress=None)
    assert not stopped.complete
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    lines = []
    first = runner.train(spec, tmp_path / "a", resume=True, progress=None, on_chunk=lambda m, u: lines.append(u))
    again = runner.train(spec, tmp_path / "b", resume=True, progress=None)
    assert first.complete and first.updates_run == 2 and lines == [2]
    for a, b in zip(jax.tree.leaves(first.state.params), jax.tree.leaves(again.state.params)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(first.metrics["episode_return"], again.metrics["episode_return"])


def test_host_sweeps_refuse_groups_and_several_devices_in_one_line():
    from jaxrl_rollout import runner

    with pytest.raises(ValueError, match=r"max_parallel=2 \(--max-parallel\) splits the 4 runs.*host env"):
        runner.check_host_run(_small_spec("gymnasium/CartPole-v1", num_seeds=4, max_parallel=2))
    with pytest.raises(ValueError, match=r"devices=2 \(--devices\), but gymnasium/CartPole-v1 is a host env"):
        runner.check_host_run(_small_spec("gymnasium/CartPole-v1"), devices=2)
    runner.check_host_run(_small_spec("CartPole-v1", num_seeds=4, max_parallel=2), devices=2)  # gymnax: no limit


def test_cli_trains_the_default_eight_seeds_on_a_host_env_then_evaluates(tmp_path, capsys, monkeypatch):
    """The command line's defaults on a host env: eight seeds in one pool, evaluated every chunk (in a pool of their
    own) with a best policy per run, which `evaluate --best-policy` reads. `evaluate` makes one pool, acting with
    the algorithm it read the checkpoint with."""
    import csv

    from jaxrl_rollout import cli, runner

    folder = tmp_path / "host"
    assert cli.main(["train", "--env", "gymnasium/CartPole-v1", "--total-steps", "1024", "--num-eval", "2",
                     "--eval-episodes", "2", "--out", str(folder)]) == 0
    out = capsys.readouterr()
    assert "8 seeds" in out.out and "over 1 cpu device(s)" in out.err
    assert "host env" in out.err and "% of the time" in out.err and " eval " in out.err
    # the evaluations' own pool has its share on every progress line (each chunk evaluates)
    steps = [line for line in out.err.splitlines() if line.lstrip().startswith("step ")]
    assert len(steps) == 2 and all("; evaluation " in line for line in steps), out.err
    assert "best policy per run (its periodic evaluation's return @ update):" in out.out
    with open(folder / "metrics.csv", newline="") as f:
        evaluated = [row for row in csv.DictReader(f) if row["metric"] == "eval_return"]
    assert len(evaluated) == 8 * 2 and all(float(row["value"]) > 0 for row in evaluated)  # 2 updates, chunks of 1
    built, make = [], runner.make_algorithm
    monkeypatch.setattr(runner, "make_algorithm", lambda spec: built.append(spec.algo) or make(spec))
    assert cli.main(["evaluate", str(folder), "--num-episodes", "2"]) == 0
    assert len([line for line in capsys.readouterr().out.splitlines() if line.startswith("  default")]) == 8
    assert cli.main(["evaluate", str(folder), "--num-episodes", "2", "--best-policy"]) == 0
    assert len([line for line in capsys.readouterr().out.splitlines() if line.startswith("  default")]) == 8
    assert built == ["ppo", "ppo"]  # one algorithm (one pool of envs) per command
    monkeypatch.undo()
    # evaluated in an env made with another time limit than training's (none: gymnasium's 500): CartPole cannot
    # fall within 6 steps, so every episode of every run returns exactly 6 under that bound
    table = tmp_path / "six.csv"
    assert cli.main(["evaluate", str(folder), "--num-episodes", "2", "--env-option", "max_episode_steps=6",
                     "--csv", str(table)]) == 0
    out = capsys.readouterr().out
    assert "(PPO on gymnasium/CartPole-v1 (max_episode_steps=6), checkpoint final)" in out, out
    assert "the env made with --env-option max_episode_steps=6 (the run trained with options: none)" in out, out
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 * 2 * 2 and {row["env_options"] for row in rows} == {"max_episode_steps=6"}
    assert {float(row["return"]) for row in rows} == {6.0}
    assert cli.main(["evaluate", str(folder), "--env-option", "foo=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxrl-rollout: error: --env gymnasium/CartPole-v1 --env-option foo=1: ") and err.count(
        "\n") == 1, err
    assert cli.main(["train", "--resume", str(folder), "--max-parallel", "1"]) == 2
    assert "--max-parallel: unset there, 1 here" in capsys.readouterr().err  # not Python's None
    assert cli.main(["train", "--env", "gymnasium/CartPole-v1", "--max-parallel", "4",
                     "--out", str(tmp_path / "groups")]) == 2
    assert "max_parallel=4 (--max-parallel)" in capsys.readouterr().err
    assert not (tmp_path / "groups").exists()


@pytest.mark.parametrize("env_id, options, message", [
    # a bare TypeError (gymnasium's, envpool's Config.__new__), or an AssertionError for 0
    ("gymnasium/CartPole-v1", {"foo": 1}, r"^gymnasium 'CartPole-v1' does not take the options \['foo'\]: "),
    ("envpool/CartPole-v1", {"foo": 1}, r"^envpool 'CartPole-v1' does not take the options \['foo'\]: "),
    # accepted, then every step truncated (and evaluate bounded at 0 steps)
    ("gymnasium/CartPole-v1", {"max_episode_steps": 0}, r"^max_episode_steps must be a positive int or None, got 0"),
    ("envpool/CartPole-v1", {"max_episode_steps": 0}, r"^max_episode_steps must be a positive int or None, got 0"),
    ("gymnasium/CartPole-v1", {"max_episode_steps": 5.0}, r"^max_episode_steps must be a positive int or None, got 5.0"),
    # a string would be true (`--env-option asynchronous=no`: an AsyncVectorEnv)
    ("gymnasium/CartPole-v1", {"asynchronous": "no"}, r"^asynchronous must be a bool \(true or false\), got 'no'\.$"),
])
def test_a_host_suites_bad_options_are_a_value_error_naming_them(env_id, options, message):
    with pytest.raises(ValueError, match=message):
        envs.make(env_id, **options)


@pytest.mark.parametrize("env_id", ["gymnasium/CartPole-v1", "envpool/CartPole-v1"])
def test_a_numpy_int_time_limit_is_taken_as_an_int(env_id):
    """np.int64(5) was refused ("must be a positive int or None"), where brax's, pgx's and xminigrid's limits take
    it; it reaches the suite as a Python int."""
    _, params = envs.make(env_id, max_episode_steps=np.int64(5))
    assert params.max_steps_in_episode == 5 and type(params.max_steps_in_episode) is int


class _IntCounter(gymnasium.Env):
    """Observations from an integer Box written as gymnasium users write it (dtype=int: int64 on Linux)."""

    def __init__(self, high=10):
        self.observation_space = gymnasium.spaces.Box(0, high, (2,), dtype=int)
        self.action_space = gymnasium.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0, 0]), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t, int(action)]), 1.0, False, False, {}


def test_an_int64_box_observation_is_given_as_int32():
    """The space kept int64, which JAX (without x64) cannot take back from the host: make_train built, and the
    jitted train failed in io_callback ("cannot specify 64-bit types"); an int64 bound iinfo.max became -1."""
    from jaxrl_rollout.algorithms import ppo

    if "IntCounter-v0" not in gymnasium.registry:
        gymnasium.register("IntCounter-v0", entry_point=_IntCounter, max_episode_steps=10)
    env, params = envs.make("gymnasium/IntCounter-v0")
    space = env.observation_space(params)
    assert space.dtype == jnp.int32 and np.all(np.asarray(space.high) == 10)
    wide_env = envs.make("gymnasium/IntCounter-v0", high=np.iinfo(np.int64).max)[0]
    wide = wide_env.observation_space(None)
    assert np.all(np.asarray(wide.low) == 0) and np.all(np.asarray(wide.high) == np.iinfo(np.int32).max)
    wide_env._shape = (2,)  # values past int32's range saturate at the space's bounds (they wrapped to -2**31)
    np.testing.assert_array_equal(wide_env._obs(np.array([[2**31, 3], [5, 2**40]])),
                                  [[2**31 - 1, 3], [5, 2**31 - 1]])
    config = ppo.PPOConfig(num_envs=2, num_steps=10, total_timesteps=20, num_minibatches=1, update_epochs=1,
                           hidden_sizes=(8, 8))
    _, metrics = jax.jit(ppo.make_train(config, env=env, env_params=params))(jax.random.key(0))
    assert np.asarray(metrics.episode_return).tolist() == [10.0]  # every step pays 1, truncated at 10


_PLUGIN = "jaxrl_rollout_test_gym_plugin"


def test_an_env_a_module_registers_is_named_module_colon_id(tmp_path, monkeypatch, capsys):
    """gymnasium >= 1.0 registers a package's envs only when it is imported (ale-py's "ALE/Pong-v5" too), and
    `gymnasium.make` takes "MODULE:ID" for that; the adapter refused every id not already registered, and for
    ALE/Pong-v5 said "Did you mean Ant-v5?". "gymnasium/MODULE:ID" now imports MODULE first, and an id of a
    namespace nothing registered says to name the module."""
    from jaxrl_rollout import cli

    (tmp_path / f"{_PLUGIN}.py").write_text(
        "import gymnasium\n"
        "gymnasium.register(id='JaxrlToy/CartPole-v9', max_episode_steps=20,\n"
        "                   entry_point='gymnasium.envs.classic_control.cartpole:CartPoleEnv')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ValueError, match=r"no env of namespace 'JaxrlToy' is registered\. gymnasium registers a "
                                             r"package's envs when the package is imported: name its module before "
                                             r"the id, .*gymnasium/the_package:JaxrlToy/CartPole-v9\.$"):
            envs.make("gymnasium/JaxrlToy/CartPole-v9")
        if "ALE" not in {spec.namespace for spec in gymnasium.registry.values()}:
            with pytest.raises(ValueError, match=r"gymnasium/ale_py:ALE/Pong-v5 \(ale-py's envs: pip install ale-py\)"):
                envs.make("gymnasium/ALE/Pong-v5")
        with pytest.raises(ValueError, match=r"cannot import 'no_such_module_xyz', the module named before ':' .*"
                                             r"PYTHONPATH=\. adds it\.$"):
            envs.make("gymnasium/no_such_module_xyz:CartPole-v1")
        if importlib.util.find_spec("ale_py") is None:
            with pytest.raises(ValueError, match=r"cannot import 'ale_py'.* ale-py is not installed: pip install ale-py"):
                envs.make("gymnasium/ale_py:ALE/Pong-v5")
        with pytest.raises(ValueError, match=r"unknown gymnasium env id 'Zzqx-v0'\. An env that a package of yours "
                                             r"registers when imported: gymnasium/MODULE:ID"):
            envs.make("gymnasium/Zzqx-v0")
        env_id = f"gymnasium/{_PLUGIN}:JaxrlToy/CartPole-v9"
        env, env_params = envs.make(env_id)
        result = jr.collect.evaluate(env, env_params, jr.policies.uniform_random_policy(env.action_space(env_params)),
                                     None, jax.random.key(0), 2)
        assert np.asarray(result.lengths).max() <= 20 and np.asarray(result.completed).all()
        env.close()
        assert cli.main(["rollout", "--env", env_id, "--num-envs", "2", "--num-steps", "25", "--num-eval", "2"]) == 0
        assert "episode" in capsys.readouterr().out
    finally:
        gymnasium.registry.pop("JaxrlToy/CartPole-v9", None)
        sys.modules.pop(_PLUGIN, None)


def test_an_ale_game_s_time_limit_is_its_emulator_s_frame_limit():
    """ale-py's v5 games have no TimeLimit: the emulator truncates at `max_num_frames_per_episode` frames (108,000),
    in steps of `frameskip` frames (4), so the command line refused `--env gymnasium/ale_py:ALE/Pong-v5` for having
    no time limit. The adapter reads the bound from the spec's kwargs (walked with ale-py 0.12.1: 27,000 steps)."""
    from gymnasium.envs.registration import EnvSpec

    from jaxrl_rollout.envs.gymnasium import _time_limit

    ale = dict(game="pong", frameskip=4, max_num_frames_per_episode=108_000)
    assert _time_limit(EnvSpec("ALE/Pong-v5", "ale_py.env:AtariEnv", kwargs=ale)) == 27_000
    assert _time_limit(EnvSpec("ALE/Pong-v5", "ale_py.env:AtariEnv", kwargs={**ale, "frameskip": 3})) == 36_000
    assert _time_limit(EnvSpec("Pong-v4", "ale_py.env:AtariEnv", kwargs={**ale, "frameskip": (2, 5)})) == 54_000
    assert _time_limit(EnvSpec("X-v0", "m:E", max_episode_steps=100, kwargs=ale)) == 100  # a TimeLimit comes first
    assert _time_limit(EnvSpec("X-v0", "m:E")) is None and _time_limit(None) is None
    assert _time_limit(EnvSpec("X-v0", "m:E", kwargs={"max_num_frames_per_episode": 0, "frameskip": 4})) is None


def test_a_second_ctrl_c_inside_a_host_envs_step_saves_the_last_whole_chunk(tmp_path, monkeypatch, capsys, caplog):
    """A signal's handler runs in the main thread, between two bytecodes, and a host env's step (an io_callback)
    may run there: then a second Ctrl-C raises inside the step and comes out of JAX as a runtime error. The runner
    still takes it as the interruption (saving the chunks done since the last checkpoint, and saying so) and the
    command line prints its --resume line, exit 130, with no traceback. (Where the handler runs is the machine's
    choice, so the test runs the active handler inside the step, as Python would there.)"""
    import signal

    from jaxrl_rollout import _signals, checkpoint, cli

    steps = []

    def host_step(self, action, stepped=GymnasiumEnv._host_step):
        steps.append(1)
        if len(steps) in (3 * 8 + 2, 3 * 8 + 4):  # in the 4th chunk (8 steps an update, a chunk of 1 update)
            _signals._ACTIVE._handle(signal.SIGINT, None)  # a stop at the next boundary, then at once
        return stepped(self, action)

    monkeypatch.setattr(GymnasiumEnv, "_host_step", host_step)
    code = cli.main(["train", "--env", "gymnasium/CartPole-v1", "--seeds", "1", "--num-envs", "2", "--num-steps", "8",
                     "--total-steps", "160", "--chunk-updates", "1", "--checkpoint-every", "5", "--eval-every", "off",
                     "--tensorboard", "false", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err and "io_callback" not in err + caplog.text  # JAX's log, dropped
    assert err.strip().splitlines()[-2:] == [
        f"  interrupted after chunk 3; checkpoint saved in {tmp_path / 'run'}",
        f"interrupted; continue with: jaxrl-rollout train --resume {tmp_path / 'run'} --tensorboard false"]
    assert checkpoint.read_manifest(tmp_path / "run")["meta"]["chunks_done"] == 3


def test_progress_line_gives_the_evaluations_host_env_its_own_share():
    """A host env's evaluations play a pool of their own: its steps/s and share of the time are on the progress line
    beside training's (a CarRacing run read "host env 72 steps/s, 1% of the time" while its evaluations took most of
    it), and a line with no evaluation since the start leaves them out."""
    from jaxrl_rollout import runner
    from jaxrl_rollout.envs._host import HostStats

    start = HostStats(0, 0.0)
    assert runner._host_share(start, HostStats(1000, 2.0), 10.0) == "  (host env 500 steps/s, 20% of the time)"
    text = runner._host_share(start, HostStats(1000, 2.0), 10.0, HostStats(50, 1.0), HostStats(850, 5.0))
    assert text == "  (host env 500 steps/s, 20% of the time; evaluation 200 steps/s, 40%)"
    idle = runner._host_share(start, HostStats(1000, 2.0), 10.0, HostStats(50, 1.0), HostStats(50, 1.0))
    assert idle == "  (host env 500 steps/s, 20% of the time)"


@pytest.mark.parametrize("stop", [False, True], ids=["complete", "interrupted"])
def test_train_closes_its_host_env_pools(monkeypatch, stop):
    """`runner.train` closes the pools it opened (training's and the evaluations'), however it ends: an
    `AsyncVectorEnv`'s worker processes used to live on until the garbage collector closed them, each printing
    a traceback (EOFError, BrokenPipeError)."""
    from jaxrl_rollout import runner

    built = []
    make = runner.make_algorithm
    monkeypatch.setattr(runner, "make_algorithm", lambda spec: built.append(make(spec)) or built[-1])
    spec = _small_spec("gymnasium/CartPole-v1", num_seeds=2, eval_every=2, eval_episodes=2)
    if stop:  # a second Ctrl-C while the first chunk runs: the wait for its dispatch (`_signals.ran`) interrupted
        monkeypatch.setattr(runner._signals, "ran", _raise_keyboard_interrupt)
        with pytest.raises(KeyboardInterrupt):
            runner.train(spec, progress=None)
    else:
        assert runner.train(spec, progress=None).complete
    hosts = [runner.host_env(algorithm.env) for algorithm in built]
    assert len(hosts) == 2 and hosts[0] is not hosts[1]  # training's pool and the evaluations' own
    assert all(host._vec is None and host._shape == () for host in hosts)
    assert all(host._abandoned == stop for host in hosts)  # interrupted: for good, a chunk left running ends


def _raise_keyboard_interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_reaches_a_host_env_run_while_its_chunk_runs(tmp_path, monkeypatch, capsys, caplog):
    """On a CPU a program with host callbacks runs inside its dispatch, in C++, where no signal handler runs:
    a Ctrl-C during a gymnasium chunk printed nothing until the chunk ended, and a second one, which stops a run
    at once, was not seen either (two signals before a handler runs are one). The chunk is now dispatched from a
    helper thread (`_signals.ran`): the notice comes at once, the second Ctrl-C stops the run, and the pool is
    abandoned, so the chunk left running in the helper thread ends at its next step (`HostEnv.abandon`) instead
    of playing on. Real signals here (`os.kill`), sent from inside the host env's step."""
    import os
    import signal
    import threading
    import time

    from jaxrl_rollout import checkpoint, runner

    steps, after = [], []

    def host_step(self, action, stepped=GymnasiumEnv._host_step):
        steps.append(1)
        if len(steps) == 2 * 8 + 3:  # in the 3rd chunk (8 steps an update, a chunk of 1 update)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the main thread's handler prints the notice: a stop at the next boundary
            os.kill(os.getpid(), signal.SIGINT)  # then at once
            time.sleep(0.5)
        elif len(steps) > 2 * 8 + 3:
            after.append(1)
            time.sleep(0.05)  # the rest of the chunk (5 steps) would take 0.25 s
        return stepped(self, action)

    monkeypatch.setattr(GymnasiumEnv, "_host_step", host_step)
    spec = _small_spec("gymnasium/CartPole-v1", num_seeds=1)
    spec = runner.RunSpec("ppo", dataclasses.replace(spec.config, total_timesteps=160), spec.grid, num_seeds=1,
                          chunk_updates=1)
    with _sigint_as_from_a_terminal(), pytest.raises(KeyboardInterrupt):
        runner.train(spec, tmp_path / "run", checkpoint_every=5, progress=True)
    err = capsys.readouterr().err
    assert "SIGINT: stopping at the next chunk boundary" in err and "interrupted after chunk 2" in err, err
    assert err.index(" 32/160 ") < err.index("SIGINT: stopping"), err  # chunk 2 ended, then the notice
    # chunk 3 stopped where it was: at its next step (0 in 7 runs beside 5 busy processes), or one later where a
    # loaded machine runs the main thread's handler late, not at the end of its 5 steps left (4 or 5 were seen
    # when `abandon` set its flag under the step's lock: test_abandon_marks_the_env_before_it_waits_...)
    assert len(after) <= 2 and " 48/160 " not in err
    helpers = [t for t in threading.enumerate() if t.name == "jaxrl_rollout-chunk"]
    for thread in helpers:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in helpers)  # the chunk left running ended at its next step
    assert "Abandoned" not in caplog.text and "was stepped" not in caplog.text  # quietly: no traceback logged
    assert checkpoint.read_manifest(tmp_path / "run")["meta"]["chunks_done"] == 2


def test_abandon_marks_the_env_before_it_waits_for_the_step_running():
    """`HostEnv.abandon` sets its flag before it waits for the lock the step running holds. It set it under the
    lock: when the step let go, the program's next step could take the lock before the waiting thread was
    scheduled, and the next, and the next (a lock is not handed to the thread that waited longest): on a loaded
    2-core machine an interrupted chunk stepped on to its end (4 or 5 steps of 5, in 4 of 8 runs of the Ctrl-C
    test beside 5 busy processes; 0 in 7 with the flag set first). Here the step running is this thread, holding
    the lock, and the program's next step comes while `abandon` waits: it raises, whoever takes the lock first."""
    import threading
    import time

    from jaxrl_rollout.envs._host import Abandoned

    env, _ = envs.make("gymnasium/CartPole-v1")
    _, tick = env._reset_callback(np.zeros((1, 2), np.uint32))
    next_step = []

    def step():
        try:
            next_step.append(env._step_callback(tick, np.zeros((1, 2), np.int32)))
        except Abandoned as error:
            next_step.append(error)

    env._lock.acquire()  # a step running
    try:
        abandoning = threading.Thread(target=env.abandon)
        abandoning.start()
        deadline = time.monotonic() + 30
        while not env._abandoned and time.monotonic() < deadline:
            time.sleep(0.01)
        assert env._abandoned and abandoning.is_alive()  # marked while it waits for the step running
        stepping = threading.Thread(target=step)
        stepping.start()
    finally:
        env._lock.release()
    for thread in (abandoning, stepping):
        thread.join(timeout=30)
    assert len(next_step) == 1 and isinstance(next_step[0], Abandoned), next_step
    assert env._shape == ()  # and the pool closed


@pytest.mark.parametrize("command", ["rollout", "evaluate"])
def test_ctrl_c_stops_rollout_and_evaluate_of_a_host_env_at_once(tmp_path, monkeypatch, capsys, caplog, command):
    """`rollout` and `evaluate` stop at once on a signal; on a host env their program ran inside its dispatch,
    where no handler runs, so a Ctrl-C waited for every step asked for (two minutes of a LunarLander rollout,
    43 s of an evaluation). Dispatched from a helper thread (`envs._host.run_interruptibly`), they stop at once,
    exit 130, and the abandoned pool ends the program at its next step, quietly. (Which thread runs a host
    callback is XLA's choice: here the rollout's ran on another thread, so its case fails without the helper
    thread, 395 steps played on; the evaluation's ran on the main thread, whose handler then raised inside the
    step, so its case checks the outcome only.)"""
    import os
    import signal
    import threading
    import time

    from jaxrl_rollout import cli

    if command == "evaluate":  # a run to evaluate (a one-update PPO run on Pendulum: its episodes are 200 steps)
        assert cli.main(["train", "--env", "gymnasium/Pendulum-v1", "--seeds", "1", "--num-envs", "2", "--num-steps",
                         "8", "--total-steps", "16", "--eval-every", "off", "--num-eval", "1", "--tensorboard",
                         "false", "--out", str(tmp_path / "run")]) == 0
        argv = ["evaluate", str(tmp_path / "run"), "--num-episodes", "4"]
    else:
        argv = ["rollout", "--env", "gymnasium/CartPole-v1", "--num-envs", "2", "--num-steps", "400"]
    capsys.readouterr()
    steps, after = [], []

    def host_step(self, action, stepped=GymnasiumEnv._host_step):
        steps.append(1)
        if len(steps) == 5:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the main thread's handler raises: the command stops
        elif len(steps) > 5:
            after.append(1)
            time.sleep(0.02)  # the rest would take seconds
        return stepped(self, action)

    monkeypatch.setattr(GymnasiumEnv, "_host_step", host_step)
    with _sigint_as_from_a_terminal():
        assert cli.main(argv) == 130
    assert "interrupted (SIGINT)" in capsys.readouterr().err
    for thread in [t for t in threading.enumerate() if t.name == "jaxrl_rollout-chunk"]:
        thread.join(timeout=60)
    # stopped where it was: a step or two may already be under way when the interruption comes (2 were seen in a CI
    # run, 2026-12-05, the evaluation's case), where a command that played on took ~195 more
    assert len(after) <= 3, len(after)
    assert "Abandoned" not in caplog.text and "Traceback" not in caplog.text


@contextlib.contextmanager
def _sigint_as_from_a_terminal():
    """SIGINT handled as from a terminal (a KeyboardInterrupt) within it: a shell's background job ignores it,
    and the test runner may be one."""
    import signal

    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class _FailingEnv(gymnasium.Env):
    """Its own code raises a KeyError: in `reset` with fail_at=0, else in the `fail_at`-th `step` of an episode."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, fail_at=5):
        self.fail_at = fail_at

    def _fail(self):
        raise KeyError("no such level")

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        if self.fail_at == 0:
            self._fail()
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == self.fail_at:
            self._fail()
        return np.zeros(3, np.float32), 1.0, False, False, {}


def _failing_env_id() -> str:
    if "FailingEnv-v0" not in gymnasium.registry:
        gymnasium.register("FailingEnv-v0", entry_point=_FailingEnv, max_episode_steps=10)
    return "FailingEnv-v0"


_FAIL_LINE = f"{__file__}:{_FailingEnv._fail.__code__.co_firstlineno + 1}"


def test_an_env_whose_own_step_raises_is_a_host_env_error_with_its_exception():
    """JAX gives a callback's exception back as its runtime error, the type lost ("INTERNAL: CpuCallback error
    calling callback: Traceback ..."); `run_interruptibly`, which dispatches the runner's chunks and the command
    line's evaluations, raises a `HostEnvError` naming the env, what it raised and where, from the env's own
    exception."""
    from jaxrl_rollout.envs._host import run_interruptibly
    from jaxrl_rollout.envs.gymnasium import HostEnvError

    env, _ = envs.make(f"gymnasium/{_failing_env_id()}", fail_at=3)
    policy = jr.policies.uniform_random_policy(env.action_space())
    run = jax.jit(lambda s: jr.rollout(env, None, policy, None, s, 8)[1].reward)
    state = jr.rollout_init(jax.random.key(0), env, None, 2)
    with pytest.raises(HostEnvError) as raised:
        run_interruptibly(lambda: jax.block_until_ready(run(state)), env)
    assert str(raised.value) == ("GymnasiumEnv('FailingEnv-v0')'s step raised KeyError: 'no such level' "
                                 f"(in _fail, {_FAIL_LINE})")
    assert isinstance(raised.value.__cause__, KeyError)
    # and `runner.train`, whose first program resets the envs
    from jaxrl_rollout import runner

    spec = _small_spec(f"gymnasium/{_failing_env_id()}", num_seeds=1)
    spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, env_options=(("fail_at", 0),)))
    with pytest.raises(HostEnvError, match=r"^GymnasiumEnv\('FailingEnv-v0'\)'s reset raised KeyError") as raised:
        runner.train(spec, progress=None)
    assert isinstance(raised.value.__cause__, KeyError)
    env, _ = envs.make(f"gymnasium/{_failing_env_id()}", fail_at=20)  # never reached: the episodes end at 10
    state = jr.rollout_init(jax.random.key(0), env, None, 2)
    run = jax.jit(lambda s: jr.rollout(env, None, policy, None, s, 8)[1].reward)
    assert np.asarray(run_interruptibly(lambda: run(state), env)).sum() == 16  # and no failure left behind


@pytest.mark.parametrize("fail_at, what", [(0, "reset"), (3, "step")])
def test_the_command_line_says_in_one_line_what_a_host_envs_own_code_raised(fail_at, what, tmp_path, capsys,
                                                                             caplog):
    """A gymnasium env whose reset (in the run's first program) or step (in a chunk) raises: one line naming the
    env, the exception and its innermost frame, exit 2, and neither JAX's log of the callback nor a traceback (a
    CartPole made with render_mode=human on a machine without a display ended in three tracebacks)."""
    from jaxrl_rollout import cli

    code = cli.main(["train", "--env", f"gymnasium/{_failing_env_id()}", "--env-option", f"fail_at={fail_at}",
                     "--seeds", "1", "--num-envs", "2", "--num-steps", "8", "--total-steps", "32", "--num-eval", "1",
                     "--tensorboard", "false", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().splitlines()[-1] == (f"jaxrl-rollout: error: GymnasiumEnv('FailingEnv-v0')'s {what} raised "
                                            f"KeyError: 'no such level' (in _fail, {_FAIL_LINE})"), err
    assert "Traceback" not in err and not [r for r in caplog.records if r.name == "jax._src.callback"], err


class _UndrawableEnv(_FailingEnv):
    """Steps, and its render() in render_mode='rgb_array' raises."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode=None):
        super().__init__(fail_at=-1)
        self.render_mode = render_mode

    def render(self):
        self._fail()


def test_an_env_whose_render_raises_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys):
    """`check_drawable` (evaluate --video's check, train --video-every's before the run) let the env's own
    exception out of render() with its traceback; now a ValueError says which env and what it raised where."""
    from jaxrl_rollout import cli

    if "Undrawable-v0" not in gymnasium.registry:
        gymnasium.register("Undrawable-v0", entry_point=_UndrawableEnv, max_episode_steps=10)
    why = ("cannot draw Undrawable-v0: its reset or render() in render_mode='rgb_array' raised KeyError: "
           f"'no such level' (in _fail, {_FAIL_LINE}).")
    with pytest.raises(ValueError) as raised:
        envs.make("gymnasium/Undrawable-v0")[0].check_drawable()
    assert str(raised.value) == why and isinstance(raised.value.__cause__, KeyError)
    assert cli.main(["train", "--env", "gymnasium/Undrawable-v0", "--video-every", "1", "--seeds", "1",
                     "--total-steps", "512", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"jaxrl-rollout: error: --video-every: {why}"
    assert not (tmp_path / "run").exists()


class _LateUndrawableEnv(_UndrawableEnv):
    """Draws its first 3 frames (so `check_drawable` passes), then its render() raises."""

    def render(self):
        self.frames = getattr(self, "frames", 0) + 1
        if self.frames > 3:
            self._fail()
        return np.zeros((8, 8, 3), np.uint8)


def test_an_env_whose_render_raises_mid_video_ends_the_videos_of_train_and_is_one_line_in_evaluate(tmp_path,
                                                                                                   capsys):
    """A render() that fails on a later frame let the env's exception out of `GymnasiumEnv.frame` with its
    traceback, ending `train --video-every` (exit 1) and `evaluate --video`; now it is the ValueError the video
    code reports: training goes on without videos, evaluate says it in one line, and no partial video is left."""
    from jaxrl_rollout import cli

    if "LateUndrawable-v0" not in gymnasium.registry:
        gymnasium.register("LateUndrawable-v0", entry_point=_LateUndrawableEnv, max_episode_steps=10)
    why = ("cannot draw LateUndrawable-v0: its render() in render_mode='rgb_array' raised KeyError: "
           f"'no such level' (in _fail, {_FAIL_LINE}).")
    folder = tmp_path / "run"
    assert cli.main(["train", "--env", "gymnasium/LateUndrawable-v0", "--video-every", "1", "--seeds", "1",
                     "--total-steps", "512", "--num-eval", "1", "--tensorboard", "false", "--out", str(folder)]) == 0
    err = capsys.readouterr().err
    assert f"  --video-every: no more videos (ValueError: {why}); training goes on" in err, err
    assert not list((folder / "videos" / "training").iterdir())
    assert cli.main(["evaluate", str(folder), "--video", "--num-episodes", "1"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"jaxrl-rollout: error: {why}"
    assert not list((folder / "videos").glob("*.mp4")) and not list((folder / "videos").glob(".*"))


@pytest.mark.parametrize("env_id", ["gymnasium/CartPole-v1", "envpool/CartPole-v1"])
def test_a_jax_that_cannot_step_a_host_env_is_one_line_naming_the_jax_to_install(env_id, monkeypatch, capsys):
    """On jax 0.6.1 to 0.8.1 every trace of a host env's step (an ordered io_callback inside custom_vmap) failed
    with `KeyError: OrderedIOEffect` and a traceback (`jaxrl-rollout rollout --env gymnasium/CartPole-v1`, on
    jax 0.8.1 installed by hand); the gymnasium and envpool extras now ask for jax >= 0.8.2, and an env made on an
    older one says so."""
    from jaxrl_rollout import cli
    from jaxrl_rollout._extras import MissingExtra

    monkeypatch.setattr(jax, "__version__", "0.8.1")
    monkeypatch.setattr(jax, "__version_info__", (0, 8, 1))
    with pytest.raises(MissingExtra, match=rf"^{env_id} is a host env, stepped through jax's io_callback, which needs jax "
                                           r">= 0\.8\.2 \(this is jax 0\.8\.1; .*pip install -U 'jax>=0\.8\.2'$"):
        envs.make(env_id)
    assert cli.main(["rollout", "--env", env_id, "--num-steps", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxrl-rollout: error: ") and err.count("\n") == 1 and "jax >= 0.8.2" in err, err
    monkeypatch.setattr(jax, "__version__", "0.8.2")
    monkeypatch.setattr(jax, "__version_info__", (0, 8, 2))
    env, _ = envs.make(env_id)
    env.close()
