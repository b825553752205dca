"""Every row of the README's suite table, trained and evaluated from the command line as a user would.

The installed `jaxrl-rollout` entry point runs in subprocesses, from working
directories outside the repository, with relative run folders; the ids are read
from README.md (`tests.test_user_paths.readme_suite_ids`), so the table cannot
drift from what is tested.
"""

import csv
import json
import re
import sys

import pytest

from jaxrl_rollout.algorithms import ppo
from tests.test_user_paths import CLI, explain, readme_suite_ids, run_as_user

# Suites whose extra cannot install on this interpreter: their rows run where it can (.ci/side runs
# navix under Python 3.12, in its own environment).
_NEEDS = {"navix": ((3, 12), None)}


def _suite_runs_here(env_id: str) -> bool:
    suite = env_id.partition("/")[0] if "/" in env_id else "gymnax"
    low, high = _NEEDS.get(suite, (None, None))
    return (low is None or sys.version_info >= low) and (high is None or sys.version_info < high)


@pytest.mark.parametrize("env_id", readme_suite_ids())
def test_every_suite_trains_and_evaluates_from_the_command_line(env_id, tmp_path):
    """`train --env ID --seeds 2 --total-steps N --out RELATIVE` then `evaluate RELATIVE`, from outside the repo.

    N is 2048 (four chunks of one update, CleanRL's 4 x 128 steps each) for the main job's CartPole, whose row
    checks the chunks' outputs, and 1024 (two chunks: a chunk boundary with its checkpoint and periodic
    evaluation) for the other suites, whose periodic evaluations of long episodes (craftax, jumanji) took
    most of their run time at four chunks (the jitted suites among them also evaluate 2 episodes per run, not 10).
    """
    if not _suite_runs_here(env_id):
        pytest.skip(f"{env_id}'s extra does not install on Python {sys.version_info[0]}.{sys.version_info[1]}; "
                    ".ci/run runs it under an interpreter where it does")
    assert CLI.exists(), f"no installed entry point at {CLI}: pip install -e '.[test]'"
    work = tmp_path / "work"
    work.mkdir()
    folder = "runs/" + env_id.replace("/", "-")
    main_job = env_id == "CartPole-v1"
    # The jitted suites' rows evaluate 2 episodes per run (periodic, closing and `evaluate`): every episode of
    # every run is played at once, and 10 of craftax's long ones took a third of its row's time. (A host env's
    # row keeps the defaults: it is evaluated after training only, one short CartPole episode at a time.)
    host = env_id.startswith(("gymnasium/", "envpool/"))
    small_eval = [] if main_job or host else ["--eval-episodes", "2", "--num-eval", "2"]
    trained = run_as_user([str(CLI), "train", "--env", env_id, "--seeds", "2", "--total-steps",
                           "2048" if main_job else "1024", *small_eval, "--out", folder], cwd=work, timeout=900)
    assert trained.returncode == 0, explain(trained)
    assert "deterministic evaluation" in trained.stdout and "Traceback" not in trained.stderr, explain(trained)
    assert {"config.json", "metrics.csv", "learning_curve.png", "checkpoints"} <= {
        p.name for p in (work / folder).iterdir()}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    evaluated = run_as_user([str(CLI), "evaluate", f"../work/{folder}", "--num-episodes", "2" if small_eval else "4"],
                            cwd=elsewhere, timeout=900)
    assert evaluated.returncode == 0, explain(evaluated)
    assert "checkpoint final" in evaluated.stdout and "Traceback" not in evaluated.stderr, explain(evaluated)
    _ROW_CHECKS.get(env_id, lambda *a: None)(trained, evaluated, work / folder)


def _metrics(folder):
    with open(folder / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _check_gymnax_cartpole(trained, evaluated, folder):
    """The main job's outputs at a small size: the lines, the files, one CSV row per seed, update and metric."""
    out, err = trained.stdout, trained.stderr
    assert "PPO on CartPole-v1, 2 seeds x 2,048 steps in one vmapped call" in out
    assert "compile" in out and "env steps/s over all runs" in out and "mean episode return by update (4 updates): " in out
    assert "final return (episode-weighted mean over the last update; 95% t-interval across seeds)" in out
    assert "deterministic evaluation, 10 episodes per run" in out
    assert "step 2,048/2,048 (100.0%)" in err and "steps/s  return" in err and "eval " in err
    assert [p.name for p in (folder / "checkpoints").iterdir()] == ["4"]  # the Orbax step after 4 chunks
    saved = json.loads((folder / "config.json").read_text())
    assert saved["config"]["total_timesteps"] == 2048 and saved["num_seeds"] == 2
    rows = _metrics(folder)
    assert list(rows[0]) == ["grid_point", "seed", "update", "step", "metric", "value"]
    # seeds x updates x metrics (env_steps left out; eval_return and eval_length: the default --eval-every chunk)
    assert len(rows) == 2 * 4 * (len(ppo.PPOMetrics._fields) - 1 + 2)
    assert {r["metric"] for r in rows} >= {"eval_return", "eval_length"}
    assert {r["step"] for r in rows} == {"512", "1024", "1536", "2048"}
    assert (folder / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _check_game(trained, evaluated, folder):
    """A two-player game trains by self-play and reports win/draw/loss rates: at the end, in the periodic
    evaluation and in `evaluate`."""
    assert json.loads((folder / "config.json").read_text())["config"]["network"] == "auto"
    wdl = re.search(r"against a uniform random legal-move opponent \(seat drawn per game\): win (\d+)%, "
                    r"draw (\d+)%, loss (\d+)%", trained.stdout)
    assert wdl and abs(sum(int(x) for x in wdl.groups()) - 100) <= 2, trained.stdout
    evals = {}
    for r in _metrics(folder):
        if r["metric"] in ("eval_win", "eval_draw", "eval_loss") and r["value"] != "nan":
            evals.setdefault((r["seed"], r["update"]), {})[r["metric"]] = float(r["value"])
    assert evals and all(len(v) == 3 and sum(v.values()) == pytest.approx(1.0) for v in evals.values()), evals
    # evaluate's rows: default, seed, det mean, (std), sto mean, (std), W/D/L det, W/D/L sto
    rows = [line.split() for line in evaluated.stdout.splitlines() if line.startswith("  default")]
    assert len(rows) == 2 and all(sum(float(x) for x in rates.split("/")) == pytest.approx(1.0)
                                  for row in rows for rates in row[-2:]), evaluated.stdout


# What a row's train and evaluate outputs show beyond running (each was a test of its own in tests/test_cli.py, which ran
# the same small configs again in-process).
_ROW_CHECKS = {"CartPole-v1": _check_gymnax_cartpole, "pgx/tic_tac_toe": _check_game}


def test_the_row_checks_name_rows_of_the_table():
    assert set(_ROW_CHECKS) <= set(readme_suite_ids()), "a row check for an id the README's table no longer has"
