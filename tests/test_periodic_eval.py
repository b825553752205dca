"""Periodic evaluation during training (`periodic_eval`, `RunSpec.eval_every`, `train --eval-every`).

The evaluation after update n equals a separate `collect.evaluate` call with
the key `fold_in(eval_key(run key), n)` on the params of that update; the
training it rides along is bit-identical to a run without it (PPO and DQN);
an interrupted and resumed run ends bit-identical, eval metrics included; the
command line writes eval_return to metrics.csv and the progress line and
refuses bad values in one line. One PPO config (6 updates in chunks of 3,
evaluated after updates 2, 4 and 6) serves the runner and the command line,
so a pytest process compiles its chunk once.
"""

import csv
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout import checkpoint, cli, envs, periodic_eval, runner
from jaxrl_rollout.algorithms import dqn, ppo
from jaxrl_rollout.collect import evaluate
from tests.trees import host_leaves

PPO_CONFIG = ppo.PPOConfig(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6, update_epochs=1, num_minibatches=2)
PLAIN = runner.RunSpec("ppo", PPO_CONFIG, (ppo.PPOHParams(),), num_seeds=2, chunk_updates=3)
EVAL = runner.RunSpec("ppo", PPO_CONFIG, (ppo.PPOHParams(),), num_seeds=2, chunk_updates=3, eval_every=2,
                      eval_episodes=3)
# The same run on the command line.
ARGV = ["train", "--num-envs", "4", "--num-steps", "16", "--total-steps", "384", "--update-epochs", "1",
        "--num-minibatches", "2", "--seeds", "2", "--chunk-updates", "3", "--eval-every", "2", "--eval-episodes", "3",
        "--num-eval", "2", "--tensorboard", "false"]
# tests/test_offpolicy_runs.py's DQN: 12 updates, here in one chunk.
DQN_CONFIG = dqn.DQNConfig(total_timesteps=1_200, buffer_size=500, batch_size=16, learning_starts=200,
                           train_frequency=4, target_network_frequency=40, hidden_sizes=(16, 16), log_interval=100)


def _assert_same(a, b):
    for x, y in zip(host_leaves(a), host_leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def _start(spec, folder):
    """A run folder as the command line writes it: config.json first."""
    (folder / "config.json").write_text(json.dumps(spec.to_json()))
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = _start(EVAL, tmp_path_factory.mktemp("eval"))
    return runner.train(PLAIN, progress=None), runner.train(EVAL, folder, checkpoint_every=1, progress=None), folder


def test_training_is_bit_identical_with_and_without_the_evaluation(runs):
    plain, evaluated, _ = runs
    _assert_same(plain.state, evaluated.state)
    assert set(evaluated.metrics) == set(plain.metrics) | {"eval_return", "eval_length"}
    for name, values in plain.metrics.items():
        np.testing.assert_array_equal(values, evaluated.metrics[name], err_msg=name)
    evaluated_updates = ~np.isnan(evaluated.metrics["eval_return"])
    np.testing.assert_array_equal(evaluated_updates, np.tile([False, True] * 3, (2, 1)))  # after updates 2, 4, 6
    assert (evaluated.metrics["eval_length"][evaluated_updates] >= 1).all()


def test_eval_metrics_equal_a_separate_evaluate_call_on_that_updates_params(runs):
    _, evaluated, _ = runs
    algorithm = runner.make_algorithm(EVAL)
    update = jax.jit(jax.vmap(periodic_eval.make_update(algorithm, every=2, num_episodes=3), in_axes=(0, 0, None, 0)))
    one_eval = jax.jit(jax.vmap(lambda params, key: evaluate(algorithm.env, algorithm.env_params,
                                                             algorithm.eval_policy_fn, params, key, 3)))
    hparams, eval_keys = EVAL.run_hparams(), EVAL.eval_keys()
    state = jax.vmap(algorithm.init)(EVAL.run_keys(), hparams)
    for u in range(PPO_CONFIG.num_updates):
        state, metrics = update(state, hparams, u, eval_keys)
        np.testing.assert_array_equal(metrics.eval_return, evaluated.metrics["eval_return"][:, u])
        if (u + 1) % 2 == 0:
            keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(eval_keys, u + 1)
            result = one_eval(jax.vmap(algorithm.policy_params)(state), keys)
            np.testing.assert_array_equal(metrics.eval_return, result.returns.mean(axis=1))
            np.testing.assert_array_equal(metrics.eval_length, result.lengths.astype(np.float32).mean(axis=1))
    _assert_same(state, evaluated.state)  # the API's update is the runner's


def test_interrupted_and_resumed_run_ends_bit_identical_eval_metrics_included(runs, tmp_path):
    _, full, _ = runs
    part = runner.train(EVAL, _start(EVAL, tmp_path), stop_after_chunks=1, progress=None)
    assert not part.complete and part.updates_done == 3
    resumed = runner.train(EVAL, tmp_path, resume=True, progress=None)
    assert resumed.complete
    _assert_same(full.state, resumed.state)
    assert set(full.metrics) == set(resumed.metrics)
    for name in full.metrics:
        np.testing.assert_array_equal(full.metrics[name], resumed.metrics[name], err_msg=name)
    _assert_same(full.best_policy, resumed.best_policy)  # kept through the checkpoint, not started again


@pytest.mark.parametrize("max_parallel", [None, 1])
def test_a_resumed_run_keeps_the_best_policy_of_its_checkpoint(runs, tmp_path, max_parallel):
    """In chunks of 2, run 0's best evaluation (after update 4) comes before the resume after chunk 2: a resumed
    run that started its best policies again would end with run 0's evaluation after update 6. With
    max_parallel=1 each run is a group of its own: the saved best policies are split between the groups (and
    a group of one run computes in other float roundings than a group of two: the run to match is its own)."""
    spec = runner.RunSpec("ppo", PPO_CONFIG, (ppo.PPOHParams(),), num_seeds=2, chunk_updates=2, eval_every=2,
                          eval_episodes=3, max_parallel=max_parallel)
    full = runs[1] if max_parallel is None else runner.train(spec, progress=None)
    assert int(full.best_policy.update[0]) == 4  # what the test stands on
    runner.train(spec, _start(spec, tmp_path), stop_after_chunks=2, progress=None)
    resumed = runner.train(spec, tmp_path, resume=True, progress=None)
    _assert_same(full.state, resumed.state)
    _assert_same(full.best_policy, resumed.best_policy)


def test_each_runs_best_policy_is_the_params_of_its_best_evaluation(runs):
    """The best policy follows every evaluation, those inside a chunk too (updates 2 and 4 end no chunk of 3)."""
    _, evaluated, folder = runs
    algorithm = runner.make_algorithm(EVAL)
    update = jax.jit(jax.vmap(periodic_eval.make_update(algorithm, every=2, num_episodes=3), in_axes=(0, 0, None, 0)))
    hparams, eval_keys = EVAL.run_hparams(), EVAL.eval_keys()
    state = jax.vmap(algorithm.init)(EVAL.run_keys(), hparams)
    seen = []  # (update from 1, [R] eval returns, [R] policy params) of every evaluation
    for u in range(PPO_CONFIG.num_updates):
        state, metrics = update(state, hparams, u, eval_keys)
        if (u + 1) % 2 == 0:
            seen.append((u + 1, np.asarray(metrics.eval_return), jax.vmap(algorithm.policy_params)(state)))
    best = evaluated.best_policy
    assert isinstance(best, periodic_eval.BestPolicy)
    for r in range(EVAL.num_runs):
        returns = [float(values[r]) for _, values, _ in seen]
        first_max = int(np.argmax(returns))  # a tie keeps the earlier policy
        number, _, params = seen[first_max]
        assert float(best.eval_return[r]) == max(returns) and int(best.update[r]) == number
        _assert_same(jax.tree.map(lambda x: x[r], best.params), jax.tree.map(lambda x: x[r], params))
    # what the folder keeps, from Python: every run's, and one run's ready to act
    spec, saved = runner.load_best_policies(folder)
    assert spec == EVAL
    _assert_same(saved, best)
    policy = runner.load_policy(folder, 1, best_policy=True)
    assert policy.updates_done == int(best.update[1])
    _assert_same(policy.params, jax.tree.map(lambda x: x[1], best.params))
    latest = runner.load_policy(folder, 1)  # the latest policy is still the default, read from the same checkpoint
    assert latest.updates_done == PPO_CONFIG.num_updates
    _assert_same(latest.params, jax.tree.map(lambda x: x[1], jax.vmap(algorithm.policy_params)(evaluated.state)))


def test_the_checkpoint_reader_with_the_state_alone_says_the_checkpoint_holds_a_pair(runs):
    """`checkpoint.load` with a template of the train state alone, as for a run without evaluation, printed the two
    tree structures (cut at 400 characters each) and nothing else; it now says what the checkpoint holds and how to
    read it, and the template it names reads it."""
    _, evaluated, folder = runs
    algorithm = runner.make_algorithm(EVAL)
    state = jax.eval_shape(jax.vmap(algorithm.init), EVAL.run_keys(), EVAL.run_hparams())
    with pytest.raises(checkpoint.CheckpointError, match=r"holds a pair \(state, best policies\), as a run with "
                                                         r"periodic evaluation saves it, and the template is its "
                                                         r"state alone: pass the template") as error:
        checkpoint.load(folder, state)
    assert "PyTreeDef" not in str(error.value)
    best = jax.eval_shape(jax.vmap(lambda s: periodic_eval.no_best(algorithm, s)), state)
    (loaded, loaded_best), _, _ = checkpoint.load(folder, (state, best))
    _assert_same(loaded_best, evaluated.best_policy)
    with pytest.raises(checkpoint.CheckpointError, match="different state structure"):  # other structures: as before
        checkpoint.load(folder, (state, best, None))


def test_keep_best_skips_updates_without_an_evaluation_and_ties():
    algorithm = runner.make_algorithm(EVAL)
    state = algorithm.init(jax.random.key(0))
    other = state._replace(params=jax.tree.map(lambda x: x + 1, state.params))
    best = periodic_eval.no_best(algorithm, state)
    assert float(best.eval_return) == -np.inf and int(best.update) == 0

    def metrics(value):
        return periodic_eval._metrics_class(ppo.PPOMetrics, ("eval_return",))(
            *(np.float32(0),) * len(ppo.PPOMetrics._fields), np.float32(value))

    kept = periodic_eval.keep_best(best, algorithm, other, metrics(np.nan), 4)  # no evaluation after update 5
    _assert_same(kept, best)
    first = periodic_eval.keep_best(best, algorithm, state, metrics(10.0), 1)
    assert float(first.eval_return) == 10.0 and int(first.update) == 2
    tie = periodic_eval.keep_best(first, algorithm, other, metrics(10.0), 3)
    _assert_same(tie, first)
    better = periodic_eval.keep_best(first, algorithm, other, metrics(10.5), 5)
    assert int(better.update) == 6
    _assert_same(better.params, algorithm.policy_params(other))


def test_a_checkpoint_without_best_policies_resumes_and_says_so(runs, tmp_path):
    """A run saved before runs kept their best policy: its checkpoint holds the train state alone."""
    import io

    _, full, _ = runs
    part = runner.train(EVAL, tmp_path, stop_after_chunks=1, progress=None)
    manifest = checkpoint.read_manifest(tmp_path)
    meta = {k: v for k, v in manifest["meta"].items() if k != runner.BEST_POLICY}
    extras = {f"metrics/{k}": v for k, v in part.metrics.items()}
    shutil.rmtree(tmp_path / checkpoint.SUBFOLDER)
    checkpoint.save(tmp_path, 1, part.state, extras, meta)  # as the version before saved it
    with pytest.raises(ValueError, match=r"keeps no best policy: its checkpoint was saved by a version that kept "
                                         r"none \(--resume it"):
        runner.load_best_policies(tmp_path)
    _assert_same(runner.load_policy(tmp_path, 0).params, jax.tree.map(lambda x: x[0], part.state.params))
    said = io.StringIO()
    resumed = runner.train(EVAL, tmp_path, resume=True, progress=said)
    assert "keeps no best policy (saved by a version that kept none): the best policy is kept from this resume on" \
        in said.getvalue()
    _assert_same(full.state, resumed.state)  # training is the same either way
    later = resumed.best_policy.update  # evaluations after update 2 only (the chunk saved ran updates 1 to 3)
    assert (np.asarray(later) > 3).all()
    _assert_same(runner.load_best_policies(tmp_path)[1], resumed.best_policy)


def test_a_run_without_evaluation_keeps_no_best_policy(tmp_path):
    result = runner.train(PLAIN, tmp_path, stop_after_chunks=1, progress=None)
    assert result.best_policy is None
    assert runner.BEST_POLICY not in checkpoint.read_manifest(tmp_path)["meta"]
    with pytest.raises(ValueError, match=r"keeps no best policy: it was trained without periodic evaluation "
                                         r"\(train with --eval-every"):
        runner.load_policy(tmp_path, 0, best_policy=True)


def test_off_policy_training_is_bit_identical_with_and_without_the_evaluation():
    plain = runner.RunSpec("dqn", DQN_CONFIG, (dqn.DQNHParams(),), num_seeds=2, chunk_updates=12)
    evaluated = runner.RunSpec("dqn", DQN_CONFIG, (dqn.DQNHParams(),), num_seeds=2, chunk_updates=12, eval_every=5,
                               eval_episodes=2)
    a, b = runner.train(plain, progress=None), runner.train(evaluated, progress=None)
    _assert_same(a.state, b.state)
    for name, values in a.metrics.items():
        np.testing.assert_array_equal(values, b.metrics[name], err_msg=name)
    np.testing.assert_array_equal(np.flatnonzero(~np.isnan(b.metrics["eval_return"][0])), [4, 9])


def test_eval_settings_live_in_config_json_and_old_configs_read_as_off():
    plain = PLAIN.to_json()
    assert "eval_every" not in plain and "eval_episodes" not in plain  # a run without it writes the old config
    assert runner.RunSpec.from_json(plain) == PLAIN and PLAIN.eval_every is None
    assert runner.RunSpec.from_json(json.loads(json.dumps(EVAL.to_json()))) == EVAL
    with pytest.raises(ValueError, match="eval_every must be an integer"):
        runner.RunSpec.from_json({**EVAL.to_json(), "eval_every": "2"})
    for bad in ({"eval_every": 0}, {"eval_episodes": 0}, {"eval_every": -1}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be a positive int"):
            runner.RunSpec("ppo", PPO_CONFIG, (ppo.PPOHParams(),), 2, **bad)


def test_a_host_env_evaluates_in_an_env_object_of_its_own_and_trains_unchanged():
    """A host env's one pool is what training steps: make_update refuses to evaluate in it (that reset the pool
    under the training's envs, and the next update failed on a 'stale env state'), and evaluates in another object
    of the env given as eval_env. Vmapped over seeds, the runs' evaluations play in lockstep in that object's pool
    (a cond above the vmap): training is bit-identical to `algorithm.train`'s, and each evaluation after update n
    equals `evaluate` of the policy trained n updates, with the key fold_in(eval_key(key), n), run by run."""
    pytest.importorskip("gymnasium")
    env, env_params = envs.make("gymnasium/CartPole-v1")
    config = ppo.PPOConfig(env_id="gymnasium/CartPole-v1", total_timesteps=4 * 2 * 16, num_envs=2, num_steps=16,
                           num_minibatches=2, update_epochs=1)
    algorithm = ppo.make_ppo(config, env=env, env_params=env_params)
    for build in (lambda: periodic_eval.make_update(algorithm, every=2),
                  lambda: periodic_eval.make_train(algorithm, None, every=2, num_episodes=2)):
        with pytest.raises(ValueError, match=r"^eval_env: the algorithm's env GymnasiumEnv\('CartPole-v1'.* is a "
                                             r"host env.*Pass another object of the env"):
            build()
    other, other_params = envs.make("gymnasium/CartPole-v1")
    keys = jax.random.split(jax.random.key(3), 2)
    train = periodic_eval.make_train(algorithm, None, every=2, num_episodes=3, eval_env=other,
                                     eval_env_params=other_params)
    state, metrics = jax.jit(jax.vmap(train))(keys)
    # (on an env object of its own: a host env's state holds its pool's step count, which goes on from run to run)
    plain = ppo.make_ppo(config, env=envs.make("gymnasium/CartPole-v1")[0], env_params=env_params)
    plain_state, plain_metrics = jax.jit(jax.vmap(plain.train))(keys)
    _assert_same(state, plain_state)
    np.testing.assert_array_equal(metrics.episode_return, plain_metrics.episode_return)
    assert np.isnan(metrics.eval_return[:, [0, 2]]).all() and not np.isnan(metrics.eval_return[:, [1, 3]]).any()
    for n in (2, 4):
        prefix = jax.jit(jax.vmap(periodic_eval.make_train(algorithm, n, every=n, num_episodes=3, eval_env=other,
                                                           eval_env_params=other_params)))
        trained, _ = prefix(keys)
        for r in range(2):
            params = algorithm.policy_params(jax.tree.map(lambda x: x[r], trained))
            alone = evaluate(other, other_params, algorithm.eval_policy_fn, params,
                                jax.random.fold_in(periodic_eval.eval_key(keys[r]), n), 3)
            assert float(metrics.eval_return[r, n - 1]) == float(alone.returns.mean())
            assert float(metrics.eval_length[r, n - 1]) == float(alone.lengths.astype(np.float32).mean())
    # the cond is taken once above the vmap: an update number vmapped with the runs is refused when traced
    update = periodic_eval.make_update(algorithm, 2, 3, eval_env=other, eval_env_params=other_params)
    with pytest.raises(ValueError, match="^an evaluation's condition .* pass update_index unbatched"):
        jax.eval_shape(jax.vmap(update, in_axes=(0, None, 0, 0)), state, None, jnp.arange(2, dtype=jnp.int32),
                       jax.vmap(periodic_eval.eval_key)(keys))


def _rows(folder, metric):
    with open(folder / "metrics.csv", newline="") as f:
        return [row for row in csv.DictReader(f) if row["metric"] == metric]


def test_cli_writes_eval_returns_to_csv_and_progress_and_resumes_identically(runs, tmp_path, capsys, monkeypatch):
    """... and with --num-eval equal to --eval-episodes the closing evaluation is the last periodic one (nothing is
    evaluated again); the resumed run's --num-eval 2 plays its own episodes."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    with monkeypatch.context() as patch:
        patch.setattr(cli, "evaluate_runs", lambda *a, **k: pytest.fail("the closing evaluation ran again"))
        assert cli.main([*ARGV, "--num-eval", "3", "--out", str(whole)]) == 0
    out, err = capsys.readouterr()
    last = runs[1].metrics["eval_return"][:, -1]
    assert (f"deterministic evaluation, 3 episodes per run: mean {last.mean():.1f} (std over runs {last.std():.1f}); "
            "per run: " + " ".join(cli._figures(last))) in out
    chunk_lines = [line for line in err.splitlines() if line.lstrip().startswith("step ")]
    assert [line.split("  eval ")[1].split(" (")[-1] for line in chunk_lines] == ["step 128)", "step 384)"]
    rows = _rows(whole, "eval_return")
    assert len(rows) == 2 * 6 and [np.isfinite(float(r["value"])) for r in rows[:6]] == [False, True] * 3
    _, evaluated, _ = runs
    np.testing.assert_array_equal(np.float32([r["value"] for r in rows]), evaluated.metrics["eval_return"].ravel())
    assert json.loads((whole / "config.json").read_text())["eval_every"] == 2

    assert cli.main([*ARGV, "--out", str(part), "--stop-after-chunks", "1"]) == 0
    assert cli.main(["train", "--resume", str(part), "--eval-every", "3"]) == 2
    assert "--eval-every: 2 there, 3 here" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(part), "--num-eval", "2", "--tensorboard", "false"]) == 0
    out, err = capsys.readouterr()
    assert "eval " in err and "deterministic evaluation, 2 episodes per run" in out
    assert (part / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()
    for a, b in zip(checkpoint.flatten(runner.load_run(part)[1])[0], checkpoint.flatten(runner.load_run(whole)[1])[0]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("argv, message", [
    (["--eval-every", "0"], "argument --eval-every: expected a positive integer (updates), 'chunk' or 'off', got '0'"),
    (["--eval-every", "-2"], "argument --eval-every: expected a positive integer (updates), 'chunk' or 'off'"),
    (["--eval-every", "often"], "argument --eval-every: expected a positive integer"),
    (["--eval-episodes", "0"], "argument --eval-episodes: expected a positive integer"),
])
def test_bad_eval_values_exit_2_naming_the_option(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", *argv, "--out", str(tmp_path / "run")])
    assert info.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, message", [
    (["--eval-every", "off", "--eval-episodes", "3"], "--eval-episodes sets the episodes"),
    (["--total-steps", "384", "--num-envs", "4", "--num-steps", "16", "--eval-every", "7"],
     "--eval-every 7: the run has only 6 updates"),
])
def test_eval_options_that_cannot_work_exit_2_in_one_line(argv, message, capsys, tmp_path):
    assert cli.main(["train", *argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "run").exists()


def test_make_train_refuses_an_every_past_the_run_and_names_its_key():
    """every > num_updates gave a run whose every eval metric was NaN (the command line refuses the same
    --eval-every); a seed in place of the key was JAX's 'invalid PRNG key data'."""
    algorithm = ppo.make_ppo(PPO_CONFIG)
    with pytest.raises(ValueError, match=r"^every=7 is more than num_updates=6: no update would be evaluated"):
        periodic_eval.make_train(algorithm, PPO_CONFIG.num_updates, every=7)
    train = periodic_eval.make_train(algorithm, PPO_CONFIG.num_updates, every=6)
    with pytest.raises(TypeError, match=r"^train's key must be a PRNG key"):
        train(0)
    # more updates than the config's: with anneal_lr the rest trained at a learning rate of 0, silently
    assert algorithm.num_updates == PPO_CONFIG.num_updates
    with pytest.raises(ValueError, match=r"^num_updates=7 is more than the 6 updates the algorithm's config was built "
                                         r"for"):
        periodic_eval.make_train(algorithm, PPO_CONFIG.num_updates + 1, every=2)
    periodic_eval.make_train(algorithm, None, every=2)  # None: the algorithm's own
    periodic_eval.make_train(algorithm, 3, every=2)  # a prefix of the run
    from jaxrl_rollout.algorithms import dqn, pqn, sac, td3

    for module, config in ((dqn, dqn.DQNConfig(total_timesteps=2000, learning_starts=500, buffer_size=1000)),
                           (pqn, pqn.PQNConfig(num_envs=4, num_steps=8, total_timesteps=96, num_minibatches=2)),
                           (sac, sac.SACConfig(total_timesteps=2000, learning_starts=500, buffer_size=1000)),
                           (td3, td3.TD3Config(total_timesteps=2000, learning_starts=500, buffer_size=1000))):
        built = getattr(module, f"make_{module.__name__.rsplit('.', 1)[-1]}")(config)
        assert built.num_updates == config.num_updates, module.__name__


def test_cli_reports_and_evaluates_each_runs_best_policy(runs, tmp_path, capsys):
    """`train` names each run's best policy; `evaluate --best-policy` plays those policies (the keys of `evaluate`,
    as `load_policy(F, r, best_policy=True)`), with their updates in the table and the CSV."""
    _, evaluated, _ = runs
    best, folder = evaluated.best_policy, tmp_path / "run"
    assert cli.main([*ARGV, "--out", str(folder)]) == 0
    out = capsys.readouterr().out
    assert ("  best policy per run (its periodic evaluation's return @ update): "
            + " ".join(f"{v}@{int(u)}" for v, u in zip(cli._figures(best.eval_return), best.update))
            + f"; kept with the checkpoint: jaxrl-rollout evaluate {folder} --best-policy\n") in out

    assert cli.main(["evaluate", str(folder), "--best-policy", "--num-episodes", "2", "--csv",
                     str(tmp_path / "e.csv")]) == 0
    out = capsys.readouterr().out
    assert "each run's best policy, checkpoint final" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("  default ")]
    assert [int(row[-2]) for row in rows] == [int(u) for u in best.update]
    assert [row[-1] for row in rows] == [f"{float(v):.2f}" for v in best.eval_return]
    with open(tmp_path / "e.csv", newline="") as f:
        updates = {(row["seed"], row["update"]) for row in csv.DictReader(f)}
    assert updates == {(str(r), str(int(u))) for r, u in enumerate(best.update)}
    keys = jax.random.split(jax.random.fold_in(jax.random.key(0), 0), EVAL.num_runs)
    for r, row in enumerate(rows):
        policy = runner.load_policy(folder, r, best_policy=True)
        result = evaluate(policy.env, policy.env_params, policy.policy_fn, policy.params, keys[r], 2)
        assert row[2] == f"{float(result.returns.mean()):.2f}"

    plain = tmp_path / "plain"
    runner.train(PLAIN, plain, stop_after_chunks=1, progress=None)
    assert cli.main(["evaluate", str(plain), "--best-policy"]) == 2
    assert capsys.readouterr().err == (
        f"jaxrl-rollout: error: {plain} keeps no best policy: it was trained without periodic evaluation (train with "
        "--eval-every to keep each run's best policy).\n")


def test_cli_gives_the_spread_of_more_runs_than_it_lists(runs, tmp_path, capsys, monkeypatch):
    """Past `cli.LISTED_RUNS` runs (a 512-seed sweep printed two lines of 512 figures), `train`'s closing lines give
    the spread of the runs' figures and the command whose table has a row per run (here with the limit at 1)."""
    _, evaluated, _ = runs
    monkeypatch.setattr(cli, "LISTED_RUNS", 1)
    folder = tmp_path / "run"
    assert cli.main([*ARGV, "--num-eval", "3", "--out", str(folder)]) == 0
    out = capsys.readouterr().out

    def spread(values):
        values = np.asarray(values, np.float64)
        low, middle, high = cli._figures([values.min(), np.median(values), values.max()])
        return f"min {low}, median {middle}, max {high} over 2 runs"

    last = evaluated.metrics["eval_return"][:, -1]
    assert f"; per run: {spread(last)} (a row per run: jaxrl-rollout evaluate {folder})\n" in out
    assert (f"  best policy per run (its periodic evaluation's return): {spread(evaluated.best_policy.eval_return)}; "
            f"kept with the checkpoint: jaxrl-rollout evaluate {folder} --best-policy\n") in out
    assert cli._spread([np.nan, 1.0, 3.0, 2.0]) == "min 1.0, median 2.0, max 3.0 over 4 runs"


def test_best_policy_before_the_first_evaluation_is_refused_in_one_line(tmp_path, capsys):
    """A checkpoint before the first evaluation holds each run's initial policy as its "best" (update 0)."""
    spec = runner.RunSpec("ppo", PPO_CONFIG, (ppo.PPOHParams(),), num_seeds=2, chunk_updates=3, eval_every=6)
    runner.train(spec, _start(spec, tmp_path), stop_after_chunks=1, progress=None)
    assert (runner.load_best_policies(tmp_path)[1].update == 0).all()
    why = "no periodic evaluation has run yet: the first is after update 6, and the checkpoint is after update 3"
    with pytest.raises(ValueError, match=f"^best_policy=True: run 1 of {tmp_path} has no evaluated policy: {why}.$"):
        runner.load_policy(tmp_path, 1, best_policy=True)
    assert cli.main(["evaluate", str(tmp_path), "--best-policy"]) == 2
    assert capsys.readouterr().err == (f"jaxrl-rollout: error: --best-policy: {why}; evaluate the latest policies "
                                       "without --best-policy.\n")
