"""`devices`: the host's cores as JAX CPU devices, and runs sharded over them.

The CPU device count is fixed when JAX first starts a backend, so each check
runs in a fresh subprocess (one for the library, one for the command line).
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jaxrl_rollout import devices

LIBRARY = textwrap.dedent("""
    import json
    import jax, numpy as np
    from jaxrl_rollout import devices, prng

    assert devices.use_host_cores(2) == 2
    from jaxrl_rollout.algorithms import ppo   # imports gymnax, which starts the backend

    out = {"devices": len(jax.devices()), "again_same_count": devices.use_host_cores(2)}
    try:
        devices.use_host_cores(3)
    except RuntimeError as error:
        out["too_late"] = str(error)

    train = jax.jit(jax.vmap(ppo.make_train(ppo.PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3,
                                                           update_epochs=1, num_minibatches=2))))
    keys = jax.random.split(jax.random.key(5), 4)
    sharded_keys = devices.shard_runs(keys)
    one = train(jax.device_put(keys, jax.devices()[0]))
    two = train(sharded_keys)
    out["key_devices"] = len(sharded_keys.sharding.device_set)
    out["out_devices"] = sorted({len(x.sharding.device_set) for x in jax.tree.leaves(two)})
    def host(x):
        return np.asarray(jax.random.key_data(x) if prng.is_key(x) else x)

    pairs = [(host(a), host(b)) for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two), strict=True)]
    out["ints_identical"] = all(np.array_equal(a, b) for a, b in pairs if a.dtype.kind != "f")
    out["close"] = all(np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True) for a, b in pairs if a.dtype.kind == "f")
    out["max_abs_diff"] = max(float(np.nanmax(np.abs(a - b))) for a, b in pairs if a.dtype.kind == "f" and a.size)
    out["odd_runs_devices"] = len(devices.shard_runs(np.zeros((3, 2))).sharding.device_set)
    # the working memory a memory check counts: every device's share, from the host's one memory
    from jaxrl_rollout import runner

    programs = [train.lower(jax.device_put(keys, jax.devices()[0])).compile(), train.lower(sharded_keys).compile()]
    out["temp_counted"] = [runner._temp_bytes([p]) for p in programs]
    out["temp_per_device"] = [p.memory_analysis().temp_size_in_bytes for p in programs]
    print(json.dumps(out))
""")


def _run(args, **env):
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=400,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_host_cores_shard_runs_and_equal_one_device():
    result = json.loads(_run(["-c", LIBRARY]).stdout.strip().splitlines()[-1])
    assert result["devices"] == 2 and result["again_same_count"] == 2
    assert "already started its CPU backend with 2 device(s)" in result["too_late"]
    assert "use_host_cores before any JAX computation" in result["too_late"]
    assert result["key_devices"] == 2 and result["out_devices"] == [2]
    # Same episodes and counters; floats to float32 rounding (XLA compiles a 2-run partition).
    assert result["ints_identical"] and result["close"], result
    assert result["odd_runs_devices"] == 1  # 3 runs do not divide over 2 devices
    # XLA analyses one device's share of a program: a chunk over both CPU devices works in twice that of the host's
    # memory, and the checks before a chunk or an evaluation count it so (they counted one device's share)
    one, two = result["temp_per_device"]
    assert one > 0 and two > 0 and result["temp_counted"] == [one, 2 * two], result


def test_cli_splits_the_host_and_keeps_an_explicit_count(tmp_path):
    # The device line comes after the compile: one chunk, saved, is enough (no periodic or closing evaluation)
    common = ["-m", "jaxrl_rollout", "--seeds", "2", "--total-steps", "1024", "--stop-after-chunks", "1",
              "--eval-every", "off", "--tensorboard", "false"]
    auto = _run([*common, "--out", str(tmp_path / "auto")])
    assert f"over {min(2, devices.usable_cores())} cpu device(s)" in auto.stderr
    one = _run([*common, "--host-devices", "1", "--out", str(tmp_path / "one")])
    assert "over 1 cpu device(s)" in one.stderr
    # An XLA_FLAGS device count is the user's choice: auto leaves it.
    forced = _run([*common, "--out", str(tmp_path / "forced")], XLA_FLAGS="--xla_force_host_platform_device_count=1")
    assert "over 1 cpu device(s)" in forced.stderr


def test_evaluate_splits_the_host_as_train_does_and_loads_the_program_of_its_closing_evaluation(tmp_path):
    """`evaluate` makes the host's devices as `train` (`--host-devices`, auto by default) and lays the runs out over
    them as `train`'s closing evaluation does, in the same program: after a train whose closing evaluation compiled,
    an `evaluate` of as many episodes loads it from the compilation cache; one on another device count compiles its
    own, and gives the same returns."""
    cache, run = tmp_path / "xla", tmp_path / "run"
    every = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}  # CartPole's evaluation compiles in under a second
    _run(["-m", "jaxrl_rollout", "--seeds", "2", "--total-steps", "1024", "--eval-every", "off", "--num-eval", "3",
          "--tensorboard", "false", "--compile-cache", str(cache), "--out", str(run)], **every)

    def programs():
        return sorted(p.name for p in cache.glob("jit_evaluation-*-cache"))

    compiled = programs()
    assert len(compiled) == 1, compiled
    evaluate = ["-m", "jaxrl_rollout", "evaluate", str(run), "--num-episodes", "3", "--compile-cache", str(cache)]
    auto = _run(evaluate, **every)
    assert programs() == compiled  # loaded, not compiled again
    one = _run([*evaluate, "--host-devices", "1"], **every)
    assert len(programs()) == 2  # one device: a program of its own
    rows = [[line for line in out.stdout.splitlines() if line.startswith("  default")] for out in (auto, one)]
    assert len(rows[0]) == 2 and rows[0] == rows[1], rows


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, "auto"])
def test_bad_counts_name_the_argument(bad):
    with pytest.raises(ValueError, match="count must be an int >= 1"):
        devices.use_host_cores(bad)


def test_use_host_cores_keeps_a_count_xla_flags_sets():
    """use_host_cores() replaced XLA_FLAGS' --xla_force_host_platform_device_count=3 with one device per core."""
    code = "from jaxrl_rollout import devices; import jax; print(devices.use_host_cores(), len(jax.devices('cpu')))"
    done = _run(["-c", code], XLA_FLAGS="--xla_force_host_platform_device_count=3")
    assert done.stdout.split() == ["3", "3"], done.stdout


def test_shard_runs_rejects_trees_without_one_runs_axis():
    with pytest.raises(ValueError, match="share a leading runs axis"):
        devices.shard_runs({"a": np.zeros((4, 2)), "b": np.zeros((3,))})
    with pytest.raises(ValueError, match="share a leading runs axis"):
        devices.shard_runs(1.0)
    with pytest.raises(ValueError, match="devices is empty"):
        devices.shard_runs(np.zeros(4), devices=[])
    # device ids were an AttributeError inside Mesh; one device "'Device' object is not iterable"
    with pytest.raises(TypeError, match=r"devices must be jax devices .* got \['int', 'int'\]"):
        devices.shard_runs(np.zeros(4), devices=[0, 1])
    import jax

    assert devices.shard_runs(np.zeros(4), devices=jax.devices()[0]).sharding.device_set == {jax.devices()[0]}


def test_largest_dividing():
    assert devices.largest_dividing(8, "abcd") == list("abcd")
    assert devices.largest_dividing(6, "abcd") == list("abc")
    assert devices.largest_dividing(7, "ab") == ["a"]
