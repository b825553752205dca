"""A run's files: atomic writes, symbolic links out of the folder, a full disk, and W&B offline staying offline."""

import contextlib
import csv
import dataclasses
import errno
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout import checkpoint, cli, report, runner
from jaxrl_rollout.algorithms import ppo
from tests.test_user_paths import with_sigint_at_default

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = runner.RunSpec("ppo", ppo.PPOConfig(num_envs=4, num_steps=8, total_timesteps=64), (ppo.PPOHParams(),), 2)
METRICS = {"episode_return": np.ones((2, 2), np.float32), "num_episodes": np.ones((2, 2), np.int32)}


def test_a_failed_metrics_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "metrics.csv"
    path.write_text("old\n")
    real = csv.writer

    def failing(f):
        writer = real(f)

        class Half:
            rows = 0

            def writerow(self, row):
                Half.rows += 1
                if Half.rows == 3:
                    raise OSError(errno.ENOSPC, "No space left on device")
                writer.writerow(row)

        return Half()

    monkeypatch.setattr(csv, "writer", failing)
    with pytest.raises(OSError, match="No space left") as raised:
        report.write_metrics_csv(path, SPEC, METRICS)
    assert raised.value.filename == str(path)  # the CLI's one line names it
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["metrics.csv"]


def test_the_learning_curve_draws_a_return_between_two_gaps(tmp_path, monkeypatch):
    """A plain line drew nothing of a value with NaN on both sides: a Pendulum run of sparse returns showed a
    legend and no curve. Such values get a dot."""
    nan = np.nan
    np.testing.assert_array_equal(report.isolated(np.array([nan, 3.0, nan, 4.0, 5.0, nan, 6.0])),
                                  [False, True, False, False, False, False, True])
    np.testing.assert_array_equal(report.isolated(np.array([1.0])), [True])
    drawn = []
    from matplotlib.axes import Axes

    plot = Axes.plot
    monkeypatch.setattr(Axes, "plot", lambda self, x, y, *a, **k: drawn.append((list(x), list(y), k.get("marker")))
                        or plot(self, x, y, *a, **k))
    sparse = {"episode_return": np.array([[nan, 2.0], [nan, 4.0]], np.float32),
              "num_episodes": np.array([[0, 1], [0, 1]], np.int32)}
    report.write_learning_curve(tmp_path / "curve.png", SPEC, sparse)
    assert (tmp_path / "curve.png").stat().st_size > 0
    assert ([64], [3.0], "o") in drawn  # update 2 of 32 steps each; the mean of the two seeds


def test_the_learning_curve_band_stays_within_the_seeds_range(tmp_path, monkeypatch):
    """Mean +-1 sd of CartPole's returns reached 570 of a 500 maximum: the band is clipped to the seeds' range."""
    bands = []
    from matplotlib.axes import Axes

    fill = Axes.fill_between
    monkeypatch.setattr(Axes, "fill_between", lambda self, x, lo, hi, *a, **k: bands.append((np.asarray(lo),
                        np.asarray(hi))) or fill(self, x, lo, hi, *a, **k))
    spec = dataclasses.replace(SPEC, num_seeds=4)
    returns = {"episode_return": np.array([[500.0, 500.0], [500.0, 500.0], [500.0, 500.0], [200.0, 500.0]],
                                          np.float32), "num_episodes": np.ones((4, 2), np.int32)}
    report.write_learning_curve(tmp_path / "curve.png", spec, returns)
    (low, high), = bands
    np.testing.assert_allclose(high, [500.0, 500.0])  # mean 425 + sd 130 at the first update: 555, unclipped
    np.testing.assert_allclose(low, [425.0 - np.std([500, 500, 500, 200]), 500.0])


def test_a_write_that_cannot_replace_its_file_names_the_file(tmp_path):
    """A rename onto a directory named the temporary file (gone by then), not metrics.csv."""
    (tmp_path / "metrics.csv").mkdir()
    with pytest.raises(OSError) as caught:
        checkpoint.write_atomic(tmp_path, "metrics.csv", lambda f: f.write(b"x"))
    assert caught.value.filename == str(tmp_path / "metrics.csv")
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.csv"]  # no temporary file left


def test_write_atomic_takes_a_writer_by_path_a_long_name_and_passes_a_writers_own_error(tmp_path):
    """What the videos needed of it: ffmpeg writes to a path, a legal 249-byte name got a temporary name past the
    255-byte limit, and a writer's own one-line OSError (no errno) was rewritten as "[Errno None] ...: 'name'"."""
    long = "n" * 249
    assert checkpoint.write_atomic(tmp_path, long, lambda path: path.write_bytes(b"by path"), to_path=True) == \
        tmp_path / long
    assert (tmp_path / long).read_bytes() == b"by path"

    def fails(path):
        path.write_bytes(b"half")
        raise OSError("cannot write it: the encoder failed.")

    with pytest.raises(OSError) as caught:
        checkpoint.write_atomic(tmp_path, "clip.mp4", fails, to_path=True)
    assert str(caught.value) == "cannot write it: the encoder failed."
    assert sorted(p.name for p in tmp_path.iterdir()) == [long]  # no temporary file, no clip.mp4


def test_symlinked_outputs_are_replaced_not_written_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    for name in ("metrics.csv", "learning_curve.png"):
        (outside / name).write_text("theirs")
        (run / name).symlink_to(outside / name)
    report.write_outputs(run, SPEC, METRICS)
    for name in ("metrics.csv", "learning_curve.png"):
        assert (outside / name).read_text() == "theirs"
        assert not (run / name).is_symlink() and (run / name).stat().st_size > 6


def test_a_symlinked_checkpoint_step_is_refused_in_one_line(tmp_path):
    (tmp_path / "run").mkdir()
    checkpoint.save(tmp_path / "run", 1, {"x": jnp.ones(3)}, {}, {})
    step = tmp_path / "run" / checkpoint.SUBFOLDER / "1"
    step.rename(tmp_path / "elsewhere")
    step.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(checkpoint.CheckpointError, match="is a symbolic link to .*elsewhere"):
        checkpoint.read_manifest(tmp_path / "run")
    with pytest.raises(checkpoint.CheckpointError, match="is a symbolic link"):
        checkpoint.save(tmp_path / "run", 2, {"x": jnp.ones(3)}, {}, {})
    assert not (tmp_path / "run" / checkpoint.SUBFOLDER / "2").exists()
    for step in (-1, "3", 2.0, True):  # -1 and "3" were taken as steps
        with pytest.raises(ValueError, match=r"^step must be a non-negative int \(the chunks done\), got "):
            checkpoint.save(tmp_path / "run", step, {"x": jnp.ones(3)}, {}, {})


def test_a_checkpoint_saved_in_the_other_64_bit_mode_names_the_mode(tmp_path):
    """A run trained with JAX_ENABLE_X64=1 (gymnax's env states then float64 and int64) and read without it, or
    the reverse, was refused with "state leaf 38 is int64, this config expects int32 (... was the run written by
    an earlier jaxrl_rollout? ...)"; now one line naming jax's 64-bit mode and how to read it."""
    import jax

    with jax.enable_x64(True):
        wide = {"obs": jnp.zeros((2, 4)), "time": jnp.zeros(2, int), "params": jnp.ones(3, jnp.float32)}
        assert wide["obs"].dtype == np.float64 and wide["time"].dtype == np.int64
        checkpoint.save(tmp_path / "x64", 1, wide, {}, {})
    narrow = {"obs": jnp.zeros((2, 4)), "time": jnp.zeros(2, int), "params": jnp.ones(3, jnp.float32)}
    with pytest.raises(checkpoint.CheckpointError) as refused:
        checkpoint.load(tmp_path / "x64", narrow)
    assert str(refused.value) == (
        f"checkpoint in {tmp_path / 'x64'} was saved with jax's 64-bit mode on (JAX_ENABLE_X64=1, or "
        "jax.config.update('jax_enable_x64', True)): its state leaf 0 is float64, where this process, with the mode "
        "off, builds float32; read or resume it with the mode on again (e.g. JAX_ENABLE_X64=1 jaxrl-rollout ...), "
        "as it was trained.")
    checkpoint.save(tmp_path / "x32", 1, narrow, {}, {})
    with jax.enable_x64(True):
        with pytest.raises(checkpoint.CheckpointError, match=r"saved with jax's 64-bit mode off: its state leaf 0 is "
                           r"float32, where this process, with the mode on .* builds float64; read or resume it with "
                           r"the mode off \(unset JAX_ENABLE_X64\), as it was trained\.$"):
            checkpoint.load(tmp_path / "x32", {**narrow, "obs": jnp.zeros((2, 4))})
        (state, _, _) = checkpoint.load(tmp_path / "x64", wide)  # in its own mode it reads
        assert state["time"].dtype == np.int64
    # a leaf of another shape is no mode's doing: the message stays the general one
    with pytest.raises(checkpoint.CheckpointError, match="state leaf 0 is .* this config expects .*earlier"):
        checkpoint.load(tmp_path / "x64", {**narrow, "obs": jnp.zeros((2, 5))})


def test_a_checkpoint_whose_keys_are_another_prng_implementations_names_it(tmp_path):
    """A run trained with JAX_DEFAULT_PRNG_IMPL=rbg (its keys 4 words) and read with jax's default threefry keys
    (2 words), or the reverse, was refused as "state leaf 42 is ... key<rbg> ..., this config expects ... key<fry>
    ... (was the run written by an earlier jaxrl_rollout? ...)"; now one line naming the implementation."""
    import jax

    def state(impl):
        return {"key": jax.random.split(jax.random.key(0, impl=impl), 2), "x": jnp.ones(3)}

    checkpoint.save(tmp_path / "rbg", 1, state("rbg"), {}, {})
    with pytest.raises(checkpoint.CheckpointError) as refused:
        checkpoint.load(tmp_path / "rbg", state("threefry2x32"))
    assert str(refused.value) == (
        f"checkpoint in {tmp_path / 'rbg'} holds PRNG keys of jax's rbg implementation (state leaf 0: key<rbg>), "
        "where this process makes threefry2x32 keys: read or resume it with the implementation it was trained with, "
        "JAX_DEFAULT_PRNG_IMPL=rbg (or jax.config.update('jax_default_prng_impl', 'rbg')).")
    checkpoint.save(tmp_path / "fry", 1, state("threefry2x32"), {}, {})
    with pytest.raises(checkpoint.CheckpointError, match=r"holds PRNG keys of jax's threefry2x32 implementation .* "
                       r"makes unsafe_rbg keys: .* unset JAX_DEFAULT_PRNG_IMPL \(threefry2x32 is jax's default\)\.$"):
        checkpoint.load(tmp_path / "fry", state("unsafe_rbg"))
    loaded, _, _ = checkpoint.load(tmp_path / "rbg", state("rbg"))  # with its own implementation it reads
    assert str(loaded["key"].dtype) == "key<rbg>"


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs, mounted if this process may (root in a container that allows it), else skipped."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                                           capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root and mount permission)")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize("tensorboard", ["false", "true"])
def test_a_full_disk_is_one_line_and_exit_2_with_earlier_files_intact(tmp_path, full_disk, tensorboard):
    """Run as a user runs it, in its own process, so tracebacks from threads or exit hooks would show."""
    args = ["--num-envs", "4", "--num-steps", "8", "--total-steps", "64", "--seeds", "1",
            "--num-minibatches", "2", "--update-epochs", "1", "--chunk-updates", "1", "--tensorboard", tensorboard,
            "--host-devices", "1", "--num-eval", "1"]
    run = full_disk / "run"
    assert cli.main(["train", *args, "--out", str(run), "--stop-after-chunks", "1"]) == 0
    config = (run / "config.json").read_text()
    manifest = checkpoint.read_manifest(run)
    try:
        with open(full_disk / "ballast", "wb") as f:  # fill the disk
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass
    proc = subprocess.run([sys.executable, "-m", "jaxrl_rollout", "train", "--resume", "run", "--tensorboard",
                           tensorboard, "--host-devices", "1", "--num-eval", "1"], cwd=full_disk,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert [line for line in err.splitlines() if "error" in line.lower()] == [err.strip().splitlines()[-1]], err
    assert err.strip().splitlines()[-1].startswith("jaxrl-rollout: error: "), err
    assert "No space left on device" in err and "Traceback" not in err and "Exception" not in err, err
    assert (run / "config.json").read_text() == config
    assert checkpoint.read_manifest(run) == manifest


def _outside_calls(trace: str) -> list[str]:
    """strace lines of a git run or of a connect() to anything but this machine (DNS included)."""
    bad = []
    for line in trace.splitlines():
        if "execve(" in line and "git" in line.split("execve(", 1)[1].split(",", 1)[0]:
            bad.append(line)
        elif "connect(" in line and ("AF_INET" in line or "AF_INET6" in line):
            local = ('inet_addr("127.' in line or 'inet_pton(AF_INET6, "::1"' in line)
            if not local or "htons(53)" in line:
                bad.append(line)
    return bad


def test_wandb_offline_makes_no_network_call_and_runs_no_git(tmp_path):
    """`--wandb offline`'s logger, traced with strace over every process it starts (W&B's own service too)."""
    pytest.importorskip("wandb")
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed: W&B's network calls happen in its own service process, which only "
                    "a system-call trace sees (.ci/run installs strace)")
    script = textwrap.dedent(f"""
        import numpy as np
        from jaxrl_rollout import loggers, runner
        from jaxrl_rollout.algorithms import ppo

        spec = runner.RunSpec("ppo", ppo.PPOConfig(num_envs=4, num_steps=8, total_timesteps=64), (ppo.PPOHParams(),), 1)
        log = loggers.WandbLogger({str(tmp_path)!r}, spec, mode="offline")
        log.log_chunk({{"value_loss": np.ones((1, 2), np.float32)}}, 0)
        log.close()
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    trace = tmp_path / "trace.txt"
    out = subprocess.run([strace, "-f", "-qq", "-e", "trace=connect,execve", "-o", str(trace), sys.executable, "-c",
                          script], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert list((tmp_path / "wandb").glob("offline-run-*"))
    text = trace.read_text()
    assert "execve(" in text  # the trace saw the processes start
    assert _outside_calls(text) == []


@pytest.mark.parametrize("login", [False, True], ids=["no-key", "key-but-no-server"])
def test_wandb_online_without_a_login_is_one_line_before_training(tmp_path, login):
    """W&B's runs started at the first chunk: without an API key the run trained a chunk, then ended in W&B's
    UsageError traceback (exit 1). They start before training now, and the refusal is one line, exit 2. With a
    key but no W&B server to reach (a closed port on 127.0.0.1), the same line once W&B's init times out."""
    pytest.importorskip("wandb")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    # no key anywhere W&B looks (the environment, ~/.netrc, its settings); a network call would meet a closed port
    env.update(HOME=str(home), WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"), WANDB_BASE_URL="http://127.0.0.1:9")
    if login:  # a well-formed key: W&B tries the server, is refused, and gives up after its init time-out
        env.update(WANDB_API_KEY="0" * 40, WANDB_INIT_TIMEOUT="3")
    out = subprocess.run([sys.executable, "-m", "jaxrl_rollout", "train", "--total-steps", "1024", "--seeds", "1",
                          "--wandb", "online", "--out", "runs/wo"], capture_output=True, text=True, timeout=300,
                         env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert out.returncode == 2, out.stdout + out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "step " not in out.stderr, out.stderr[-3000:]  # nothing trained
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("jaxrl-rollout: error: --wandb online: W&B could not start its online run g0_s0: "), line
    assert line.endswith("nothing was trained by this command; continue with: jaxrl-rollout train --resume runs/wo "
                         "--wandb online"), line
    assert not (tmp_path / "runs/wo/checkpoints").exists()


def test_grid_labels_tell_distinct_values_apart():
    """lr 1e-3 and 1.000001e-3 (distinct in float32) were both 'lr=0.001' in the summary, the CSV's lr column,
    TensorBoard and the plot's legend."""
    grid = (ppo.PPOHParams(lr=1e-3), ppo.PPOHParams(lr=1.000001e-3), ppo.PPOHParams(lr=2e-3))
    spec = runner.RunSpec("ppo", SPEC.config, grid, 1)
    assert [report.grid_label(spec, g) for g in range(3)] == ["lr=0.001", "lr=0.001000001", "lr=0.002"]
    plain = runner.RunSpec("ppo", SPEC.config, (ppo.PPOHParams(lr=1e-3), ppo.PPOHParams(lr=2.5e-4)), 1)
    assert [report.grid_label(plain, g) for g in range(2)] == ["lr=0.001", "lr=0.00025"]
    # one grid point: what it sets apart from the defaults (`--lr 3e-4 --ent-coef 0.01` was 'default'; 0.01 is
    # PPO's default ent_coef), or 'default'
    single = runner.RunSpec("ppo", SPEC.config, (ppo.PPOHParams(lr=3e-4, ent_coef=0.01, gamma=0.9),), 1)
    assert report.grid_label(single, 0) == "lr=0.0003, gamma=0.9"
    assert report.grid_label(SPEC, 0) == "default"


def test_reports_name_metrics_that_are_not_the_specs(tmp_path):
    """An empty dict was an IndexError, another spec's metrics 'cannot reshape array of size 4 into shape (1,1)'."""
    with pytest.raises(ValueError, match=r"^metrics must be a run's metrics .* got \[\]"):
        report.write_metrics_csv(tmp_path / "m.csv", SPEC, {})
    one_run = runner.RunSpec("ppo", SPEC.config, SPEC.grid, 1)
    with pytest.raises(ValueError, match=r"^metrics must be \[runs, updates\] arrays of the spec's 1 runs \(1 grid "
                                         r"points x 1 seeds\), all of one length, got episode_return \[2, 2\]"):
        report.summarize(one_run, METRICS)
    with pytest.raises(ValueError, match=r"^metrics must be a run's metrics"):
        report.write_learning_curve(tmp_path / "c.png", SPEC, {"episode_return": METRICS["episode_return"]})
    assert not list(tmp_path.iterdir())


def test_evaluation_csv_has_a_row_per_episode_leaves_out_a_policy_without_returns_and_checks_shapes(tmp_path):
    """SPEC: 1 grid point x 2 seeds, PPOConfig of 2 updates of 32 steps; DQN and TD3 have no stochastic column."""
    det = np.array([[1.5, 2.0, 3.0], [4.0, 5.0, 6.25]], np.float32)
    report.write_evaluation_csv(tmp_path / "e.csv", SPEC, 1, 7, {"deterministic": det, "stochastic": None})
    with open(tmp_path / "e.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["grid_point", "seed", "update", "step", "eval_seed", "policy", "episode", "return"]
    assert rows[1:] == [["0", str(s), "1", "32", "7", "deterministic", str(e), f"{det[s, e]:.9g}"]
                        for s in range(2) for e in range(3)]
    for bad in (det[0], det[:1], det[None]):
        with pytest.raises(ValueError, match=r"^returns\['stochastic'\] must be \[2 runs, episodes\], got shape"):
            report.write_evaluation_csv(tmp_path / "bad.csv", SPEC, 1, 7, {"deterministic": det, "stochastic": bad})
    assert not (tmp_path / "bad.csv").exists()


def test_evaluation_summary_is_per_grid_point_and_names_the_runs_it_leaves_out():
    grid = runner.RunSpec("ppo", SPEC.config, (ppo.PPOHParams(lr=1e-3), ppo.PPOHParams(lr=3e-4)), 3)
    det = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 5.0], [10.0, 10.0], [np.nan, 1.0], [20.0, 20.0]])
    lines = report.format_evaluation_summary(grid, {"deterministic": det, "stochastic": None}).splitlines()
    assert lines[0] == "  per grid point: mean over its 3 seeds of each run's mean return, 95% t-interval across seeds"
    assert lines[1].split() == ["grid", "point", "deterministic"]
    # lr=0.001: run means 2, 2, 4 -> mean 8/3, sd 2/sqrt(3), t(0.975, 2) = 4.302653; lr=0.0003: 10 and 20 only
    rows = [[float(x) for x in re.findall(r"-?\d+\.\d+", line.split(None, 1)[1])] for line in lines[2:4]]
    half = 4.302653 * (2 / 3**0.5) / 3**0.5
    assert rows[0] == pytest.approx([8 / 3, 8 / 3 - half, 8 / 3 + half], abs=0.006)
    assert rows[1] == pytest.approx([15.0, 15 - 12.706205 * 5, 15 + 12.706205 * 5], abs=0.006)
    assert lines[4] == "    left out of these means, with NaN or inf returns: lr=0.0003 seed 1 (deterministic)"
    assert len(lines) == 5


_SMALL_TRAIN = [sys.executable, "-m", "jaxrl_rollout", "train", "--num-envs", "4", "--num-steps", "8", "--total-steps",
                "64", "--seeds", "1", "--chunk-updates", "1", "--tensorboard", "false", "--host-devices", "1",
                "--num-eval", "1", "--out", "run"]


def _user_env(**changes):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(PYTHONPATH=ROOT, **changes)
    return env


def _with_stdout_read_then_closed(command, cwd, lines: int = 0, buffered: bool = False) -> tuple[list, int, str]:
    """`command | head -LINES` with its stderr kept: (the lines read, the exit status, stderr). Unbuffered unless
    `buffered`, so the first write after the reader has gone meets the closed pipe at once."""
    env = _user_env() if buffered else _user_env(PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = [proc.stdout.readline() for _ in range(lines)]
        proc.stdout.close()
        err = proc.stderr.read()
        return first, proc.wait(timeout=300), err
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_reader_that_closes_stdout_early_ends_no_command_and_an_unwritable_output_says_the_run_is_saved(tmp_path):
    """A reader that stops reading stdout early (`train | head -2`, `evaluate RUN --csv - | head`) wants no more
    text, not an end to the work: the command writes its files and ends with status 0 (it ended with "error: Broken
    pipe", train's outputs unwritten). An output file that cannot be written, once the run is saved: one error line
    says so, and what writes the outputs again (it said only "error: run/metrics.csv: Is a directory", as if the
    run were lost)."""
    # `train 2>&1 | tee log`, then Ctrl-C, which stops tee too: the run's line about the signal meets the closed
    # pipe, and the run still stops at a chunk's end with its checkpoint (it died there, with status 1)
    train = [*_SMALL_TRAIN[:4], "--num-envs", "4", "--num-steps", "8", "--total-steps", "320000", "--seeds", "1",
             "--chunk-updates", "1000", "--tensorboard", "false", "--host-devices", "1", "--out", "run"]  # 10 chunks of ~1 s
    # As from a terminal: SIGINT at its default in the run (without, a test runner started as a shell's background
    # job made the run ignore it, and it trained to its end, status 0: a `benchmarks.suite_costs` run, 2026-12-06).
    proc = subprocess.Popen(with_sigint_at_default(train), cwd=tmp_path, env=_user_env(PYTHONUNBUFFERED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # after the first chunk's line: the signal comes during the second chunk, or before it starts, and the run
        # stops after chunk 2 or 1 (or later, on a machine so loaded that the line or the signal comes chunks late:
        # with 3 chunks in all, and later 5, such a run ended complete, status 0)
        while not (line := proc.stdout.readline()).startswith("  step  32,000/320,000"):  # aligned to the total
            assert line, "the run ended before its first chunk's line"
        proc.stdout.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=300) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] in [[str(n)] for n in range(1, 10)]
    assert not (tmp_path / "run" / "metrics.csv").exists()
    # `train --resume run | head -1`: the rest of the text is dropped; the run trains and writes every output. (On a
    # run of 2 small chunks, stopped after its first: resuming the one above trained its 8 or 9 chunks left, 25 s
    # of a CI run on 2 cores.)
    shutil.rmtree(tmp_path / "run")
    assert cli.main([*_SMALL_TRAIN[3:-1], str(tmp_path / "run"), "--stop-after-chunks", "1"]) == 0
    first, code, err = _with_stdout_read_then_closed([*train[:4], "--resume", "run"], tmp_path, 1)
    assert code == 0 and first[0].startswith("jaxrl_rollout: PPO on CartPole-v1"), err
    assert "error" not in err and "Traceback" not in err and "step 64/64" in err, err
    assert {"metrics.csv", "learning_curve.png"} <= {p.name for p in (tmp_path / "run").iterdir()}
    # `evaluate run --csv - | head -0`: the report on stderr, status 0
    _, code, err = _with_stdout_read_then_closed([*_SMALL_TRAIN[:3], "evaluate", "run", "--num-episodes", "1",
                                                  "--csv", "-"], tmp_path)
    assert code == 0 and "error" not in err and "Traceback" not in err, err
    assert "jaxrl_rollout: evaluate run (PPO on CartPole-v1, checkpoint final)" in err, err  # the report: stderr
    assert err.rstrip().endswith("wrote every episode's return to stdout"), err
    (tmp_path / "run" / "learning_curve.png").unlink()
    (tmp_path / "run" / "learning_curve.png").mkdir()  # an output that cannot be replaced
    again = subprocess.run([*_SMALL_TRAIN[:4], "--resume", "run"], cwd=tmp_path, env=_user_env(), capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 2 and again.stderr.strip().splitlines()[-1] == (
        "jaxrl-rollout: error: run/learning_curve.png: Is a directory, after training: the run is complete and saved "
        "in run: `jaxrl-rollout train --resume run` writes its metrics.csv and learning_curve.png and prints its "
        "summary again, and `jaxrl-rollout evaluate run` evaluates it."), again.stderr
    (tmp_path / "run" / "learning_curve.png").rmdir()
    assert cli.main(["train", "--resume", str(tmp_path / "run")]) == 0  # as the line says
    assert (tmp_path / "run" / "learning_curve.png").is_file()


@pytest.mark.parametrize("code", [errno.EPIPE, errno.EIO], ids=["reader-closed", "terminal-hung-up"])
def test_a_stream_whose_reader_is_gone_drops_its_text_and_points_at_devnull(code):
    """`cli.ReaderMayClose`: a write meeting a closed pipe (EPIPE) or a hung-up terminal (EIO) is dropped, as is
    every later one, and the stream's file descriptor points at /dev/null; any other error is raised."""
    read_end, write_end = os.pipe()

    class Gone(io.StringIO):
        def write(self, text):
            raise OSError(code, os.strerror(code))

        def fileno(self):
            return write_end

    try:
        stream = cli.ReaderMayClose(Gone())
        assert stream.write("a line\n") == 7 and stream.reader_closed
        assert stream.write("more") == 4
        stream.flush()
        os.write(write_end, b"after")  # the descriptor is /dev/null's now: nothing reaches the pipe's reader
        os.close(write_end)
        assert os.read(read_end, 100) == b""
    finally:
        os.close(read_end)

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    full = cli.ReaderMayClose(Full())
    with pytest.raises(OSError, match="No space left on device"):
        full.write("x")
    assert not full.reader_closed


def test_a_stream_that_cannot_spell_a_folders_name_writes_it_escaped():
    """`PYTHONIOENCODING=ascii jaxrl-rollout train --out runs/über`: the header line naming the folder ended the
    command with "error: 'ascii' codec can't encode character '\\xfc' ..."; it is escaped as Python's stderr does."""
    raw = io.BytesIO()
    text = io.TextIOWrapper(raw, encoding="ascii")
    stream = cli.ReaderMayClose(text)
    assert stream.write("output in runs/\u00fcber\n") == 20
    text.flush()
    assert raw.getvalue() == b"output in runs/\\xfcber\n"


def test_a_command_started_without_stdout_drops_its_text(capsys):
    """`jaxrl-rollout rollout >&-`: Python's sys.stdout is None, where print writes nothing; the stream wrapper
    raised AttributeError on it (and the flush at exit did before the wrapper)."""
    with contextlib.redirect_stdout(None):
        assert cli.main(["rollout", "--num-envs", "2", "--num-steps", "10", "--num-eval", "1"]) == 0
    assert capsys.readouterr().err == ""


def test_a_reader_that_closes_a_buffered_output_early_gets_no_traceback(tmp_path):
    """Without PYTHONUNBUFFERED a pipe's output is buffered, and a reader gone before the end (`| head -1`) made
    Python's flush at exit print "Exception ignored ... BrokenPipeError" and exit 120; the run had trained and
    written everything, so it ends as it would have."""
    _, code, err = _with_stdout_read_then_closed(_SMALL_TRAIN, tmp_path, buffered=True)
    assert code == 0, err
    assert "Traceback" not in err and "Exception" not in err and "BrokenPipe" not in err, err
    assert {"metrics.csv", "learning_curve.png", "checkpoints"} <= {p.name for p in (tmp_path / "run").iterdir()}


@pytest.mark.skipif(not os.path.exists("/proc/sys/vm/overcommit_memory")
                    or open("/proc/sys/vm/overcommit_memory").read().strip() == "1",
                    reason="needs Linux that refuses an allocation past its memory (vm.overcommit_memory 0 or 2); with "
                           "1 the 1.2 TB one is granted, and the pages it then fills end the process")
def test_out_of_memory_is_its_one_line_and_nothing_of_jaxs_exit_handlers(tmp_path):
    """XLA's out of memory in a train chunk (every episode of a periodic evaluation is played at once: 2e9 of them
    ask 1.2 TB) ends in its one line, exit 2: JAX's exit handlers waited on the failed program's runtime token and
    printed the error again as two "Exception ignored in atexit callback" tracebacks under it. On Linux the run is
    refused before its chunk (runner.StatesTooLarge); XLA's own error is what a machine whose free memory is not
    known meets (the run here is told so by a sitecustomize, as where /proc/meminfo cannot be read)."""
    for unknown in (False, True):
        env = _user_env()
        if unknown:
            (tmp_path / "site").mkdir()
            (tmp_path / "site" / "sitecustomize.py").write_text(
                "from jaxrl_rollout import _memory\n_memory.free_host_bytes = lambda: None\n")
            env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), env["PYTHONPATH"]])
        ran = subprocess.run([*_SMALL_TRAIN[:-1], f"run{int(unknown)}", "--eval-episodes", "2000000000"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        lines = ran.stderr.strip().splitlines()
        start = ("jaxrl-rollout: error: out of memory on the cpu device (Out of memory allocating " if unknown else
                 "jaxrl-rollout: error: this run cannot fit in the ")
        assert ran.returncode == 2 and lines[-1].startswith(start), ran.stderr
        assert ("or --eval-episodes (each periodic evaluation plays 2,000,000,000 episodes of every run at once)" if
                unknown else "or eval_episodes (--eval-episodes: each periodic evaluation plays its 2,000,000,000 "
                "episodes of every run at once)") in lines[-1], lines[-1]
        assert "Traceback" not in ran.stderr and "Exception ignored" not in ran.stderr, ran.stderr
