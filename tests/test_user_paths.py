"""What a user types, run as a user runs it: the README's main job on a fresh copy, Ctrl-C and SIGTERM.

These tests start the installed `jaxrl-rollout` entry point (and, for the main job, the README's
set-up line through bash) in subprocesses, from working directories outside the repository, with
relative run folders, so the paths a user walks are the paths tested. The README's main-job line
and its suite table are read from README.md here, so they cannot drift from what is tested (the
suite table's rows run in tests/test_user_suites.py, a file of its own so that a parallel test run
can put it beside this one).
"""

import contextlib
import csv
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import types

import numpy as np
import pytest

from jaxrl_rollout.algorithms import ppo
from tests.conftest import ADDED_XLA_FLAG_VAR

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BIN = pathlib.Path(sys.executable).parent
CLI = BIN / "jaxrl-rollout"


def _env() -> dict:
    """The environment of a user's shell: no PYTHONPATH, no virtual env of the test run active, and XLA's flags as
    the user set them (without the one tests/conftest.py adds to the suite's own processes)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    added = env.pop(ADDED_XLA_FLAG_VAR, None)
    if added:
        flags = " ".join(flag for flag in env.get("XLA_FLAGS", "").split() if flag != added)
        if flags:
            env["XLA_FLAGS"] = flags
        else:
            env.pop("XLA_FLAGS", None)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if pathlib.Path(p) != BIN)
    return env


def with_sigint_at_default(args: list[str]) -> list[str]:
    """`args` started with SIGINT at its default, as from a terminal, whatever the test runner's is.

    A test runner started as a shell's background job ignores SIGINT, a command it starts inherits that and
    keeps it ignored (as it should: `_signals.StopSignals`), and a Ctrl-C test's run then trained to its end. A
    short Python resets it and execs `args` (the disposition survives exec): a `preexec_fn` would do the same in
    a forked copy of the test process, which Python warns may deadlock in a process with JAX's threads.
    """
    reset = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", reset, *map(str, args)]


def run_as_user(args, cwd, timeout, extra_env=None, **kwargs) -> subprocess.CompletedProcess:
    """`args` run in `cwd` with a user's environment (`_env`), plus the variables of `extra_env`."""
    env = {**_env(), **(extra_env or {})}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)


def explain(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"


def readme_main_job() -> str:
    """The README's main-job line: the first command of the first bash block of "Set up"."""
    block = re.search(r"## Set up\n.*?```bash\n(.*?)```", README, flags=re.S).group(1)
    lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) == 1, lines
    return lines[0]


def readme_suite_ids() -> list[str]:
    """The example id of every row of the README's suite table (section "Environments beyond gymnax")."""
    section = README.split("## Environments beyond gymnax", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]
    header, *rows = rows
    column = [c.strip() for c in header.strip("|").split("|")].index("example id")
    ids = [re.fullmatch(r"`([^`]+)`", [c.strip() for c in row.strip("|").split("|")][column]).group(1) for row in rows]
    assert len(ids) >= 8, ids
    return ids


def _fresh_copy(dest: pathlib.Path) -> pathlib.Path:
    """The repository's files as a clone of this working tree would hold them (tracked and unignored files)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def test_a_users_shell_has_the_users_xla_flags_not_the_suites(monkeypatch):
    """`_env` takes away the flag tests/conftest.py adds for the suite's own processes, and keeps the user's."""
    monkeypatch.setenv(ADDED_XLA_FLAG_VAR, "--suite-flag=1")
    monkeypatch.setenv("XLA_FLAGS", "--users-flag=2 --suite-flag=1")
    env = _env()
    assert env["XLA_FLAGS"] == "--users-flag=2" and ADDED_XLA_FLAG_VAR not in env
    monkeypatch.setenv("XLA_FLAGS", "--suite-flag=1")
    assert "XLA_FLAGS" not in _env()
    monkeypatch.delenv(ADDED_XLA_FLAG_VAR)
    assert _env()["XLA_FLAGS"] == "--suite-flag=1"  # a flag the user set is the user's


def test_readme_main_job_verbatim_on_a_fresh_copy(tmp_path):
    """The README's first command, exactly as written, then `evaluate` on its run folder by relative path."""
    clone = _fresh_copy(tmp_path / "jaxrl_rollout")
    command = readme_main_job()
    # The command runs as written; only pip's byte-compiling of every file it installs is turned off
    # (PIP_COMPILE=0, pip's own variable for --no-compile): Python then writes the byte-code of the modules the
    # run imports as it imports them. The install took 32 s against 47 s on 2 cores (2026-12-02), and nothing
    # the run computes or prints depends on it.
    result = run_as_user(["bash", "-c", command], cwd=clone, timeout=1500, extra_env={"PIP_COMPILE": "0"})
    assert result.returncode == 0, explain(result)
    out = result.stdout
    assert "final return (episode-weighted mean" in out and "deterministic evaluation, 10 episodes per run" in out, out
    folder = re.search(r"output in (runs/ppo-CartPole-v1-\d{8}-\d{6})\n", out)
    assert folder, out  # the default run folder is relative, under runs/
    folder = folder.group(1)
    # This run is also the README suite table's CartPole-v1 row (tests/test_user_suites.py trains the others): the
    # chunks' outputs a row shows, at the main job's size (976 updates of 512 steps in 16 chunks, 8 seeds).
    err = result.stderr
    # (the default total, 500,000, is not whole updates: the header says what it trains, and why)
    assert ("PPO on CartPole-v1, 8 seeds x 499,712 steps (--total-steps 500,000 in whole updates of 512) in one "
            "vmapped call") in out, out
    assert "compile " in out and "env steps/s over all runs" in out, out
    assert "mean episode return by tenth of training: " in out, out
    assert "step 499,712/499,712 (100.0%)" in err and "steps/s  return" in err and "eval " in err, err
    assert {"config.json", "metrics.csv", "learning_curve.png", "tensorboard"} <= {
        p.name for p in (clone / folder).iterdir()}
    assert [p.name for p in (clone / folder / "checkpoints").iterdir()] == ["16"]  # all 16 chunks, committed
    saved = json.loads((clone / folder / "config.json").read_text())
    assert saved["config"]["total_timesteps"] == 500_000 and saved["num_seeds"] == 8, saved
    assert (clone / folder / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(clone / folder / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["grid_point", "seed", "update", "step", "metric", "value"]
    # seeds x updates x metrics (env_steps left out; eval_return and eval_length: the default --eval-every chunk)
    assert len(rows) == 8 * 976 * (len(ppo.PPOMetrics._fields) - 1 + 2), len(rows)
    assert {r["metric"] for r in rows} >= {"eval_return", "eval_length"}
    assert {int(r["step"]) for r in rows} == {512 * u for u in range(1, 977)}
    evaluations = {int(r["update"]) for r in rows if r["metric"] == "eval_return" and r["value"] != "nan"}
    assert evaluations == {61 * c - 1 for c in range(1, 17)}, sorted(evaluations)  # after each chunk's last update
    ret = float(re.search(r"0  default\s+([\d.]+)", out).group(1))
    assert ret > 400, out  # CleanRL's config solves CartPole-v1 in 5e5 steps
    # PPO's learning test on its default config (8 vmapped seeds, as tests/test_learning.py's others): per seed,
    # the mean return of the episodes completed in the last 20 updates, from the run's metrics.csv
    final = _last_updates_return(rows, 20)
    assert len(final) == 8 and final.mean() >= 470, final  # PureJaxRL's reference reaches about 490
    evaluated = run_as_user([str(clone / ".venv" / "bin" / "jaxrl-rollout"), "evaluate", folder], cwd=clone, timeout=600)
    assert evaluated.returncode == 0, explain(evaluated)
    assert "checkpoint final" in evaluated.stdout and len(re.findall(r"default\s+\d+\s", evaluated.stdout)) == 8


def _last_updates_return(rows: list[dict], updates: int) -> np.ndarray:
    """Per seed: the mean return of the episodes completed in the run's last `updates` updates
    (tests/test_learning.py's `episode_weighted`, on the [seeds, updates] arrays of a run's metrics.csv rows)."""
    from tests.test_learning import episode_weighted

    values = {"episode_return": {}, "num_episodes": {}}
    for r in rows:
        if r["metric"] in values:
            values[r["metric"]][int(r["seed"]), int(r["update"])] = float(r["value"])
    seeds, steps = (1 + max(k[i] for k in values["num_episodes"]) for i in (0, 1))
    arrays = {name: np.full((seeds, steps), np.nan) for name in values}
    for name, cells in values.items():
        for at, value in cells.items():
            arrays[name][at] = value
    return episode_weighted(types.SimpleNamespace(**arrays), slice(-updates, None))


@contextlib.contextmanager
def _ended(process: subprocess.Popen):
    """Kills `process` on the way out if it is still running (a failed assertion, a time-out)."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# 40 chunks of one update: the Ctrl-C below lands after the second, with 38 to go (100 chunks with a checkpoint
# after each ran 19 s on 2 cores, so 38 take about 7 s), and resuming trains the rest (this test took 36
# CPU-seconds with 100 chunks, 31 with 40, 2026-12-01).
SMALL = ["--seeds", "2", "--num-envs", "4", "--num-steps", "16", "--total-steps", "2560", "--chunk-updates", "1",
         "--num-eval", "2"]


def test_ctrl_c_and_sigterm_then_resume_by_relative_paths(tmp_path):
    """Ctrl-C mid-run and SIGTERM mid-compile, relative folders, `--resume` from another folder: no run lost.

    The run stopped while compiling is resumed from its bare folder, so it trains
    the whole run from the start: it is the uninterrupted run the Ctrl-C'd one
    must end equal to (tests/test_cli.py compares with a run never stopped).
    """
    b, c = (tmp_path / n for n in "bc")
    for d in (b, c):
        d.mkdir()

    process = subprocess.Popen(with_sigint_at_default([CLI, "train", *SMALL, "--checkpoint-every", "1", "--out", "runs/cut"]),
                               cwd=b, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with _ended(process):
        lines, progress = [], 0
        while progress < 2:  # the second chunk's line: the first chunk's checkpoint is committed
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
            progress += line.lstrip().startswith("step ")
        assert process.poll() is None, "the run ended before it could be interrupted: " + "".join(lines)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    err = "".join(lines) + err
    assert process.returncode == 130, f"exit {process.returncode}\n{out}\n{err}"
    assert "continue with: jaxrl-rollout train --resume runs/cut" in err, err
    assert "Traceback" not in err, err
    # SIGTERM (a job scheduler's stop) while the run is still compiling, before any checkpoint: the folder
    # holds only config.json, and --resume starts it from scratch.
    process = subprocess.Popen([str(CLI), "train", *SMALL, "--out", "runs/early"], cwd=b, env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with _ended(process):
        assert process.stdout.readline().startswith("jaxrl_rollout: PPO on CartPole-v1")  # the folder is written
        process.send_signal(signal.SIGTERM)
        out, early_err = process.communicate(timeout=300)
    assert process.returncode == 143, f"exit {process.returncode}\n{out}\n{early_err}"
    assert "continue with: jaxrl-rollout train --resume runs/early" in early_err and "Traceback" not in early_err
    whole = run_as_user([str(CLI), "train", "--resume", "runs/early"], cwd=b, timeout=600)
    assert whole.returncode == 0, explain(whole)
    assert "resuming after chunk" not in whole.stderr and "final return" in whole.stdout, explain(whole)

    resumed = run_as_user([str(CLI), "train", "--resume", "../b/runs/cut"], cwd=c, timeout=600)
    assert resumed.returncode == 0, explain(resumed)
    assert "resuming after chunk" in resumed.stderr, explain(resumed)
    assert (b / "runs/cut/metrics.csv").read_bytes() == (b / "runs/early/metrics.csv").read_bytes()
    final = re.compile(r"final return.*?\n.*?\n(.*?)\n", re.S)
    assert final.search(resumed.stdout).group(1) == final.search(whole.stdout).group(1)


def _cuda_installed() -> bool:
    import importlib.util

    return any(importlib.util.find_spec(f"jax_cuda{v}_plugin") is not None for v in (12, 13))


@pytest.mark.parametrize("platforms", ["cuda", "nonsense"])
def test_jax_platforms_naming_a_backend_jax_cannot_start_is_one_line(tmp_path, platforms):
    """`JAX_PLATFORMS=cuda` with jax's CPU build (a Colab CPU runtime, a `pip install` without the cuda12 extra)
    makes jax fail with a bare AssertionError at its first array; every command says it in one line instead,
    with what to install or unset, before it builds anything. Help needs no jax and is printed (`train --help`
    too, from `_option_table`)."""
    if platforms == "cuda" and _cuda_installed():
        pytest.skip("jax's CUDA plugin is installed here, so JAX_PLATFORMS=cuda is a backend jax can try to start")
    env = dict(_env(), JAX_PLATFORMS=platforms)
    for command in (["train", "--seeds", "1", "--total-steps", "512", "--out", "runs/x"], ["evaluate", "runs/x"],
                    ["rollout"]):
        done = subprocess.run([str(CLI), *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stdout == "", explain(done)
        assert done.stderr.startswith(f"jaxrl-rollout: error: JAX cannot start a backend for JAX_PLATFORMS={platforms}: ")
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, explain(done)
        assert "unset JAX_PLATFORMS or set it to cpu" in done.stderr
        assert ("pip install 'jaxrl-rollout[cuda12]'" in done.stderr) == (platforms == "cuda")
    for command in (["--help"], ["evaluate", "--help"], ["rollout", "--help"], ["train", "--help"]):
        done = subprocess.run([str(CLI), *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.startswith("usage: jaxrl-rollout") and not done.stderr, explain(done)
    assert not (tmp_path / "runs").exists()
