"""Run logs people already read: TensorBoard event files and Weights & Biases runs, written from the host.

`TensorBoardLogger` writes one event-file folder per run (grid point g, seed s)
under `<run folder>/tensorboard/g{g}_s{s}`, so TensorBoard shows every seed and
grid point as its own run. The runner calls it between jitted chunks with the
chunk's metrics, which are already on the host: nothing is logged from inside
jit. Every metric is a scalar tagged `train/<metric>` at the run's cumulative
env steps, except a periodic evaluation's `eval_return` and `eval_length`,
tagged `eval/return` and `eval/length` (`metric_tag`); a grid point's
hyperparameters are written once as text.

Resuming: a logger opened at update U tells TensorBoard to drop events past
step `run_metrics.steps_at(config, U)` (update U's, which stays) from the earlier
writer (tensorboardX's purge event), so chunks logged after the last checkpoint
of an interrupted run are not shown twice; a run that starts over from update 0
drops all of them.

`WandbLogger` (the `wandb` extra) logs the same scalars to one W&B run per
grid point and seed, grouped by the run folder's name, online or offline
(`wandb sync` uploads an offline run later). Its run ids are the folder's
name and a random token saved in the folder (`wandb/jaxrl_rollout.id`), so a
resumed run continues the same W&B runs, and two folders of the same name in
different places (`a/exp`, `b/exp`) never share a W&B run.
"""

from __future__ import annotations

import contextlib
import math
import os
import pathlib
import socket
import struct
import time
from typing import Any

import numpy as np

from jaxrl_rollout import _extras
from jaxrl_rollout.run_metrics import steps_at

__all__ = ["TensorBoardLogger", "WandbLogger", "chain", "metric_tag"]


def chain(*hooks):
    """One `on_chunk` hook calling each non-None hook in turn (None if there is none)."""
    hooks = [h for h in hooks if h is not None]
    if not hooks:
        return None

    def on_chunk(metrics: dict, first_update: int) -> None:
        for hook in hooks:
            hook(metrics, first_update)

    return on_chunk


def metric_tag(name: str) -> str:
    """A metric's TensorBoard and W&B name: "eval/return" for a periodic evaluation's eval_return, else "train/NAME"."""
    return f"eval/{name[len('eval_'):]}" if name.startswith("eval_") else f"train/{name}"


def _chunk_arrays(metrics: dict, runs: int) -> dict:
    """A chunk's metrics as numpy arrays, each checked to be [runs, updates], all of the same updates (each logger
    writes an update's metrics together)."""
    arrays = {name: np.asarray(values) for name, values in metrics.items()}
    for name, values in arrays.items():
        if values.ndim != 2 or values.shape[0] != runs:
            raise ValueError(f"metric {name!r} must be [runs={runs}, updates], got {values.shape}.")
    if len({values.shape[1] for values in arrays.values()}) > 1:
        counts = ", ".join(f"{name!r} {values.shape[1]}" for name, values in arrays.items())
        raise ValueError(f"every metric of a chunk must have the same number of updates, got {counts}.")
    return arrays


def _import_tensorboardx():
    """Imports tensorboardX without letting it import torch, unless torch is already imported.

    tensorboardX's package imports its `SummaryWriter`, which imports torch when
    it is installed, only to accept torch tensors: 1.9 s of every command that
    writes TensorBoard logs, on the machines of the PyTorch users this library
    is for (`python -X importtime`, 2 cores). Nothing here hands it a torch
    tensor (it writes numpy values and protos), so while tensorboardX loads,
    `import torch` fails as if torch were absent, a case tensorboardX handles:
    torch then only drops out of its type annotations, and its conversions
    still import torch when a user's own code hands them a tensor.
    """
    import sys

    if "tensorboardX" in sys.modules or "torch" in sys.modules:
        import tensorboardX
        return tensorboardX
    sys.modules["torch"] = None  # an import of a module mapped to None raises ImportError
    try:
        import tensorboardX
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return tensorboardX


class _EventFile:
    """One TensorBoard event file, written and flushed in the calling thread.

    tensorboardX's `SummaryWriter` writes from a background thread and closes
    its files at exit: an error there (a full disk) reached the user as thread
    and atexit tracebacks, and a dead writer thread could block the run on a
    full queue. Here every write happens in the runner's thread, so an OS error
    is raised where the runner can name the file. The file format, its name
    (events.out.tfevents.<time>.<host><suffix>) and the purge event are
    tensorboardX's; only the writing thread differs.
    """

    def __init__(self, folder: pathlib.Path, suffix: str, purge_step):
        _import_tensorboardx()
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.record_writer import masked_crc32c

        self._event, self._crc = Event, masked_crc32c
        folder.mkdir(parents=True, exist_ok=True)
        now = time.time()
        name = f"events.out.tfevents.{int(now)}.{socket.gethostname()}{suffix}"
        self.path, n = folder / name, 0
        while self.path.exists():  # a run starting over within the same second truncated its earlier writer's file
            n += 1
            self.path = folder / f"{name}.{n}"
        with self._naming():
            self._file = open(self.path, "wb")
            self._write(Event(wall_time=now, file_version="brain.Event:2"))
            if purge_step is not None:  # TensorBoard drops the earlier writer's events from this step on
                self._write(Event(wall_time=now, step=purge_step, session_log=SessionLog(status=SessionLog.START)))

    @contextlib.contextmanager
    def _naming(self):
        """Re-raises an OS error with this file's path."""
        try:
            yield
        except OSError as error:
            raise OSError(error.errno, error.strerror or str(error), str(self.path)) from None

    def _write(self, event) -> None:
        """One TFRecord: length, its masked CRC-32C, the Event proto, the proto's masked CRC-32C."""
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", self._crc(header)) + data + struct.pack("<I", self._crc(data)))

    def add(self, summary, step: int) -> None:
        with self._naming():
            self._write(self._event(wall_time=time.time(), step=step, summary=summary))

    def flush(self) -> None:
        """Hands what was written to the OS (TensorBoard sees it); `close` also syncs it to disk."""
        with self._naming():
            self._file.flush()

    def close(self) -> None:
        """Flushes, syncs and closes; a failed flush still closes the file, then raises."""
        try:
            with self._naming():
                self._file.flush()
                os.fsync(self._file.fileno())
        finally:
            try:
                self._file.close()
            except OSError:
                pass  # the flush's error (raised) says what went wrong


class TensorBoardLogger:
    """TensorBoard scalars for every run of a `RunSpec`.

    Args:
      folder: the run folder; events go to `folder/tensorboard/g{g}_s{s}`.
      spec: the sweep (its grid, seeds and batch size name and place the runs).
      first_update: updates already done (0 for a new run, the checkpoint's on
        resume); events from an earlier writer past it are purged (all of them
        at 0).

    Every chunk is written and flushed before `log_chunk` returns, in the
    caller's thread: a full disk or a read-only folder raises an `OSError`
    naming the event file, and no thread or exit hook is left behind.
    """

    def __init__(self, folder, spec: Any, first_update: int = 0):
        try:
            _import_tensorboardx()
            from tensorboardX import summary
        except ImportError as err:  # a base dependency; this only fires in a broken install
            raise ImportError(
                f"TensorBoard logs need tensorboardX ({err}); pip install tensorboardX, or pass --tensorboard false."
            ) from err
        from tensorboardX.proto.summary_pb2 import Summary

        self._summary, self._proto = summary, Summary
        self._config = spec.config
        self.root = pathlib.Path(folder) / "tensorboard"
        self._spec, self._first_update, self._files = spec, first_update, None

    def _open_files(self) -> list:
        # Opened at the first chunk (or video), so a run that fails before one (a corrupt checkpoint on
        # resume, a bad config) leaves no event files behind; later calls return the open files.
        if self._files is not None:
            return self._files
        from jaxrl_rollout.run_metrics import grid_label

        spec, first_update = self._spec, self._first_update
        self._files = []
        for r in range(spec.num_runs):
            g, s = divmod(r, spec.num_seeds)
            folder = self.root / f"g{g}_s{s}"
            # TensorBoard keeps an earlier writer's events of steps below the purge step: up to the checkpoint's
            # update, whose point was logged at steps_at(first_update). A run starting over (it stopped before its
            # first checkpoint) purges all the earlier writer's events, where there are any.
            if first_update:
                purge = steps_at(self._config, first_update) + 1
            else:
                purge = 0 if any(folder.glob("events.out.tfevents.*")) else None
            # Files are named by the second: the suffix keeps a resume's file apart from the
            # earlier writer's even within the same second.
            events = _EventFile(folder, f".from_update_{first_update}", purge)
            self._files.append(events)
            if not first_update:
                events.add(self._summary.text("run", f"{spec.algo} on {spec.config.env_id}; grid point {g} "
                                                     f"({grid_label(spec, g)}), seed {s}"), 0)
        return self._files

    def log_chunk(self, metrics: dict, first_update: int) -> None:
        """Writes a chunk's metrics (name -> [R, updates] arrays) for updates first_update + 1, ...

        NaN values (no episode ended in that update) are skipped, as TensorBoard
        would draw them as gaps anyway. An update's scalars are one event (one
        summary of several values, as TensorFlow's merged summaries are), not
        one event each: PPO's ten metrics of the README's main job made 75,000
        events, and writing them took 2.6 of its 16.4 s of run (2 cores,
        2026-12-07).
        """
        files = self._open_files()
        arrays = _chunk_arrays(metrics, len(files))
        if not arrays:
            return
        tags = [metric_tag(name) for name in arrays]
        # [updates, runs, metrics], as Python floats (what a proto's float field takes)
        table = np.stack([values.astype(np.float64) for values in arrays.values()], axis=-1).transpose(1, 0, 2)
        Value = self._proto.Value
        for u, rows in enumerate(table.tolist()):
            step = steps_at(self._config, first_update + u + 1)
            for events, row in zip(files, rows):
                values = [Value(tag=tag, simple_value=x) for tag, x in zip(tags, row) if math.isfinite(x)]
                if values:
                    events.add(self._proto(value=values), step)
        for events in files:
            events.flush()

    def log_video(self, run: int, video: Any, frames: np.ndarray, update: int) -> None:
        """Writes an evaluation episode's frames [T, H, W, 3] to run `run` as an animated GIF image "eval/video".

        TensorBoard's Images tab plays it; the step is the run's env steps at
        `update`. Frames wider than 320 pixels are thinned by striding, so an
        episode of a few hundred frames stays near a megabyte.
        """
        from tensorboardX.proto.summary_pb2 import Summary

        from jaxrl_rollout.video import gif_bytes

        files = self._open_files()
        stride = max(1, -(-frames.shape[2] // 320))
        small = frames[:, ::stride, ::stride]  # a view: gif_bytes reads it a frame at a time
        image = Summary.Image(height=small.shape[1], width=small.shape[2], colorspace=3,
                              encoded_image_string=gif_bytes(small))
        files[run].add(Summary(value=[Summary.Value(tag="eval/video", image=image)]), steps_at(self._config, update))
        files[run].flush()

    def close(self) -> None:
        """Flushes and closes every event file (all of them, then raises the first error)."""
        files, self._files = self._files or [], []
        first_error = None
        for events in files:
            try:
                events.close()
            except OSError as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error


WANDB_RUN_ID_RESERVED = ":;,#?/'"  # characters W&B refuses in a run id (its settings' validate_run_id)
WANDB_PROJECT_RESERVED = "/\\#?%:"  # and in a project name (validate_project), which is at most 128 characters


def wandb_run_id(text: str) -> str:
    """`text` as a W&B run id: each character W&B reserves, and any white space, as "-" (a run folder named
    "lr=1e-3,ent=0.01" or "lr:1e-3" is a valid folder name, and its runs' ids were refused mid-run)."""
    return "".join("-" if c in WANDB_RUN_ID_RESERVED or c.isspace() else c for c in text)


def check_wandb_project(project: Any, option: str = "project") -> None:
    """A ValueError naming `option` unless `project` is a name W&B takes (1 to 128 characters, none of
    `WANDB_PROJECT_RESERVED`); W&B itself refuses one only at its first run, after training has begun."""
    if not isinstance(project, str) or not project.strip():
        raise ValueError(f"{option} must be a W&B project name, got {project!r}.")
    bad = sorted(set(project) & set(WANDB_PROJECT_RESERVED))
    if bad or len(project) > 128:
        why = f"it holds {' '.join(bad)}" if bad else f"it has {len(project)} characters"
        raise ValueError(f"{option} {project}: W&B project names have 1 to 128 characters and none of "
                         f"{' '.join(WANDB_PROJECT_RESERVED)}; {why}.")


WANDB_TOKEN_FILE = "jaxrl_rollout.id"  # in FOLDER/wandb: the token of the folder's W&B run ids


def _wandb_refusal(error: Exception) -> str:
    """W&B's refusal in one line; where its settings refused a value that a WANDB_* variable of the environment
    set (pydantic names the setting, `mode` for WANDB_MODE), that variable and its value too."""
    text = " ".join(str(error).split()).rstrip(".") or type(error).__name__
    text = text.split(" For further information visit https://errors.pydantic.dev")[0]
    settings = [e["loc"][0] for e in getattr(error, "errors", list)() if isinstance(e, dict) and e.get("loc")]
    names = [f"WANDB_{str(name).upper()}" for name in dict.fromkeys(settings)]
    read = [f"{name}={os.environ[name]!r}" for name in names if name in os.environ]
    return text + (f" (read from the environment: {', '.join(read)})" if read else "")


def _wandb_token(folder: pathlib.Path) -> str:
    """The random token of `folder`'s W&B run ids, made and saved at its first W&B run, read after.

    A folder whose W&B runs were started before the token (a `wandb` folder and no token file) keeps its
    ids without one (""), so a resumed run continues them.
    """
    import secrets

    from . import checkpoint

    path = folder / "wandb" / WANDB_TOKEN_FILE
    if path.is_file():
        return path.read_text().strip()
    if (folder / "wandb").exists():
        return ""
    (folder / "wandb").mkdir(parents=True)
    token = secrets.token_hex(4)
    checkpoint.write_atomic(path.parent, path.name, lambda f: f.write(token.encode() + b"\n"))
    return token


class WandbLogger:
    """Weights & Biases scalars for every run of a `RunSpec` (the `wandb` extra).

    Args:
      folder: the run folder; W&B writes under `folder/wandb`.
      spec: the sweep.
      mode: "online" or "offline".
      project: the W&B project.
    """

    def __init__(self, folder, spec: Any, mode: str = "offline", project: str = "jaxrl_rollout"):
        if mode not in ("online", "offline"):
            raise ValueError(f"mode must be 'online' or 'offline', got {mode!r}.")
        check_wandb_project(project)
        try:
            import wandb
        except ImportError as err:
            raise _extras.missing("W&B logging", "wandb", err) from err
        self._wandb, self._folder, self._spec, self._mode, self._project = wandb, pathlib.Path(folder), spec, mode, project
        self._config = spec.config
        self._runs = None

    def start(self) -> None:
        """Starts the W&B runs now rather than at the first chunk, so that a W&B that cannot start (an online
        run without an API key) is refused before training rather than after its first chunk.

        Raises:
          ValueError: W&B's own error (`wandb.errors.Error`) in one line, naming the run it could not start.
        """
        self._start()

    def _start(self) -> list:
        # Started at the first chunk (or by `start`), like the TensorBoard writers: a run that fails before one
        # logs nothing; later calls return the started runs.
        if self._runs is not None:
            return self._runs
        import dataclasses

        wandb, folder, spec, mode, project = self._wandb, self._folder, self._spec, self._mode, self._project
        name = folder.resolve().name  # the folder's own name however it was given ("." or "../runs/x/")
        token = _wandb_token(folder)
        prefix = f"{name}-{token}" if token else name
        self._runs = []
        if mode == "offline":
            # W&B's process-wide set-up (made at the first init) reads these: without them it runs git and
            # sends analytics even for an offline run. Set for the process, as that set-up outlives this call.
            os.environ["WANDB_MODE"] = "offline"
            os.environ["WANDB_DISABLE_GIT"] = "true"
        for r in range(spec.num_runs):
            g, s = divmod(r, spec.num_seeds)
            config = {"algo": spec.algo, "grid_point": g, "seed": s, "root_seed": spec.seed,
                      **dataclasses.asdict(spec.config), "env_options": dict(spec.config.env_options),
                      **spec.grid[g]._asdict()}  # the env's make options as their object, as config.json has them
            try:
                self._runs.append(wandb.init(
                    mode=mode, dir=str(folder), project=project, group=name, name=f"g{g}_s{s}",
                    id=wandb_run_id(f"{prefix}-g{g}-s{s}"), resume="allow", config=config,
                    reinit="create_new", settings=self._settings(),
                ))
            # "No API key configured. Use `wandb login` to log in.", ...; a ValueError: W&B's settings refused
            # (pydantic's ValidationError, a page long), e.g. a WANDB_MODE of the environment it does not know
            except (wandb.errors.Error, ValueError) as error:
                started, self._runs = self._runs, None
                for run in started:
                    run.finish(exit_code=1)
                raise ValueError(f"W&B could not start its {mode} run g{g}_s{s}: {_wandb_refusal(error)}") from None
        return self._runs

    def _settings(self):
        """Offline: no network and no subprocess but W&B's own service (no git, system metrics or metadata)."""
        if self._mode != "offline":
            return None
        return self._wandb.Settings(mode="offline", disable_git=True, x_disable_stats=True, x_disable_meta=True,
                                    x_disable_machine_info=True, x_save_requirements=False)

    def log_chunk(self, metrics: dict, first_update: int) -> None:
        """Logs a chunk's metrics (name -> [R, updates]) at the runs' env steps; NaNs are left out."""
        runs = self._start()
        arrays = _chunk_arrays(metrics, len(runs))
        updates = next(iter(arrays.values())).shape[1] if arrays else 0
        for r, run in enumerate(runs):
            for u in range(updates):
                row = {metric_tag(k): float(v[r, u]) for k, v in arrays.items() if np.isfinite(v[r, u])}
                run.log(row, step=steps_at(self._config, first_update + u + 1))

    needs_frames = False
    """`log_video` reads the video's file, not its frames (`video.TrainingVideos` then draws it a block at a time)."""

    def log_video(self, run: int, video: Any, frames: np.ndarray | None, update: int) -> None:
        """Logs an evaluation episode's video file (`video.path`, mp4 or gif) to W&B run `run` as "eval/video"."""
        runs = self._start()
        clip = self._wandb.Video(str(video.path), caption=f"update {update}: return {video.episode_return:.1f}")
        runs[run].log({"eval/video": clip}, step=steps_at(self._config, update))

    def close(self) -> None:
        """Finishes every W&B run."""
        for run in self._runs or []:
            run.finish()
