"""The command line: the main job, sweeps, interrupted and resumed runs, evaluate, bad input."""

import csv
import io
import json
import os
import pathlib
import re
import shutil
import socket
import sys

import numpy as np
import pytest

from jaxrl_rollout import cli
from jaxrl_rollout.algorithms import a2c, ppo

# The config of tests/test_runner.py's SPEC (one compile when both modules run in one process):
# 2 grid points x 2 seeds, 7 updates in chunks of 3 (+ a tail of 1), groups of 2 runs; no periodic
# evaluation, so that the chunk is the runner test's program.
SWEEP = ["--algo", "a2c", "--num-envs", "4", "--num-steps", "8", "--total-steps", "224", "--lr", "1e-3,3e-4",
         "--seeds", "2", "--chunk-updates", "3", "--max-parallel", "2", "--num-eval", "2", "--eval-every", "off"]


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _saved_arrays(folder):
    from jaxrl_rollout import checkpoint, runner

    _, state, extras, _ = runner.load_run(folder)
    return {**{f"state/{i}": np.asarray(x) for i, x in enumerate(checkpoint.flatten(state)[0])}, **extras}


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep") / "run"
    assert cli.main(["train", *SWEEP, "--out", str(folder)]) == 0
    return folder


def test_no_arguments_is_the_readme_main_job():
    spec = cli._build_spec(cli._given(cli.build_parser().parse_args(["train"])))
    assert spec.algo == "ppo" and spec.config == ppo.PPOConfig() and spec.grid == (ppo.PPOHParams(),)
    assert spec.num_seeds == 8 and spec.seed == 0 and spec.max_parallel is None
    assert spec.chunk_updates == 61 and len(spec.chunk_lengths) == 16  # 976 updates


def test_the_command_runs_the_cycle_collector_less_often(monkeypatch):
    """`entry` (the console script and `python -m jaxrl_rollout`) sets `cli.GC_THRESHOLDS` before the command
    runs; importing the package leaves the interpreter's thresholds alone."""
    import gc

    before = gc.get_threshold()
    assert cli.GC_THRESHOLDS != before  # (this process is a test's: it never went through `entry`)
    seen = []
    monkeypatch.setattr(cli, "main", lambda: seen.append(gc.get_threshold()) or 0)
    from jaxrl_rollout import _deferred

    monkeypatch.setattr(_deferred, "defer", lambda: None)  # (it would defer this test process's later imports)
    try:
        with pytest.raises(SystemExit) as ended:
            cli.entry()
    finally:
        gc.set_threshold(*before)
    assert ended.value.code == 0 and seen == [cli.GC_THRESHOLDS]


def test_an_optional_float_config_field_is_read_as_a_float(capsys):
    """SAC's target_entropy (`float | None`; None means -|A|) parses as a float; a word is refused naming it."""
    spec = cli._build_spec(cli._given(cli.build_parser().parse_args(["train", "--algo", "sac", "--target-entropy", "-0.5"])))
    assert spec.config.target_entropy == -0.5 and type(spec.config.target_entropy) is float
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["train", "--algo", "sac", "--target-entropy", "auto"])
    assert exit_info.value.code == 2 and "--target-entropy" in capsys.readouterr().err


def test_none_sets_an_optional_config_field_to_none(capsys):
    """`--obs-clip none` turns PPO's observation clip off (its docstring's None); the option counts as given,
    so it is not the default 10.0, and a resume compares it as None."""
    def spec_of(*argv):
        return cli._build_spec(cli._given(cli.build_parser().parse_args(["train", *argv])))

    spec = spec_of("--normalize-observations", "true", "--obs-clip", "none", "--reward-clip", "NONE")
    assert spec.config.obs_clip is None and spec.config.reward_clip is None
    assert spec_of("--algo", "sac", "--target-entropy", "-2", "--target-entropy", "none").config.target_entropy is None
    assert cli._spec_options(spec)["obs_clip"] is None and cli._given(
        cli.build_parser().parse_args(["train", "--obs-clip", "none"]))["obs_clip"] is None
    assert "'none' sets None" in cli.build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    with pytest.raises(SystemExit):  # a field that cannot be None takes no "none"
        cli.build_parser().parse_args(["train", "--num-envs", "none"])
    assert "--num-envs: expected" in capsys.readouterr().err


# The main job's outputs at a small size (lines, files, CSV rows): the CartPole-v1 row of tests/test_user_suites.py.


def test_sweep_outputs(sweep_run, capsys):
    with open(sweep_run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["grid_point", "seed", "update", "step", "lr", "metric", "value"]
    assert {(r["grid_point"], r["seed"], r["lr"]) for r in rows} == {
        ("0", "0", "0.001"), ("0", "1", "0.001"), ("1", "0", "0.0003"), ("1", "1", "0.0003")}
    assert len(rows) == 4 * 7 * (len(a2c.A2CMetrics._fields) - 1)  # runs x updates x metrics (env_steps left out)
    saved = json.loads((sweep_run / "config.json").read_text())
    assert [p["lr"] for p in saved["grid"]] == [1e-3, 3e-4] and saved["chunk_updates"] == 3


def test_interrupted_and_resumed_cli_run_ends_identical(sweep_run, tmp_path, capsys):
    folder = tmp_path / "part"
    assert cli.main(["train", *SWEEP, "--out", str(folder), "--stop-after-chunks", "1", "--tensorboard", "false",
                     "--checkpoint-every", "2"]) == 0
    # the command's own options (not saved with the run) are in the command that continues it
    assert (f"stopped after chunk 1 of 3; continue with: jaxrl-rollout train --resume {folder} --num-eval 2 "
            "--tensorboard false --checkpoint-every 2\n") in capsys.readouterr().out
    assert "metrics.csv" not in _files(folder)
    assert cli.main(["train", "--resume", str(folder), "--num-eval", "2"]) == 0
    out = capsys.readouterr().out
    assert "lr=0.001" in out and "lr=0.0003" in out
    assert _files(folder)["metrics.csv"] == _files(sweep_run)["metrics.csv"]
    whole, resumed = _saved_arrays(sweep_run), _saved_arrays(folder)
    assert whole.keys() == resumed.keys()
    for k in whole:
        assert np.array_equal(whole[k], resumed[k], equal_nan=whole[k].dtype.kind == "f"), k


def test_a_full_disk_during_training_is_one_line_with_what_is_kept_and_the_resume_ends_identical(
        sweep_run, tmp_path, capsys, monkeypatch):
    """A checkpoint that cannot be saved (a full disk: Orbax's error, runner.SaveFailed) and a TensorBoard event
    file that cannot be written: one line each saying what the folder keeps and the command that goes on from it
    (the TensorBoard one said only "FILE: No space left on device"); the run resumed from the kept checkpoint ends
    as the uninterrupted one. (The checkpoint's own one line and its quiet threads: tests/test_runner.py.)"""
    import errno
    import os
    import signal

    from jaxrl_rollout import checkpoint, loggers, runner

    save, saves = checkpoint.save, []

    def full_at_the_second_save(folder, step, *args, **kwargs):
        saves.append(step)
        if len(saves) == 2:
            raise checkpoint.CheckpointError(f"could not save the checkpoint in {folder}/checkpoints: No space left on "
                                             "device (errno 28)")
        return save(folder, step, *args, **kwargs)

    folder = tmp_path / "full"
    with monkeypatch.context() as patch:
        patch.setattr(checkpoint, "save", full_at_the_second_save)
        assert cli.main(["train", *SWEEP, "--out", str(folder), "--tensorboard", "false", "--checkpoint-every", "1"]) == 2
    assert saves == [1, 2]
    assert capsys.readouterr().err.splitlines(keepends=True)[-1] == (
        f"jaxrl-rollout: error: could not save the checkpoint in {folder}/checkpoints: No space left on device (errno "
        "28); the run stopped after chunk 2, and its checkpoint after chunk 1 is kept; continue with: jaxrl-rollout "
        f"train --resume {folder} --num-eval 2 --tensorboard false --checkpoint-every 1\n")
    assert cli.main(["train", "--resume", str(folder), "--num-eval", "2"]) == 0
    assert "resuming after chunk 1" in capsys.readouterr().err
    assert _files(folder)["metrics.csv"] == _files(sweep_run)["metrics.csv"]
    whole, resumed = _saved_arrays(sweep_run), _saved_arrays(folder)
    assert whole.keys() == resumed.keys()
    for k in whole:
        assert np.array_equal(whole[k], resumed[k], equal_nan=whole[k].dtype.kind == "f"), k

    # SIGTERM (SLURM's, Kubernetes') in chunk 1, and the save it asks for fails: its exit code (it was 2) and a
    # line that says the run was interrupted (it said "the run stopped", as if a schedule had stopped it).
    progress_line = runner._progress_line

    def sigterm_in_the_first_chunk(spec, updates_done, *args):
        if updates_done == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return progress_line(spec, updates_done, *args)

    folder = tmp_path / "full_stopped"
    with monkeypatch.context() as patch:
        patch.setattr(checkpoint, "save", full_at_the_second_save)
        patch.setattr(runner, "_progress_line", sigterm_in_the_first_chunk)
        saves.clear()
        saves.append(0)  # the first save this run asks for fails
        assert cli.main(["train", *SWEEP, "--out", str(folder), "--tensorboard", "false"]) == 143
    assert saves == [0, 1] and not folder.joinpath("checkpoints").exists()
    assert capsys.readouterr().err.splitlines(keepends=True)[-1] == (
        f"jaxrl-rollout: error: could not save the checkpoint in {folder}/checkpoints: No space left on device (errno "
        "28); the run was interrupted (SIGTERM) after chunk 1, and no checkpoint was saved before; continue with: "
        f"jaxrl-rollout train --resume {folder} --num-eval 2 --tensorboard false\n")

    log_chunk, logged = loggers.TensorBoardLogger.log_chunk, []

    def full_at_the_second_chunk(self, chunk, first_update):
        logged.append(first_update)
        if len(logged) == 2:  # chunk 2 is logged before it is saved
            raise OSError(errno.ENOSPC, "No space left on device", str(folder / "tensorboard" / "events"))
        return log_chunk(self, chunk, first_update)

    folder = tmp_path / "full_tb"
    monkeypatch.setattr(loggers.TensorBoardLogger, "log_chunk", full_at_the_second_chunk)
    assert cli.main(["train", *SWEEP, "--out", str(folder), "--checkpoint-every", "1"]) == 2
    assert capsys.readouterr().err.splitlines(keepends=True)[-1] == (
        f"jaxrl-rollout: error: {folder}/tensorboard/events: No space left on device, during training; the run is "
        f"saved after chunk 1; continue with: jaxrl-rollout train --resume {folder} --num-eval 2 --checkpoint-every 1\n")

    def full_at_close(self):  # TensorBoard's last events, written after the last chunk (it was a bare OSError line)
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "tensorboard" / "events"))

    monkeypatch.setattr(loggers.TensorBoardLogger, "log_chunk", log_chunk)
    monkeypatch.setattr(loggers.TensorBoardLogger, "close", full_at_close)
    assert cli.main(["train", "--resume", str(folder), "--num-eval", "2"]) == 2
    assert capsys.readouterr().err.splitlines(keepends=True)[-1] == (
        f"jaxrl-rollout: error: {folder}/tensorboard/events: No space left on device, after training: the run is "
        f"complete and saved in {folder}: `jaxrl-rollout train --resume {folder}` writes its metrics.csv and "
        f"learning_curve.png and prints its summary again, and `jaxrl-rollout evaluate {folder}` evaluates it.\n")


def test_a_run_started_from_a_saved_runs_config_is_that_run_again(sweep_run, tmp_path, capsys):
    """`train --config FOLDER --out NEW` trains the saved run's algorithm, env, grid, seeds and chunks again: the
    same config.json, metrics and checkpoint, bit for bit (nothing but the folder given)."""
    again = tmp_path / "again"
    assert cli.main(["train", "--config", str(sweep_run), "--out", str(again), "--num-eval", "2"]) == 0
    out = capsys.readouterr().out
    assert (f"  options of {sweep_run}: --algo a2c --seeds 2 --total-steps 224 --chunk-updates 3 --max-parallel 2 "
            "--eval-every off --num-envs 4 --num-steps 8 --lr 0.001,0.0003\n") in out
    assert "given here" not in out
    for name in ("config.json", "metrics.csv"):
        assert _files(again)[name] == _files(sweep_run)[name], name
    first, second = _saved_arrays(sweep_run), _saved_arrays(again)
    assert first.keys() == second.keys()
    for k in first:
        assert np.array_equal(first[k], second[k], equal_nan=first[k].dtype.kind == "f"), k


def _config_spec(argv: list):
    """The spec `train ARGV` would build (`--config` read), without training."""
    args = cli.build_parser().parse_args(["train", *argv])
    return cli._build_spec(cli._with_saved_options(args, cli._given(args))), args.from_config


def test_options_given_with_config_replace_the_saved_runs(sweep_run):
    """Given options replace the saved ones (a hyperparameter's whole axis); the saved chunk is kept while the
    number of updates is the saved run's and chosen again when it changes; the evaluation schedule is the saved
    one unless --eval-every or --eval-episodes is given. Its config.json or its folder read alike."""
    from jaxrl_rollout.runner import read_spec

    saved = read_spec(sweep_run)
    spec, taken = _config_spec(["--config", str(sweep_run / "config.json"), "--seed", "5", "--lr", "5e-4"])
    assert spec.seed == 5 and [h.lr for h in spec.grid] == [5e-4] and spec.num_seeds == 2
    assert spec.config == saved.config and spec.chunk_updates == 3 and spec.max_parallel == 2
    assert spec.eval_every is None and "lr" not in taken and "seed" not in taken
    spec, taken = _config_spec(["--config", str(sweep_run), "--total-steps", "448"])  # 14 updates, not 7
    assert spec.config.num_updates == 14 and "chunk_updates" not in taken
    assert spec.chunk_updates == cli._build_spec({"algo": "a2c", "num_envs": 4, "num_steps": 8,
                                                  "total_steps": 448}).chunk_updates
    spec, taken = _config_spec(["--config", str(sweep_run), "--eval-episodes", "3"])
    assert spec.eval_every == spec.chunk_updates == 3 and spec.eval_episodes == 3 and "eval_every" not in taken


def test_every_algorithms_saved_run_is_rebuilt_from_its_config(tmp_path):
    """For each algorithm, a sweep of two values of its first hyperparameter with other seeds, steps and root seed:
    `--config` of its folder builds the very spec that was saved (no training)."""
    from jaxrl_rollout.runner import write_spec

    for algo, (config_cls, hparams_cls, _) in cli._algorithms().items():
        first = hparams_cls._fields[0]
        default = getattr(hparams_cls(), first)
        steps = config_cls().total_timesteps // 2
        spec = cli._build_spec({"algo": algo, "seeds": 3, "seed": 4, "total_steps": steps, "eval_every": 2,
                                first: [default, default / 2 if default > 0 else 0.1]})
        folder = tmp_path / algo
        folder.mkdir()
        write_spec(folder, spec)
        rebuilt, taken = _config_spec(["--config", str(folder)])
        assert rebuilt == spec and len(rebuilt.grid) == 2, algo
        assert {"algo", "seeds", "seed", "total_steps", first} <= set(taken), (algo, taken)


@pytest.mark.parametrize("eval_every, expected", [(3, "chunk"), (2, 2)])
def test_a_saved_evaluation_every_chunk_follows_the_new_chunk_and_another_is_kept(tmp_path, eval_every, expected):
    """A saved run evaluated once per chunk is evaluated per chunk again when the chunk is chosen again (its
    steps changed), and one evaluated every N updates every N updates; its episodes per evaluation are kept."""
    from jaxrl_rollout.runner import RunSpec, write_spec

    write_spec(tmp_path, RunSpec("a2c", a2c.A2CConfig(num_envs=4, num_steps=8, total_timesteps=224), (a2c.A2CHParams(),),
                                 2, chunk_updates=3, eval_every=eval_every, eval_episodes=4))
    spec, taken = _config_spec(["--config", str(tmp_path), "--total-steps", "2048"])  # 64 updates
    assert spec.chunk_updates != 3 and spec.eval_episodes == 4 and taken["eval_episodes"] == 4
    assert spec.eval_every == (spec.chunk_updates if expected == "chunk" else expected)
    assert taken.get("eval_every", "chunk") == expected


def test_config_mistakes_exit_2_naming_the_option_and_write_nothing(sweep_run, tmp_path, capsys):
    from jaxrl_rollout.runner import RunSpec, write_spec

    odd = tmp_path / "odd"  # a grid made in Python: no command line's lists give these two points
    odd.mkdir()
    write_spec(odd, RunSpec("a2c", a2c.A2CConfig(total_timesteps=64, num_envs=4, num_steps=8),
                            (a2c.A2CHParams(lr=1e-3, gamma=0.99), a2c.A2CHParams(lr=3e-4, gamma=0.9)), 1))
    (tmp_path / "notes.txt").write_text("not json")
    cases = [
        (["--config", str(sweep_run), "--resume", str(sweep_run)],
         f"--config {sweep_run} and --resume {sweep_run} both given"),
        (["--config", str(sweep_run), "--algo", "ppo"], f"--algo ppo: the run in {sweep_run} is A2C's"),
        (["--config", str(tmp_path / "none")], f"--config {tmp_path / 'none'}: {tmp_path / 'none'} does not exist."),
        (["--config", str(tmp_path / "notes.txt")], "notes.txt is not a valid run config"),
        (["--config", str(odd)], "the run's 2 grid points are not every combination of its hyperparameters' values"),
        # a saved option that no longer fits what is given is named with where it came from
        (["--config", str(sweep_run), "--chunk-updates", "8"],
         f"(--config {sweep_run} gave --algo a2c --seeds 2 --total-steps 224"),
    ]
    for argv, message in cases:
        out = tmp_path / "out"
        assert cli.main(["train", *argv, "--out", str(out)]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)
        assert not out.exists(), argv


@pytest.fixture
def sigint_handled():
    """SIGINT as a terminal delivers it (a shell's background job, as the test runner may be, ignores it)."""
    import signal

    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_ctrl_c_after_training_stops_at_once_and_says_the_run_is_saved(sweep_run, tmp_path, capsys, monkeypatch,
                                                                      sigint_handled):
    """A Ctrl-C in the closing evaluation was acknowledged ("stopping at the next chunk boundary"), then ignored
    through the whole evaluation, and the command exited 0; one during the last chunk likewise."""
    import os
    import signal

    from jaxrl_rollout import runner

    evaluations = []

    def evaluate_then_ctrl_c(*args, **kwargs):  # Ctrl-C as the closing evaluation starts
        evaluations.append(1)
        os.kill(os.getpid(), signal.SIGINT)
        return real_evaluation(*args, **kwargs)

    real_evaluation = cli._closing_evaluation
    monkeypatch.setattr(cli, "_closing_evaluation", evaluate_then_ctrl_c)
    folder = tmp_path / "closing"
    assert cli.main(["train", *SWEEP, "--out", str(folder)]) == 130
    out, err = capsys.readouterr()
    assert evaluations == [1] and "final return" in out and "deterministic evaluation" not in out
    assert (f"SIGINT: stopped after training; the run is complete and saved in {folder}; evaluate it with: "
            f"jaxrl-rollout evaluate {folder}") in err and "next chunk boundary" not in err, err
    assert _files(folder)["metrics.csv"] == _files(sweep_run)["metrics.csv"]

    progress_line = runner._progress_line

    def ctrl_c_in_the_last_chunk(spec, updates_done, *args):
        if updates_done == spec.config.num_updates:
            os.kill(os.getpid(), signal.SIGINT)
        return progress_line(spec, updates_done, *args)

    monkeypatch.setattr(runner, "_progress_line", ctrl_c_in_the_last_chunk)
    evaluations.clear()
    folder = tmp_path / "last"
    assert cli.main(["train", *SWEEP, "--out", str(folder)]) == 130
    out, err = capsys.readouterr()
    assert evaluations == [] and "final return" in out, out
    assert "the run is complete and saved" in err and "interrupted after chunk" not in err, err
    monkeypatch.undo()
    assert cli.main(["train", "--resume", str(folder), "--num-eval", "2"]) == 0  # evaluates the complete run
    assert "deterministic evaluation" in capsys.readouterr().out
    assert _saved_arrays(folder).keys() == _saved_arrays(sweep_run).keys()


def test_a_signal_in_the_closing_evaluation_is_acted_on_while_jax_computes(sigint_handled):
    """A handler runs only when the main thread runs Python: the evaluation read its returns with np.asarray,
    waiting in C++, so a Ctrl-C was acted on only once the whole evaluation had finished. The evaluator waits
    in Python (`_signals.wait_ready`), as the training chunks do."""
    import os
    import signal
    import threading
    import time

    import jax
    import jax.numpy as jnp

    from jaxrl_rollout._signals import Interrupted, StopSignals, at_once, wait_ready

    @jax.jit
    def slow(x):  # a few seconds of matrix products on 2 cores
        return jax.lax.fori_loop(0, 200, lambda i, y: jnp.tanh(y @ y), x)

    x = jnp.full((1024, 1024), 1e-3, jnp.float32)
    slow.lower(x).compile()
    with StopSignals(lambda line: None), at_once():
        out = slow(x)
        sent = time.perf_counter()
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(Interrupted):
            wait_ready(out)
        waited, ready = time.perf_counter() - sent, out.is_ready()
    out.block_until_ready()  # (XLA cannot cancel it: let it end before the next test)
    finished = time.perf_counter() - sent
    assert not ready and waited < finished / 2, (waited, finished)


def test_evaluate_prints_per_seed_returns_and_writes_every_episode_with_csv(sweep_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["evaluate", str(sweep_run), "--num-episodes", "2", "--seed", "5", "--csv", "out/eval.csv"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint final), 2 episodes per run" in out and "wrote every episode's return to out/eval.csv" in out
    # "  lr=0.001     0      26.00 (  0.0)      21.00 (  5.0)": label, seed, mean (std) per mode
    # (the per-grid-point table's rows are indented further: a line starting "  lr=" is a run's)
    rows = [re.findall(r"lr=[\d.]+|[\d.]+", line) for line in out.splitlines() if line.startswith("  lr=")]
    assert [(r[0], r[1]) for r in rows] == [("lr=0.001", "0"), ("lr=0.001", "1"), ("lr=0.0003", "0"),
                                            ("lr=0.0003", "1")]
    assert all(len(r) == 6 and float(r[2]) >= 8 and float(r[4]) >= 8 for r in rows)  # CartPole lasts >= 8 steps
    # the file: 4 runs x 2 policies x 2 episodes, metrics.csv's leading columns, the printed means
    with open(tmp_path / "out" / "eval.csv") as f:
        written = list(csv.DictReader(f))
    with open(sweep_run / "metrics.csv") as f:
        metric_rows = list(csv.DictReader(f))
    assert list(written[0]) == [*list(metric_rows[0])[:-2], "eval_seed", "policy", "episode", "return"]
    assert len(written) == 16 and {r["eval_seed"] for r in written} == {"5"}
    # `--csv -`: the same rows on stdout, alone (for a pipe); the report on stderr
    assert cli.main(["evaluate", str(sweep_run), "--num-episodes", "2", "--seed", "5", "--csv", "-"]) == 0
    piped = capsys.readouterr()
    assert list(csv.DictReader(io.StringIO(piped.out))) == written
    assert piped.err.splitlines() == [*out.splitlines()[:-1], "  wrote every episode's return to stdout"]
    last = max(metric_rows, key=lambda r: int(r["update"]))  # the checkpoint: after the last update (0-based there)
    assert {(r["update"], r["step"]) for r in written} == {(str(int(last["update"]) + 1), last["step"])}
    for (label, seed, det, _, sto, _), g in zip(rows, (0, 0, 1, 1)):
        mine = [r for r in written if r["grid_point"] == str(g) and r["seed"] == seed]
        assert [r["lr"] for r in mine] == [label.split("=")[1]] * 4
        for policy, printed in (("deterministic", det), ("stochastic", sto)):
            episodes = [float(r["return"]) for r in mine if r["policy"] == policy]
            assert [r["episode"] for r in mine if r["policy"] == policy] == ["0", "1"]
            assert f"{np.mean(episodes):.2f}" == printed, (policy, episodes, printed)
    # per grid point: the mean of its seeds' means, and a 95% Student-t interval across them (scipy's own here)
    from scipy import stats

    lines = out.splitlines()
    start = lines.index("  per grid point: mean over its 2 seeds of each run's mean return, 95% t-interval across seeds")
    assert lines[start + 1].split() == ["grid", "point", "deterministic", "stochastic"]
    for g, line in enumerate(lines[start + 2:start + 4]):
        cells = re.findall(r"-?[\d.]+", line.split(None, 1)[1])
        for p, policy in enumerate(("deterministic", "stochastic")):
            means = [np.mean([float(r["return"]) for r in written if (r["grid_point"], r["seed"], r["policy"])
                              == (str(g), str(s), policy)]) for s in (0, 1)]
            half = stats.t.ppf(0.975, 1) * np.std(means, ddof=1) / np.sqrt(2)  # (t.interval is NaN for equal means)
            expected = [np.mean(means), np.mean(means) - half, np.mean(means) + half]
            assert [float(c) for c in cells[3 * p:3 * p + 3]] == pytest.approx(expected, abs=0.006)


def test_evaluate_csv_mistakes_are_refused_before_evaluating(sweep_run, tmp_path, monkeypatch, capsys):
    def no_evaluation(*args, **kwargs):
        raise AssertionError("evaluated despite the mistake")

    monkeypatch.setattr(cli, "evaluate_both", no_evaluation)
    (tmp_path / "folder").mkdir()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the csv's folder would go")
    for csv_arg, words in ((str(tmp_path / "folder"), "a folder; give a file name"),
                           (str(blocked / "eval.csv"), f"--csv {blocked / 'eval.csv'}: cannot write in {blocked}"),
                           (str(tmp_path) + "/", "argument --csv: expected a file name")):
        try:
            code = cli.main(["evaluate", str(sweep_run), "--csv", csv_arg])
        except SystemExit as stop:  # argparse's own refusal
            code = stop.code
        assert code == 2, csv_arg
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_bad_folders_and_resumes_exit_2_and_write_nothing(sweep_run, tmp_path, capsys):
    before = _tree(sweep_run)
    other = [a if a != "1e-3,3e-4" else "1e-3" for a in SWEEP]
    assert cli.main(["train", *other, "--out", str(sweep_run)]) == 2
    err = capsys.readouterr().err
    assert "already holds a different run" in err and "--lr: [0.001, 0.0003] there, [0.001] here" in err
    assert err.endswith(f"; choose another --out, or continue that run with --resume {sweep_run}.\n"), err
    # another algorithm's run: that alone (its options differed from every default of this one's, a line of 20)
    assert cli.main(["train", "--algo", "ppo", "--out", str(sweep_run)]) == 2
    assert capsys.readouterr().err == (f"jaxrl-rollout: error: --out {sweep_run} already holds an A2C run (this "
                                       "command trains PPO); choose another --out, or continue that run with "
                                       f"--resume {sweep_run}.\n")
    assert cli.main(["train", *SWEEP, "--out", str(sweep_run)]) == 2
    assert f"already holds this run; continue it with --resume {sweep_run}" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(sweep_run), "--lr", "5e-4", "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert "the run there has a different config" in err and "--lr: [0.001, 0.0003] there, [0.0005] here" in err
    assert err.count("\n") == 1, err  # one line, as every refusal (it listed the differences below a header)
    assert "--seeds" not in err  # the same value is no difference
    # an option of another algorithm: "--q-lr: None there, [0.001] here"
    assert cli.main(["train", "--resume", str(sweep_run), "--q-lr", "1e-3", "--tau", "0.01"]) == 2
    assert capsys.readouterr().err == (f"jaxrl-rollout: error: --resume {sweep_run}: --tau, --q-lr are not options of "
                                       "the A2C run there.\n")
    assert _tree(sweep_run) == before

    corrupt = tmp_path / "corrupt"
    shutil.copytree(sweep_run, corrupt)
    step = corrupt / "checkpoints" / "3" / "state"
    for data in (p for p in step.rglob("*") if p.is_file() and p.parent.name == "d"):  # every data file truncated
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # (evaluate reads the policies' leaves alone)
    before = _tree(corrupt)
    assert cli.main(["train", "--resume", str(corrupt)]) == 2
    assert f"corrupt checkpoint {corrupt / 'checkpoints' / '3'}" in capsys.readouterr().err
    assert cli.main(["evaluate", str(corrupt)]) == 2
    assert _tree(corrupt) == before

    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    assert cli.main(["train", *SWEEP, "--out", str(stranger)]) == 2
    assert "is not empty and holds no jaxrl-rollout run" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(stranger)]) == 2
    assert "holds no run: config.json is missing" in capsys.readouterr().err
    assert _files(stranger) == {"notes.txt": b"mine"}
    # a folder without a run names the run it is inside, or the runs in it
    assert cli.main(["evaluate", str(sweep_run / "checkpoints")]) == 2
    assert f"holds no run: config.json is missing. It is inside the run {sweep_run}." in capsys.readouterr().err
    assert cli.main(["evaluate", str(sweep_run.parent)]) == 2
    assert f"holds no run: config.json is missing. The runs in it: {sweep_run}." in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(tmp_path / "typo")]) == 2
    typo = tmp_path / "typo"
    assert capsys.readouterr().err == f"jaxrl-rollout: error: --resume {typo}: {typo} does not exist.\n"
    # a run with nothing trained yet (Ctrl-C during the first compile): evaluate says so and how to go on
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(sweep_run / "config.json", fresh / "config.json")
    assert cli.main(["evaluate", str(fresh)]) == 2
    assert capsys.readouterr().err == (
        f"jaxrl-rollout: error: {fresh} holds a run with nothing trained yet (no checkpoint: its train stopped before "
        f"the first chunk ended); continue it with: jaxrl-rollout train --resume {fresh}\n")
    spaced = tmp_path / "fresh run"  # a command to paste quotes its folder
    spaced.mkdir()
    shutil.copy(sweep_run / "config.json", spaced / "config.json")
    assert cli.main(["evaluate", str(spaced)]) == 2
    assert capsys.readouterr().err.endswith(f"continue it with: jaxrl-rollout train --resume '{spaced}'\n")
    assert cli.main(["train", *SWEEP, "--out", str(spaced)]) == 2
    assert capsys.readouterr().err.endswith(f"already holds this run; continue it with --resume '{spaced}' or choose "
                                            "another --out.\n")
    # and from Python: each loader says the same, not that checkpoints/ holds no committed step
    from jaxrl_rollout import checkpoint, runner

    for load in (runner.load_run, runner.load_best_policies, lambda folder: runner.load_policy(folder, 0)):
        with pytest.raises(checkpoint.CheckpointError, match=(
                rf"^{re.escape(str(fresh))} holds a run with nothing trained yet .*; continue it with "
                rf"runner\.train\(runner\.read_spec\(folder\), folder, resume=True\), or from the command line: "
                rf"jaxrl-rollout train --resume {re.escape(str(fresh))}$")):
            load(fresh)
    # the same while a train holds the folder (compiling, or before its first checkpoint): not "--resume", which
    # the lock would refuse, but who writes it and when to come back; evaluate takes no lock and leaves none
    from jaxrl_rollout._lock import LOCK_NAME, FolderLock

    assert not (fresh / LOCK_NAME).exists()
    with FolderLock(fresh).acquire("test"):
        assert cli.main(["evaluate", str(fresh)]) == 2
        assert capsys.readouterr().err == (
            f"jaxrl-rollout: error: {fresh} is being trained by pid {os.getpid()} on host {socket.gethostname()}, "
            "which has not saved its first checkpoint yet (one at the end of the first chunk, or of every "
            "--checkpoint-every chunks); evaluate it once that is written.\n")
    assert cli.main(["evaluate", str(fresh)]) == 2  # released: the folder's lock file is no lock
    assert "holds a run with nothing trained yet" in capsys.readouterr().err
    (fresh / LOCK_NAME).unlink()
    # a hand-edited config.json whose config is not an object: one line, not an AttributeError
    edited = tmp_path / "edited"
    edited.mkdir()
    saved = json.loads((sweep_run / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps({**saved, "config": []}))
    for argv in (["evaluate", str(edited)], ["train", "--resume", str(edited)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "config.json is not a valid run config: config must be an object of A2CConfig's fields, got []." in err
        assert len(err.strip().splitlines()) == 1, err
    # config.json edited against its checkpoint: named as the other resume errors are, by the option first
    changed = tmp_path / "changed"
    shutil.copytree(sweep_run, changed)
    saved = json.loads((changed / "config.json").read_text())
    (changed / "config.json").write_text(json.dumps({**saved, "seed": saved["seed"] + 1}))
    assert cli.main(["train", "--resume", str(changed)]) == 2
    assert capsys.readouterr().err.startswith(
        f"jaxrl-rollout: error: --resume {changed}: {changed / 'config.json'} differs from the spec saved with its "
        "checkpoint (was it edited?): ")
    assert cli.main(["evaluate", str(stranger / "notes.txt")]) == 2
    assert capsys.readouterr().err == f"jaxrl-rollout: error: {stranger / 'notes.txt'} is a file, not a run folder.\n"


def test_rollout_command(capsys):
    assert cli.main(["rollout", "--num-envs", "2", "--num-steps", "100", "--num-eval", "2"]) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1, 2 envs x 100 steps" in out
    assert "completed episodes, mean return" in out
    # one of each, in the singular: one Pendulum episode (200 steps) in 300 steps, one evaluation episode
    assert cli.main(["rollout", "--env", "Pendulum-v1", "--num-envs", "1", "--num-steps", "300", "--num-eval", "1"]) == 0
    out = capsys.readouterr().out
    assert "Pendulum-v1, 1 env x 300 steps" in out and "rollout: 1 completed episode, mean return" in out
    assert "evaluate: 1 episode, return mean" in out


def test_rollout_sums_its_episodes_chunk_by_chunk_as_one_rollout_would(capsys, monkeypatch):
    """`rollout` kept every step of every env (~17 bytes a step and env: 7 GB for 4,096 envs x 100,000 steps); it
    now rolls out in chunks and sums the finished episodes between them. The figures are one rollout's."""
    import jax

    import jaxrl_rollout as jr
    from jaxrl_rollout import envs

    monkeypatch.setattr(cli, "ROLLOUT_CHUNK_STEPS", 64)
    result = cli.run_rollout("CartPole-v1", 4, 64 * 3 + 10, 7, 2)  # three whole chunks and 10 steps
    env, params = envs.make("CartPole-v1")
    state = jr.rollout_init(jax.random.key(7), env, params, 4)
    _, traj = jr.rollout(env, params, cli._random_policy(env, params), None, state, 64 * 3 + 10)
    whole = jr.episode_metrics(traj)
    assert int(result["metrics"].num_episodes) == int(whole.num_episodes) > 20
    np.testing.assert_allclose(float(result["metrics"].mean_return), float(whole.mean_return), rtol=1e-6)
    np.testing.assert_allclose(float(result["metrics"].mean_length), float(whole.mean_length), rtol=1e-6)
    capsys.readouterr()


def test_rollout_video_writes_one_random_episode_after_checking_it_can(tmp_path, monkeypatch, capsys):
    """`rollout --video [FOLDER]`: one episode of the random policy, `evaluate`'s for the key fold_in(seed key, 2),
    in FOLDER (default ./videos), named after the env and the seed; an env that cannot be drawn is one line before
    anything is rolled out."""
    imageio = pytest.importorskip("imageio.v3")
    pytest.importorskip("pygame")
    import jax

    import jaxrl_rollout as jr
    from jaxrl_rollout import envs

    monkeypatch.chdir(tmp_path)
    assert cli.main(["rollout", "--num-envs", "2", "--num-steps", "16", "--num-eval", "2", "--seed", "3",
                     "--video"]) == 0
    env, params = envs.make("CartPole-v1")
    episode = jr.evaluate(env, params, cli._random_policy(env, params), None,
                          jax.random.split(jax.random.fold_in(jax.random.key(3), 2), 1)[0], 1)
    ret = float(episode.returns[0])
    name = f"CartPole-v1_random_seed3_return{ret:.1f}.mp4"
    assert [p.name for p in (tmp_path / "videos").iterdir()] == [name]
    # a frame for each state its actions saw, and the state it ended in (the pole past its angle)
    assert imageio.imread(tmp_path / "videos" / name, plugin="FFMPEG").shape[0] == int(episode.lengths[0]) + 1
    assert int(episode.lengths[0]) == ret
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"  video of one episode: return {ret:.1f}, {int(ret)} steps: videos/{name}")
    assert cli.main(["rollout", "--env", "DeepSea-bsuite", "--video", "clips"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("jaxrl-rollout: error: --video: cannot render DeepSea-bsuite") and "rollout:" not in out
    assert not (tmp_path / "clips").exists()


def test_a_users_strict_jax_modes_do_not_reach_the_commands_programs(capsys, monkeypatch, tmp_path):
    """JAX_NUMPY_RANK_PROMOTION=raise, JAX_NUMPY_DTYPE_PROMOTION=strict and JAX_TRANSFER_GUARD=disallow (set to
    check one's own code) ended every train in those checks inside the library's code (DQN: "could not be
    broadcast together ... (128, 1) (1,)", PPO: "no available implicit dtype promotion path", the guard in gymnax's
    import). A command runs with jax's defaults and gives the user's modes back when it returns."""
    import jax

    monkeypatch.chdir(tmp_path)
    small = ["--seeds", "1", "--eval-every", "off", "--tensorboard", "false", "--hidden-sizes", "8"]
    jax.config.update("jax_numpy_rank_promotion", "raise")
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_transfer_guard", "disallow")
    try:
        assert cli.main(["train", "--algo", "dqn", "--total-steps", "48", "--log-interval", "16", "--learning-starts",
                         "16", "--buffer-size", "64", "--batch-size", "8", "--train-frequency", "2",
                         "--target-network-frequency", "8", "--out", "dqn", *small]) == 0, capsys.readouterr().err
        assert cli.main(["train", "--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--total-steps",
                         "32", "--out", "ppo", *small]) == 0, capsys.readouterr().err
        assert (jax.config.jax_numpy_rank_promotion, jax.config.jax_numpy_dtype_promotion) == ("raise", "strict")
        assert jax.config.jax_transfer_guard == "disallow"
    finally:
        jax.config.update("jax_transfer_guard", "allow")
        jax.config.update("jax_numpy_rank_promotion", "allow")
        jax.config.update("jax_numpy_dtype_promotion", "standard")


def test_jax_disable_jit_is_one_line_before_train_writes_anything(capsys, monkeypatch, tmp_path):
    """With JAX_DISABLE_JIT=1, train wrote config.json, then ended in jax's "Disable jit is not supported in the AOT
    path" (a chunk is compiled ahead of time); now one line naming the variable, before anything is written."""
    import jax

    monkeypatch.chdir(tmp_path)
    with jax.disable_jit():
        assert cli.main(["train", "--total-steps", "1024", "--seeds", "1", "--out", "runs/x"]) == 2
    assert capsys.readouterr().err == (
        "jaxrl-rollout: error: JAX_DISABLE_JIT is set (jax_disable_jit): train compiles each chunk ahead of time, "
        "which jax cannot do with jit disabled; unset it.\n")
    assert not (tmp_path / "runs").exists()


def test_jax_debug_nans_stopping_at_the_metrics_nans_is_one_line_naming_it(capsys, monkeypatch, tmp_path):
    """With JAX_DEBUG_NANS=1 (a user hunting a NaN), SAC's first command ended in a FloatingPointError traceback
    (its metrics' NaN fill, made at build), and A2C's after a chunk in jax's InternalFloatingPointError, which
    is no FloatingPointError (a chunk is compiled ahead of time). Both are one line now, naming the variable."""
    import jax

    monkeypatch.chdir(tmp_path)
    tail = ("and jax stops there as JAX_DEBUG_NANS (jax_debug_nans) asks: the metrics mark what was not measured "
            "with NaN (an update's episode_return where no episode ended, a loss before the first gradient step); "
            "unset JAX_DEBUG_NANS (a run whose state stops being finite is stopped without it, exit 3, its last "
            "finite checkpoint kept).\n")
    with jax.debug_nans(True):
        assert cli.main(["train", "--algo", "sac", "--total-steps", "400", "--learning-starts", "200", "--log-interval", "100",
                         "--seeds", "1",
                         "--out", "sac"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("jaxrl-rollout: error: invalid value (nan) encountered in ") and err.endswith(tail), err
        assert cli.main(["train", "--algo", "a2c", "--num-envs", "2", "--num-steps", "4", "--total-steps", "16",
                         "--hidden-sizes", "8", "--seeds", "1", "--eval-every", "off", "--tensorboard", "false",
                         "--out", "a2c"]) == 2
        err = capsys.readouterr().err.splitlines()[-1] + "\n"
        assert err == "jaxrl-rollout: error: invalid value (nan) in the output of jit(fn), " + tail, err
    assert not jax.config.jax_debug_nans


def test_out_of_memory_is_one_line_naming_the_options_that_size_it(capsys, monkeypatch, tmp_path):
    """XLA's RESOURCE_EXHAUSTED (a JaxRuntimeError) was a traceback; another runtime error still is one."""
    import jax

    def out_of_memory(*args, **kwargs):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 1700000000288 bytes.")

    monkeypatch.setattr(cli, "run_rollout", out_of_memory)
    assert cli.main(["rollout", "--num-envs", "100000", "--num-steps", "1000000"]) == 2
    assert capsys.readouterr().err == (
        f"jaxrl-rollout: error: out of memory on the {jax.default_backend()} device (Out of memory allocating "
        "1700000000288 bytes): lower --num-envs (rollout keeps up to 1,024 steps of every env).\n")
    # train: the options that size this algorithm's memory (PPO has no --buffer-size), and the folder it wrote
    train_itself = cli._run_train
    monkeypatch.setattr(cli, "_run_train", out_of_memory)
    # (--max-parallel does not shrink the replay buffers, which every run keeps on the device)
    for argv, sizes in ((["--out", "runs/x"], "--num-envs or --num-steps, or train fewer runs at once "
                                              "(--max-parallel N;"),
                        (["--algo", "dqn", "--out", "runs/x"], "--num-envs or --buffer-size (or store each "
                                                               "observation once: --optimize-memory-usage true), or "
                                                               "train fewer runs (--seeds, the grid: every run keeps "
                                                               "its replay buffer on the device, whatever "
                                                               "--max-parallel)"),
                        (["--algo", "sac", "--optimize-memory-usage", "true", "--out", "runs/x"],
                         "--num-envs or --buffer-size (or, where the observations are stacks of frames, store each "
                         "frame once: --frame-stack-axis), or train fewer runs (--seeds,"),
                        (["--algo", "dqn", "--optimize-memory-usage", "true", "--frame-stack-axis", "-1", "--out",
                          "runs/x"], "--num-envs or --buffer-size, or train fewer runs (--seeds,"),
                        (["--algo", "td3", "--checkpoint-every", "1", "--out", "runs/x"], "--num-envs or --buffer-size"),
                        # every episode of an evaluation is played at once (2e9 of them ran out of memory)
                        (["--eval-episodes", "100000", "--out", "runs/x"], "--num-envs, --num-steps or --eval-episodes "
                         "(each periodic evaluation plays 100,000 episodes of every run at once), or train fewer")):
        assert cli.main(["train", *argv]) == 2
        err = capsys.readouterr().err
        assert f"): lower {sizes}" in err, err
        copy = ("; --checkpoint-every 1 keeps one state of each run (between checkpoints a chunk is given a copy of "
                "the state, replay buffers included)")
        assert (copy in err) == ("--algo" in argv and "--checkpoint-every" not in argv), err  # off-policy, not 1
        assert err.endswith("; runs/x keeps this run's config, so give the new settings another --out.\n"), err
    # a --resume or --config: the run's algorithm and options are its folder's, not the typed ones (it said "lower
    # --num-envs or --num-steps" to a resumed DQN run, whose config a resume cannot change)
    from jaxrl_rollout import runner

    monkeypatch.setattr(cli, "_run_train", train_itself)
    monkeypatch.setattr(cli, "_train_in_folder", out_of_memory)  # after --config's options are read
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dqn-run").mkdir()
    (tmp_path / "ppo-run").mkdir()
    runner.write_spec("dqn-run", cli._build_spec({"algo": "dqn", "optimize_memory_usage": True}))
    runner.write_spec("ppo-run", cli._build_spec({"algo": "ppo"}))
    assert cli.main(["train", "--resume", "dqn-run"]) == 2
    assert capsys.readouterr().err.endswith(
        "): resume it with --checkpoint-every 1, which keeps one state of each run (between checkpoints a chunk is "
        "given a copy of the state, replay buffers included), or a resumed run keeps its config: train it again, with "
        "`--config dqn-run` and another --out, and lower --num-envs or --buffer-size (or, where the observations are "
        "stacks of frames, store each frame once: --frame-stack-axis), or train fewer runs (--seeds, the grid: every "
        "run keeps its replay buffer on the device, whatever --max-parallel).\n")
    assert cli.main(["train", "--resume", "ppo-run", "--checkpoint-every", "1"]) == 2
    assert "Exception ignored" not in capsys.readouterr().err  # (nothing of JAX's exit handlers either)
    runner.write_spec("ppo-run", cli._build_spec({"algo": "ppo", "eval_episodes": 20}))
    assert cli.main(["train", "--resume", "ppo-run", "--checkpoint-every", "1"]) == 2
    assert "lower --num-envs, --num-steps or --eval-episodes (each periodic evaluation plays 20 episodes" in (
        capsys.readouterr().err)
    runner.write_spec("ppo-run", cli._build_spec({"algo": "ppo"}))
    assert cli.main(["train", "--resume", "ppo-run", "--checkpoint-every", "1"]) == 2
    assert capsys.readouterr().err.endswith(
        "): a resumed run keeps its config: train it again, with `--config ppo-run` and another --out, and lower "
        "--num-envs or --num-steps, or train fewer runs at once (--max-parallel N; grid points x --seeds are trained "
        "together by default).\n")
    assert cli.main(["train", "--config", "dqn-run", "--out", "runs/y"]) == 2  # its saved --optimize-memory-usage
    err = capsys.readouterr().err
    assert "): lower --num-envs or --buffer-size (or, where the observations are stacks of frames," in err, err
    assert err.endswith("; runs/y keeps this run's config, so give the new settings another --out.\n"), err

    def other(*args, **kwargs):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    monkeypatch.setattr(cli, "run_rollout", other)
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        cli.main(["rollout"])


def test_unknown_env_suggests_close_names(capsys, tmp_path):
    assert cli.main(["train", "--env", "CartPol-v1", "--out", str(tmp_path / "x")]) == 2
    assert "Did you mean CartPole-v1" in capsys.readouterr().err
    assert cli.main(["rollout", "--env", "CartPol-v1"]) == 2
    assert not (tmp_path / "x").exists()
    capsys.readouterr()
    # a colon for the slash: the suite's id, not the gymnax names that look most like "brax:ant"
    assert cli.main(["train", "--env", "brax:ant", "--out", str(tmp_path / "x")]) == 2
    assert "--env brax:ant: unknown env_id 'brax:ant'. Did you mean 'brax/ant'? Known ids:" in capsys.readouterr().err
    assert cli.main(["train", "--env", "gymnax:CartPole-v1", "--out", str(tmp_path / "x")]) == 2
    assert "Did you mean 'gymnax/CartPole-v1'? Known ids:" in capsys.readouterr().err


def test_an_env_the_algorithm_cannot_train_is_named_before_other_options(capsys, tmp_path):
    # Two faults: the env is named first, since the other options would be tuned for the env the user settles on.
    out = str(tmp_path / "x")
    assert cli.main(["train", "--algo", "sac", "--env", "CartPole-v1", "--total-steps", "1000", "--out", out]) == 2
    assert capsys.readouterr().err.startswith("jaxrl-rollout: error: --env CartPole-v1: SAC needs continuous actions")
    assert cli.main(["train", "--algo", "dqn", "--env", "brax/nope", "--total-steps", "1000", "--out", out]) == 2
    assert capsys.readouterr().err.startswith("jaxrl-rollout: error: --env brax/nope: unknown brax env name 'nope'")
    # a fitting env leaves the other option's error
    assert cli.main(["train", "--algo", "sac", "--env", "Pendulum-v1", "--total-steps", "1000", "--out", out]) == 2
    assert capsys.readouterr().err.startswith("jaxrl-rollout: error: --total-steps 1000: learning_starts=5000 leaves")
    assert not (tmp_path / "x").exists()


def test_impossible_configs_exit_2_before_writing(capsys, tmp_path):
    out = str(tmp_path / "x")
    cases = {
        ("--num-minibatches", "3"): "error: --num-minibatches 3: the batch num_envs * num_steps = 512 does not "
                                     "divide into num_minibatches=3",
        ("--network", "lstm"): "error: --network lstm: network must be one of 'auto', 'mlp', 'cnn', 'gru', got 'lstm'",
        ("--algo", "a2c", "--clip-eps", "0.1"): "--clip-eps is not a hyperparameter of A2C",
        ("--algo", "a2c", "--update-epochs", "2"): "--update-epochs is not an option of A2C",
        ("--total-steps", "256"): "less than one batch",
        ("--chunk-updates", "2000"): "error: --chunk-updates 2000: chunk_updates=2000 is more than the run's 976 "
                                     "updates",
        ("--out", out, "--resume", out): "--out and --resume both given",
        # options the run would not read: each is refused, led by the option as typed
        ("--obs-clip", "5"): "error: --obs-clip 5.0: the clip applies to normalised values, and "
                             "--normalize-observations is false; add --normalize-observations true",
        ("--reward-clip", "5"): "error: --reward-clip 5.0: the clip applies to normalised values",
        # it advised --normalize-observations true, which is refused for a Discrete observation
        ("--env", "gymnasium/FrozenLake-v1", "--obs-clip", "5"): "error: --obs-clip 5.0: the clip applies to "
            "normalised observations, and this env's observation is a Discrete index, read one-hot and never "
            "normalised; drop --obs-clip.",
        ("--env", "gymnasium/FrozenLake-v1", "--network", "cnn"): "error: --network cnn: network='cnn' needs an image "
                                                                  "observation",
        ("--network", "gru", "--hidden-sizes", "32,32"): "error: --hidden-sizes 32,32: the GRU network (--network gru) "
                                                        "reads one size, its state's: give one, e.g. --hidden-sizes 32.",
        ("--network", "gru", "--activation", "relu"): "error: --activation relu: the GRU network (--network gru) does "
                                                     "not read --activation.",
        ("--env", "Breakout-MinAtar", "--activation", "relu"):
            "error: --activation relu: the CNN encoder (network=auto, for this env's image observation) has fixed "
            "layers and reads neither --hidden-sizes nor --activation.",
        ("--algo", "td3", "--env", "Pendulum-v1", "--network", "cnn"): "error: --network cnn: network='cnn' needs an "
                                                                      "image observation [H, W, C] (channels last), "
                                                                      "got obs float32[3]",
        ("--env", "Breakout-MinAtar", "--network", "mlp"): "error: --network mlp: network='mlp' needs a flat vector "
                                                          "observation [O], got obs float32[10, 10, 4]",
    }
    for argv, message in cases.items():
        assert cli.main(["train", *argv, "--out", out] if "--out" not in argv else ["train", *argv]) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert not (tmp_path / "x").exists()


def test_a_config_error_gives_the_flags_of_the_fields_it_names_that_were_left_at_their_defaults(capsys, tmp_path):
    """The fix a config's message names in field names ("lower learning_starts") reads as flags after it."""
    lead = cli._led_by_options
    message = "total_timesteps=5 with num_envs=8 gives no update; lower num_envs or raise total_timesteps."
    assert lead(message, {"total_steps": 5}) == f"--total-steps 5: {message} (set with --num-envs)"
    assert lead(message, {"total_steps": 5, "num_envs": 8}) == f"--total-steps 5 --num-envs 8: {message}"
    # in the order the message names them; a field of another algorithm's config only is not offered
    assert lead("learning_starts=9 and batch_size=4 with num_steps=2", {"algo": "dqn"}).endswith(
        "(set with --learning-starts, --batch-size)")
    assert lead("learning_starts=9 with num_steps=2", {"algo": "ppo"}).endswith("(set with --num-steps)")
    # a one-word field counts as `field=`, not as a word of the prose
    assert lead("a recurrent network keeps env sequences whole", {}) == "a recurrent network keeps env sequences whole"
    assert lead("network='mlp' needs a flat vector", {}) == "network='mlp' needs a flat vector (set with --network)"
    # from the command line: DQN's default learning_starts leaves a short run no gradient step
    assert cli.main(["train", "--algo", "dqn", "--total-steps", "1000", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxrl-rollout: error: --total-steps 1000: learning_starts=10000 leaves no gradient step")
    assert err.rstrip().endswith("or raise total_timesteps. (set with --learning-starts, --num-envs)"), err
    assert not (tmp_path / "x").exists()


def test_inf_is_no_limit_for_the_thresholds_that_take_it(capsys):
    """Python took PPOHParams(max_grad_norm=inf) and TD3HParams(noise_clip=inf) (no limit); the command line
    refused them as not finite. Every other hyperparameter stays finite."""
    parser = cli.build_parser()
    args = parser.parse_args(["train", "--max-grad-norm", "inf,0.5", "--noise-clip", "inf"])
    assert args.max_grad_norm == [float("inf"), 0.5] and args.noise_clip == [float("inf")]
    for argv, words in ((["--lr", "inf"], "--lr: expected a finite number, got 'inf'"),
                        (["--max-grad-norm", "nan"], "--max-grad-norm: expected a finite number or inf (no limit), "
                                                     "got 'nan'"),
                        (["--noise-clip=-inf"], "--noise-clip: expected a finite number or inf (no limit)")):
        with pytest.raises(SystemExit):
            parser.parse_args(["train", *argv])
        assert words in capsys.readouterr().err, argv


def test_bad_values_exit_non_zero(capsys):
    cases = {
        ("rollout", "--num-steps", "0"): "expected a positive integer",
        ("train", "--algo", "ddpg"): "invalid choice: 'ddpg'",
        ("train", "--seeds", "-1"): "--seeds: expected a positive integer",
        # a count written as a number (1e6) is taken when it is a whole one; any other is refused, not rounded
        ("train", "--total-steps", "1.5e0"): "--total-steps: expected a positive integer, got '1.5e0'",
        ("train", "--buffer-size", "2.5"): "--buffer-size: expected an integer, got '2.5'",
        ("train", "--learning-starts", "1e-3"): "--learning-starts: expected an integer, got '1e-3'",
        ("train", "--total-steps", "inf"): "--total-steps: expected a positive integer, got 'inf'",
        ("train", "--total-steps", "1e999999999"): "--total-steps: expected a positive integer, got '1e999999999'",
        ("train", "--total-steps", "1e10"): "--total-steps: expected at most 2,147,483,647",
        ("train", "--lr", "abc"): "--lr: expected a number, got 'abc'",
        ("train", "--lr", "1e-3,1e-3"): "--lr: expected distinct values",
        # the same float32: two grid points that trained the same run under the same label
        ("train", "--lr", "1e-3,1.00000001e-3"): "--lr: expected distinct values, got '1e-3,1.00000001e-3', which are "
                                                 "not all distinct in float32",
        ("train", "--ent-coef", "nan"): "--ent-coef: expected a finite number",
        ("train", "--bootstrap-on-truncation", "maybe"): "expected true or false, got 'maybe'",
        ("train", "--hidden-sizes", "64,x"): "expected comma-separated integers",
        ("train", "--no-such-option", "1"): "unrecognized arguments: --no-such-option",
        ("evaluate", "runs/x", "--bogus"): "unrecognized arguments: --bogus",
        # an empty folder (`--resume "$RUN"` with RUN unset) read as not given: a fresh default run started
        ("train", "--resume", ""): "argument --resume: expected a folder, got ''",
        ("train", "--out", ""): "argument --out: expected a folder, got ''",
        ("evaluate", ""): "argument folder: expected a folder, got ''",
        ("train", "--host-devices", "0"): "--host-devices: expected a positive int or 'auto', got '0'",
        ("train", "--host-devices", "two"): "--host-devices: expected a positive int or 'auto', got 'two'",
        # a seed jax.random.key cannot take was an OverflowError traceback in all three commands; one it takes
        # but cuts to its low 32 bits silently repeated another (2**32 trained and evaluated seed 0's runs)
        ("train", "--seed", str(2**63)): f"--seed: expected an integer from 0 to 2**32 - 1 = 4,294,967,295 "
                                         f"(jax.random.key keeps a seed's low 32 bits), got '{2**63}'",
        ("train", "--seed", str(2**32)): "--seed: expected an integer from 0 to 2**32 - 1 = 4,294,967,295",
        ("evaluate", "runs/x", "--seed", "99999999999999999999"): "--seed: expected an integer from 0 to 2**32 - 1",
        ("evaluate", "runs/x", "--seed", "-1"): "--seed: expected an integer from 0 to 2**32 - 1",
        ("rollout", "--seed", str(-2**63 - 1)): "--seed: expected an integer from 0 to 2**32 - 1",
    }
    for argv, message in cases.items():
        with pytest.raises(SystemExit) as info:
            cli.main(list(argv))
        assert info.value.code == 2, argv
        err = capsys.readouterr().err
        # one line: the error and where the help is, not argparse's usage block above it
        assert message in err and len(err.strip().splitlines()) == 1, (argv, err)
        # the command's own parser, whose help lists its options (an unknown option pointed at the top one's)
        prog = f"jaxrl-rollout {argv[0]}"
        assert err.startswith(f"{prog}: error: ") and err.endswith(f" (see {prog} --help)\n"), (argv, err)


def test_the_seed_option_takes_exactly_the_seeds_a_run_spec_takes():
    """cli._seed keeps its own literal (importing runner would import jax to parse a flag): it is runner's."""
    import argparse

    from jaxrl_rollout import runner

    assert cli._seed(str(runner.MAX_SEED)) == runner.MAX_SEED and cli._seed("0") == 0
    for refused in (runner.MAX_SEED + 1, -1):
        with pytest.raises(argparse.ArgumentTypeError, match=f"to 2\\*\\*32 - 1 = {runner.MAX_SEED:,}"):
            cli._seed(str(refused))


def test_counts_take_the_forms_they_are_written_in():
    """`--total-steps 1e6` (how step counts are written in papers and in PureJaxRL's configs) was refused as not
    an integer; a whole number in any form is taken, as the int it is, and `--algo` in any case."""
    parser = cli.build_parser()
    args = parser.parse_args(["train", "--algo", "SAC", "--total-steps", "1e6", "--buffer-size", "2.5E5",
                              "--learning-starts", "5_000", "--seeds", "4.0", "--seed", "1e3"])
    assert (args.algo, args.total_steps, args.buffer_size, args.learning_starts, args.seeds, args.seed) == (
        "sac", 1_000_000, 250_000, 5_000, 4, 1_000)
    assert all(type(v) is int for v in (args.total_steps, args.buffer_size, args.learning_starts, args.seeds))
    assert parser.parse_args(["rollout", "--num-steps", "1e3"]).num_steps == 1000
    # and counts are printed as counts: "--num-eval 1" said "1 episodes per run"
    assert (cli._count(1, "episode"), cli._count(10, "episode"), cli._count(1000, "episode")) == (
        "1 episode", "10 episodes", "1,000 episodes")


def test_the_help_examples_parse():
    import shlex

    epilog = cli.build_parser().epilog
    examples = [line.split("#")[0] for line in epilog.splitlines() if line.startswith("  jaxrl-rollout ")]
    assert len(examples) == 6
    for line in examples:
        args = cli.build_parser().parse_args(shlex.split(line)[1:])
        assert args.command in ("train", "evaluate", "rollout"), line


@pytest.mark.parametrize("project, why", [("a/b", "it holds /"), ("x" * 129, "it has 129 characters")])
def test_a_wandb_project_name_that_wandb_refuses_is_refused_before_the_folder(tmp_path, capsys, project, why):
    """W&B refused it at its first run, after the first chunk had trained: a traceback, and a folder left."""
    assert cli.main(["train", "--wandb", "offline", "--wandb-project", project, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jaxrl-rollout: error: --wandb-project {project}: W&B project names have 1 to 128 "
                          "characters and none of / \\ # ? % :;") and err.endswith(f"{why}.\n"), err
    assert not (tmp_path / "run").exists()


def test_a_wandb_project_without_wandb_is_refused(tmp_path, capsys):
    """--wandb-project without --wandb trained the default job and logged nowhere."""
    assert cli.main(["train", "--wandb-project", "x", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == ("jaxrl-rollout: error: --wandb-project x: names the W&B project of --wandb "
                                       "offline|online, which is off; add --wandb offline (or online), or drop "
                                       "--wandb-project.\n")
    assert not (tmp_path / "run").exists()


def test_an_unknown_command_is_one_line_with_the_closest_one(capsys):
    assert cli.main(["trian", "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert err == ("jaxrl-rollout: error: unknown command 'trian': the commands are train, evaluate and rollout "
                   "(with none, train); did you mean train?\n")
    assert cli.main(["runs/ppo"]) == 2
    assert "unknown command 'runs/ppo'" in capsys.readouterr().err


def test_version_prints_what_a_bug_report_needs(capsys):
    import platform
    from importlib import metadata

    import jaxrl_rollout

    for flag in ("--version", "-V"):
        assert cli.main([flag]) == 0
        out = capsys.readouterr().out
        assert out == (f"jaxrl-rollout {jaxrl_rollout.__version__} (Python {platform.python_version()}, "
                       f"jax {metadata.version('jax')}, jaxlib {metadata.version('jaxlib')}, "
                       f"flax {metadata.version('flax')}, gymnax {metadata.version('gymnax')})\n")
    assert jaxrl_rollout.__version__ == metadata.version("jaxrl-rollout")  # the package and pyproject agree
    assert "-V, --version" in cli.build_parser().format_help()
    with pytest.raises(SystemExit) as done:  # the parser's own flag says the same
        cli.build_parser().parse_args(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == out


def test_host_devices_too_late_is_a_clear_error(capsys, tmp_path):
    import jax

    have = len(jax.devices("cpu"))  # JAX runs in this process: its CPU device count is fixed
    assert cli.main(["--host-devices", str(have + 1), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"--host-devices {have + 1}: use_host_cores({have + 1}): JAX has already started its CPU backend" in err
    assert not (tmp_path / "run").exists()
    # auto keeps the running backend's devices instead of failing
    assert cli._configure_jax_early(["train"]) is None and len(jax.devices("cpu")) == have


def test_evaluate_uses_the_saved_observation_statistics(tmp_path, capsys):
    # A run with observation normalisation acts on normalised observations, so its saved policy must be
    # evaluated through the saved running statistics (Algorithm.policy_params), not the raw params.
    import jax

    import jaxrl_rollout as jr
    from jaxrl_rollout.runner import load_run, make_algorithm

    folder = tmp_path / "norm"
    args = ["--env", "Pendulum-v1", "--normalize-observations", "true", "--normalize-rewards", "true",
            "--num-envs", "2", "--num-steps", "8", "--total-steps", "32", "--update-epochs", "1",
            "--num-minibatches", "1", "--seeds", "2", "--num-eval", "1", "--out", str(folder)]
    assert cli.main(args) == 0
    spec, state, _, _ = load_run(folder)
    algo = make_algorithm(spec)
    assert state.rollout.obs_rms.count.shape == (2,) and state.reward_scale.returns.shape == (2, 2)
    key = jax.random.key(4)
    got = cli.evaluate_runs(spec, state, 1, key, deterministic=True)
    keys = jax.random.split(key, spec.num_runs)
    for r in range(spec.num_runs):
        run = jax.tree.map(lambda x: x[r], state)
        want = jr.evaluate(algo.env, algo.env_params, algo.eval_policy_fn, (run.rollout.obs_rms, run.params),
                           keys[r], 1).returns
        np.testing.assert_allclose(got[r], want, rtol=1e-5)


# Two-player games by self-play, win/draw/loss at the end, per evaluation and in `evaluate`: the pgx row of
# tests/test_user_suites.py.


def test_an_env_whose_data_cannot_be_downloaded_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """gymnax's MNISTBandit-bsuite downloads MNIST when it is made: offline, that was urllib's bare
    "<urlopen error ...>"; it now names the env and what to do, exit 2, nothing written."""
    import urllib.error

    import gymnax

    def offline(env_id, **kwargs):
        raise urllib.error.URLError(OSError(-2, "Name or service not known"))

    monkeypatch.setattr(gymnax, "make", offline)
    folder = tmp_path / "offline"
    assert cli.main(["train", "--env", "MNISTBandit-bsuite", "--total-steps", "2048", "--out", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gymnax's MNISTBandit-bsuite downloads its data when it is made" in err[0], err
    assert not folder.exists()


def test_a_missing_extra_is_one_line_naming_it_before_anything_is_written(sweep_run, tmp_path, capsys, monkeypatch):
    """A suite, `wandb` or `video` not installed: one line with the pip install, exit 2, no folder (it was a
    60-line traceback, exit 1, for a suite; for --wandb a traceback after the run folder was written)."""
    import sys

    for module in ("brax", "brax.envs", "jumanji", "wandb", "imageio", "imageio.v3"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed

    def one_line(extra):
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"pip install 'jaxrl-rollout[{extra}]'" in err, err

    folder = tmp_path / "new"
    assert cli.main(["train", "--env", "brax/inverted_pendulum", "--out", str(folder)]) == 2
    one_line("brax")
    assert cli.main(["train", "--total-steps", "2048", "--wandb", "offline", "--out", str(folder)]) == 2
    one_line("wandb")
    assert not folder.exists()
    before = _tree(sweep_run)
    assert cli.main(["train", "--resume", str(sweep_run), "--wandb", "offline"]) == 2
    one_line("wandb")
    assert cli.main(["rollout", "--env", "jumanji/Snake-v1"]) == 2
    one_line("jumanji")
    assert cli.main(["evaluate", str(sweep_run), "--video"]) == 2  # before every run is evaluated
    one_line("video")
    assert _tree(sweep_run) == before


def test_evaluate_checks_its_video_runs_before_evaluating(sweep_run, capsys):
    for runs, message in (("99", "--runs: run '99' in selector '99' is not a run index"), ("bets", "unknown run 'bets'")):
        assert cli.main(["evaluate", str(sweep_run), "--video", "--runs", runs]) == 2
        out, err = capsys.readouterr()
        assert out == "" and message in err and err.count("\n") == 1, (out, err)  # no evaluation table first


def test_evaluate_checks_its_videos_folder_before_evaluating(sweep_run, tmp_path, capsys):
    """A videos folder it cannot write in was reported after every run had been evaluated."""
    folder = tmp_path / "copy"
    shutil.copytree(sweep_run, folder)
    (folder / "videos").write_text("not a folder")
    assert cli.main(["evaluate", str(folder), "--video"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"jaxrl-rollout: error: --video: cannot write in {folder / 'videos'} (")
    assert err.count("\n") == 1, err


def test_evaluate_videos_are_named_by_checkpoint_and_seed_and_a_folder_in_their_way_is_one_line(tmp_path, capsys,
                                                                                             monkeypatch):
    """`evaluate --video` wrote seed0_return<R>.mp4 whatever the checkpoint and --seed: the videos of a stopped run,
    of the same run finished, and of another --seed lay side by side under names that did not tell them apart."""
    monkeypatch.chdir(tmp_path)  # a relative folder, as typed
    assert cli.main(["train", *SWEEP, "--out", "part", "--stop-after-chunks", "1", "--tensorboard", "false"]) == 0
    evaluate = ["evaluate", "part", "--num-episodes", "1", "--video", "--runs", "0"]
    assert cli.main(evaluate) == 0  # after chunk 1: update 3 of 7
    assert cli.main(["train", "--resume", "part", "--num-eval", "2"]) == 0
    assert cli.main(evaluate) == 0 and cli.main([*evaluate, "--seed", "1"]) == 0
    out = capsys.readouterr().out
    names = sorted(p.name for p in (tmp_path / "part" / "videos").iterdir())
    assert [n.split("_return")[0] for n in names] == ["update3_evalseed0_lr=0.001_seed0", "update7_evalseed0_lr=0.001_seed0",
                                                      "update7_evalseed1_lr=0.001_seed0"], names
    assert "run 0: return " in out and names[1] in out
    # a folder in the way of a video: one line naming it (it was ffmpeg's messages and a BrokenPipe traceback)
    (tmp_path / "part" / "videos" / names[1]).unlink()
    (tmp_path / "part" / "videos" / names[1]).mkdir()
    assert cli.main(evaluate) == 2
    err = capsys.readouterr().err
    assert err == (f"jaxrl-rollout: error: --video: cannot write the video {pathlib.Path('part', 'videos', names[1])}: "
                   "a folder of that name is there.\n"), err
    # (the video is written under a hidden name until its episode's return names it: none is left behind)
    assert not [p.name for p in (tmp_path / "part" / "videos").iterdir() if p.name.startswith(".")]


def test_an_empty_video_run_selector_is_refused_naming_its_option(sweep_run, tmp_path, capsys):
    """`--video-runs ''` recorded run 0 (`args.video_runs or "0"`)."""
    folder = tmp_path / "run"
    assert cli.main(["train", *SWEEP, "--video-every", "1", "--video-runs", "", "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err == ("jaxrl-rollout: error: --video-runs: empty run selector '': it takes 'all', 'best', 'worst' or run "
                   "indices 0..3, comma-separated (e.g. 'best,worst,0,3').\n"), err
    assert not folder.exists()
    assert cli.main(["evaluate", str(sweep_run), "--video", "--runs", ""]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("jaxrl-rollout: error: --runs: empty run selector ''") and err.count("\n") == 1


def test_a_renderers_missing_package_stops_train_and_evaluate_before_they_run(sweep_run, tmp_path, capsys, monkeypatch):
    """Without pygame, `train --video-every` trained chunks, then died at its first video without a checkpoint
    (only imageio was checked), and `evaluate --video` failed after evaluating every run."""
    import sys

    monkeypatch.setitem(sys.modules, "pygame", None)  # as if not installed
    folder = tmp_path / "run"
    assert cli.main(["train", *SWEEP, "--video-every", "1", "--out", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert "chunk" not in out and not folder.exists()
    assert err.startswith("jaxrl-rollout: error: --video-every: drawing gymnax's CartPole-v1 needs the optional "
                          "`video` extra (pygame could not be imported") and err.count("\n") == 1, err
    assert "pip install 'jaxrl-rollout[video]'" in err
    assert cli.main(["evaluate", str(sweep_run), "--video"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("jaxrl-rollout: error: --video: drawing gymnax's CartPole-v1") \
        and err.count("\n") == 1, (out, err)
    assert not (sweep_run / "videos").exists()


def test_a_video_that_fails_mid_run_ends_the_videos_not_the_run(tmp_path, capsys, monkeypatch):
    """The `train --video-every` hook let an ImportError (a package gone mid-run) through, ending the run."""
    from jaxrl_rollout import _extras, video

    calls = []

    class Failing:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, state, updates_done):
            calls.append(updates_done)
            raise _extras.missing("drawing gymnax's CartPole-v1", "video", "pygame could not be imported")

    monkeypatch.setattr(video, "TrainingVideos", Failing)
    args = cli.build_parser().parse_args(["train", *SWEEP, "--video-every", "1"])
    spec = cli._build_spec(cli._given(args))
    on_state = cli._training_videos(args, spec, tmp_path, [], 0)
    on_state(None, 1)
    on_state(None, 2)  # no more videos after the first failure
    assert calls == [1]
    err = capsys.readouterr().err
    assert err.count("--video-every: no more videos (MissingExtra: drawing gymnax's CartPole-v1") == 1, err


def test_evaluate_compiles_both_columns_once_and_each_equals_its_own_policy(sweep_run):
    """`evaluate`'s one program gives, bit for bit, the deterministic and stochastic columns of two separate calls."""
    import jax

    from jaxrl_rollout import runner

    spec, state, _, _ = runner.load_run(sweep_run)
    algorithm = runner.make_algorithm(spec)
    keys = [jax.random.fold_in(jax.random.key(7), i) for i in (0, 1)]
    det, sto = cli.evaluate_both(spec, state, 3, keys, algorithm)
    np.testing.assert_array_equal(det, cli.evaluate_runs(spec, state, 3, keys[0], True, algorithm))
    np.testing.assert_array_equal(sto, cli.evaluate_runs(spec, state, 3, keys[1], False, algorithm))
    assert not np.array_equal(det, sto)  # the flag picks different policies


def test_evaluate_compiles_each_column_apart_when_the_policies_outputs_differ(sweep_run, monkeypatch):
    """A deterministic policy whose value is bfloat16 cannot share a program with the float32 stochastic one:
    `evaluate_both` falls back to one `evaluate_runs` call per column, and gives what those calls give."""
    import jax
    import jax.numpy as jnp

    from jaxrl_rollout import runner

    spec, state, _, _ = runner.load_run(sweep_run)
    algorithm = runner.make_algorithm(spec)
    mode = algorithm.eval_policy_fn
    algorithm = algorithm._replace(eval_policy_fn=lambda p, *a: mode(p, *a)._replace(
        value=mode(p, *a).value.astype(jnp.bfloat16)))
    keys = [jax.random.fold_in(jax.random.key(7), i) for i in (0, 1)]
    want = [cli.evaluate_runs(spec, state, 3, keys[0], True, algorithm),
            cli.evaluate_runs(spec, state, 3, keys[1], False, algorithm)]
    calls = []
    separate = cli.evaluate_runs
    monkeypatch.setattr(cli, "evaluate_runs", lambda *a, **k: calls.append(a[4]) or separate(*a, **k))
    det, sto = cli.evaluate_both(spec, state, 3, keys, algorithm)
    assert calls == [True, False]  # the fallback ran, one program per column
    np.testing.assert_array_equal(det, want[0])
    np.testing.assert_array_equal(sto, want[1])


@pytest.mark.parametrize("returns, runs, note", [
    ((500.0,), "best,worst", True),            # every run returned the same: argmax and argmin are run 0
    ((500.0, 180.0), "best,worst", False),     # two runs, two videos
    ((500.0,), "best", False),                 # one video because one was asked for
])
def test_evaluate_video_says_when_best_and_worst_are_one_run(returns, runs, note, tmp_path, monkeypatch, capsys):
    """`evaluate --video --runs best,worst` over runs whose episodes all returned the same writes one video, and says
    why (write_episode_videos is replaced: what is checked is the command's account of what it wrote)."""
    import pathlib
    import types

    import jax
    import jax.numpy as jnp

    from jaxrl_rollout import runner, video

    def written(folder, *args, **kwargs):
        return [video.EpisodeVideo(run=r, path=pathlib.Path(folder, f"seed{r}.mp4"), episode_return=g, length=int(g))
                for r, g in enumerate(returns)]

    monkeypatch.setattr(video, "write_episode_videos", written)
    spec = runner.RunSpec("ppo", ppo.PPOConfig(), (ppo.PPOHParams(),), 4)
    algorithm = types.SimpleNamespace(recurrent=False, env=None, env_params=None, eval_policy_fn=None,
                                      policy_params=lambda state: state)
    cli._write_videos(types.SimpleNamespace(folder=str(tmp_path), runs=runs, seed=0, video_max_steps=None,
                                            env_option=None), spec, jnp.zeros(4),
                      jax.random.key(0), algorithm, spec.config.num_updates)
    out = capsys.readouterr().out
    assert out.count("    run ") == len(returns)
    assert ("(best and worst are that one run: every run's episode returned 500.0)" in out) == note, out


def test_the_continue_command_keeps_a_multi_process_runs_options():
    """--distributed and its options are the command's, not the run's: the printed --resume dropped them, so each
    host pasting it resumed the same folder as an independent single-process run."""
    argv = ["train", "--distributed", "--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "1",
            "--out", "x"]
    # (only process 0 prints it: its --process-id 0 pasted on every host would clash, so each host adds its own)
    assert cli._resume_command(cli.build_parser().parse_args(argv), "x") == (
        "jaxrl-rollout train --resume x --distributed --coordinator 127.0.0.1:1234 --num-processes 2 (on each host, "
        "with its own --process-id)")
    assert cli._resume_command(cli.build_parser().parse_args(["train", "--out", "x"]), "x") == \
        "jaxrl-rollout train --resume x"
    command = cli._resume_command(cli.build_parser().parse_args(argv), "x").split(" (")[0]
    resumed = cli.build_parser().parse_args([*command.split()[1:], "--process-id", "1"])
    assert (resumed.distributed, resumed.coordinator, resumed.num_processes, resumed.process_id) == (
        True, "127.0.0.1:1234", 2, 1)


@pytest.mark.parametrize("command", ["evaluate", "rollout"])
@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_evaluate_and_rollout_unwind_on_sigterm_and_sighup_as_on_ctrl_c(command, name, sweep_run, monkeypatch,
                                                                       capsys):
    """A job scheduler's SIGTERM or a closed terminal's SIGHUP raises at once in `evaluate` and `rollout` (no chunk
    boundary to wait for), so the command unwinds as a Ctrl-C does (its `finally`s run: a video's temporary file
    removed, ffmpeg ended) and exits 128 + the signal's number, with one line; the handlers are put back after."""
    import signal
    import time

    sig = getattr(signal, name)
    unwound = []

    def signalled(*args, **kwargs):
        try:
            os.kill(os.getpid(), sig)
            time.sleep(30)  # the handler raises here, in Python, long before
        finally:
            unwound.append(name)
        raise AssertionError("the signal did not interrupt the command")

    def left_alone(signum, frame):  # the signal's default would end this test process: a plain failure instead
        raise RuntimeError(f"the command left {name} to the handler it found")

    monkeypatch.setattr(cli, "_evaluate" if command == "evaluate" else "run_rollout", signalled)
    previous = signal.signal(sig, left_alone)
    try:
        before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
        argv = ["evaluate", str(sweep_run)] if command == "evaluate" else ["rollout", "--num-steps", "8"]
        start = time.perf_counter()
        assert cli.main(argv) == 128 + int(sig)
        assert time.perf_counter() - start < 20 and unwound == [name]
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"jaxrl-rollout: interrupted ({name})"
        assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)] == before
    finally:
        signal.signal(sig, previous)


@pytest.mark.parametrize("command", ["train", "evaluate", "rollout"])
def test_a_signal_during_xlas_compile_stops_the_command_at_once(command, sweep_run, tmp_path, monkeypatch, capsys):
    """XLA's compile runs in C++, where Python runs no signal handler: a Ctrl-C or SIGTERM during a large program's
    compile (craftax's takes a minute on a CPU) was acted on only when the compile ended. The commands now wait for
    it where a handler runs (`_signals.compiled`), and stop at once: nothing has run, so nothing is lost. Here the
    first compile sends SIGTERM and then holds XLA for 20 s (a host callback that sleeps, waited for in C++); the
    command must be back, with exit 143 and its one line, long before. An interrupted new run resumes from its
    folder with no checkpoint."""
    import signal
    import threading
    import time

    import jax
    import jax.numpy as jnp

    from jaxrl_rollout import checkpoint, runner

    held = jax.jit(lambda x: jax.pure_callback(lambda v: (time.sleep(20), v)[1], jax.ShapeDtypeStruct((), x.dtype), x))
    real_compile, released = jax.stages.Lowered.compile, threading.Event()

    def compile_held(self, *args, **kwargs):
        if threading.current_thread() is threading.main_thread():
            raise AssertionError("XLA's compile was waited for on the main thread")
        if not released.is_set():
            released.set()
            os.kill(os.getpid(), signal.SIGTERM)
            jax.block_until_ready(held(jnp.float32(0)))
        return real_compile(self, *args, **kwargs)

    def left_alone(signum, frame):  # the signal's default would end this test process: a plain failure instead
        raise AssertionError(f"{command} left SIGTERM to the handler it found")

    folder = tmp_path / "run"
    # (train: another config than the module's runs, whose programs this process keeps compiled)
    argv = {"train": ["train", *SWEEP, "--num-envs", "2", "--out", str(folder), "--compile-cache", "off"],
            "evaluate": ["evaluate", str(sweep_run), "--compile-cache", "off"],
            "rollout": ["rollout", "--num-steps", "8"]}[command]
    monkeypatch.setattr(jax.stages.Lowered, "compile", compile_held)
    previous = signal.signal(signal.SIGTERM, left_alone)
    try:
        start = time.perf_counter()
        assert cli.main(argv) == 143
        assert time.perf_counter() - start < 15 and released.is_set()
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    if command == "train":
        assert "  interrupted while compiling\n" in err, err
        assert err.strip().splitlines()[-1] == f"interrupted; continue with: jaxrl-rollout train --resume {folder} " \
                                               "--num-eval 2 --compile-cache off", err
        assert not checkpoint.exists(folder)
        monkeypatch.setattr(jax.stages.Lowered, "compile", real_compile)
        assert cli.main(["train", "--resume", str(folder)]) == 0
        assert "interrupted" not in capsys.readouterr().err
        assert runner.load_run(folder)[0].config.num_envs == 2
    else:
        assert err.strip().splitlines()[-1] == "jaxrl-rollout: interrupted (SIGTERM)", err


def test_a_signal_during_rollouts_run_stops_it_at_once(monkeypatch, capsys):
    """`rollout` waits for its run in Python (`_signals.ready_time`), where a signal's handler runs: a Ctrl-C or
    SIGTERM during a long rollout stops it then, not when the whole rollout is done (a wait inside XLA would hold
    it). The signal is sent as the wait begins."""
    import signal

    from jaxrl_rollout import _signals

    waited = []

    def ready_time(tree, ready=_signals.ready_time):
        waited.append(tree)
        os.kill(os.getpid(), signal.SIGTERM)
        return ready(tree)

    def left_alone(signum, frame):  # the signal's default would end this test process: a plain failure instead
        raise AssertionError("rollout left SIGTERM to the handler it found")

    monkeypatch.setattr(_signals, "ready_time", ready_time)
    previous = signal.signal(signal.SIGTERM, left_alone)
    try:
        assert cli.main(["rollout", "--num-steps", "64"]) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    out, err = capsys.readouterr()
    assert waited and "rollout:" not in out and err.strip().splitlines()[-1] == "jaxrl-rollout: interrupted (SIGTERM)"



def test_an_evaluation_past_the_free_memory_is_one_line_naming_its_episodes(sweep_run, capsys, monkeypatch,
                                                                           tmp_path):
    """`evaluate` plays every episode of every run at once: on a CPU, an evaluation whose working memory fits in the
    machine's memory but not in what is free was ended by the kernel (no message); it is refused once compiled, in
    one line naming --num-episodes (train's closing evaluation: --num-eval). So is a `rollout` (--num-envs)."""
    import jax

    from jaxrl_rollout import _memory, runner

    monkeypatch.setattr(_memory, "free_host_bytes", lambda: 1000)
    assert cli.main(["evaluate", str(sweep_run), "--num-episodes", "3"]) == 2
    out, err = capsys.readouterr()
    assert re.fullmatch(r"jaxrl-rollout: error: this evaluation cannot fit in the 1 kB of memory free on this machine "
                        r"\(/proc/meminfo's MemAvailable and SwapFree, or its cgroup's limit\): it works in [\d.]+ [kM]B "
                        r"\(XLA's temp buffers: the 3 episodes of each of its 4 runs, played at once\); lower "
                        r"--num-episodes\.", err.strip()), err
    assert "deterministic" not in out  # (nothing was played)
    spec, state, _, _ = runner.load_run(sweep_run)
    with pytest.raises(runner.StatesTooLarge, match=r"the 3 episodes of each of its 4 runs, played at once\); lower "
                                                    r"--num-eval\.$") as refused:
        cli.evaluate_runs(spec, state, 3, jax.random.key(0), True, option="--num-eval")
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: refused.value.need)  # exactly what it needs: played
    assert cli.evaluate_runs(spec, state, 3, jax.random.key(0), True).shape == (4, 3)
    # train's closing evaluation comes after the run is saved: the line says so, and how to evaluate it with fewer
    # episodes (not that the folder keeps the config, the advice for a run refused before it trains)
    folder = tmp_path / "complete"
    shutil.copytree(sweep_run, folder)
    monkeypatch.setattr(runner, "_check_states_fit", lambda *args, **kwargs: None)  # (the resume's states fit)
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: 1000)
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(folder), "--num-eval", "3"]) == 2  # a complete run: its evaluation
    out, err = capsys.readouterr()
    assert "deterministic evaluation" not in out and err.count("error") == 1, err
    assert err.strip().splitlines()[-1].endswith(f"played at once); lower --num-eval. The run is complete and saved in {folder}: evaluate "
                                f"it with fewer episodes, jaxrl-rollout evaluate {folder} --num-episodes N."), err
    # `rollout` keeps up to 1,024 steps of every env: refused before it runs, naming --num-envs; then its evaluation
    capsys.readouterr()
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: 1000)
    assert cli.main(["rollout", "--num-envs", "3", "--num-steps", "8", "--num-eval", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and re.fullmatch(r"jaxrl-rollout: error: this rollout cannot fit in the 1 kB of memory free on "
                                      r"this machine \(.*\): it works in [\d.]+ kB \(XLA's temp buffers: 3 envs "
                                      r"stepped at once, up to 8 steps of each kept\); lower --num-envs\.", err.strip()), err
    answers = iter([10**12, 1000])  # the rollout fits, its evaluation does not
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: next(answers))
    assert cli.main(["rollout", "--num-envs", "3", "--num-steps", "8", "--num-eval", "2"]) == 2
    assert capsys.readouterr().err.strip().endswith("(XLA's temp buffers: the 2 episodes of its policy, played at "
                                                    "once); lower --num-eval.")


def test_states_past_the_free_memory_are_one_line_naming_the_folder_that_keeps_the_config(capsys, monkeypatch, tmp_path):
    """`train --algo sac --buffer-size 1e9` on a CPU: the kernel ended the process, exit 137 and no message; now one
    line (runner.StatesTooLarge) with the options that size the states, and that --out keeps the run's config."""
    from jaxrl_rollout import _memory

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: 10**6)  # 1 MB: under DQN's default 10,000 transitions
    assert cli.main(["train", "--algo", "dqn", "--seeds", "1", "--out", "runs/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("jaxrl-rollout: error: this run cannot fit in the 1 MB of memory free on this machine"), err
    assert err.endswith("--optimize-memory-usage true). runs/x keeps this run's config, so give the new settings "
                        "another --out."), err


def test_a_librarys_warning_is_one_line_naming_the_library(monkeypatch, capsys):
    """A warning while a command runs (brax's notice that it is not maintained) is one line that names the library,
    not Python's file path in site-packages followed by the source line that warned; Python's display is back after."""
    import warnings

    site = "/env/lib/python3.11/site-packages/brax/io/mjcf.py"

    def warns(argv):
        warnings.warn_explicit("Brax System ... is not\n maintained.", UserWarning, site, 480)
        warnings.warn_explicit("a note of our own", RuntimeWarning, cli.__file__, 1)
        return 0

    monkeypatch.setattr(cli, "_main", warns)
    before = warnings.formatwarning, warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        # Python's display, which writes `warnings.formatwarning`'s text to stderr (pytest's records them instead)
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
            warnings.formatwarning(message, category, filename, lineno, line))
        assert cli.main(["rollout"]) == 0
    assert capsys.readouterr().err == (
        "jaxrl-rollout: warning from brax (UserWarning): Brax System ... is not maintained.\n"
        "jaxrl-rollout: warning from jaxrl_rollout (RuntimeWarning): a note of our own\n")
    assert (warnings.formatwarning, warnings.showwarning) == before
    with warnings.catch_warnings(record=True) as caught:  # a caller's record still gets them, unformatted
        warnings.simplefilter("always")
        assert cli.main(["rollout"]) == 0
    assert [w.category for w in caught] == [UserWarning, RuntimeWarning] and capsys.readouterr().err == ""


def test_commands_started_in_the_same_second_get_default_run_folders_of_their_own(tmp_path):
    """The default run folder is stamped to the second; a second command in the same second (`python -m jaxrl_rollout
    --seed 1 & python -m jaxrl_rollout --seed 2`) was refused with the first's folder, which held another run. Each
    now gets the first of STAMP, STAMP-2, ... that it creates itself, however many start at once."""
    import concurrent.futures

    base = tmp_path / "runs" / "ppo-CartPole-v1-20261206-183458"  # runs/ made on the way, as on a first run
    assert cli._new_folder(base) == base and base.is_dir()
    assert cli._new_folder(base) == base.with_name(base.name + "-2")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: cli._new_folder(base), range(8)))
    assert sorted(p.name for p in made) == sorted(f"{base.name}-{n}" for n in range(3, 11))
    assert all(p.is_dir() and not any(p.iterdir()) for p in made)


def test_a_leading_tilde_in_a_folder_or_file_option_is_the_home_folder(tmp_path, monkeypatch, capsys):
    """The shell expands ~ only at the start of a word: `--out=~/runs/x` (or a quoted "~/runs/x") reached the command
    as typed and made a folder named ~ in the current one. Every folder and file option reads it as the home folder."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    parser = cli.build_parser()
    for argv, name in ((["train", "--out=~/runs/x"], "out"), (["train", "--resume", "~/runs/x"], "resume"),
                       (["train", "--config", "~/runs/x"], "config"), (["evaluate", "~/runs/x"], "folder"),
                       (["evaluate", "runs/y", "--csv=~/runs/x"], "csv"), (["rollout", "--video=~/runs/x"], "video")):
        assert getattr(parser.parse_args(argv), name) == str(home / "runs" / "x"), argv
    assert parser.parse_args(["evaluate", "runs/y", "--csv", "-"]).csv == "-"  # stdout stays stdout
    assert parser.parse_args(["rollout", "--video"]).video == "videos"
    monkeypatch.chdir(tmp_path)
    assert cli.main(["evaluate", "~/runs/x"]) == 2  # named as the home folder's, and nothing made
    assert capsys.readouterr().err == f"jaxrl-rollout: error: {home / 'runs' / 'x'} does not exist.\n"
    assert not (tmp_path / "~").exists()


def test_the_run_line_gives_the_chunks_rate_and_the_time_outside_them_apart(tmp_path, capsys, monkeypatch):
    """Host work outside the chunks (here a video hook taking 2 s) was counted in the run's env steps/s: a video of
    jumanji's Snake took 107 of a run's 110 s, and its rate read 10 env steps/s against the chunks' 403. The rate is
    the chunks' own now, and the work outside them is told apart."""
    import time

    from jaxrl_rollout import video

    class Slow:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, state, updates_done):
            if updates_done == 3:
                time.sleep(2.0)

    monkeypatch.setattr(video, "TrainingVideos", Slow)
    assert cli.main(["train", *SWEEP, "--video-every", "3", "--tensorboard", "false", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    line = re.search(r"run (\d+\.\d) s \(([\d,]+) env steps/s over all runs.*; (\d+\.\d) s of the run went to "
                     r"checkpoints, logs and videos outside the chunks\)", out)
    assert line, out
    run_s, rate, between = float(line.group(1)), int(line.group(2).replace(",", "")), float(line.group(3))
    steps = 7 * 4 * 8 * 4  # updates x envs x steps x runs
    assert 2.0 <= between <= run_s and rate >= 2 * steps / run_s, out
