"""Two local processes on jax.distributed train one sweep together, and resume it together.

Each process is the CLI with `--distributed --coordinator 127.0.0.1:PORT
--num-processes 2 --process-id I`, two forced host devices each (4 global
devices, gloo collectives), on a free port with bounded time-outs; both end by
themselves or are killed. What this proves: the runner's sharded sweep, the
gathered metrics, the Orbax checkpoint saved by both processes (each its own
shards) and restored by both into their shards, the run folder written by
process 0 alone, and a resume across processes give what one process gives (integers exactly,
floats to float32 rounding: the sharded program may fuse differently). What it
does not prove: several machines, a real network, or accelerators.
"""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from jaxrl_rollout import cli

RUN = ["train", "--seeds", "4", "--total-steps", "2048", "--chunk-updates", "1", "--num-eval", "1",
       "--tensorboard", "false"]
TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(args: list[str], tmp_path, name: str, expect: int = 0) -> list[str]:
    """Runs the CLI as processes 0 and 1 of one cluster; returns their outputs (asserting both exit `expect`)."""
    port = _free_port()
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo", "JAX_PLATFORMS": "cpu"}
    procs, logs = [], []
    for i in range(2):
        log = open(tmp_path / f"{name}-{i}.log", "w+")
        cmd = [sys.executable, "-m", "jaxrl_rollout", *args, "--distributed", "--coordinator",
               f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)]
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        logs.append(log)
    try:
        codes = [p.wait(timeout=TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    assert codes == [expect, expect], "\n---\n".join(outputs)
    return outputs


def _metrics(folder) -> dict:
    with open(folder / "metrics.csv") as f:
        return {(r["grid_point"], r["seed"], r["update"], r["metric"]): float(r["value"]) for r in csv.DictReader(f)}


def _checkpoint(folder) -> dict:
    from jaxrl_rollout import checkpoint, runner

    _, state, extras, _ = runner.load_run(folder)
    return {**{f"state/{i}": np.asarray(x) for i, x in enumerate(checkpoint.flatten(state)[0])}, **extras}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("distributed")
    assert cli.main([*RUN, "--out", str(tmp / "single")]) == 0
    outputs = _two_processes([*RUN, "--out", str(tmp / "multi"), "--stop-after-chunks", "2"], tmp, "first")
    resumed = _two_processes(["train", "--resume", str(tmp / "multi"), "--num-eval", "1", "--tensorboard", "false"],
                             tmp, "resume")
    return tmp, outputs, resumed


def test_two_processes_resumed_equal_one_process(runs):
    tmp, _, _ = runs
    single, multi = _metrics(tmp / "single"), _metrics(tmp / "multi")
    assert multi.keys() == single.keys() and len(single) > 0
    for key, value in single.items():
        if key[3] == "num_episodes":
            assert multi[key] == value, key
        elif np.isfinite(value):
            np.testing.assert_allclose(multi[key], value, rtol=2e-5, atol=1e-6, err_msg=str(key))
    a, b = _checkpoint(tmp / "single"), _checkpoint(tmp / "multi")
    assert a.keys() == b.keys()
    for name in a:
        if np.issubdtype(a[name].dtype, np.floating):
            np.testing.assert_allclose(b[name], a[name], rtol=2e-5, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(b[name], a[name], err_msg=name)


def test_only_process_zero_prints_and_writes(runs):
    tmp, outputs, resumed = runs
    for out in (outputs, resumed):
        assert "jaxrl_rollout: PPO on CartPole-v1" in out[0]
        assert "jaxrl_rollout: PPO" not in out[1] and "step " not in out[1]
    assert "continue with: jaxrl-rollout train --resume" in outputs[0]
    assert "deterministic evaluation" in resumed[0]
    assert {p.name for p in (tmp / "multi").iterdir()} >= {"config.json", "metrics.csv", "checkpoints"}
    # each process wrote its own shards of the state into the Orbax checkpoint
    (step,) = (tmp / "multi" / "checkpoints").iterdir()
    assert {p.name for p in (step / "state").iterdir()} >= {"ocdbt.process_0", "ocdbt.process_1"}


def test_a_multi_process_run_needs_an_explicit_folder(tmp_path):
    outputs = _two_processes(RUN, tmp_path, "nofolder", expect=2)
    assert all("a multi-process run needs --out FOLDER" in out for out in outputs)
