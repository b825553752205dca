"""No run lost, none silently wrong (#25): one writer per folder, checks before writing, resume and extension."""

import errno
import json
import math
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from jaxrl_rollout import _signals, checkpoint, cli, runner
from jaxrl_rollout._lock import LOCK_NAME, FolderLock, FolderLocked
from jaxrl_rollout.algorithms import a2c, ppo, stack_hparams

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 2 updates of 4 envs x 8 steps, in chunks of 1, 2 seeds.
SMALL = ["--num-envs", "4", "--num-steps", "8", "--total-steps", "64", "--seeds", "2", "--num-eval", "1",
         "--tensorboard", "false"]


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _cli(*args, cwd):
    return subprocess.Popen([sys.executable, "-m", "jaxrl_rollout", *args], cwd=cwd, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _holder(folder, exit_at_once=False):
    """A process that locks `folder` and holds the lock until its stdin closes (or exits at once)."""
    code = textwrap.dedent(f"""
        import sys
        from jaxrl_rollout._lock import FolderLock
        FolderLock({str(folder)!r}).acquire("test")
        print("locked", flush=True)
        {"" if exit_at_once else "sys.stdin.read()"}
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("guard") / "run"
    assert cli.main(["train", *SMALL, "--out", str(folder)]) == 0
    return folder


def test_two_writers_racing_on_one_folder_one_is_refused(tmp_path):
    procs = [_cli("train", *SMALL, "--out", "race", cwd=tmp_path) for _ in range(2)]
    outs = []
    for proc in procs:
        try:
            outs.append((*proc.communicate(timeout=300), proc.returncode))
        finally:
            proc.kill()
    codes = sorted(rc for _, _, rc in outs)
    assert codes == [0, 2], outs
    err = next(e for _, e, rc in outs if rc == 2)
    # Refused by the lock, or (if the first had already finished) by the folder check; never a traceback.
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    # The holder's pid is normally named; a refusal in the instant between its flock and its write says so.
    assert "--out race: the run folder is in use by " in err or "already holds" in err, err
    spec = runner.read_spec(tmp_path / "race")
    runner.check_checkpoint_spec(tmp_path / "race", spec, checkpoint.read_manifest(tmp_path / "race"))


def test_resume_while_another_process_holds_the_lock_exits_2(small_run, tmp_path, capsys):
    holder = _holder(small_run)
    try:
        assert cli.main(["train", "--resume", str(small_run)]) == 2
        assert cli.main(["train", *SMALL, "--out", str(small_run)]) == 2
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    err = capsys.readouterr().err
    assert f"--resume {small_run}: the run folder is in use by pid {holder.pid} on host" in err
    assert f"--out {small_run}: the run folder is in use by pid {holder.pid}" in err


def test_a_dead_holders_lock_is_taken_over(small_run, tmp_path, capsys):
    folder = tmp_path / "run"
    shutil.copytree(small_run, folder)
    dead = _holder(folder, exit_at_once=True)
    dead.wait(timeout=60)
    assert f"pid {dead.pid} " in (folder / LOCK_NAME).read_text()  # the file stays; the flock went with the process
    assert cli.main(["train", "--resume", str(folder)]) == 0
    with FolderLock(folder).acquire("test"):
        with pytest.raises(FolderLocked, match=f"in use by pid {os.getpid()} on host"):
            FolderLock(folder).acquire("test")  # a second descriptor, even in the same process, is refused


def test_a_lock_file_that_cannot_be_written_leaves_no_folder_and_names_the_file(small_run, tmp_path, capsys,
                                                                              monkeypatch):
    """On a full disk the lock file is made (an inode) but its holder line cannot be written: that was a bare "error:
    No space left on device", and the new run folder stayed behind with an empty lock file in it."""
    write = os.write

    def full_for_locks(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(LOCK_NAME):
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(fd, data)

    monkeypatch.setattr(os, "write", full_for_locks)
    folder = tmp_path / "runs" / "x"
    assert cli.main(["train", *SMALL, "--out", str(folder)]) == 2
    assert capsys.readouterr().err == f"jaxrl-rollout: error: {folder / LOCK_NAME}: No space left on device\n"
    assert not (tmp_path / "runs").exists()
    resumed = tmp_path / "resumed"  # a run's own lock file stays (it is not this command's to remove)
    shutil.copytree(small_run, resumed)
    assert cli.main(["train", "--resume", str(resumed)]) == 2
    assert capsys.readouterr().err == f"jaxrl-rollout: error: {resumed / LOCK_NAME}: No space left on device\n"
    assert (resumed / LOCK_NAME).exists() and (resumed / "config.json").exists()


def test_a_folder_removed_while_its_run_trains_is_locked_again_or_the_run_stops(tmp_path, capsys, monkeypatch):
    """`rm -rf runs/x` while it trains: the run writes the folder again at its next save, so it takes its lock
    again first (a `train --resume runs/x` started then was not refused: two writers); and where another command
    has locked a new folder of that name meanwhile, the run stops, writing nothing there."""
    progress_line, holders = runner._progress_line, []

    def remove_at_the_last_chunk(spec, updates_done, *args):  # (chunk 2's line: TensorBoard's files are open)
        if updates_done == 2:
            shutil.rmtree(folder)
            if holders:  # another command locks a folder of that name
                holders[0] = _holder(folder)
        return progress_line(spec, updates_done, *args)

    save, holders_at_save = checkpoint.save, []

    def save_noting_the_holder(*args, **kwargs):  # the folder is locked again when the run writes it again
        holders_at_save.append(FolderLock(folder).held_by())
        return save(*args, **kwargs)

    monkeypatch.setattr(runner, "_progress_line", remove_at_the_last_chunk)
    monkeypatch.setattr(checkpoint, "save", save_noting_the_holder)
    folder = tmp_path / "removed"
    assert cli.main(["train", *SMALL, "--out", str(folder), "--tensorboard", "true"]) == 0
    assert holders_at_save == [f"pid {os.getpid()} on host {socket.gethostname()}"]
    out, err = capsys.readouterr()
    assert f"  {folder} was removed while this run trained: the run writes it again from its next checkpoint\n" in err
    # TensorBoard's files went with the folder (its writers write to the removed ones): not listed as written
    assert out.splitlines()[-1] == (f"  wrote {folder}/config.json, {folder}/metrics.csv, {folder}/learning_curve.png "
                                    "and the checkpoint")
    assert FolderLock(folder).held_by() is None  # released at the end, as ever
    assert cli.main(["evaluate", str(folder), "--num-episodes", "1"]) == 0  # whole again: config.json included

    folder = tmp_path / "taken"
    holders.append(None)
    try:
        assert cli.main(["train", *SMALL, "--out", str(folder)]) == 2
    finally:
        if holders[0] is not None:
            holders[0].stdin.close()
            holders[0].wait(timeout=60)
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"jaxrl-rollout: error: {folder} was removed while this run trained, and another command writes a folder of "
        f"that name now (pid {holders[0].pid} on host {socket.gethostname()}): this run stops, writing nothing there.")
    assert os.listdir(folder) == [LOCK_NAME]


@pytest.mark.parametrize("bad", [
    ["--devices", "3", "--seeds", "4"], ["--lr", "-1"], ["--gamma", "2"], ["--gae-lambda", "-3"],
    ["--lr", "1e-3,0"], ["--max-grad-norm", "0"], ["--ent-coef", "-0.1"]])
def test_refused_commands_exit_2_and_leave_no_folder(bad, tmp_path, capsys):
    assert cli.main(["train", *SMALL, *bad, "--out", str(tmp_path / "runs" / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jaxrl-rollout: error: {bad[0]} ") and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


def test_gamma_message_names_the_option_and_range(tmp_path, capsys):
    assert cli.main(["train", *SMALL, "--gamma", "2", "--out", str(tmp_path / "x")]) == 2
    assert "--gamma 2: gamma must be in [0, 1]" in capsys.readouterr().err


def test_huge_step_counts_are_refused_at_once(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", *SMALL, "--total-steps", "99999999999999999999999", "--out", str(tmp_path / "x")])
    assert exit_.value.code == 2 and not (tmp_path / "x").exists()
    assert "--total-steps: expected at most 2,147,483,647" in capsys.readouterr().err
    with pytest.raises(ValueError, match="total_timesteps=2147483648 is more than"):
        ppo.PPOConfig(total_timesteps=2**31)
    assert runner.default_chunk_updates(10**12) == 10**12 // 20  # no loop over every update
    assert runner.default_chunk_updates(976) == 61 and runner.default_chunk_updates(7) == 1


@pytest.mark.parametrize("field, value, words", [
    ("lr", 0.0, "lr must be > 0"), ("gamma", 1.5, r"gamma must be in \[0, 1\]"),
    ("gae_lambda", -0.1, r"gae_lambda must be in \[0, 1\]"), ("clip_eps", 0.0, "clip_eps must be > 0"),
    ("ent_coef", -1.0, "ent_coef must be >= 0"), ("vf_coef", math.nan, "vf_coef must be >= 0"),
    ("max_grad_norm", -1.0, "max_grad_norm must be > 0")])
def test_python_hparams_out_of_range_are_a_value_error(field, value, words):
    bad = ppo.PPOHParams(**{field: value})
    with pytest.raises(ValueError, match=words):
        stack_hparams([ppo.PPOHParams(), bad])
    with pytest.raises(ValueError, match=words):
        runner.RunSpec("ppo", ppo.PPOConfig(num_envs=4, num_steps=8, total_timesteps=64), (bad,), num_seeds=1)


def test_python_init_checks_concrete_hparams_and_skips_traced_ones():
    config = a2c.A2CConfig(num_envs=2, num_steps=4, total_timesteps=8)
    algorithm = a2c.make_a2c(config)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got 2"):
        algorithm.init(key, a2c.A2CHParams(gamma=2.0))
    with pytest.raises(ValueError, match="lr must be > 0 and finite, got -1"):
        algorithm.init(key, stack_hparams([a2c.A2CHParams()])._replace(lr=np.array([1e-3, -1.0])))
    traced = jax.eval_shape(lambda g: algorithm.init(key, a2c.A2CHParams(gamma=g)), 2.0)  # not checkable: traced
    assert traced is not None


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["grid"][0].update(lr=0.5), ["grid[0].lr: 0.5 in config.json, 0.00025 in the checkpoint"]),
    (lambda d: d["grid"][0].update(lr=math.nan), ["lr must be > 0 and finite, got nan"]),
    (lambda d: d["config"].update(total_timesteps=128), ["config.total_timesteps: 128 in config.json, 64 in"]),
    (lambda d: d.update(seed="abc"), ['seed must be an integer, got "abc"']),
    (lambda d: d.update(seed=2**32), ["seed must be from 0 to 2**32 - 1 (jax.random.key keeps a seed's low 32 bits"])])
def test_edited_config_json_is_refused_naming_the_fields(edit, words, small_run, tmp_path, capsys):
    folder = tmp_path / "run"
    shutil.copytree(small_run, folder)
    data = json.loads((folder / "config.json").read_text())
    edit(data)
    (folder / "config.json").write_text(json.dumps(data))
    assert cli.main(["train", "--resume", str(folder)]) == 2
    assert cli.main(["evaluate", str(folder)]) == 2
    err = capsys.readouterr().err
    assert all(err.count(w) == 2 for w in words) and "Traceback" not in err, err
    assert not any(p.name.startswith(".config.json") for p in folder.iterdir())


def test_resume_with_more_total_steps_trains_longer(small_run, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "run"
    shutil.copytree(small_run, folder)
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "128"]) == 0
    out = capsys.readouterr().out
    assert f"extending the run in {folder} from 64 to 128 steps per run" in out and "anneal_lr" in out
    spec = runner.read_spec(folder)
    meta = checkpoint.read_manifest(folder)["meta"]
    assert spec.config.total_timesteps == 128 and meta["spec"] == spec.to_json()
    assert meta["updates_done"] == 4 and meta["chunks_done"] == 4
    assert cli.main(["evaluate", str(folder)]) == 0 and "checkpoint final" in capsys.readouterr().out
    # resuming the complete run says so (it printed only "resuming after chunk 4" of 4 and "run 0.0 s")
    saved = sorted(p.name for p in (folder / "checkpoints").iterdir())
    assert cli.main(["train", "--resume", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert ("the run is complete (4 updates): nothing left to train; its summary follows (to train it longer: "
            f"jaxrl-rollout train --resume {folder} --total-steps N)") in err, err
    assert re.search(r"compile \d+\.\d s, run \d+\.\d s \(nothing trained[,)]", out) and "env steps/s" not in out, out
    assert checkpoint.read_manifest(folder)["meta"]["updates_done"] == 4
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == saved
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "64"]) == 2
    assert "has already trained 128 steps (4 updates of 32)" in capsys.readouterr().err
    # below one update too: the same line, not the new config's own complaint about its size
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxrl-rollout: error: --total-steps 16: the run in ") and err.count("\n") == 1, err
    assert "has already trained 128 steps (4 updates of 32); a resumed run can only be extended" in err
    # a new total in either direction says which, and names only the schedules it moves
    # (it said "extending ... from 256 to 192", and "anneal_lr ... rises again" when the updates stayed the same)
    resume = ["train", "--resume", str(folder), "--stop-after-chunks", "1", "--total-steps"]
    assert cli.main([*resume, "256"]) == 0  # 8 updates, 5 trained
    assert cli.main([*resume, "192"]) == 0  # 6 updates, 6 trained
    out = capsys.readouterr().out
    assert f"shortening the run in {folder} from 256 to 192 steps per run\n" in out, out
    assert ("anneal_lr: from update 6 on, the learning rate follows the new total's linear schedule over 6 updates "
            "(it falls faster from here on)") in out, out
    assert cli.main([*resume, "200"]) == 0  # 200 // 32: still 6 updates, all trained
    captured = capsys.readouterr()
    # it said "extending ... from 192 to 200 (the same number of updates)", and config.json stayed at 192
    assert (f"--total-steps 200 gives the run in {folder} the same 6 updates (192 steps per run) as its saved 192: "
            "nothing changes" in captured.out), captured.out
    assert "extending" not in captured.out and "anneal_lr" not in captured.out, captured.out
    assert "the run is complete (6 updates)" in captured.err, captured
    assert checkpoint.read_manifest(folder)["meta"]["updates_done"] == 6
    assert runner.read_spec(folder).config.total_timesteps == 192
    # an extension stopped before its first save: the printed command carries the new total, which the folder
    # does not hold yet (it printed "--resume F" alone, and that resumed the complete run with nothing to train)
    def stopped_at_once(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "train", stopped_at_once)
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "320"]) == 130
    assert (f"interrupted; continue with: jaxrl-rollout train --resume {folder} --total-steps 320\n"
            in capsys.readouterr().err)
    assert runner.read_spec(folder).config.total_timesteps == 192


def test_an_extension_stopped_between_its_checkpoint_and_config_json_still_resumes(small_run, tmp_path, capsys,
                                                                                     monkeypatch):
    """An extension saves its checkpoint, then rewrites config.json. With config.json not writable there (or the
    process killed between the two), the folder was refused for good by train --resume, evaluate and load_run
    ("differs from the spec saved with its checkpoint (was it edited?)"). The checkpoint's spec is the run's:
    evaluate reads it, and --resume rewrites config.json and ends where an uninterrupted extension ends."""
    plain, folder = tmp_path / "plain", tmp_path / "run"
    shutil.copytree(small_run, plain)
    shutil.copytree(small_run, folder)
    assert cli.main(["train", "--resume", str(plain), "--total-steps", "128"]) == 0
    real = runner.write_spec

    def unwritable(where, spec):
        raise PermissionError(errno.EPERM, "Operation not permitted", str(pathlib.Path(where) / "config.json"))

    monkeypatch.setattr(runner, "write_spec", unwritable)
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "128"]) == 2
    monkeypatch.setattr(runner, "write_spec", real)
    assert runner.read_spec(folder).config.total_timesteps == 64  # one total behind its checkpoint
    assert checkpoint.read_manifest(folder)["meta"]["spec"]["config"]["total_timesteps"] == 128
    capsys.readouterr()
    assert runner.load_run(folder)[0].config.total_timesteps == 128
    assert cli.main(["evaluate", str(folder)]) == 0 and "checkpoint final" in capsys.readouterr().out  # 4 of 4
    assert cli.main(["train", "--resume", str(folder)]) == 0
    out = capsys.readouterr().out
    assert (f"jaxrl_rollout: {folder}/config.json says 64 steps per run, its checkpoint 128 (an extension stopped "
            "before it rewrote config.json); config.json is rewritten from the checkpoint") in out, out
    assert runner.read_spec(folder) == runner.read_spec(plain)
    assert (folder / "metrics.csv").read_bytes() == (plain / "metrics.csv").read_bytes()
    # config.json removed: evaluate says how to get it back, and --resume writes it from the checkpoint's spec
    # (both said the folder "holds no run: config.json is missing")
    (folder / "config.json").unlink()
    assert cli.main(["evaluate", str(folder)]) == 2
    assert capsys.readouterr().err == (f"jaxrl-rollout: error: {folder} holds a checkpoint but no config.json "
                                       f"(removed?); jaxrl-rollout train --resume {folder} writes config.json again "
                                       "from the spec saved with the checkpoint.\n")
    assert cli.main(["train", "--resume", str(folder)]) == 0
    assert (f"jaxrl_rollout: {folder} holds no config.json: it is written again from its checkpoint's spec"
            in capsys.readouterr().out)
    assert runner.read_spec(folder) == runner.read_spec(plain)
    # a config.json edited in anything else is still refused
    data = json.loads((folder / "config.json").read_text())
    data["config"]["total_timesteps"], data["grid"][0]["lr"] = 64, 0.5
    (folder / "config.json").write_text(json.dumps(data))
    assert cli.main(["evaluate", str(folder)]) == 2
    assert "grid[0].lr: 0.5 in config.json, 0.00025 in the checkpoint" in capsys.readouterr().err


def test_resume_reads_eval_every_as_a_new_run_does(small_run, tmp_path, capsys):
    """`--eval-every chunk` given again on --resume is the run's chunk (it was refused: "1 there, chunk here"), and
    a --total-steps that leaves the run fewer updates than its --eval-every is refused, as a new run is (it trained
    with every eval_return NaN and said it would evaluate)."""
    folder = tmp_path / "run"
    shutil.copytree(small_run, folder)
    assert runner.read_spec(folder).eval_every == runner.read_spec(folder).chunk_updates == 1
    assert cli.main(["train", "--resume", str(folder), "--eval-every", "chunk"]) == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(folder), "--eval-every", "2"]) == 2
    assert "--eval-every: 1 there, 2 here" in capsys.readouterr().err
    shutil.rmtree(folder / "checkpoints")  # nothing trained yet, so any total above zero updates is allowed
    data = json.loads((folder / "config.json").read_text())
    data.update(eval_every=3)
    data["config"].update(total_timesteps=128)
    (folder / "config.json").write_text(json.dumps(data))
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "64"]) == 2
    err = capsys.readouterr().err
    assert err == (f"jaxrl-rollout: error: --total-steps 64: the run in {folder} evaluates every 3 updates "
                   "(--eval-every), and 64 steps give it only 2, so it would never evaluate.\n"), err


def test_video_every_on_resume_needs_a_multiple_left_to_train(small_run, capsys):
    """A complete run (2 of 2 updates) resumed with --video-every 1 trained nothing and recorded nothing, exit 0."""
    before = sorted(p.name for p in small_run.iterdir())
    assert cli.main(["train", "--resume", str(small_run), "--video-every", "1"]) == 2
    assert capsys.readouterr().err == (
        f"jaxrl-rollout: error: --video-every 1: the run has trained 2 of its 2 updates, and no multiple of 1 is "
        f"left, so it would never record; record its policy with: jaxrl-rollout evaluate {small_run} --video\n")
    assert sorted(p.name for p in small_run.iterdir()) == before


def test_a_run_stopped_before_its_first_checkpoint_takes_a_total_under_its_chunk(small_run, tmp_path, capsys):
    """Nothing trained yet (Ctrl-C during the first compile): a smaller --total-steps is a fresh start with the
    same options, the chunk chosen again. It said "chunk_updates=2 is more than the run's 1 updates"."""
    folder = tmp_path / "run"
    shutil.copytree(small_run, folder)
    shutil.rmtree(folder / "checkpoints")
    data = json.loads((folder / "config.json").read_text())
    data.update(chunk_updates=2, eval_every=2)  # as the default chunk and --eval-every chunk of a longer run
    (folder / "config.json").write_text(json.dumps(data))
    # a total the config itself refuses is still that error, naming the option
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxrl-rollout: error: --total-steps 16: total_timesteps=16 is less than one batch"), err
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "32"]) == 0
    out = capsys.readouterr().out
    assert (f"nothing trained in {folder} yet: --total-steps 32 has 1 update, fewer than the saved chunk's 2, so the "
            "chunk is chosen again: 1 update (and the evaluation runs after each)") in out, out
    spec = runner.read_spec(folder)
    assert (spec.config.total_timesteps, spec.chunk_updates, spec.eval_every) == (32, 1, 1)
    assert checkpoint.read_manifest(folder)["meta"]["updates_done"] == 1
    # with a checkpoint the chunk is the checkpoint's: a total under what was trained is refused as before
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "16"]) == 2
    assert "has already trained 32 steps (1 update of 32)" in capsys.readouterr().err


def test_an_extended_run_continues_in_whole_chunks_after_a_short_last_one():
    config = a2c.A2CConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 10)
    spec = runner.RunSpec("a2c", config, (a2c.A2CHParams(),), num_seeds=1, chunk_updates=3)
    assert runner.continued_lengths(spec, 3, 7) == [3, 3, 1, 3]  # 7 updates were [3, 3, 1]
    assert runner.continued_lengths(spec, 2, 6) == spec.chunk_lengths == [3, 3, 3, 1]
    # extended twice, [3, 1] then [3, 1]: the sizes are not kept, but they sum right and none is below 1
    # (it gave [3, 3, 3, -1], printed as "1 of -1 updates")
    twice = runner.continued_lengths(spec, 4, 8)
    assert twice[4:] == [2] and sum(twice) == 10 and min(twice) >= 1, twice
    # all ten updates done in more chunks than the plan's four: none left (it took the plan, and said nothing)
    assert runner.continued_lengths(spec, 6, 10)[6:] == []
    with pytest.raises(ValueError, match="done 11 updates"):
        runner.continued_lengths(spec, 4, 11)


def test_extending_twice_says_what_is_done_and_what_is_left_in_trained_steps(tmp_path, capsys):
    """The done chunks' sizes are not kept: the line says how many chunks and updates are done and the chunks to
    go; and the total is the whole updates trained, not the --total-steps typed (it said 'to 5,000' for 4,608)."""
    folder = str(tmp_path / "run")
    # without the learning-rate schedule, whose length is the total's, every total here trains the same two chunk
    # programs (3 updates and 1), loaded from the compilation cache after the first run (the tests' shared cache,
    # which the command line takes): 27 -> 14 s on 2 cores, 2026-12-06. They were compiled again on every resume
    # until then: checkify's check numbers made each trace of them, in one process, a new program to the cache.
    small = ["--num-envs", "4", "--num-steps", "8", "--seeds", "1", "--num-eval", "1", "--eval-every", "off",
             "--anneal-lr", "false", "--tensorboard", "false"]
    assert cli.main(["train", *small, "--total-steps", "128", "--chunk-updates", "3", "--out", folder]) == 0  # [3, 1]
    assert cli.main(["train", "--resume", folder, "--total-steps", "256"]) == 0  # [3, 1]
    capsys.readouterr()
    assert cli.main(["train", "--resume", folder, "--total-steps", "400"]) == 0  # 12 updates: [3, 1]
    out, err = capsys.readouterr()
    assert (f"extending the run in {folder} from 256 to 384 steps per run (--total-steps 400 in whole updates of "
            "32)\n") in out, out
    assert "; 4 chunks done (8 updates), 2 chunks of 3 updates (the last of 1 update) to go\n" in err, err
    assert "this session, 2 programs loaded from the compilation cache)" in out, out
    assert cli.main(["train", "--resume", folder]) == 0
    err = capsys.readouterr().err
    assert "; 6 chunks done (12 updates)\n" in err and "the run is complete (12 updates)" in err, err


def test_a_corrupt_checkpoint_is_one_line_even_at_exit(small_run, tmp_path):
    """Orbax leaves failed TensorStore reads behind; Python would print them later (even at exit) as
    "Event loop is closed" and never-awaited coroutine tracebacks. A user sees the one error line only."""
    corrupt = tmp_path / "corrupt"
    shutil.copytree(small_run, corrupt)
    step = max((p for p in (corrupt / "checkpoints").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for data in (p for p in (step / "state").rglob("*") if p.is_file() and p.parent.name == "d"):  # every data
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # file (evaluate reads the policy's alone)
    for command in (["evaluate", "corrupt"], ["train", "--resume", "corrupt"]) * 2:  # the leftovers come and go
        proc = _cli(*command, cwd=tmp_path)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, err
        assert err.strip().splitlines() == [f"jaxrl-rollout: error: {err.split('error: ', 1)[1].strip()}"], err
        assert f"corrupt checkpoint {step}" in err and "Traceback" not in err, err


def test_late_failed_reads_logged_by_asyncio_are_dropped_and_nothing_else():
    import logging

    asyncio_log = logging.getLogger("asyncio")
    before, hook = list(asyncio_log.filters), sys.unraisablehook
    try:
        checkpoint._drop_late_orbax_noise()
        checkpoint._drop_late_orbax_noise()  # installed once
        added = [f for f in asyncio_log.filters if f not in before]
        assert len(added) <= 1 and len([f for f in asyncio_log.filters if type(f).__name__ == "_LateOrbaxFutures"]) == 1

        def record(msg, error=None):
            exc_info = (type(error), error, None) if error is not None else None
            return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, msg, None, exc_info)

        read = ValueError('OUT_OF_RANGE: Error reading "00019/0.0.0" in OCDBT database at local file "x"')
        assert not asyncio_log.filter(record("Future exception was never retrieved\nfuture: <Future>", read))
        assert not asyncio_log.filter(record("Task exception was never retrieved\ntask: <Task>", read))
        assert asyncio_log.filter(record("Future exception was never retrieved", ValueError("something else")))
        assert asyncio_log.filter(record("Executing <Task> took 0.2 seconds"))
    finally:
        for f in [f for f in asyncio_log.filters if f not in before]:
            asyncio_log.removeFilter(f)
        sys.unraisablehook = hook


def test_the_orbax_noise_filter_passes_every_other_unraisable_error():
    seen = []
    previous = sys.unraisablehook
    try:
        sys.unraisablehook = seen.append
        checkpoint._drop_late_orbax_noise()
        checkpoint._drop_late_orbax_noise()  # installed once
        hook = sys.unraisablehook
        assert hook._jaxrl_rollout_orbax_noise

        class Unraisable:
            def __init__(self, value, obj=None):
                self.exc_value, self.object = value, obj

        hook(Unraisable(RuntimeError("Event loop is closed")))
        other = Unraisable(RuntimeError("something else"))
        hook(other)
        mine = Unraisable(ValueError("x"), obj=(lambda: None).__code__)
        hook(mine)
        assert seen == [other, mine]
    finally:
        sys.unraisablehook = previous


def test_an_interrupt_before_a_resumed_run_trains_says_where_its_checkpoint_is(small_run, tmp_path, monkeypatch,
                                                                              capsys):
    """It said "checkpoint saved" of a checkpoint it had only read."""
    folder = tmp_path / "copy"
    shutil.copytree(small_run, folder)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_signals, "wait_ready", interrupted)  # as Ctrl-C during the first chunk of the resumed run
    assert cli.main(["train", "--resume", str(folder), "--total-steps", "128"]) == 130
    captured = capsys.readouterr()
    assert f"  interrupted after chunk 2; its checkpoint is in {folder}\n" in captured.err, captured
    assert "checkpoint saved" not in captured.out + captured.err
