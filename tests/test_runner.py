"""The chunked runner and its checkpoints: bit-identical resume, corrupt and mismatched checkpoints."""

import dataclasses
import gc
import io
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings

import jax
import numpy as np
import pytest

from jaxrl_rollout import _signals, checkpoint, runner
from jaxrl_rollout.algorithms import a2c, pqn

# 7 updates in chunks of 3: two full chunks and a tail of 1. 2 grid points x 2 seeds
# in groups of 2 runs. The CLI tests use the same config, so a pytest process compiles it once.
CONFIG = a2c.A2CConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 7)
SPEC = runner.RunSpec("a2c", CONFIG, (a2c.A2CHParams(lr=1e-3), a2c.A2CHParams(lr=3e-4)), num_seeds=2,
                      chunk_updates=3, max_parallel=2)


def _leaves(state):
    leaves, _, _ = checkpoint.flatten(state)
    return [np.asarray(x) for x in leaves]


def _assert_identical(a, b):
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole")
    return folder, runner.train(SPEC, folder, checkpoint_every=1, progress=None)


def test_spec_layout_and_chunks():
    assert SPEC.chunk_lengths == [3, 3, 1]
    assert SPEC.groups == [(0, 2), (2, 4)]
    hp = SPEC.run_hparams()
    np.testing.assert_allclose(hp.lr, [1e-3, 1e-3, 3e-4, 3e-4])
    keys = jax.random.key_data(SPEC.run_keys())
    np.testing.assert_array_equal(keys[0], keys[2])  # seed s is the same key at every grid point
    assert not np.array_equal(keys[0], keys[1])
    # seed s's key is split(key(seed), seeds)[s], as the README says, so seed s of a sweep can be trained alone in
    # Python; and --seeds N trains the first N seeds of any larger --seeds (JAX's partitionable threefry split)
    split = jax.random.key_data(jax.random.split(jax.random.key(SPEC.seed), SPEC.num_seeds))
    np.testing.assert_array_equal(keys, np.concatenate([split] * len(SPEC.grid)))
    more = jax.random.key_data(dataclasses.replace(SPEC, num_seeds=5).run_keys())
    np.testing.assert_array_equal(more[:SPEC.num_seeds], keys[:SPEC.num_seeds])
    assert runner.RunSpec.from_json(json.loads(json.dumps(SPEC.to_json()))) == SPEC
    assert runner.default_chunk_updates(976) == 61 and runner.default_chunk_updates(7) == 1


def test_the_chunk_line_says_an_uneven_split():
    """`--total-steps 5632 --chunk-updates 2` (11 updates) printed "6 chunks of 2 updates"."""
    assert runner._chunks_text(SPEC.chunk_lengths) == "3 chunks of 3 updates (the last of 1 update)"
    assert runner._chunks_text([2, 2]) == "2 chunks of 2 updates" and runner._chunks_text([1]) == "1 chunk of 1 update"
    # an extended run continues in whole chunks after a short one it had done
    assert runner._chunks_text([3, 1, 3, 2]) == "4 chunks (2 of 3 updates, 1 of 1 update, 1 of 2 updates)"


def test_a_second_train_of_the_same_spec_compiles_nothing(uninterrupted, tmp_path):
    """A notebook that trains a spec again (another folder, a checkpoint every 2 chunks, so each chunk between
    checkpoints is given a copy of the states; two groups, joined into one state to be saved) compiles nothing the
    second time: the copy's and the join's programs were jitted anew in every `train` call and compiled again."""
    compiles, listening = [], [True]

    def listen(event, duration, **kwargs):  # a program lowered (the suite's persistent cache may serve its compile)
        if listening[0] and event.endswith(("jaxpr_to_mlir_module_duration", "backend_compile_duration")):
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        runner.train(SPEC, tmp_path / "a", checkpoint_every=2, progress=None)  # (what it traces depends on the
        compiles.clear()                                                      # tests before it in this process)
        runner.train(SPEC, tmp_path / "b", checkpoint_every=2, progress=None)
        assert compiles == []
    finally:
        listening[0] = False


def test_group_shapes_without_out_info_are_each_groups_runs():
    """`_group_shapes`: where a compiled init gives no `out_info` (a program with host callbacks), each group's
    shapes are every run's traced once with the leading axis cut to the group's runs, as the group's own trace."""
    class NoOutInfo:
        @property
        def out_info(self):
            raise NotImplementedError

    algorithm = runner.make_algorithm(SPEC)  # 4 runs (2 hparams x 2 seeds) in groups of 3 and 1
    groups = [(0, 3), (3, 4)]
    shapes = runner._group_shapes([NoOutInfo(), NoOutInfo()], algorithm, SPEC, groups)
    keys, hparams = SPEC.run_keys(), SPEC.run_hparams()
    for (a, b), got in zip(groups, shapes):
        want = jax.eval_shape(jax.vmap(algorithm.init), keys[a:b], jax.tree.map(lambda x: x[a:b], hparams))
        assert jax.tree.structure(got) == jax.tree.structure(want)
        assert [(x.shape, x.dtype) for x in jax.tree.leaves(got)] == [(x.shape, x.dtype) for x in jax.tree.leaves(want)]


def test_a_folder_trained_from_python_opens_as_a_run(uninterrupted, capsys):
    """runner.train(spec, folder) left checkpoints/ and no config.json: load_run, evaluate and --resume said
    "holds no run: config.json is missing". The run writes its spec there, as the command line does."""
    from jaxrl_rollout import cli

    folder, whole = uninterrupted
    assert runner.read_spec(folder) == SPEC
    spec, state, _, manifest = runner.load_run(folder)
    assert spec == SPEC and manifest["meta"]["updates_done"] == 7
    _assert_identical(state, whole.state)
    assert cli.main(["train", "--resume", str(folder)]) == 0
    assert "the run is complete (7 updates): nothing left to train" in capsys.readouterr().err


def test_sac_and_td3_default_to_finer_chunks_than_the_others():
    """CleanRL's SAC and TD3 (a million steps, 1,000 updates of a thousand gradient steps each) run in 100 chunks, so
    the first progress line and a Ctrl-C's stop come after 10,000 steps; PPO's default keeps its 16 chunks."""
    assert runner.default_chunk_updates(1000) == 50 and runner.default_chunk_updates(1000, 100) == 10
    assert runner.default_chunk_updates(7, 100) == 1 and runner.default_chunk_updates(10**12, 100) == 10**10
    from jaxrl_rollout import algorithms
    from jaxrl_rollout.algorithms import ppo

    for algo in ("sac", "td3"):
        config_cls, hparams_cls, _ = algorithms.get(algo)
        spec = runner.RunSpec(algo, config_cls(), (hparams_cls(),), 4)
        assert spec.config.num_updates == 1000 and len(spec.chunk_lengths) == 100, (algo, spec.chunk_updates)
        assert "default_chunks" not in spec.to_json()["config"]  # a class attribute, not a saved field
    assert len(runner.RunSpec("ppo", ppo.PPOConfig(), (ppo.PPOHParams(),), 8).chunk_lengths) == 16


def test_run_completes_with_metrics_per_run_and_update(uninterrupted):
    folder, result = uninterrupted
    assert result.complete and result.updates_done == 7 and result.chunks_done == 3
    assert set(result.metrics) == set(a2c.A2CMetrics._fields) - {"env_steps"}
    assert all(v.shape == (4, 7) for v in result.metrics.values())
    # Before the first gradient step the two grid points act with the same params and keys.
    first = result.metrics["value_loss"][:, 0]
    assert first[0] == first[2] and first[1] == first[3] and first[0] != first[1]
    assert not np.array_equal(result.metrics["value_loss"][0], result.metrics["value_loss"][2])
    # one Orbax step, the latest: the earlier ones were removed once it was committed
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["3"]


def test_one_run_of_a_saved_sweep_trains_alone_as_the_readme_says(uninterrupted):
    """README (Checkpoints): run r = g x seeds + s of a saved sweep is `make_algorithm(spec).train` on
    `spec.run_keys()[r]` and `spec.grid[g]`, equal to the sweep's run r to float32 rounding."""
    folder, result = uninterrupted
    spec = runner.read_spec(folder)
    g, s = 1, 1
    r = g * spec.num_seeds + s
    alone, metrics = jax.jit(runner.make_algorithm(spec).train)(spec.run_keys()[r], spec.grid[g])
    for a, b in zip(_leaves(jax.tree.map(lambda x: x[r], result.state)), _leaves(alone), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.metrics["value_loss"][r], np.asarray(metrics.value_loss), rtol=1e-5)


def test_a_run_state_has_no_weakly_typed_leaf(uninterrupted):
    # gymnax's env state counts steps from a Python 0 (a weakly typed int32); a state read back from a
    # checkpoint has none, and a fresh run's must match it for the two to be one compiled program.
    _, result = uninterrupted
    weak = [jax.tree_util.keystr(path) for path, x in jax.tree_util.tree_leaves_with_path(result.state)
            if getattr(x, "weak_type", False)]
    assert weak == []


def test_interrupted_and_resumed_run_is_bit_identical(uninterrupted, tmp_path):
    _, whole = uninterrupted
    part = runner.train(SPEC, tmp_path, stop_after_chunks=1, progress=None)
    assert not part.complete and part.chunks_done == 1 and part.updates_done == 3
    assert checkpoint.read_manifest(tmp_path)["meta"]["chunks_done"] == 1
    resumed = runner.train(SPEC, tmp_path, resume=True, progress=None)
    assert resumed.complete and resumed.updates_run == 4
    _assert_identical(whole.state, resumed.state)
    assert whole.metrics.keys() == resumed.metrics.keys()
    for k in whole.metrics:
        np.testing.assert_array_equal(whole.metrics[k], resumed.metrics[k])
    # and the saved checkpoints hold the same arrays
    template = jax.eval_shape(jax.vmap(runner.make_algorithm(SPEC).init), SPEC.run_keys(), SPEC.run_hparams())
    saved, extras, _ = checkpoint.load(tmp_path, template)
    _assert_identical(saved, whole.state)
    np.testing.assert_array_equal(extras["metrics/episode_return"], whole.metrics["episode_return"])


def _template(config=CONFIG):
    spec = runner.RunSpec("a2c", config, SPEC.grid, SPEC.num_seeds, chunk_updates=1)
    return jax.eval_shape(jax.vmap(runner.make_algorithm(spec).init), spec.run_keys(), spec.run_hparams())


def _copy_run(folder, to):
    shutil.copytree(folder, to, dirs_exist_ok=True)
    return to


def test_mismatched_checkpoint_is_a_clear_error(uninterrupted, tmp_path):
    folder = _copy_run(uninterrupted[0], tmp_path)
    with pytest.raises(checkpoint.CheckpointError, match="different state structure"):
        checkpoint.load(folder, _template(a2c.A2CConfig(num_envs=4, num_steps=8, total_timesteps=224,
                                                        hidden_sizes=(64, 64, 64))))
    with pytest.raises(checkpoint.CheckpointError, match=r"state leaf \d+ is .*shape.*expects"):
        checkpoint.load(folder, _template(a2c.A2CConfig(num_envs=4, num_steps=8, total_timesteps=224,
                                                        hidden_sizes=(32, 64))))
    shutil.rmtree(folder / "checkpoints" / "3")
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint in"):
        checkpoint.load(folder, _template())


def test_a_load_that_loses_a_race_with_the_writer_reads_the_newer_step(tmp_path, monkeypatch):
    """`evaluate` takes no lock: a train still writing the folder can save step 5 and remove step 4 while step 4
    is read. That read failed as "corrupt checkpoint .../4: NOT_FOUND"; it is made again on the newer step. With
    the latest step unchanged the failure is the checkpoint's own and is raised."""
    reads = []

    def read(folder, step, template, sharding, only=None):
        reads.append(step)
        if len(reads) == 1:
            raise checkpoint.CheckpointError("corrupt checkpoint run/checkpoints/4: NOT_FOUND")
        return "step 5"

    monkeypatch.setattr(checkpoint, "_load_step", read)
    listed = iter([(3, 4), (4, 5), (4, 5)])  # before the first read, after its failure, before the second
    monkeypatch.setattr(checkpoint, "_committed_steps", lambda folder: next(listed))
    assert checkpoint.load(tmp_path, None) == "step 5" and reads == [4, 5]
    reads.clear()
    listed = iter([(3, 4), (3, 4)])
    with pytest.raises(checkpoint.CheckpointError, match="NOT_FOUND"):
        checkpoint.load(tmp_path, None)
    assert reads == [4]
    # An older step removed during the read, the latest the same (Orbax's manager lists every step as it opens,
    # and stat-ed step 3 as it went): read again. Found walking an evaluate beside a train saving every update.
    reads.clear()
    listed = iter([(3, 4), (4,), (4,), (4,)])

    def older_gone(folder, step, template, sharding, only=None):
        reads.append(step)
        if len(reads) == 1:
            raise FileNotFoundError(2, "No such file or directory", "run/checkpoints/3")
        return "step 4"

    monkeypatch.setattr(checkpoint, "_load_step", older_gone)
    assert checkpoint.load(tmp_path, None) == "step 4" and reads == [4, 4]
    # a writer that saves faster than the folder is read: five reads, then one line that says so
    def always_gone(folder, step, template, sharding, only=None):
        raise FileNotFoundError(2, "No such file or directory", f"run/checkpoints/{step}")

    monkeypatch.setattr(checkpoint, "_load_step", always_gone)
    listed = iter([(n,) for n in range(100)])
    with pytest.raises(checkpoint.CheckpointError, match=r"saved a newer checkpoint during each of 5 reads \(a train "
                                                         r"is writing it; the last read: .*No such file"):
        checkpoint.load(tmp_path, None)
    # read_manifest (the command line's first read of a run) moves on the same way
    manifests = []

    def manifest_at(folder, step):
        manifests.append(step)
        if step == 4:
            raise checkpoint.CheckpointError("corrupt checkpoint manifest in run/checkpoints/4: NOT_FOUND")
        return {"step": step}

    monkeypatch.setattr(checkpoint, "_manifest_at", manifest_at)
    listed = iter([(4,), (5,), (5,)])
    assert checkpoint.read_manifest(tmp_path) == {"step": 5} and manifests == [4, 5]
    listed = iter([(4,), (4,)])
    with pytest.raises(checkpoint.CheckpointError, match="manifest in run/checkpoints/4: NOT_FOUND"):
        checkpoint.read_manifest(tmp_path)


def test_corrupt_checkpoint_files_are_a_clear_error(uninterrupted, tmp_path):
    # Flip bytes across the largest array file (the network weights): every load must fail with a
    # CheckpointError or return the saved state, never a different one. Orbax reads some flips as
    # errors; zstd-compressed array bytes can decode to other numbers, which the digests catch.
    folder = _copy_run(uninterrupted[0], tmp_path)
    template = _template()
    saved, _, _ = checkpoint.load(folder, template)
    data = max((p for p in (folder / "checkpoints" / "3" / "state").rglob("*") if p.is_file()),
               key=lambda p: p.stat().st_size)
    original, caught = data.read_bytes(), {"digest": 0, "read": 0, "unchanged": 0}
    for position in np.linspace(0, len(original) - 1, 8).astype(int):
        corrupt = bytearray(original)
        corrupt[position] ^= 0x10
        data.write_bytes(bytes(corrupt))
        try:
            loaded, _, _ = checkpoint.load(folder, template)
        except checkpoint.CheckpointError as error:
            assert "corrupt checkpoint" in str(error)
            caught["digest" if "digest saved with it" in str(error) else "read"] += 1
        else:
            _assert_identical(loaded, saved)
            caught["unchanged"] += 1
    assert caught["digest"] >= 1, caught  # the digest check is what stands between those flips and a wrong state
    data.write_bytes(original[: len(original) // 2])
    with pytest.raises(checkpoint.CheckpointError, match="corrupt checkpoint"):
        checkpoint.load(folder, template)
    manifest = next((folder / "checkpoints" / "3" / "manifest").iterdir())
    manifest.write_text("{not json")
    with pytest.raises(checkpoint.CheckpointError, match="corrupt checkpoint manifest"):
        checkpoint.load(folder, template)


def test_extras_swapped_for_other_valid_ones_are_a_clear_error(tmp_path):
    """The extras item (the metrics so far) carries a sha256: readable files of other metrics are refused.

    Flipped bytes in the extras files are caught by TensorStore's own reads (or land in bytes never read);
    an extras item copied from another checkpoint of the same shapes reads cleanly, and only the sha256
    saved in the manifest tells it apart.
    """
    import shutil

    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    for name, value in (("mine", 1.0), ("other", 2.0)):
        checkpoint.save(tmp_path / name, 1, state, {"metrics/loss": np.full((2, 3), value, np.float32)}, {})
    _, extras, _ = checkpoint.load(tmp_path / "mine", jax.eval_shape(lambda: state))
    np.testing.assert_array_equal(extras["metrics/loss"], np.ones((2, 3)))
    mine = tmp_path / "mine" / "checkpoints" / "1" / "extras"
    shutil.rmtree(mine)
    shutil.copytree(tmp_path / "other" / "checkpoints" / "1" / "extras", mine)
    with pytest.raises(checkpoint.CheckpointError, match="extra 'metrics/loss' does not match the sha256"):
        checkpoint.load(tmp_path / "mine", jax.eval_shape(lambda: state))


def test_digest_sees_every_single_word_change():
    rng = np.random.default_rng(0)
    leaves = [rng.normal(size=(3, 50)).astype(np.float32), rng.integers(0, 9, 40).astype(np.int32),
              rng.integers(0, 2, 7).astype(bool), rng.normal(size=5).astype(np.float16)]
    base = checkpoint._digest_strings(leaves)
    for i, leaf in enumerate(leaves):
        for index in rng.choice(leaf.size, 5, replace=False):
            for bit in ([0] if leaf.dtype == bool else [0, 7, 8 * leaf.itemsize - 1]):
                changed = leaf.copy().reshape(-1)
                if leaf.dtype == bool:
                    changed[index] = ~changed[index]
                else:
                    changed.view(f"u{leaf.itemsize}")[index] ^= np.array(1 << bit, f"u{leaf.itemsize}")
                digests = checkpoint._digest_strings([*leaves[:i], changed.reshape(leaf.shape), *leaves[i + 1:]])
                assert digests[i] != base[i] and digests[:i] + digests[i + 1:] == base[:i] + base[i + 1:]
    swapped = leaves[1].copy()
    j = int(np.flatnonzero(swapped != swapped[0])[0])
    swapped[[0, j]] = swapped[[j, 0]]
    assert checkpoint._digest_strings([swapped])[0] != base[1]  # position matters, not only the multiset


def _reference_digest(leaf: np.ndarray) -> str:
    """The digest as one pair of weighted sums over the whole leaf, in numpy (uint32 arithmetic wraps)."""
    leaf = np.asarray(leaf)
    if leaf.dtype == bool:
        leaf = leaf.astype(np.uint8)
    words = leaf.reshape(-1).view(f"u{leaf.itemsize}")
    if leaf.itemsize == 8:
        words = words.view(np.uint32)  # low word first, as the bitcast splits it
    words = words.astype(np.uint32)
    i = np.arange(words.size, dtype=np.uint32)
    with np.errstate(over="ignore"):
        odd = (2 * i + 1) * np.uint32(0x9E3779B1)
        mixed = (i ^ (i >> 16)) * np.uint32(0x85EBCA6B)
        mixed = ((mixed ^ (mixed >> 13)) * np.uint32(0xC2B2AE35)) | np.uint32(1)
        return f"{int(np.sum(words * odd, dtype=np.uint32)):08x}{int(np.sum(words * mixed, dtype=np.uint32)):08x}"


@pytest.mark.parametrize("block", [64, checkpoint.DIGEST_BLOCK])
def test_digest_summed_block_by_block_equals_one_sum_over_the_leaf(monkeypatch, block):
    """The digest is summed a block of words at a time (its scratch memory a block's); every checkpoint written
    before holds the one-piece sum, so the blocks must give exactly that, at and around block boundaries."""
    monkeypatch.setattr(checkpoint, "DIGEST_BLOCK", block)
    digest = jax.jit(checkpoint._digest_leaf)  # traced here, with this block size
    rng = np.random.default_rng(1)
    sizes = [0, 1, block - 1, block, block + 1, 3 * block, 3 * block + 5] if block < 1000 else [block, block + 3]
    for size in sizes:
        for dtype in [np.float32, np.int32, np.uint8, np.int16, np.float16, bool]:
            raw = rng.integers(0, 256, size * np.dtype(dtype).itemsize, dtype=np.uint8)
            leaf = (raw % 2).astype(bool) if dtype is bool else raw.view(dtype).copy()
            if leaf.dtype.kind == "f":
                leaf[~np.isfinite(leaf)] = 0.5  # a NaN's payload need not survive the trip to the device
            got = jax.device_get(digest(jax.numpy.asarray(leaf)))
            assert f"{int(got[0]):08x}{int(got[1]):08x}" == _reference_digest(leaf), (size, dtype)
    with jax.enable_x64(True):  # 8-byte leaves: two words an element, so half as many elements a block
        for size in [block // 2 - 1, block // 2, block // 2 + 1, 2 * block + 1]:
            for dtype in [np.float64, np.int64]:
                leaf = rng.normal(size=size).astype(dtype) if dtype is np.float64 else rng.integers(-2**62, 2**62, size)
                got = jax.device_get(jax.jit(checkpoint._digest_leaf)(jax.numpy.asarray(leaf)))
                assert f"{int(got[0]):08x}{int(got[1]):08x}" == _reference_digest(leaf), (size, dtype)


def test_small_leaves_are_digested_on_the_host_and_give_the_devices_digest(monkeypatch):
    """A leaf of at most HOST_DIGEST_WORDS words is digested on the host with numpy (compiling the device's program
    took 0.6 s of every save and load of PPO's state), a larger one where it is: the same digest either way, every
    dtype, in the leaves' order."""
    import ml_dtypes

    rng = np.random.default_rng(2)
    leaves = [rng.normal(size=(3, 5)).astype(np.float32), rng.integers(-9, 9, 11).astype(np.int32),
              rng.integers(0, 2, 7).astype(bool), rng.normal(size=4).astype(np.float16),
              rng.normal(size=6).astype(ml_dtypes.bfloat16), rng.integers(0, 255, (2, 3)).astype(np.uint8),
              rng.integers(-9, 9, 5).astype(np.int16), rng.integers(0, 2**32 - 1, 9, dtype=np.uint32),
              np.float32(2.5), np.zeros((0, 3), np.float32)]
    with jax.enable_x64(True):
        leaves += [rng.normal(size=3), rng.integers(-2**62, 2**62, 4)]  # float64, int64: two words an element
        expected = [_reference_digest(leaf) for leaf in leaves]
        assert checkpoint._digest_strings(leaves) == expected  # numpy leaves: on the host
        on_device = [jax.numpy.asarray(leaf) for leaf in leaves]
        assert [x.dtype for x in on_device] == [np.asarray(leaf).dtype for leaf in leaves]
        assert checkpoint._digest_strings(on_device) == expected  # small: copied to the host
        for words in (-1, 8):  # every leaf on the device; those of more than 8 words there, the rest on the host
            monkeypatch.setattr(checkpoint, "HOST_DIGEST_WORDS", words)
            assert checkpoint._digest_strings(on_device) == expected, words


def test_digest_scratch_memory_is_a_blocks_not_the_leafs():
    """Summed in one piece, XLA on the CPU kept the leaf's weighted products whole: a checkpoint of a 1.3 GB
    replay buffer took 2.6 GB more memory. Compiled for a 256 MB leaf (nothing allocated), the digest's scratch
    memory is a few blocks' of words."""
    leaf = jax.ShapeDtypeStruct((64, 1 << 20), np.float32)  # 256 MB
    temp = jax.jit(checkpoint._digest_leaf).lower(leaf).compile().memory_analysis().temp_size_in_bytes
    assert temp <= 8 * 4 * checkpoint.DIGEST_BLOCK, temp  # 32 MB; in one piece it was twice the leaf, 512 MB


def test_a_leaf_with_unit_axes_is_saved_in_its_own_memory_and_loads_into_its_shape(tmp_path):
    """TensorStore copied a leaf with an axis of size 1 whole before writing it (a replay buffer's [runs, 1 env,
    ...]: a save peaked at twice the buffers). On a CPU such a leaf is saved, without copying, in the shape without
    those axes, and read back into its own shape, on the host or laid out over a mesh; a manifest whose stored
    shape does not fit its leaf is refused."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("runs",))
    laid = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))
    n = checkpoint.UNIT_AXES_MIN_BYTES // 4  # float32s, bools: leaves at and under the size saved another way
    state = {"buffer": jax.device_put(np.arange(2 * n * 3, dtype=np.float32).reshape(2, 1, n, 3), laid),
             "done": jax.device_put(np.arange(2 * 2 * n).reshape(2, 1, 2 * n) % 3 == 0, laid),  # 4n bytes
             "key": jax.random.split(jax.random.key(3), 1),  # key data [1, 2]: small, saved as it is
             "small": jax.device_put(np.zeros((1, 1, 4 * n - 1), bool), laid),  # a byte under the size
             "count": jax.device_put(np.array([4, 5], np.int32), laid)}  # no unit axis: saved as it is
    stored = checkpoint._without_unit_axes(state["buffer"])
    assert stored.shape == (2, n, 3)
    assert stored.unsafe_buffer_pointer() == state["buffer"].unsafe_buffer_pointer()  # the array's own memory
    assert checkpoint._without_unit_axes(state["count"]) is None
    checkpoint.save(tmp_path, 1, state, {}, {})
    manifest = checkpoint.read_manifest(tmp_path)
    assert manifest["stored_shapes"] == {"00000": [2, n, 3], "00002": [2, 2 * n]}  # leaves in key order
    template = jax.eval_shape(lambda: state)
    for sharding in (None, laid):
        loaded, _, _ = checkpoint.load(tmp_path, template, sharding)
        _assert_identical(loaded, state)
        assert [np.shape(x) for x in _leaves(loaded)] == [np.shape(x) for x in _leaves(state)]
        if sharding is not None:
            assert all(x.sharding == laid for x in jax.tree.leaves(loaded))
    file = next((tmp_path / "checkpoints" / "1" / "manifest").iterdir())
    written = json.loads(file.read_text())
    written["stored_shapes"]["00000"] = [2, n + 1, 3]
    file.write_text(json.dumps(written))
    with pytest.raises(checkpoint.CheckpointError, match=rf"stored_shapes names '00000' as \[2, {n + 1}, 3\], not a shape"):
        checkpoint.load(tmp_path, template)


def test_a_load_of_some_leaves_reads_and_checks_those_alone(tmp_path):
    """`checkpoint.load(..., only=positions)`: what acts with a policy (`evaluate`, `load_policy`) reads its params
    and not the replay buffer beside them. The leaves asked (stored in their own shape or not, PRNG keys rewrapped)
    equal a whole read's, on the host or laid out over a mesh; the others are None and the extras are not read. A
    leaf read is checked against its digest; a digest altered for a leaf not read does not stop the read."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("runs",))
    laid = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))
    n = checkpoint.UNIT_AXES_MIN_BYTES // 4
    state = {"buffer": jax.device_put(np.arange(2 * n * 3, dtype=np.float32).reshape(2, 1, n, 3), laid),  # stored
             "count": jax.device_put(np.array([4, 5], np.int32), laid),
             "key": jax.random.split(jax.random.key(3), 2),
             "params": {"w": jax.device_put(np.linspace(0, 1, 2 * 1 * 6, dtype=np.float32).reshape(2, 1, 6), laid)}}
    checkpoint.save(tmp_path, 1, state, {"metrics/x": np.ones((2, 3))}, {})
    template = jax.eval_shape(lambda: state)
    whole, extras, _ = checkpoint.load(tmp_path, template)
    assert set(extras) == {"metrics/x"}
    for only in ([0], [2, 3], [3, 1, 3], []):
        for sharding in (None, laid):
            part, part_extras, manifest = checkpoint.load(tmp_path, template, sharding, only=only)
            assert part_extras == {} and manifest["step"] == 1
            leaves = jax.tree.leaves(part, is_leaf=lambda x: x is None)
            assert [i for i, x in enumerate(leaves) if x is not None] == sorted(set(only))
            for i in set(only):
                a, b = leaves[i], jax.tree.leaves(whole)[i]
                if jax.dtypes.issubdtype(b.dtype, jax.dtypes.prng_key):
                    a, b = jax.random.key_data(a), jax.random.key_data(b)
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
                assert np.shape(a) == np.shape(b)
                if sharding is not None:
                    assert a.sharding == laid
    file = next((tmp_path / "checkpoints" / "1" / "manifest").iterdir())
    written = json.loads(file.read_text())
    written["digests"][0] = "0" * 16  # the buffer's
    file.write_text(json.dumps(written))
    assert checkpoint.load(tmp_path, template, only=[3])[0]["params"]["w"].shape == (2, 1, 6)
    with pytest.raises(checkpoint.CheckpointError, match="the content of state leaf 0 does not match the digest"):
        checkpoint.load(tmp_path, template, only=[0, 3])
    with pytest.raises(ValueError, match=r"only: positions of the template's 4 leaves \(0 to 3\), got \[4\]"):
        checkpoint.load(tmp_path, template, only=[4])


@pytest.mark.parametrize("folder", [False, True], ids=["no-folder", "folder"])
def test_a_chunk_takes_its_states_memory_unless_that_state_is_not_yet_saved(tmp_path, folder):
    """A chunk's program is given its state donated, so a run holds one train state (an off-policy state is mostly
    its replay buffers), not two: the state `on_state` saw is deleted once the next chunk has it. With a run folder,
    a state whose chunk is not yet saved is kept (the next chunk gets a copy): a second Ctrl-C or a diverged chunk
    saves it. One group of runs, so `get_state()` is the runner's own state, chunks of one update, checkpoints
    after every second chunk and after the last."""
    spec = runner.RunSpec("a2c", CONFIG, (a2c.A2CHParams(),), num_seeds=2, chunk_updates=1)
    seen = []
    result = runner.train(spec, tmp_path / "run" if folder else None, checkpoint_every=2, progress=None,
                          on_state=lambda get_state, updates: seen.append((updates, get_state())))
    assert [u for u, _ in seen] == list(range(1, 8)) and result.complete
    deleted = [[x.is_deleted() for x in jax.tree.leaves(state)] for _, state in seen]
    assert all(len(set(d)) == 1 for d in deleted), deleted  # every leaf or none (key leaves among them)
    deleted = [d[0] for d in deleted]
    if folder:  # chunks 1, 3 and 5 were not saved when the next chunk ran; 2, 4 and 6 were
        assert deleted == [False, True, False, True, False, True, False]
    else:
        assert deleted == [True] * 6 + [False]  # the last chunk's state is the result's
    _assert_identical(seen[-1][1], result.state)


def test_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    import orbax.checkpoint as ocp

    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "key": jax.random.split(jax.random.key(0), 2)}
    checkpoint.save(tmp_path, 1, state, {"m": np.ones(3)}, {"chunks_done": 1})
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    def broken_json_save(self, directory, *args, **kwargs):  # the manifest is written after the arrays
        raise OSError("disk full")

    monkeypatch.setattr(ocp.JsonCheckpointHandler, "async_save", broken_json_save)
    with pytest.raises(checkpoint.CheckpointError, match="could not save the checkpoint in .*: disk full"):
        checkpoint.save(tmp_path, 2, {**state, "w": state["w"] + 1}, {"m": np.zeros(3)}, {"chunks_done": 2})
    with warnings.catch_warnings(record=True) as caught:  # Orbax's abandoned save coroutines are gone, silently
        warnings.simplefilter("always")
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]
    monkeypatch.undo()
    after = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k in before} == before  # nothing committed was touched
    assert all("tmp" in str(k) for k in after.keys() - before.keys()), sorted(after.keys() - before.keys())
    loaded, extras, manifest = checkpoint.load(tmp_path, jax.eval_shape(lambda: state))
    assert manifest["meta"] == {"chunks_done": 1}
    np.testing.assert_array_equal(loaded["w"], state["w"])
    np.testing.assert_array_equal(extras["m"], np.ones(3))
    np.testing.assert_array_equal(jax.random.key_data(loaded["key"]), jax.random.key_data(state["key"]))
    assert jax.dtypes.issubdtype(loaded["key"].dtype, jax.dtypes.prng_key)
    checkpoint.save(tmp_path, 2, state, {"m": np.zeros(3)}, {"chunks_done": 2})  # the next save cleans up
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["2"]


def test_a_save_past_the_file_system_limit_is_one_line_naming_the_system_error(tmp_path, capfd, caplog):
    """A full disk failed the save in Orbax's threads, which logged a traceback each (absl, "_SignalingThread.run()
    raised an exception") before the save's line, itself 300 characters of TensorStore's paths in Orbax's
    temporary folders. Now that line names the system error only, and the threads' logs are held back. The
    limit here is the process's file size limit (RLIMIT_FSIZE, with SIGXFSZ ignored: EFBIG, "File too large"),
    the one such failure a test can make without a file system of its own; a full one is ENOSPC the same way."""
    import logging
    import resource
    import signal

    state = {"w": np.random.default_rng(0).standard_normal((2, 64 * 1024), np.float32)}  # 512 kB, incompressible
    checkpoint.save(tmp_path, 1, state, {"m": np.ones(3)}, {"chunks_done": 1})  # (compiles what the save does)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG):
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
        try:
            with pytest.raises(checkpoint.CheckpointError) as failed:
                checkpoint.save(tmp_path, 2, {"w": state["w"] + 1}, {"m": np.zeros(3)}, {"chunks_done": 2})
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
    assert str(failed.value) == f"could not save the checkpoint in {tmp_path}/checkpoints: File too large (errno 27)"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage()[:200] for r in caplog.records]
    assert capfd.readouterr() == ("", "")
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if "tmp" not in p.name) == ["1"]
    loaded, _, manifest = checkpoint.load(tmp_path, jax.eval_shape(lambda: state))
    assert manifest["meta"] == {"chunks_done": 1}
    np.testing.assert_array_equal(loaded["w"], state["w"])


def test_a_successful_save_and_load_run_no_garbage_collection_and_leave_no_noise(tmp_path, monkeypatch):
    """Only a failed Orbax call pays for a full collection (its abandoned coroutines); one that succeeds leaves
    none behind (a full collection took about half of each save of a small run's checkpoint)."""
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "key": jax.random.split(jax.random.key(0), 2)}
    checkpoint.save(tmp_path, 1, state, {"m": np.ones(3)}, {"chunks_done": 1})  # the digest compiled once
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)
    checkpoint.save(tmp_path, 2, {**state, "w": state["w"] + 1}, {"m": np.zeros(3)}, {"chunks_done": 2})
    loaded, extras, manifest = checkpoint.load(tmp_path, jax.eval_shape(lambda: state))
    assert collections == [] and manifest["meta"] == {"chunks_done": 2}
    np.testing.assert_array_equal(loaded["w"], state["w"] + 1)
    monkeypatch.undo()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]


def test_ctrl_c_saves_the_last_whole_chunk(uninterrupted, tmp_path):
    def press_ctrl_c(metrics, first_update):  # as if Ctrl-C arrived while chunk 1's metrics were logged
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.train(SPEC, tmp_path, checkpoint_every=5, progress=None, on_chunk=press_ctrl_c)
    assert checkpoint.read_manifest(tmp_path)["meta"]["chunks_done"] == 1  # saved although 1 % 5 != 0
    resumed = runner.train(SPEC, tmp_path, resume=True, progress=None)
    _assert_identical(uninterrupted[1].state, resumed.state)



def test_a_folder_removed_while_its_run_trains_is_written_again_whole(uninterrupted, tmp_path):
    """The folder removed after chunk 1 (`rm -rf runs/x` while it trains): the next save makes it again (Orbax),
    and config.json with it, so it opens, evaluates and resumes as any run (it had the checkpoint without its
    config.json, while the command's last line listed config.json as written)."""
    folder = tmp_path / "run"

    def remove_the_folder(metrics, first_update):
        if first_update == 0:
            shutil.rmtree(folder)

    result = runner.train(SPEC, folder, checkpoint_every=1, progress=None, on_chunk=remove_the_folder)
    assert result.complete and runner.read_spec(folder) == SPEC
    spec, state, _, manifest = runner.load_run(folder)
    assert spec == SPEC and manifest["meta"]["chunks_done"] == result.chunks_done
    _assert_identical(uninterrupted[1].state, state)


def test_a_save_that_fails_after_ctrl_c_says_the_run_was_interrupted(uninterrupted, tmp_path, monkeypatch):
    """The save a Ctrl-C asks for can fail too (a full disk): `SaveFailed` then keeps the interruption
    (`stopped_by`) and says it ("the run stopped after chunk 1" read as if the schedule had stopped it)."""
    def full(folder, *args, **kwargs):
        raise checkpoint.CheckpointError(f"could not save the checkpoint in {folder}/checkpoints: No space left on "
                                         "device (errno 28)")

    def press_ctrl_c(metrics, first_update):
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", full)
    with pytest.raises(runner.SaveFailed) as failed:
        runner.train(SPEC, tmp_path, checkpoint_every=5, progress=None, on_chunk=press_ctrl_c)
    assert str(failed.value) == (f"could not save the checkpoint in {tmp_path}/checkpoints: No space left on device "
                                 "(errno 28); the run was interrupted after chunk 1, and no checkpoint was saved before")
    assert isinstance(failed.value.stopped_by, KeyboardInterrupt)
    assert (failed.value.chunks_done, failed.value.last_saved) == (1, 0)


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_stops_at_the_chunk_boundary_and_saves(uninterrupted, tmp_path, name):
    """SIGTERM (what SLURM and Kubernetes send), a first Ctrl-C and SIGHUP (a terminal gone: an ssh connection
    dropped) stop after the chunk in flight, saved."""
    import os
    import signal

    from jaxrl_rollout._signals import Interrupted

    def send(metrics, first_update):  # the signal arrives while chunk 1 is being logged
        if first_update == 0:
            os.kill(os.getpid(), getattr(signal, name))

    sig = getattr(signal, name)
    ignored = signal.getsignal(sig) == signal.SIG_IGN
    if ignored:  # as from a terminal (a shell's background job ignores SIGINT, nohup SIGHUP; the test runner may be)
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    try:
        handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
        with pytest.raises(Interrupted) as stopped:
            runner.train(SPEC, tmp_path, checkpoint_every=5, progress=None, on_chunk=send)
        assert stopped.value.signal_name == name and stopped.value.exit_code == 128 + sig
        assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)] == handlers  # put back
    finally:
        if ignored:
            signal.signal(sig, signal.SIG_IGN)
    assert checkpoint.read_manifest(tmp_path)["meta"]["chunks_done"] == 1
    resumed = runner.train(SPEC, tmp_path, resume=True, progress=None)
    _assert_identical(uninterrupted[1].state, resumed.state)


def test_a_run_started_ignoring_sighup_trains_through_it(uninterrupted, tmp_path):
    """`nohup jaxrl-rollout train ...` asks for a run that outlives its terminal: a SIGHUP it ignores stays ignored
    (as a background job's ignored SIGINT does), and the run ends complete, equal to one without the signal."""
    def hang_up(metrics, first_update):
        if first_update == 0:
            os.kill(os.getpid(), signal.SIGHUP)

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        result = runner.train(SPEC, tmp_path, checkpoint_every=5, progress=None, on_chunk=hang_up)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert result.complete
    _assert_identical(uninterrupted[1].state, result.state)


KILLED_MID_SAVE = textwrap.dedent("""
    import os, signal, sys
    from orbax.checkpoint.path import atomicity
    from jaxrl_rollout import runner
    from tests.test_runner import SPEC

    commit = atomicity.AtomicRenameTemporaryPath.finalize
    saves = []

    async def finalize(self):  # the second save dies after writing every item, before its step's commit
        if self.get_final().parent.name == "checkpoints":
            saves.append(self)
        if len(saves) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return await commit(self)

    atomicity.AtomicRenameTemporaryPath.finalize = finalize
    runner.train(SPEC, sys.argv[1], checkpoint_every=1, progress=None)
""")


def test_a_save_killed_midway_leaves_the_previous_checkpoint_to_resume_from(uninterrupted, tmp_path):
    done = subprocess.run([sys.executable, "-c", KILLED_MID_SAVE, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, cwd=pathlib.Path(__file__).parent.parent)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    leftovers = [p.name for p in (tmp_path / "checkpoints").iterdir()]
    assert "1" in leftovers and any("tmp" in name for name in leftovers), leftovers  # step 2 written, uncommitted
    assert checkpoint.read_manifest(tmp_path)["meta"]["chunks_done"] == 1
    resumed = runner.train(SPEC, tmp_path, resume=True, progress=None)
    _, whole = uninterrupted
    _assert_identical(whole.state, resumed.state)
    for k in whole.metrics:
        np.testing.assert_array_equal(whole.metrics[k], resumed.metrics[k])
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["3"]  # the dead save's files are gone


def test_bad_runner_arguments():
    with pytest.raises(ValueError, match="chunk_updates=9 is more than the run's 7 updates"):
        runner.RunSpec("a2c", CONFIG, SPEC.grid, 2, chunk_updates=9)
    with pytest.raises(ValueError, match="num_seeds must be a positive int"):
        runner.RunSpec("a2c", CONFIG, SPEC.grid, 0)
    with pytest.raises(TypeError, match="grid must be a non-empty sequence of A2CHParams"):
        runner.RunSpec("a2c", CONFIG, (), 2)
    with pytest.raises(ValueError, match=r"a group of 4 runs .* does not divide over 3 devices"):
        runner.choose_devices([4], 3)
    n = len(jax.devices())
    with pytest.raises(ValueError, match=rf"devices={n + 1} but only {n} are available"):
        runner.choose_devices([n + 1], n + 1)
    assert len(runner.choose_devices([4, 2])) == max(d for d in (1, 2) if d <= n)
    # an evaluation every 9 updates of a 7-update run trained with every eval metric NaN
    with pytest.raises(ValueError, match=r"^eval_every=9 is more than the run's 7 updates: no evaluation would run"):
        runner.RunSpec("a2c", CONFIG, SPEC.grid, 2, eval_every=9)
    # NumPy scalars are the numbers they hold (a loop over np.arange gave seed=np.int64(3): a TypeError)
    numpy_spec = runner.RunSpec("a2c", CONFIG, (a2c.A2CHParams(lr=np.float32(1e-3)),), np.int64(2), seed=np.int64(3))
    assert type(numpy_spec.seed) is int and type(numpy_spec.num_seeds) is int and type(numpy_spec.grid[0].lr) is float
    json.dumps(numpy_spec.to_json())
    # train's own arguments, before anything compiles: devices=-1 aborted the process (an empty device mesh)
    for kwargs, error, message in [
        (dict(devices=-1), ValueError, r"^devices must be a positive int, got -1"),
        (dict(devices=0), ValueError, r"^devices must be a positive int, got 0"),
        (dict(devices=True), TypeError, r"^devices must be a positive Python int"),
        (dict(stop_after_chunks=0), ValueError, r"^stop_after_chunks must be a positive int"),
        (dict(checkpoint_every=1.5), TypeError, r"^checkpoint_every must be a positive Python int"),
        (dict(progress="yes"), TypeError, r"^progress must be True, False, None or a stream"),
    ]:
        with pytest.raises(error, match=message):
            runner.train(SPEC, **kwargs)


def test_a_folder_is_made_for_a_new_run_and_never_overwritten(uninterrupted, tmp_path, monkeypatch):
    """A new train into a folder with a checkpoint replaced its steps under the old config.json (load_run then
    refused the folder); a relative folder that did not exist failed naming a temporary file."""
    folder = _copy_run(uninterrupted[0], tmp_path / "run")
    with pytest.raises(ValueError, match=rf"^folder {folder} already holds a trained run \(a checkpoint\); pass "
                                         "resume=True"):
        runner.train(SPEC, folder, progress=None)
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(folder / "config.json", other / "config.json")
    changed = runner.RunSpec("a2c", CONFIG, SPEC.grid, num_seeds=3, chunk_updates=3, max_parallel=2)
    with pytest.raises(ValueError, match=rf"^folder {other} holds another run's config.json: num_seeds: 2 in "
                                         "config.json, 3 in the spec given"):
        runner.train(changed, other, progress=None)
    with pytest.raises(ValueError, match=r"^the spec given differs from the run in .*: num_seeds: 3 in the spec "
                                         "given, 2 in the run"):
        runner.train(changed, folder, resume=True, progress=None)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"is a file, not a folder"):
        runner.train(SPEC, tmp_path / "file", progress=None)
    monkeypatch.chdir(tmp_path)
    part = runner.train(SPEC, "runs/demo", stop_after_chunks=1, progress=None)  # the module docstring's example
    assert part.chunks_done == 1 and runner.read_spec("runs/demo") == SPEC


def test_a_run_extended_from_python_opens_as_its_new_total(uninterrupted, tmp_path):
    """train(longer spec, resume=True) left config.json at the old total while its checkpoint held the new one:
    load_run and evaluate refused the folder as edited."""
    folder = _copy_run(uninterrupted[0], tmp_path / "run")
    longer = runner.RunSpec("a2c", a2c.A2CConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 9), SPEC.grid,
                            num_seeds=2, chunk_updates=3, max_parallel=2)
    result = runner.train(longer, folder, resume=True, progress=None)
    assert result.complete and result.updates_done == 9
    spec, _, _, manifest = runner.load_run(folder)
    assert spec == longer and manifest["meta"]["updates_done"] == 9


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_a_progress_bar_with_eta_and_the_lines(uninterrupted):
    terminal, pipe = _Terminal(), io.StringIO()
    runner.train(SPEC, progress=terminal)
    runner.train(SPEC, progress=pipe)
    shown = terminal.getvalue()
    assert "ETA" in shown and "training" in shown
    total = SPEC.config.num_updates * SPEC.config.batch_size
    assert f"{total}/{total}" in shown  # the bar ran to the end
    assert "steps/s" in shown  # the progress lines are still printed above it
    assert "ETA" not in pipe.getvalue() and "steps/s" in pipe.getvalue()  # no bar without a terminal
    lines = [line for line in pipe.getvalue().splitlines() if "steps/s" in line]
    assert all(" left  return" in line for line in lines[:-1]) and " left" not in lines[-1]  # none at 100%


def test_the_progress_line_rate_is_the_last_chunks(monkeypatch):
    """steps/s is the chunk's own rate, not the average since the start (which a slow first chunk would drag)."""
    clock, durations, wait = [0.0], iter([10.0, 1.0, 1.0]), _signals.wait_ready

    def timed_wait(tree, *args, **kwargs):  # each chunk "takes" its duration on a fake clock
        wait(tree, *args, **kwargs)
        clock[0] += next(durations)

    monkeypatch.setattr(_signals, "wait_ready", timed_wait)
    monkeypatch.setattr(runner.time, "perf_counter", lambda: clock[0])
    pipe = io.StringIO()
    runner.train(SPEC, progress=pipe)
    lines = [line for line in pipe.getvalue().splitlines() if "steps/s" in line]
    runs = SPEC.num_runs * SPEC.config.steps_per_update  # env steps per update over all runs
    # chunks of 3, 3 and 1 updates over 10 s, 1 s and 1 s (the average would read 38, 70, 75)
    assert [line.split(" steps/s")[0].split()[-1] for line in lines] == [f"{3 * runs / 10:,.0f}", f"{3 * runs:,.0f}",
                                                                          f"{runs:,.0f}"], lines


def test_host_work_between_chunks_is_in_the_time_left_not_in_the_rate(monkeypatch):
    """Videos, loggers and checkpoints between chunks: left out of a chunk's steps/s, added to the time left."""
    clock, wait = [0.0], _signals.wait_ready

    def timed_wait(tree, *args, **kwargs):  # every chunk "takes" 1 s on a fake clock
        wait(tree, *args, **kwargs)
        clock[0] += 1.0

    def on_chunk(chunk, first_update):  # a 4 s video after the first chunk only
        clock[0] += 4.0 if first_update == 0 else 0.0

    monkeypatch.setattr(_signals, "wait_ready", timed_wait)
    monkeypatch.setattr(runner.time, "perf_counter", lambda: clock[0])
    pipe = io.StringIO()
    runner.train(SPEC, progress=pipe, on_chunk=on_chunk)
    lines = [line for line in pipe.getvalue().splitlines() if "steps/s" in line]
    runs = SPEC.num_runs * SPEC.config.steps_per_update
    # chunks of 3, 3 and 1 updates, 1 s each: the second chunk's rate is not dragged by the video before it
    assert [line.split(" steps/s")[0].split()[-1] for line in lines] == [f"{3 * runs:,.0f}"] * 2 + [f"{runs:,.0f}"]
    # after chunk 1: 4 updates at 1/3 s, nothing between chunks seen yet; after chunk 2: 1 update at 1/3 s and
    # one more chunk's host work at its mean so far (4 s)
    assert [line.split(" left")[0].split("~")[-1] for line in lines[:2]] == ["1s", "4s"], lines


def test_the_progress_line_gives_the_time_left_at_the_last_chunk_pace():
    n = SPEC.config.num_updates
    ended = np.ones(2, bool)
    line = runner._progress_line(SPEC, 1, 12345.6, np.array([1.0, 2.0]), ended, pace=90.5)
    assert f"12,346 steps/s  ~{runner._duration(90.5 * (n - 1))} left  return 1.5" in line
    assert " left" not in runner._progress_line(SPEC, n, 100.0, np.array([1.0, 2.0]), ended, pace=1.0)
    assert " left" not in runner._progress_line(SPEC, 1, 100.0, np.array([1.0, 2.0]), ended)
    assert [runner._duration(s) for s in (0.4, 59.6, 61, 3599, 3600, 7530)] == ["0s", "1m00s", "1m01s", "59m59s",
                                                                                  "1h00m", "2h05m"]


def _two_chunks_as_saved(spec, state, atol):
    """This version's first two chunks of `spec`, whose state equals `state`, saved after them by an earlier version
    (floats to float32 rounding: written on this machine's CPU; another CPU may round the last bit apart)."""
    now = runner.train(spec, stop_after_chunks=2, progress=None)
    for old, new in zip(_leaves(state), _leaves(now.state), strict=True):
        assert old.dtype == new.dtype
        if old.dtype.kind == "f":
            np.testing.assert_allclose(old, new, rtol=1e-5, atol=atol)
        else:
            np.testing.assert_array_equal(old, new)
    return now


def test_a_run_folder_of_version_0_1_loads_resumes_and_evaluates(tmp_path, capsys):
    # tests/fixtures/run_0.1: the npz/JSON checkpoint format of 0.1, stopped after 2 of 3 chunks
    # (tests/fixtures/README.md has the command that wrote it).
    from jaxrl_rollout import cli

    folder = shutil.copytree(pathlib.Path(__file__).parent / "fixtures" / "run_0.1", tmp_path / "run")
    spec = runner.read_spec(folder)
    assert checkpoint.read_manifest(folder)["format"] == "jaxrl_rollout.checkpoint/1"
    template = jax.eval_shape(jax.vmap(runner.make_algorithm(spec).init), spec.run_keys(), spec.run_hparams())
    state, extras, manifest = checkpoint.load(folder, template)
    assert manifest["meta"]["chunks_done"] == 2
    now = _two_chunks_as_saved(spec, state, atol=1e-7)
    np.testing.assert_array_equal(extras["metrics/num_episodes"], now.metrics["num_episodes"])
    _, acting, _, _ = runner._load_run_policies(folder)  # (read whole, one .npz: the leaves not asked set to None)
    policies = jax.vmap(runner.make_algorithm(spec).policy_params)
    _assert_identical(policies(acting), policies(state))
    assert all(x is None for x in jax.tree.leaves((acting.opt_state, acting.rollout), is_leaf=lambda x: x is None))
    altered = shutil.copytree(folder, tmp_path / "altered")
    npz = next(altered.glob("checkpoint-*.npz"))
    npz.write_bytes(npz.read_bytes()[:-1] + bytes([npz.read_bytes()[-1] ^ 1]))
    with pytest.raises(checkpoint.CheckpointError, match="sha256"):
        checkpoint.load(altered, template)

    assert cli.main(["train", "--resume", str(folder), "--num-eval", "1", "--tensorboard", "false"]) == 0
    assert "resuming after chunk 2" in capsys.readouterr().err
    assert not (folder / "checkpoint.json").exists() and not list(folder.glob("checkpoint-*.npz"))
    assert checkpoint.read_manifest(folder)["meta"]["chunks_done"] == 3
    assert cli.main(["evaluate", str(folder), "--num-episodes", "1"]) == 0
    assert "checkpoint final" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["dqn_f1a3ed5", "ppo_3f37f30", "a2c_3f37f30", "pqn_3f37f30", "sac_3f37f30",
                                  "td3_3f37f30"])
def test_a_run_saved_by_an_earlier_version_evaluates_and_resumes(name, tmp_path, capsys):
    """Runs saved by earlier versions, one per algorithm, stopped after 2 of 3 chunks (tests/fixtures/README.md has
    their commands): each reads, its two chunks equal this version's, and it evaluates and resumes from the command
    line. DQN's was saved before it had `network` (2026-11-30), SAC's and TD3's before `optimize_memory_usage` and
    their own `network` (2026-12-03): neither field is in their config.json nor in their checkpoint's spec, and each
    reads as what the run trained with (network "mlp", no compact buffer) on both sides, so the run is not refused
    as edited (it was until the checkpoint's spec was read as config.json is)."""
    from jaxrl_rollout import cli

    folder = shutil.copytree(pathlib.Path(__file__).parent / "fixtures" / name, tmp_path / "run")
    algo = name.split("_")[0]
    if algo in ("dqn", "sac", "td3"):
        saved = checkpoint.read_manifest(folder)["meta"]["spec"]["config"]
        written = json.loads((folder / "config.json").read_text())["config"]
        for fields in (saved, written):
            assert "optimize_memory_usage" not in fields and "network" not in fields
    spec, state, _, _ = runner.load_run(folder)  # refused as edited before: config.json read, the spec saved not
    assert spec == runner.read_spec(folder) and spec.algo == algo
    if algo in ("dqn", "sac", "td3"):
        assert spec.config.network == "mlp" and spec.config.optimize_memory_usage is False
    _two_chunks_as_saved(spec, state, atol=1e-6)

    assert cli.main(["evaluate", str(folder), "--num-episodes", "1"]) == 0
    assert "checkpoint after chunk 2, update 2 of 3 (run incomplete)" in capsys.readouterr().out
    assert cli.main(["train", "--resume", str(folder), "--tensorboard", "false"]) == 0
    assert "resuming after chunk 2" in capsys.readouterr().err
    assert checkpoint.read_manifest(folder)["meta"]["chunks_done"] == 3
    assert cli.main(["evaluate", str(folder), "--num-episodes", "1"]) == 0
    assert "checkpoint final" in capsys.readouterr().out


def test_a_pqn_run_on_atari_frames_saved_when_auto_meant_the_mlp_evaluates_and_resumes(tmp_path, capsys):
    """PQN's network "auto" meant its MLP until 2026-12-02 (commit 08a18b8), then its CNN for images of 36 x 36
    or more: a PQN run on envpool's Atari frames (84 x 84 x 4) saved before says "auto" in config.json and in its
    checkpoint, and holds an MLP's params, so `evaluate` and `--resume` refused it in the structure check (the
    saved tree printed against a CNN's). It reads as network "mlp" now, and a resume says why it rewrites
    config.json. (A host env: its state is not in the checkpoint, so its chunks are not compared.)"""
    pytest.importorskip("envpool")
    from jaxrl_rollout import cli

    folder = shutil.copytree(pathlib.Path(__file__).parent / "fixtures" / "pqn_72825d0", tmp_path / "run")
    assert json.loads((folder / "config.json").read_text())["config"]["network"] == "auto"
    manifest = checkpoint.read_manifest(folder)
    assert manifest["meta"]["spec"]["config"]["network"] == "auto" and "'Dense_0'" in manifest["treedef"]
    spec, written = runner.load_run(folder)[0], runner.read_spec(folder)
    assert spec.config.network == "mlp" and written.config.network == "auto"
    policy = runner.load_policy(folder, 0)
    assert policy.act(np.zeros((84, 84, 4), np.uint8)).shape == ()
    assert cli.main(["evaluate", str(folder), "--num-episodes", "1"]) == 0
    assert "checkpoint after chunk 2, update 2 of 3 (run incomplete)" in capsys.readouterr().out
    # from Python, the spec given is taken as given: config.json's "auto" is told the run's network
    with pytest.raises(ValueError, match='config.network: "auto" in the spec given, "mlp" in the run'):
        runner.train(written, folder, resume=True, progress=False)
    assert cli.main(["train", "--resume", str(folder), "--num-eval", "1", "--tensorboard", "false"]) == 0
    out, err = capsys.readouterr()
    assert "config.json says network 'auto', a CNN on this env's images since 2026-12-02; the run was trained " \
           "before, with the MLP, so config.json is rewritten with network 'mlp'" in out, out
    assert "resuming after chunk 2" in err
    assert json.loads((folder / "config.json").read_text())["config"]["network"] == "mlp"
    assert checkpoint.read_manifest(folder)["meta"]["spec"]["config"]["network"] == "mlp"
    assert cli.main(["evaluate", str(folder), "--num-episodes", "1"]) == 0
    assert "checkpoint final" in capsys.readouterr().out
    # a PQN run with "auto" whose params are the CNN's (trained since) or on small images (MinAtar) keeps "auto"
    assert runner.as_trained(written, manifest) == spec
    assert runner.as_trained(written, {"treedef": manifest["treedef"].replace("'Dense_0'", "'conv_0'")}) == written
    minatar = runner.RunSpec("pqn", pqn.PQNConfig(env_id="Breakout-MinAtar"), (pqn.PQNHParams(),), 1)
    assert runner.as_trained(minatar, manifest) == minatar


def test_load_policy_acts_and_evaluates_as_the_evaluate_command(uninterrupted):
    """`load_policy(FOLDER, r)`: run r's policy, which `jaxrl_rollout.evaluate` plays as `jaxrl-rollout evaluate`
    does (its docstring's keys), and whose `act` takes one observation or a batch."""
    import jaxrl_rollout as jr
    from jaxrl_rollout import cli

    folder, result = uninterrupted
    spec, state, _, _ = runner.load_run(folder)
    seed = jax.random.key(7)
    det, sto = cli.evaluate_both(spec, state, 3, [jax.random.fold_in(seed, i) for i in (0, 1)],
                                 runner.make_algorithm(spec))
    for r in range(spec.num_runs):
        for deterministic, column in ((True, det), (False, sto)):
            policy = runner.load_policy(folder, r, deterministic=deterministic)
            assert (policy.run, policy.updates_done, policy.deterministic) == (r, 7, deterministic)
            key = jax.random.split(jax.random.fold_in(seed, 0 if deterministic else 1), spec.num_runs)[r]
            returns = jr.evaluate(policy.env, policy.env_params, policy.policy_fn, policy.params, key, 3).returns
            np.testing.assert_allclose(returns, column[r], rtol=1e-6)
    # act: the policy's actions, for one observation or a batch [B, ...]
    policy = runner.load_policy(str(folder), 2)
    obs = jax.vmap(lambda k: policy.env.reset(k, policy.env_params)[0])(jax.random.split(jax.random.key(1), 5))
    expected = policy.policy_fn(policy.params, obs, jax.random.key(0)).action
    np.testing.assert_array_equal(policy.act(obs), expected)
    assert [int(policy.act(o)) for o in obs] == [int(a) for a in expected] and policy.act(obs[0]).shape == ()
    # as plain lists too (jit read a list as a pytree of scalars: a TracerArrayConversionError)
    assert int(policy.act(np.asarray(obs[0]).tolist())) == int(expected[0])
    np.testing.assert_array_equal(policy.act(np.asarray(obs).tolist()), expected)
    stochastic = runner.load_policy(folder, 2, deterministic=False)
    assert stochastic.act(obs, jax.random.key(3)).shape == (5,)
    assert repr(stochastic) == "TrainedPolicy(A2C on CartPole-v1, run 2 of 4 (lr=0.0003, seed 0), update 7 of 7, stochastic)"
    for call, words in ((lambda: stochastic.act(obs), "act: key is needed: this is the stochastic policy"),
                        (lambda: policy.act(obs[:, :2]), "act: obs must be one observation of shape [4] or a batch "
                                                         "[B, 4] of them, got shape [5, 2]"),
                        (lambda: policy.act(obs, carry=obs), "act: carry is for a recurrent policy"),
                        (lambda: policy.initial_carry(5), "initial_carry: this policy is feed-forward"),
                        (lambda: runner.load_policy(folder, 4), "run must be an int from 0 to 3 (grid point x 2 "
                                                                 "seeds + seed) for the 4 runs in"),
                        (lambda: runner.load_policy(folder, True), "run must be an int from 0 to 3")):
        with pytest.raises(ValueError, match=re.escape(words)):
            call()


def test_load_policy_refuses_a_stochastic_policy_where_there_is_none(tmp_path):
    """DQN's and TD3's exploration belongs to training: deterministic=False is refused before the checkpoint is read
    (here there is none)."""
    from jaxrl_rollout.algorithms import dqn, td3

    for algo, config in (("dqn", dqn.DQNConfig()), ("td3", td3.TD3Config())):
        folder = tmp_path / algo
        folder.mkdir()
        runner.write_spec(folder, runner.RunSpec(algo, config, (runner.algorithms.get(algo).hparams(),), 1))
        with pytest.raises(ValueError, match=f"deterministic=False: {algo.upper()}'s policy is deterministic"):
            runner.load_policy(folder, 0, deterministic=False)
        with pytest.raises(checkpoint.CheckpointError):
            runner.load_policy(folder, 0)


def test_a_recurrent_and_a_continuous_trained_policy_act_on_one_observation_or_a_batch():
    """`TrainedPolicy.act` with a carry (network="gru": (action, new carry), from `initial_carry`) and with Box
    actions ([B, A], or [A] for one observation); built here from an untrained state, as `load_policy` builds it."""
    from jaxrl_rollout.algorithms import ppo

    for config, recurrent in ((ppo.PPOConfig(network="gru", num_envs=4, num_steps=4, total_timesteps=16), True),
                              (ppo.PPOConfig(env_id="Pendulum-v1", num_envs=2, num_steps=4, total_timesteps=8), False)):
        spec = runner.RunSpec("ppo", config, (ppo.PPOHParams(),), 1)
        algorithm = runner.make_algorithm(spec)
        state = algorithm.init(jax.random.key(0), ppo.PPOHParams())
        policy = runner.TrainedPolicy(spec, 0, 0, algorithm.env, algorithm.env_params, algorithm.policy_params(state),
                                      algorithm.eval_policy_fn, True, algorithm.recurrent, algorithm.module)
        assert policy.recurrent == recurrent
        obs = jax.vmap(lambda k: policy.env.reset(k, policy.env_params)[0])(jax.random.split(jax.random.key(1), 3))
        if recurrent:
            carry = policy.initial_carry(3)
            out, new_carry = jax.jit(policy.policy_fn)(policy.params, obs, jax.random.key(0), carry)
            action, got_carry = policy.act(obs, carry=carry)
            np.testing.assert_array_equal(action, out.action)
            for a, b in zip(jax.tree.leaves(got_carry), jax.tree.leaves(new_carry), strict=True):
                np.testing.assert_array_equal(a, b)
            one, _ = policy.act(obs[0], carry=policy.initial_carry(1))
            assert one.shape == () and int(one) == int(policy.act(obs[:1], carry=policy.initial_carry(1))[0][0])
            with pytest.raises(ValueError, match="act: this policy is recurrent: pass carry"):
                policy.act(obs)
            # a carry of another batch is named as act's (the GRU's own message spoke of obs [1, 4] for one observation)
            with pytest.raises(ValueError, match=r"act: carry must have leading axis 1 for one observation "
                                                 r"\(initial_carry\(1\)\), got shape \(4, 64\)"):
                policy.act(obs[0], carry=policy.initial_carry(4))
            with pytest.raises(ValueError, match=r"act: carry must have leading axis 3, the observations' batch"):
                policy.act(obs, carry=policy.initial_carry(2))
        else:
            expected = jax.jit(policy.policy_fn)(policy.params, obs, jax.random.key(0)).action
            np.testing.assert_array_equal(policy.act(obs), expected)
            assert expected.shape == (3, 1) and policy.act(obs[1]).shape == (1,)
            np.testing.assert_allclose(policy.act(obs[1]), expected[1], rtol=1e-6)


def test_a_cpu_run_whose_states_cannot_fit_in_free_memory_is_refused_before_they_are_made(tmp_path, monkeypatch):
    """On a CPU a state past the free memory is granted (Linux overcommits), and the kernel ended the process when it
    filled it, with no message (`train --algo sac --buffer-size 1e9`: exit 137). It is refused after the init's
    compile, before the init runs, naming what it takes and the options that size it; with a run folder a chunk
    between checkpoints is given a copy of the states, so twice that is needed, unless checkpoint_every=1."""
    from jaxrl_rollout import _memory
    from jaxrl_rollout.algorithms import dqn

    free = _memory.free_host_bytes()
    with open("/proc/meminfo") as f:
        meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    assert 0 < free <= meminfo["MemTotal"] + meminfo.get("SwapTotal", 0)
    config = dqn.DQNConfig(total_timesteps=40, num_envs=1, learning_starts=10, train_frequency=10, log_interval=10,
                           target_network_frequency=20, buffer_size=1000, batch_size=8)
    spec = runner.RunSpec("dqn", config, (dqn.DQNHParams(),), num_seeds=2, chunk_updates=1)
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: 1000)
    with pytest.raises(runner.StatesTooLarge, match=r"^this run cannot fit in the 1 kB of memory free on this machine "
                       r"\(/proc/meminfo's MemAvailable and SwapFree, or its cgroup's limit\): the train states of its "
                       r"2 runs take [\d.]+ kB \([\d.]+ kB of replay buffers per run\), and twice that with the copy a "
                       r"chunk between checkpoints is given; lower buffer_size \(--buffer-size\) or train fewer runs "
                       r"\(--seeds, the grid\), or store each observation once \(optimize_memory_usage, "
                       r"--optimize-memory-usage true\)\.$") as refused:
        runner.train(spec, tmp_path / "a", progress=None)
    need = refused.value.need
    assert not (tmp_path / "a" / "checkpoints").exists()
    # one state fits, its copy does not
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: need + need // 2)
    with pytest.raises(runner.StatesTooLarge, match=r"and a chunk between checkpoints is given a copy of them \(a "
                       r"second Ctrl-C then saves the last whole chunk\), [\d.]+ kB in all; checkpoint_every=1 "
                       r"\(--checkpoint-every 1\) keeps one state, or lower buffer_size"):
        runner.train(spec, tmp_path / "b", progress=None)
    result = runner.train(spec, tmp_path / "c", checkpoint_every=1, progress=None)
    assert result.complete and sum(x.nbytes for x in jax.tree.leaves(result.state)) == need  # every leaf counted
    runner.train(spec, None, progress=None)  # without a folder nothing is copied: it fits
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: need - 1)
    with pytest.raises(runner.StatesTooLarge, match=r"of replay buffers per run\); lower buffer_size"):  # no copy
        runner.train(spec, None, progress=None)
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: None)  # not Linux: not known, not refused
    runner.train(spec, None, progress=None)
    # a resume, checked before its checkpoint is read: its config is the checkpoint's
    assert not runner.train(spec, tmp_path / "d", checkpoint_every=1, stop_after_chunks=1, progress=None).complete
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: need - 1)
    with pytest.raises(runner.StatesTooLarge, match=r"per run\), and twice that with the copy a chunk between "
                       r"checkpoints is given; free memory on this machine, or resume the run on one with more\.$"):
        runner.train(spec, tmp_path / "d", resume=True, progress=None)
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: need + need // 2)
    with pytest.raises(runner.StatesTooLarge, match=r"checkpoint_every=1 \(--checkpoint-every 1\) keeps one state, "
                       r"or free memory on this machine"):
        runner.train(spec, tmp_path / "d", resume=True, progress=None)
    assert runner.train(spec, tmp_path / "d", resume=True, checkpoint_every=1, progress=None).complete


def test_a_cpu_run_whose_chunks_cannot_work_in_the_free_memory_is_refused_before_its_first_chunk(tmp_path, monkeypatch):
    """A chunk's temp buffers (XLA's, its rollouts and minibatches) under the machine's memory are granted and were
    filled until the kernel ended the process; with the states made, the largest chunk's temp buffers and the copy
    of the states between checkpoints are checked against what is free, naming the options that size them."""
    from jaxrl_rollout import _memory

    answers = iter([10**12, 1000])  # the states fit; then 1 kB is left for the chunks
    monkeypatch.setattr(_memory, "free_host_bytes", lambda: next(answers))
    with pytest.raises(runner.StatesTooLarge, match=r"^this run cannot fit in the 1 kB of memory free on this machine "
                       r"\(/proc/meminfo's MemAvailable and SwapFree, or its cgroup's limit\), its train states made: "
                       r"each chunk works in [\d.]+ [kM]B \(XLA's temp buffers: its rollouts, minibatches and "
                       r"activations\), beside a copy of the runs' train states \([\d.]+ kB\) between checkpoints; "
                       r"checkpoint_every=1 \(--checkpoint-every 1\) saves each chunk's state instead of copying it, or "
                       r"lower num_envs \(--num-envs\) or num_steps \(--num-steps\), or train fewer runs at once "
                       r"\(max_parallel, --max-parallel N\)\.$") as refused:
        runner.train(SPEC, tmp_path / "a", progress=None)
    assert refused.value.free == 1000 and not (tmp_path / "a" / "checkpoints").exists()
    answers = iter([10**12, refused.value.need])  # exactly what it needs: trained
    result = runner.train(SPEC, tmp_path / "b", progress=None)
    assert result.complete
    work = refused.value.need - sum(x.nbytes for x in jax.tree.leaves(result.state))  # the need less the copy
    answers = iter([10**12, work])
    runner.train(SPEC, None, progress=None)  # no folder: no copy
    answers = iter([10**12, work - 1])
    with pytest.raises(runner.StatesTooLarge, match=r"activations\); lower num_envs \(--num-envs\) or num_steps "):
        runner.train(SPEC, None, progress=None)  # no folder: no copy
    # the periodic evaluation's episodes, all played at once, are named when there are more than the default
    answers = iter([10**12, 1000])
    with pytest.raises(runner.StatesTooLarge, match=r"or eval_episodes \(--eval-episodes: each periodic evaluation "
                                                    r"plays its 20 episodes of every run at once\)"):
        runner.train(dataclasses.replace(SPEC, eval_every=7, eval_episodes=20), None, progress=None)
