"""The command line's persistent compilation cache (`--compile-cache`, `jaxrl_rollout.compile_cache`).

The tests' own shared cache (conftest) is taken away from the subprocesses here, so that they use the
command line's default folder under a temporary XDG_CACHE_HOME, or the folder given.
"""

import os
import subprocess
import sys

import pytest

from jaxrl_rollout import compile_cache

TRAIN = ["train", "--total-steps", "2048", "--seeds", "1", "--eval-every", "off", "--num-eval", "1",
         "--tensorboard", "false"]


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), **extra)
    return env


def _cli(args, cwd, env):
    proc = subprocess.run([sys.executable, "-m", "jaxrl_rollout", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_resume_and_a_second_train_of_the_same_config_load_their_programs(tmp_path):
    env = _env(tmp_path)
    code, out = _cli([*TRAIN, "--out", "runs/a", "--stop-after-chunks", "1"], tmp_path, env)
    assert code == 0, out
    folder = tmp_path / "xdg" / "jaxrl_rollout" / "xla"
    assert any(folder.iterdir()), "the default folder holds the compiled programs"
    assert "loaded from the compilation cache" not in out
    # The resumed run's chunks are the program the first session compiled (the state read back from the
    # checkpoint has the same types as a fresh one: runner._strong_types).
    code, out = _cli(["train", "--resume", "runs/a"], tmp_path, env)
    assert code == 0, out
    assert "loaded from the compilation cache)" in out, out  # on the closing 'compile ..., run ...' line
    code, out = _cli([*TRAIN, "--out", "runs/b"], tmp_path, env)
    assert code == 0, out
    assert "loaded from the compilation cache)" in out, out
    # off also turns off a folder the user set for JAX: with JAX's threshold at 0 s, every program the evaluation
    # compiles would be written there if the cache were on (this was a train of its own in the test below, 2026-12-02)
    own = tmp_path / "own"
    own.mkdir()
    code, out = _cli(["evaluate", "runs/b", "--num-episodes", "1", "--compile-cache", "off"], tmp_path,
                     dict(env, JAX_COMPILATION_CACHE_DIR=str(own), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0"))
    assert code == 0 and not any(own.iterdir()), out


def test_off_and_a_bad_folder(tmp_path):
    env = _env(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out = _cli([*TRAIN, "--out", "runs/x", "--compile-cache", str(blocker / "sub")], tmp_path, env)
    assert code == 2 and out.strip().splitlines()[-1].startswith("jaxrl-rollout: error: --compile-cache "), out
    assert not (tmp_path / "runs").exists()
    code, out = _cli(["evaluate", "no-such-run", "--compile-cache", "off"], tmp_path, env)
    assert code == 2 and not (tmp_path / "xdg" / "jaxrl_rollout").exists(), out


def test_enable_leaves_the_users_own_folder_and_reports_an_unusable_default(tmp_path, monkeypatch):
    # None of the calls below changes this process's JAX configuration ("off", which does, is checked in a
    # subprocess above): the first returns the user's folder, the others give up before setting anything.
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "own"))
    assert compile_cache.enable("auto") == (str(tmp_path / "own"), None)
    monkeypatch.setattr(compile_cache, "_users_own", lambda: None)  # as without the tests' shared cache
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    folder, note = compile_cache.enable("auto")
    assert folder is None and note.startswith("compilation cache off (") and "--compile-cache FOLDER" in note
    with pytest.raises(ValueError, match="--compile-cache .*cannot use"):
        compile_cache.enable(str(blocker / "sub"))
    with pytest.raises(ValueError, match=f"--compile-cache {blocker}: cannot use {blocker}: a file, not a folder"):
        compile_cache.enable(str(blocker))
    assert compile_cache.default_dir() == blocker / "jaxrl_rollout" / "xla"
    # "" was the current folder, "AUTO" a folder of that name, None a pathlib TypeError
    for bad, message in (("", "must be 'auto', 'off' or a folder, got ''"), (None, "got None"),
                         ("AUTO", "--compile-cache AUTO: the choices are lower case")):
        with pytest.raises(ValueError, match=message):
            compile_cache.enable(bad)


def test_the_summary_counts_the_hits_since_a_command_began(monkeypatch):
    monkeypatch.setitem(compile_cache._counts, "hits", 5)
    assert compile_cache.summary(5) == ""
    assert compile_cache.summary(4) == ", 1 program loaded from the compilation cache"
    assert compile_cache.summary(2) == ", 3 programs loaded from the compilation cache"
