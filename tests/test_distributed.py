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
from tests.conftest import xla_flags_with_devices

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
    env = {**os.environ, "XLA_FLAGS": xla_flags_with_devices(2), "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
           "JAX_PLATFORMS": "cpu"}
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


def test_a_refusal_by_process_zero_ends_every_process_in_one_line(tmp_path):
    """Process 0 alone checks the folder and options; the others waited at a barrier it never reached, and
    ended after about 30 s in a Gloo time-out's traceback (exit 1). Three runs over two processes were not
    refused at all: one process had no shard, failed, and the other hung for minutes."""
    for extra, words in ((["--seeds", "3"], "--seeds / --max-parallel: a group of 3 runs (grid points x seeds, or "
                                            "max_parallel) does not divide over the run's 2 processes"),
                         (["--seeds", "4", "--devices", "3"], "--devices 3: a group of 4 runs")):
        outputs = _two_processes(["train", "--total-steps", "2048", *extra, "--out", str(tmp_path / "x")], tmp_path,
                                 "refused", expect=2)
        # each process's error line. Gloo prints "[Gloo] Rank 1 is connected to 1 peer ranks..." on stdout from
        # two threads, whose pieces and newlines may land around ours (glued in front of it, or after it): the line
        # is read from where our words start, up to a piece of Gloo's after them
        lines = [([line[line.index("jaxrl-rollout: "):].split("[Gloo]")[0] for line in out.splitlines()
                   if "jaxrl-rollout: " in line] or [out])[-1] for out in outputs]
        assert lines[0].startswith(f"jaxrl-rollout: error: {words}"), outputs[0]
        assert lines[1] == lines[0].replace("error: ", "error: process 0 refused the run: ", 1), outputs[1]
        assert not any("Traceback" in out for out in outputs) and not (tmp_path / "x").exists()


def test_a_group_smaller_than_the_devices_is_shared_by_every_process(runs, tmp_path):
    """Two runs on two processes of two devices each: the first two of the four devices, both process 0's,
    were chosen, and process 1 failed without a shard. One device of each process trains them, and they are
    the first two seeds of the four-seed single-process run."""
    tmp, _, _ = runs
    _two_processes([*RUN[:2], "2", *RUN[3:], "--out", str(tmp_path / "two")], tmp_path, "two")
    single, two = _metrics(tmp / "single"), _metrics(tmp_path / "two")
    assert two.keys() == {k for k in single if k[1] in ("0", "1")} and len(two) > 0
    for key, value in two.items():
        if np.isfinite(single[key]):
            np.testing.assert_allclose(value, single[key], rtol=2e-5, atol=1e-6, err_msg=str(key))


@pytest.mark.parametrize("options, words", [
    (["--coordinator", "127.0.0.1", "--num-processes", "1", "--process-id", "0"],
     "--coordinator 127.0.0.1: expected HOST:PORT, process 0's address and a free port on it"),  # an IndexError
    ([], "--distributed: JAX found no cluster to read the coordinator from (coordinator_address should be defined); "
         "off a cluster, give --coordinator HOST:PORT --num-processes N --process-id I on every process.")])
def test_a_coordinator_that_cannot_be_used_is_one_line(options, words, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}  # no cluster
    out = subprocess.run([sys.executable, "-m", "jaxrl_rollout", "train", "--distributed", *options, "--seeds", "2",
                          "--out", str(tmp_path / "x")], capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(f"jaxrl-rollout: error: {words}"), \
        out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "x").exists()

