"""Non-finite training is caught: the `nonfinite` flag, `runner.Diverged`, and NaN returns never shown as 0."""

import jax
import numpy as np
import pytest

from jaxrl_rollout import checkpoint, cli, envs, report, runner
from jaxrl_rollout.algorithms import a2c, ppo
from tests.toy_envs import NaNRewardEnv

TINY = dict(num_envs=4, num_steps=8, total_timesteps=32 * 4)  # 4 updates


@pytest.fixture
def nan_env(monkeypatch):
    """`envs.make("toy/nan")` builds a NaNRewardEnv whose reward is NaN from update 3 (env step 17) on."""
    make = envs.make

    def fake(env_id, **kwargs):
        if env_id == "toy/nan":
            env = NaNRewardEnv(nan_at=17)
            return env, env.default_params
        return make(env_id, **kwargs)

    monkeypatch.setattr(envs, "make", fake)
    return "toy/nan"


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_nan_reward_sets_the_flag_from_its_update(nan_env, algo):
    module = {"ppo": ppo, "a2c": a2c}[algo]
    config_cls = {"ppo": ppo.PPOConfig, "a2c": a2c.A2CConfig}[algo]
    extra = {"num_minibatches": 2, "update_epochs": 1} if algo == "ppo" else {}
    _, metrics = jax.jit(module.make_train(config_cls(env_id=nan_env, **TINY, **extra)))(jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(metrics.nonfinite) != 0, [False, False, True, True])


def test_huge_learning_rate_is_flagged():
    config = ppo.PPOConfig(num_envs=4, num_steps=8, total_timesteps=64, num_minibatches=2, update_epochs=2)
    train = jax.jit(ppo.make_train(config))
    _, good = train(jax.random.key(0))
    _, bad = train(jax.random.key(0), ppo.PPOHParams(lr=1e30))
    assert not np.asarray(good.nonfinite).any()
    assert np.asarray(bad.nonfinite).any()


def test_runner_stops_at_the_first_bad_chunk_keeping_the_last_finite_checkpoint(nan_env, tmp_path):
    spec = runner.RunSpec("ppo", ppo.PPOConfig(env_id=nan_env, num_minibatches=2, update_epochs=1, **TINY),
                          (ppo.PPOHParams(),), num_seeds=2, chunk_updates=1)
    with pytest.raises(runner.Diverged, match=r"update 3 \(step 96\) of run 0 .*non-finite loss") as raised:
        runner.train(spec, tmp_path, checkpoint_every=5, progress=None)
    assert (raised.value.update, raised.value.run) == (3, 0)
    manifest = checkpoint.read_manifest(tmp_path)
    assert manifest["meta"]["chunks_done"] == 2  # saved before raising; the bad chunk never is
    template = jax.eval_shape(jax.vmap(runner.make_algorithm(spec).init), spec.run_keys(), spec.run_hparams())
    state, extras, _ = checkpoint.load(tmp_path, template)
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(state.params))
    assert extras["metrics/nonfinite"].shape == (2, 2) and not extras["metrics/nonfinite"].any()


def test_cli_divergence_is_one_line_and_exit_3(nan_env, tmp_path, capsys, monkeypatch):
    argv = ["train", "--env", nan_env, "--num-envs", "4", "--num-steps", "8", "--total-steps", "128",
            "--num-minibatches", "2", "--update-epochs", "1", "--seeds", "1", "--chunk-updates", "1",
            "--tensorboard", "false", "--host-devices", "1"]
    code = cli.main([*argv, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 3
    errors = [line for line in err.splitlines() if line.startswith("jaxrl-rollout: error:")]
    assert len(errors) == 1 and "diverged at update 3" in errors[0], err
    assert "Traceback" not in err
    assert checkpoint.read_manifest(tmp_path / "run")["meta"]["chunks_done"] == 2
    assert not (tmp_path / "run" / "metrics.csv").exists()

    # The save of the finite chunks before the diverged one fails (a full disk): still the divergence's exit 3,
    # and the one line says both (it said only the save's failure, with exit 2 and a --resume that diverges again).
    def full(folder, *args, **kwargs):
        raise checkpoint.CheckpointError(f"could not save the checkpoint in {folder}/checkpoints: No space left on "
                                         "device (errno 28)")

    monkeypatch.setattr(checkpoint, "save", full)
    folder = tmp_path / "full"
    assert cli.main([*argv, "--out", str(folder)]) == 3
    assert capsys.readouterr().err.splitlines(keepends=True)[-1] == (
        f"jaxrl-rollout: error: could not save the checkpoint in {folder}/checkpoints: No space left on device (errno "
        "28); training diverged at update 3 (step 96) of run 0 (grid point 0, seed 0): non-finite loss, gradients, "
        "params (metrics approx_kl, entropy, policy_loss, value_loss); the run stopped after chunk 2, the last finite "
        "one, and no checkpoint was saved before. Lower the learning rate, check the env's rewards and observations "
        "for NaN or inf, or clip them.\n")


def _metrics(returns, episodes):
    return {"episode_return": np.asarray(returns, np.float32), "num_episodes": np.asarray(episodes, np.int32)}


def test_nan_returns_are_never_counted_as_zero():
    # run 0: 10 and 20 over one episode each; run 1: a NaN return from an update with an episode;
    # run 2: no episode at all.
    m = _metrics([[10.0, 20.0], [np.nan, 30.0], [np.nan, np.nan]], [[1, 1], [2, 1], [0, 0]])
    returns = runner.chunk_return(m)
    assert returns[0] == 15.0 and np.isnan(returns[1]) and np.isnan(returns[2])
    text = runner.returns_text(returns, m["num_episodes"].sum(1) > 0)
    assert text == "return 15.0 (1/3 runs, 1 run(s) with a non-finite return)"  # one value: no spread over runs
    only_bad = runner.returns_text(returns[1:2], np.array([True]))
    assert only_bad == "return n/a (1/1 runs with a non-finite return)"
    assert cli._coarse_curve(m) == "nan 25 (nan: a run's episodes returned NaN or inf)"


def test_summary_names_non_finite_seeds():
    spec = runner.RunSpec("ppo", ppo.PPOConfig(**TINY), (ppo.PPOHParams(),), num_seeds=3)
    m = _metrics([[10.0] * 4, [np.nan] * 4, [np.nan] * 4], [[1] * 4, [1] * 4, [0] * 4])
    (row,) = report.summarize(spec, m)
    assert (row.mean, row.num_seeds, row.missing, row.nonfinite) == (10.0, 1, 1, 1)
    assert "1 without episodes; 1 with NaN or inf returns" in report.format_summary([row], 1)
    m = _metrics([[np.nan] * 4] * 3, [[1] * 4] * 3)
    (row,) = report.summarize(spec, m)
    assert row.nonfinite == 3 and "n/a" in report.format_summary([row], 1)


def test_summary_says_when_an_interval_comes_from_two_seeds():
    """Two seeds give a t factor of 12.71 ([-425, 523] on CartPole looked like a bug): the summary says why."""
    from scipy.special import stdtrit

    assert (round(float(stdtrit(1, 0.975)), 2), round(float(stdtrit(4, 0.975)), 2)) == (12.71, 2.78)
    rows = [report.GridSummary(0, "a", 49.0, -425.0, 523.0, 2, 0), report.GridSummary(1, "b", 400.0, 390.0, 410.0, 5, 0)]
    assert "an interval from 2 seeds is wide: its t factor is 12.71" in report.format_summary(rows, 1)
    assert "seeds is wide" not in report.format_summary(rows[1:], 1)
    one = report.GridSummary(0, "a", 49.0, np.nan, np.nan, 1, 0)  # one seed: no interval, no note
    assert "seeds is wide" not in report.format_summary([one], 1)
    solved = report.GridSummary(0, "a", 500.0, 500.0, 500.0, 2, 0)  # both seeds at 500: a zero-width interval
    assert "seeds is wide" not in report.format_summary([solved], 1)


def test_returns_that_round_to_zero_print_without_a_minus_sign():
    # MountainCarContinuous's small action costs: -0.003 per run printed as "-0.0 +- 0.0 (min -0.0, max -0.0"
    tiny = np.array([-0.003, -0.004])
    assert runner.returns_text(tiny, np.array([True, True])) == "return 0.0 +- 0.0 (min 0.0, max 0.0, 2/2 runs)"
    assert cli._coarse_curve(_metrics([[-0.002, -0.003]], [[1, 1]])) == "0.00 0.00"
    # small returns keep the decimals that tell them apart (a MinAtar 0.2 or a game's 0.7 read 0 and 1)
    assert cli._coarse_curve(_metrics([[-0.2, 0.7]], [[1, 1]])) == "-0.20 0.70"
    assert cli._figures([500.0, 21.5]) == ["500", "22"] and cli._figures([2.54, 0.5]) == ["2.5", "0.5"]
    assert runner.returns_text(np.array([-0.06]), np.array([True])) == "return -0.1"  # not rounded away


def test_one_run_prints_its_return_without_a_spread_over_runs():
    """A single seed's progress line read "return -180.9 +- 0.0 (min -180.9, max -180.9, 1/1 runs)  eval -485.5 +-
    0.0": the spread, min and max are over runs, so one run prints its figure alone."""
    spec = runner.RunSpec("ppo", ppo.PPOConfig(**TINY), (ppo.PPOHParams(),), num_seeds=1)
    assert runner.returns_text(np.array([-180.94]), np.array([True])) == "return -180.9"
    assert runner._eval_text(spec, 1, np.array([-485.5])).startswith("  eval -485.5 (step ")
    two = runner._eval_text(spec, 1, np.array([1.0, 3.0]))
    assert two.startswith("  eval 2.0 +- 1.0 (step ")
    assert runner.returns_text(np.array([1.0, 3.0]), np.array([True, True])) == "return 2.0 +- 1.0 (min 1.0, max 3.0, 2/2 runs)"
