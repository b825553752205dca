"""benchmarks/suite_costs.py: its hook records a process's JAX compiles and cache use, and its tally adds them up."""

import subprocess
import sys

import pytest

from benchmarks import suite_costs

PROGRAM = "import jax\ndef double(x):\n    return x * 2\nprint(jax.jit(double)(3.0))"


def test_the_hook_records_compiles_and_cache_use_per_test_and_the_tally_adds_them(tmp_path):
    logs, hook, cache = (tmp_path / name for name in ("logs", "hook", "cache"))
    logs.mkdir()
    hook.mkdir()
    env = suite_costs.hooked_env(str(hook), str(logs))
    env.update(PYTEST_CURRENT_TEST="tests/test_x.py::test_y (call)", JAX_PLATFORMS="cpu",
               JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    for _ in range(2):  # the second process finds the first one's program in the persistent cache
        done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == "6.0", done.stderr
    assert len(list(logs.glob("*.tsv"))) == 2  # one file per process
    pytest_output = "  1.50s call     tests/test_x.py::test_y\n  0.25s setup    tests/test_x.py::test_y\n"
    result = suite_costs.tally(str(logs), pytest_output)
    test = result["tests"]["tests/test_x.py::test_y"]
    assert test["worker_s"] == 1.75
    assert test["compile_s"] > 0 and test["trace_s"] > 0 and test["lower_s"] > 0, test
    assert test["misses"] >= 1 and test["hits"] >= 1, test
    assert result["files"]["tests/test_x.py"] == test
    assert [t for t, name, _ in result["programs"] if name == "jit(double)"] == ["tests/test_x.py::test_y"]
    table = suite_costs.tables(result, top=5)
    assert "| tests/test_x.py::test_y | jit(double) |" in table


def test_option_mistakes_exit_2_naming_the_option_before_anything_runs(tmp_path, monkeypatch, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "1.tsv").write_text("")

    def no_run(*args):
        raise AssertionError("the suite ran despite the mistake")

    monkeypatch.setattr(suite_costs, "run_suite", no_run)
    for argv, words in ((["--top", "0"], "--top 0"), (["--top", "-3"], "--top -3"),
                        (["--report", str(tmp_path)], f"--report {tmp_path}: no pytest.out"),
                        (["--keep", str(full)], f"--keep {full}: not empty")):
        monkeypatch.setattr(sys, "argv", ["suite_costs.py", *argv])
        with pytest.raises(SystemExit) as exited:
            suite_costs.main()
        assert exited.value.code == 2 and words in capsys.readouterr().err, argv


def test_the_queue_simulation_gives_a_file_to_a_worker_with_two_tests_left_as_xdist_does():
    # a's worker holds one test (<= 2 left), so xdist gives it c at once: b's worker ends at 4 s, idle after
    assert suite_costs.queue_finish([("a", [10.0]), ("b", [1.0] * 4), ("c", [5.0])]) == [15.0, 4.0]
    # b's worker is down to two tests first (at 1 s), so c is its
    assert suite_costs.queue_finish([("a", [10.0] * 3), ("b", [1.0] * 3), ("c", [5.0] * 3)]) == [30.0, 18.0]
    # four one-test files: each worker takes two at the start
    assert suite_costs.queue_finish([(f, [s]) for f, s in zip("abcd", (4.0, 3.0, 2.0, 1.0))]) == [6.0, 4.0]
    result = {"tests": {f"tests/{f}.py::t{i}": {"worker_s": s} for f, times in (("a", [1.0] * 3), ("b", [4.0] * 3))
                        for i, s in enumerate(times)}}
    sched = suite_costs.schedule(result, first=("tests/a.py",))
    assert sched["listed_order"] == [3.0, 12.0] and sched["slowest_first"] == [12.0, 3.0]
    assert sched["slowest_files"] == ["tests/b.py", "tests/a.py"]
