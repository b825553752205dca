"""Every row of the README's suite table, trained and evaluated from the command line as a user would.

The installed `jaxrl-rollout` entry point runs in subprocesses, from working
directories outside the repository, with relative run folders; the ids are read
from README.md (`tests.test_user_paths.readme_suite_ids`), so the table cannot
drift from what is tested.
"""

import sys

import pytest

from tests.test_user_paths import CLI, explain, readme_suite_ids, run_as_user

# Suites whose extra cannot install on this interpreter: their rows run where it can (.ci/run runs
# navix under Python 3.12, in its own environment).
_NEEDS = {"navix": ((3, 12), None), "envpool": (None, (3, 12))}


def _suite_runs_here(env_id: str) -> bool:
    suite = env_id.partition("/")[0] if "/" in env_id else "gymnax"
    low, high = _NEEDS.get(suite, (None, None))
    return (low is None or sys.version_info >= low) and (high is None or sys.version_info < high)


@pytest.mark.parametrize("env_id", readme_suite_ids())
def test_every_suite_trains_and_evaluates_from_the_command_line(env_id, tmp_path):
    """`train --env ID --seeds 2 --total-steps 2048 --out RELATIVE` then `evaluate RELATIVE`, from outside the repo."""
    if not _suite_runs_here(env_id):
        pytest.skip(f"{env_id}'s extra does not install on Python {sys.version_info[0]}.{sys.version_info[1]}; "
                    ".ci/run runs it under an interpreter where it does")
    assert CLI.exists(), f"no installed entry point at {CLI}: pip install -e '.[test]'"
    work = tmp_path / "work"
    work.mkdir()
    folder = "runs/" + env_id.replace("/", "-")
    trained = run_as_user([str(CLI), "train", "--env", env_id, "--seeds", "2", "--total-steps", "2048", "--out", folder],
                   cwd=work, timeout=900)
    assert trained.returncode == 0, explain(trained)
    assert "deterministic evaluation" in trained.stdout and "Traceback" not in trained.stderr, explain(trained)
    assert {"config.json", "metrics.csv", "learning_curve.png", "checkpoints"} <= {
        p.name for p in (work / folder).iterdir()}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    evaluated = run_as_user([str(CLI), "evaluate", f"../work/{folder}", "--num-episodes", "4"], cwd=elsewhere, timeout=900)
    assert evaluated.returncode == 0, explain(evaluated)
    assert "checkpoint final" in evaluated.stdout and "Traceback" not in evaluated.stderr, explain(evaluated)
