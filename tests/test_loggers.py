"""Logs of the train command: TensorBoard event files and offline W&B runs, one per grid point and seed,
holding the numbers of metrics.csv."""

from __future__ import annotations

import csv
import json
import os
import re
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jaxrl_rollout import cli

SWEEP = ["--seeds", "2", "--lr", "1e-3,5e-4", "--total-steps", "2048", "--chunk-updates", "1", "--num-eval", "1"]


def read_points(folder) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar TensorBoard shows from the event files in `folder` (TFRecord framing,
    Event protos), in the order written.

    The files are read in name order, as TensorBoard reads a run's folder; a session-start event (the purge event
    of a resumed writer) at step P drops every event read before it whose step is P or more, TensorBoard's rule
    for files of version 2 (its event accumulator's `_CheckForRestartAndMaybePurge`).
    """
    from tensorboardX.proto import event_pb2
    from tensorboardX.record_writer import masked_crc32c

    points: list = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            header, (length,) = data[at:at + 8], struct.unpack("<Q", data[at:at + 8])
            assert struct.unpack("<I", data[at + 8:at + 12])[0] == masked_crc32c(header), path
            body = data[at + 12:at + 12 + length]
            assert struct.unpack("<I", data[at + 12 + length:at + 16 + length])[0] == masked_crc32c(body), path
            event = event_pb2.Event.FromString(body)
            at += 12 + length + 4
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                points = [p for p in points if p[1] < event.step]
            points += [(value.tag, event.step, value.simple_value) for value in event.summary.value
                       if value.HasField("simple_value")]
    return points


def read_scalars(folder) -> dict:
    """tag -> {step: value} that TensorBoard shows from the event files in `folder` (`read_points`)."""
    scalars: dict = {}
    for tag, step, value in read_points(folder):
        scalars.setdefault(tag, {})[step] = value
    return scalars


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tb") / "run"
    assert cli.main(["train", *SWEEP, "--out", str(folder)]) == 0
    return folder


def test_one_event_folder_per_grid_point_and_seed(logged_run):
    runs = sorted(p.name for p in (logged_run / "tensorboard").iterdir())
    assert runs == ["g0_s0", "g0_s1", "g1_s0", "g1_s1"]


def test_scalars_equal_the_metrics_csv_at_the_same_steps(logged_run):
    with open(logged_run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    checked = 0
    for g, s in ((0, 0), (1, 1)):
        scalars = read_scalars(logged_run / "tensorboard" / f"g{g}_s{s}")
        for row in rows:
            if int(row["grid_point"]) != g or int(row["seed"]) != s or row["metric"] not in ("policy_loss", "entropy"):
                continue
            logged = scalars[f"train/{row['metric']}"][int(row["step"])]
            np.testing.assert_allclose(logged, float(row["value"]), rtol=1e-6)
            checked += 1
    assert checked == 2 * 2 * 4  # two runs, two metrics, four updates of 512 steps


def test_an_updates_scalars_are_one_event(logged_run):
    """One event per update and run, its summary holding every metric of that update (TensorFlow's merged-summary
    form, which TensorBoard reads value by value): an event per scalar made the README's main job write 75,000
    events, 2.6 s of its 16.4 s run on 2 cores."""
    from tensorboardX.proto import event_pb2

    data, at, steps = next((logged_run / "tensorboard" / "g0_s0").glob("events.out.tfevents.*")).read_bytes(), 0, []
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
        at += 16 + length
        tags = [value.tag for value in event.summary.value if value.HasField("simple_value")]
        if tags:
            steps.append(event.step)
            assert len(tags) == len(set(tags)) and {"train/policy_loss", "train/entropy"} <= set(tags), tags
    assert steps == [512, 1024, 1536, 2048]


def test_tensorboard_logs_do_not_import_torch(tmp_path):
    """tensorboardX imports torch, where installed, for torch tensors it is never given here (1.9 s a command)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from jaxrl_rollout import loggers\n"
        "loggers._import_tensorboardx()\n"
        "from tensorboardX import summary\n"
        "assert 'torch' not in sys.modules, 'tensorboardX imported torch'\n"
        "assert summary.scalar('x', 1.0).value[0].simple_value == 1.0\n"
        "import importlib.util\n"
        "if importlib.util.find_spec('torch') is None:\n"
        "    print('no torch installed')\n"
        "else:\n"
        "    import torch\n"  # still importable afterwards
        "    print('torch', torch.__version__)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_tensorboard_false_writes_none(tmp_path):
    folder = tmp_path / "quiet"
    assert cli.main(["train", *SWEEP, "--tensorboard", "false", "--out", str(folder)]) == 0
    assert not (folder / "tensorboard").exists()


def test_a_resumed_run_continues_the_logs(tmp_path):
    folder = tmp_path / "resumed"
    assert cli.main(["train", *SWEEP, "--out", str(folder), "--stop-after-chunks", "2",
                     "--checkpoint-every", "1"]) == 0
    assert cli.main(["train", "--resume", str(folder), "--num-eval", "1"]) == 0
    scalars = read_scalars(folder / "tensorboard" / "g0_s0")
    # the checkpoint's own update (step 1024) stays; the purge took it with the points logged after it
    assert sorted(scalars["train/entropy"]) == [512, 1024, 1536, 2048]


def test_a_run_that_starts_over_drops_its_earlier_logs(tmp_path):
    """A run that stopped before its first checkpoint (a crash, a kill) starts over from update 0 on --resume; the
    earlier writer's points stayed beside the new ones (two values at each step)."""
    import shutil

    from jaxrl_rollout import checkpoint

    folder = tmp_path / "over"
    one_run = ["--seeds", "1", "--total-steps", "2048", "--chunk-updates", "1", "--num-eval", "1"]
    assert cli.main(["train", *one_run, "--out", str(folder), "--stop-after-chunks", "2", "--checkpoint-every", "1"]) == 0
    shutil.rmtree(folder / checkpoint.SUBFOLDER)  # as if it had died before saving
    assert cli.main(["train", "--resume", str(folder), "--num-eval", "1"]) == 0
    events = folder / "tensorboard" / "g0_s0"
    assert len(list(events.glob("events.out.tfevents.*"))) == 2
    points = [(tag, step) for tag, step, _ in read_points(events)]
    assert len(points) == len(set(points))
    assert sorted(step for tag, step in points if tag == "train/entropy") == [512, 1024, 1536, 2048]


def test_two_writers_of_one_second_keep_apart_files(tmp_path, monkeypatch):
    """A run starting over within the second its earlier writer opened reused the file name and truncated it (the
    test above failed so on a loaded host)."""
    from jaxrl_rollout import loggers

    monkeypatch.setattr(loggers.time, "time", lambda: 1_700_000_000.5)
    first = loggers._EventFile(tmp_path, ".from_update_0", None)
    second = loggers._EventFile(tmp_path, ".from_update_0", 0)
    assert first.path != second.path and second.path.name == first.path.name + ".1"
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    first.close()
    second.close()


def read_wandb(path) -> tuple[str, list[dict]]:
    """(run name, history rows) of an offline W&B run file (its LevelDB-style log of Record protos)."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    at, pending, name, rows = 7, b"", None, []
    while at + 7 <= len(data):
        if block - at % block < 7:
            at += block - at % block
            continue
        _, length, kind = struct.unpack("<IHB", data[at:at + 7])
        chunk, at = data[at + 7:at + 7 + length], at + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record.FromString(pending + chunk if kind == 4 else chunk)
            which = record.WhichOneof("record_type")
            if which == "run":
                name = record.run.display_name
            elif which == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
    return name, rows


def test_wandb_offline_runs_hold_the_metrics(tmp_path, monkeypatch):
    """In a folder whose name holds characters W&B refuses in run ids (its runs' start raised mid-run)."""
    monkeypatch.setenv("WANDB_SILENT", "true")
    folder = tmp_path / "wb lr:1e-3,ent=0.01"
    assert cli.main(["train", *SWEEP, "--wandb", "offline", "--tensorboard", "false", "--out", str(folder)]) == 0
    files = sorted((folder / "wandb").glob("offline-run-*/run-*.wandb"))
    assert all(re.fullmatch(r"run-wb-lr-1e-3-ent=0\.01-[0-9a-z]+-g\d-s\d\.wandb", p.name) for p in files), files
    runs = dict(read_wandb(path) for path in files)
    assert sorted(runs) == ["g0_s0", "g0_s1", "g1_s0", "g1_s1"]
    with open(folder / "metrics.csv") as f:
        expected = {int(r["step"]): float(r["value"]) for r in csv.DictReader(f)
                    if r["grid_point"] == "1" and r["seed"] == "0" and r["metric"] == "entropy"}
    logged = {row["_step"]: row["train/entropy"] for row in runs["g1_s0"] if "train/entropy" in row}
    assert sorted(logged) == sorted(expected) == [512, 1024, 1536, 2048]
    for step, value in expected.items():
        np.testing.assert_allclose(logged[step], value, rtol=1e-6)


def test_a_wandb_setting_refused_from_the_environment_is_one_line_naming_its_variable(tmp_path):
    """An unknown WANDB_MODE (W&B reads its settings from WANDB_* variables too) ended `--wandb online` in
    pydantic's four-line ValidationError, its "For further information visit" link included, not naming the
    variable. Now one line with W&B's reason and the variable's value; no run is started. (In a process of its
    own: W&B reads the environment once per process, at its first run.)"""
    pytest.importorskip("wandb")
    script = textwrap.dedent(f"""
        from jaxrl_rollout import loggers, runner
        from jaxrl_rollout.algorithms import a2c

        spec = runner.RunSpec("a2c", a2c.A2CConfig(total_timesteps=1024), (a2c.A2CHParams(),), 2)
        try:
            loggers.WandbLogger({str(tmp_path)!r}, spec, mode="online").start()
        except ValueError as error:
            print(error)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_MODE="bogus", WANDB_BASE_URL="http://127.0.0.1:9")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    message = out.stdout.strip()
    assert "\n" not in message and "errors.pydantic.dev" not in message, message
    assert message.startswith("W&B could not start its online run g0_s0: "), message
    assert "input_value='bogus'" in message and message.endswith("(read from the environment: WANDB_MODE='bogus')"), \
        message
    assert not list(tmp_path.glob("wandb/*run-*"))


def test_wandb_runs_are_named_by_the_folder_however_it_is_given(tmp_path, monkeypatch):
    """`train --resume .` from inside the run folder gave the W&B runs an empty group and ids "-g0-s0", so they
    did not continue the runs that `--out exp` had started."""
    import types

    from jaxrl_rollout import runner
    from jaxrl_rollout.algorithms import a2c
    from jaxrl_rollout.loggers import WandbLogger

    started = []
    fake = types.SimpleNamespace(init=lambda **kwargs: started.append(kwargs), Settings=lambda **kwargs: None)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    spec = runner.RunSpec("a2c", a2c.A2CConfig(total_timesteps=1024), (a2c.A2CHParams(),), 2)
    (tmp_path / "exp").mkdir()
    monkeypatch.chdir(tmp_path / "exp")
    ids = []
    for given in (tmp_path / "exp", ".", "../exp/"):
        started.clear()
        WandbLogger(given, spec, mode="offline")._start()
        assert [run["group"] for run in started] == ["exp", "exp"], given
        ids.append([run["id"] for run in started])
    token = (tmp_path / "exp" / "wandb" / "jaxrl_rollout.id").read_text().strip()
    assert re.fullmatch("[0-9a-f]{8}", token)
    assert ids == [[f"exp-{token}-g0-s0", f"exp-{token}-g0-s1"]] * 3
    # Two folders of one name in different places never share a W&B run (resume="allow" would have continued
    # one's runs in the other): each has its own token.
    (tmp_path / "b" / "exp").mkdir(parents=True)
    started.clear()
    WandbLogger(tmp_path / "b" / "exp", spec, mode="offline")._start()
    other = (tmp_path / "b" / "exp" / "wandb" / "jaxrl_rollout.id").read_text().strip()
    assert other != token and [run["id"] for run in started] == [f"exp-{other}-g0-s0", f"exp-{other}-g0-s1"]
    # A folder whose W&B runs began before the token keeps their ids, so a resume continues them.
    (tmp_path / "old" / "wandb").mkdir(parents=True)
    started.clear()
    WandbLogger(tmp_path / "old", spec, mode="offline")._start()
    assert [run["id"] for run in started] == ["old-g0-s0", "old-g0-s1"]
    assert not (tmp_path / "old" / "wandb" / "jaxrl_rollout.id").exists()


def test_wandb_missing_extra_names_it(tmp_path, monkeypatch):
    import sys

    from jaxrl_rollout.loggers import WandbLogger
    from jaxrl_rollout.runner import RunSpec  # noqa: F401  (the spec is never reached)

    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxrl-rollout\[wandb\]'"):
        WandbLogger(tmp_path, spec=None)


def read_images(folder) -> dict:
    """tag -> {step: encoded image bytes} from every event file in `folder`."""
    from tensorboardX.proto import event_pb2

    images: dict = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 16 + length
            for value in event.summary.value:
                if value.HasField("image"):
                    images.setdefault(value.tag, {})[event.step] = value.image.encoded_image_string
    return images


def test_video_every_sends_clips_to_files_tensorboard_and_wandb(tmp_path, monkeypatch):
    """`--video-every 2 --video-runs 3`: run 3 (grid point 1, seed 1) gets a clip after updates 2 and 4, as an mp4
    in videos/training, an animated GIF in its TensorBoard run and a video in its W&B run; the episode is the one
    `evaluate` gives with the run's final params and the key fold_in(fold_in(run key, VIDEO_KEY_TAG), 4)."""
    import imageio.v3 as iio
    import jax

    from jaxrl_rollout import collect, video
    from jaxrl_rollout.runner import load_run, make_algorithm

    monkeypatch.setenv("WANDB_SILENT", "true")
    folder = tmp_path / "clips"
    assert cli.main(["train", *SWEEP, "--video-every", "2", "--video-runs", "3", "--wandb", "offline",
                     "--out", str(folder)]) == 0
    files = sorted(p.name for p in (folder / "videos" / "training").iterdir())
    assert [f.split("_return")[0] for f in files] == ["update2_lr=0.0005_seed1", "update4_lr=0.0005_seed1"], files
    assert all(f.endswith(".mp4") for f in files)

    assert not read_images(folder / "tensorboard" / "g0_s0")
    gifs = read_images(folder / "tensorboard" / "g1_s1")["eval/video"]
    assert sorted(gifs) == [1024, 2048]
    frames = iio.imread(gifs[2048], index=None, extension=".gif")
    assert frames.ndim == 4 and frames.shape[0] > 1 and not np.array_equal(frames[0], frames[-1])

    runs = dict(read_wandb(path) for path in sorted((folder / "wandb").glob("offline-run-*/run-*.wandb")))
    clips = {row["_step"]: row["eval/video/_type"] for row in runs["g1_s1"] if "eval/video/_type" in row}
    assert clips == {1024: "video-file", 2048: "video-file"}
    assert not any("eval/video/_type" in row for row in runs["g0_s0"])

    spec, state, _, _ = load_run(folder)
    algorithm = make_algorithm(spec)
    params = jax.tree.map(lambda x: x[3], jax.vmap(algorithm.policy_params)(state))
    key = jax.random.fold_in(jax.random.fold_in(spec.run_keys()[3], video.VIDEO_KEY_TAG), 4)
    episode = collect.evaluate(algorithm.env, algorithm.env_params, algorithm.eval_policy_fn, params, key, 1)
    assert files[1] == video.video_name("update4_lr=0.0005_seed1", float(episode.returns[0]))


def test_video_max_steps_ends_each_videos_episode_there(tmp_path, monkeypatch):
    """`--video-max-steps 3`: each training video's episode stops after 3 steps (CartPole's return 3; 4 frames, the
    states the 3 actions saw and the one after the last), as evaluate's with max_steps=3; the option is the
    command's, so an interrupted run's resume line repeats it."""
    import imageio.v3 as iio

    monkeypatch.chdir(tmp_path)
    argv = ["train", *SWEEP, "--video-every", "2", "--video-max-steps", "3", "--tensorboard", "false", "--out", "v"]
    assert cli.main([*argv, "--stop-after-chunks", "2"]) == 0
    files = sorted((tmp_path / "v" / "videos" / "training").iterdir())
    assert [f.name for f in files] == ["update2_lr=0.001_seed0_return3.0.mp4"]
    assert iio.imread(files[0]).shape[0] == 4
    from jaxrl_rollout import cli as cli_module

    args = cli_module.build_parser().parse_args(argv)
    assert cli_module._resume_command(args, "v") == ("jaxrl-rollout train --resume v --video-every 2 "
                                                     "--video-max-steps 3 --num-eval 1 --tensorboard false")
    # evaluate --video takes it too, for its videos only
    assert cli.main(["evaluate", "v", "--num-episodes", "1", "--video", "--runs", "0", "--video-max-steps", "2"]) == 0
    (clip,) = (tmp_path / "v" / "videos").glob("update2_evalseed0_*.mp4")
    assert clip.name.endswith("_return2.0.mp4") and iio.imread(clip).shape[0] == 3, clip.name


def test_evaluate_refuses_video_max_steps_without_video(tmp_path, capsys):
    assert cli.main(["evaluate", str(tmp_path), "--video-max-steps", "2"]) == 2
    assert capsys.readouterr().err == ("jaxrl-rollout: error: --video-max-steps 2 bounds the episodes of --video; "
                                       "add --video.\n")


@pytest.mark.parametrize("options, message", [
    (["--video-runs", "1"], "--video-runs is an option of --video-every's videos; add --video-every N."),
    (["--video-max-steps", "3"], "--video-max-steps is an option of --video-every's videos; add --video-every N."),
    (["--video-every", "5"], "--video-every 5: the run has only 4 updates"),
    (["--video-every", "1", "--video-runs", "4"], "--video-runs: run '4'"),
    # (a gymnasium env draws itself and envpool's Atari shows its observations: tests/test_video.py; envpool's
    # CartPole can do neither)
    (["--video-every", "1", "--env", "envpool/CartPole-v1", "--seeds", "1", "--lr", "1e-3"],
     "--video-every: cannot render CartPole-v1: EnvpoolEnv is a host env"),
])
def test_bad_video_options_exit_2_before_anything_is_written(tmp_path, capsys, options, message):
    if "envpool/CartPole-v1" in options:
        pytest.importorskip("envpool")
    folder = tmp_path / "refused"
    assert cli.main(["train", *SWEEP, *options, "--out", str(folder)]) == 2
    assert message in capsys.readouterr().err
    assert not folder.exists()


def test_training_videos_come_at_each_multiple_reached_after_a_resumed_update(tmp_path):
    """The hook's schedule: a clip after any chunk that reaches a new multiple of `every`, none at the resume; the
    state is asked for (runner.train passes a function, which merges a sweep's groups) only when a clip is due."""
    import jax

    from jaxrl_rollout import algorithms, video
    from jaxrl_rollout.algorithms import ppo

    algorithm = algorithms.get("ppo").make(ppo.PPOConfig(num_envs=2, num_steps=8, total_timesteps=64))
    keys = jax.random.split(jax.random.key(0), 1)
    state = jax.vmap(algorithm.init)(keys, algorithms.stack_hparams([ppo.PPOHParams()]))
    record = video.TrainingVideos(tmp_path, algorithm.env, algorithm.env_params, algorithm.eval_policy_fn,
                                  algorithm.policy_params, keys, every=3, first_update=4, max_steps=5)
    asked = []
    made = [len(record(lambda: asked.append(u) or state, u)) for u in (5, 6, 8, 9, 13)]
    assert made == [0, 1, 0, 1, 1] and asked == [6, 9, 13]
    assert len(record(state, 16)) == 1  # the state itself, as well
    assert sorted(p.name.split("_")[0] for p in tmp_path.iterdir()) == ["update13", "update16", "update6", "update9"]


def test_training_videos_hand_frames_only_to_a_sink_that_reads_them(tmp_path):
    """A sink with `needs_frames = False` (W&B's, which uploads the file) gets None for the frames; with one that
    reads them (TensorBoard's GIF) every sink gets the episode's frames [L, H, W, 3]."""
    import jax
    import numpy as np

    from jaxrl_rollout import algorithms, video
    from jaxrl_rollout.algorithms import ppo
    from jaxrl_rollout.loggers import TensorBoardLogger, WandbLogger

    assert WandbLogger.needs_frames is False and getattr(TensorBoardLogger, "needs_frames", True)
    algorithm = algorithms.get("ppo").make(ppo.PPOConfig(num_envs=2, num_steps=8, total_timesteps=64))
    keys = jax.random.split(jax.random.key(0), 1)
    state = jax.vmap(algorithm.init)(keys, algorithms.stack_hparams([ppo.PPOHParams()]))

    class Sink:
        def __init__(self, needs_frames):
            self.needs_frames, self.got = needs_frames, []

        def log_video(self, run, clip, frames, update):
            self.got.append(frames)

    for sinks in ([Sink(False)], [Sink(False), Sink(True)]):
        record = video.TrainingVideos(tmp_path / str(len(sinks)), algorithm.env, algorithm.env_params,
                                      algorithm.eval_policy_fn, algorithm.policy_params, keys, every=1, max_steps=5,
                                      sinks=sinks)
        (clip,) = record(state, 1)
        for sink in sinks:
            (frames,) = sink.got
            if len(sinks) == 1:
                assert frames is None
            else:
                # the states the episode's actions saw and the one it ended in
                assert isinstance(frames, np.ndarray) and frames.shape[0] == clip.length + 1 and frames.ndim == 4


def test_a_video_that_fails_to_draw_is_reported_once_and_training_goes_on(tmp_path, capsys):
    """A draw failing mid-run (here a renderer that raises, as MuJoCo does when its OpenGL context is lost) ends
    the videos with one line on stderr; the run trains to the end and exits 0."""
    from gymnax.environments.classic_control.cartpole import CartPole

    from jaxrl_rollout import video

    def broken(env, env_params, states):
        raise RuntimeError("the OpenGL context was lost")

    video.register_renderer(CartPole, broken)
    try:
        folder = tmp_path / "broken"
        assert cli.main(["train", *SWEEP, "--video-every", "1", "--tensorboard", "false", "--out", str(folder)]) == 0
    finally:
        video.register_renderer(CartPole, None)
    err = capsys.readouterr().err
    assert err.count("--video-every: no more videos (RuntimeError: the OpenGL context was lost); training goes on") == 1
    assert not list((folder / "videos" / "training").glob("*.mp4")) and (folder / "metrics.csv").exists()


def test_a_chunks_metrics_of_different_update_counts_are_refused_naming_them():
    """Both loggers write an update's metrics together (TensorBoard one event, W&B one row); metrics of different
    update counts are one ValueError naming each metric's count, not an IndexError or updates left unwritten."""
    from jaxrl_rollout import loggers

    with pytest.raises(ValueError, match=r"same number of updates, got 'entropy' 3, 'policy_loss' 2\."):
        loggers._chunk_arrays({"entropy": np.zeros((2, 3)), "policy_loss": np.zeros((2, 2))}, 2)
    assert loggers._chunk_arrays({"entropy": np.zeros((2, 3))}, 2)["entropy"].shape == (2, 3)
