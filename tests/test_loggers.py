"""Logs of the train command: TensorBoard event files and offline W&B runs, one per grid point and seed,
holding the numbers of metrics.csv."""

from __future__ import annotations

import csv
import json
import struct

import numpy as np
import pytest

from jaxrl_rollout import cli

SWEEP = ["--seeds", "2", "--lr", "1e-3,5e-4", "--total-steps", "2048", "--chunk-updates", "1", "--num-eval", "1"]


def read_scalars(folder) -> dict:
    """tag -> {step: value} from every event file in `folder` (TFRecord framing, Event protos)."""
    from tensorboardX.proto import event_pb2
    from tensorboardX.record_writer import masked_crc32c

    scalars: dict = {}
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
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars.setdefault(value.tag, {})[event.step] = value.simple_value
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
    assert sorted(scalars["train/entropy"]) == [512, 1024, 1536, 2048]


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
    monkeypatch.setenv("WANDB_SILENT", "true")
    folder = tmp_path / "wb"
    assert cli.main(["train", *SWEEP, "--wandb", "offline", "--tensorboard", "false", "--out", str(folder)]) == 0
    files = sorted((folder / "wandb").glob("offline-run-*/run-*.wandb"))
    runs = dict(read_wandb(path) for path in files)
    assert sorted(runs) == ["g0_s0", "g0_s1", "g1_s0", "g1_s1"]
    with open(folder / "metrics.csv") as f:
        expected = {int(r["step"]): float(r["value"]) for r in csv.DictReader(f)
                    if r["grid_point"] == "1" and r["seed"] == "0" and r["metric"] == "entropy"}
    logged = {row["_step"]: row["train/entropy"] for row in runs["g1_s0"] if "train/entropy" in row}
    assert sorted(logged) == sorted(expected) == [512, 1024, 1536, 2048]
    for step, value in expected.items():
        np.testing.assert_allclose(logged[step], value, rtol=1e-6)


def test_wandb_missing_extra_names_it(tmp_path, monkeypatch):
    import sys

    from jaxrl_rollout.loggers import WandbLogger
    from jaxrl_rollout.runner import RunSpec  # noqa: F401  (the spec is never reached)

    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxrl-rollout\[wandb\]'"):
        WandbLogger(tmp_path, spec=None)
