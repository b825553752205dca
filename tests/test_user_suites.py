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


# The table's first row, CartPole-v1, is the README's main job (`python -m jaxrl_rollout`: PPO on PPOConfig's default
# env with every default), which tests/test_user_paths.py runs verbatim and checks as a row's outputs are checked
# here; training it again at a smaller size took 18 s of the suite on 2 cores (2026-12-01).
MAIN_JOB_ROW = "CartPole-v1"


def test_the_main_job_is_the_tables_cartpole_row():
    assert MAIN_JOB_ROW in readme_suite_ids() and ppo.PPOConfig().env_id == MAIN_JOB_ROW


# Craftax's row trains without the periodic evaluation: a chunk with its evaluation in it compiled in 48 s against
# 23 s without, and its `evaluate` compiled for 20 s more; without it, the closing evaluation compiles the program
# that `evaluate` loads from the compilation cache (2 cores, 2026-12-07: the row took 65 s against 81 s; jumanji's,
# 31 s against 33 s, keeps it). The other jitted rows keep the periodic evaluation, as by default.
_CLOSING_ONLY = {"craftax/Craftax-Classic-Symbolic-v1"}


@pytest.mark.parametrize("env_id", [env_id for env_id in readme_suite_ids() if env_id != MAIN_JOB_ROW])
def test_every_suite_trains_and_evaluates_from_the_command_line(env_id, tmp_path):
    """`train --env ID --seeds 2 --total-steps 1024 --out RELATIVE` then `evaluate RELATIVE`, from outside the repo.

    1024 steps are two chunks (a chunk boundary with its checkpoint and periodic evaluation): the periodic
    evaluations of long episodes (craftax, jumanji) took most of their rows' run time at four chunks (the jitted
    suites also evaluate 2 episodes per run, not 10).
    """
    if not _suite_runs_here(env_id):
        pytest.skip(f"{env_id}'s extra does not install on Python {sys.version_info[0]}.{sys.version_info[1]}; "
                    ".ci/run runs it under an interpreter where it does")
    assert CLI.exists(), f"no installed entry point at {CLI}: pip install -e '.[test]'"
    work = tmp_path / "work"
    work.mkdir()
    folder = "runs/" + env_id.replace("/", "-")
    # The jitted suites' rows evaluate 2 episodes per run (periodic, closing and `evaluate`): every episode of
    # every run is played at once, and 10 of craftax's long ones took a third of its row's time. (A host env's
    # row keeps the defaults: it is evaluated after training only, one short CartPole episode at a time.)
    host = env_id.startswith(("gymnasium/", "envpool/"))
    small_eval = [] if host else ["--eval-episodes", "2", "--num-eval", "2"]
    # A row of _CLOSING_ONLY trains without the periodic evaluation, in a compilation cache of its own: the closing
    # evaluation compiles the program that `evaluate` then loads, not compiles (the row checks it).
    cache = tmp_path / "xla"
    own = ["--eval-every", "off", "--compile-cache", str(cache)] if env_id in _CLOSING_ONLY else []
    if own:
        small_eval = small_eval[2:]  # (--eval-episodes with --eval-every off is refused)
    trained = run_as_user([str(CLI), "train", "--env", env_id, "--seeds", "2", "--total-steps", "1024", *small_eval,
                           *own, "--out", folder], cwd=work, timeout=900)
    assert trained.returncode == 0, explain(trained)
    assert "deterministic evaluation" in trained.stdout and "Traceback" not in trained.stderr, explain(trained)
    assert {"config.json", "metrics.csv", "learning_curve.png", "checkpoints"} <= {
        p.name for p in (work / folder).iterdir()}
    evaluations = sorted(p.name for p in cache.glob("jit_evaluation-*-cache"))
    assert len(evaluations) == (1 if own else 0), evaluations
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    evaluated = run_as_user([str(CLI), "evaluate", f"../work/{folder}", "--num-episodes", "2" if small_eval else "4",
                             *own[2:]], cwd=elsewhere, timeout=900)
    assert evaluated.returncode == 0, explain(evaluated)
    assert "checkpoint final" in evaluated.stdout and "Traceback" not in evaluated.stderr, explain(evaluated)
    assert sorted(p.name for p in cache.glob("jit_evaluation-*-cache")) == evaluations  # loaded, none compiled anew
    _ROW_CHECKS.get(env_id, lambda *a: None)(trained, evaluated, work / folder)


def _metrics(folder):
    with open(folder / "metrics.csv") as f:
        return list(csv.DictReader(f))


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
_ROW_CHECKS = {"pgx/tic_tac_toe": _check_game}


def test_the_row_checks_name_rows_of_the_table():
    assert set(_ROW_CHECKS) <= set(readme_suite_ids()), "a row check for an id the README's table no longer has"
    assert _CLOSING_ONLY <= set(readme_suite_ids()), "a closing-only row for an id the README's table no longer has"
