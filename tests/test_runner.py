"""The chunked runner and its checkpoints: bit-identical resume, corrupt and mismatched checkpoints."""

import io
import json

import jax
import numpy as np
import pytest

from jaxrl_rollout import checkpoint, runner
from jaxrl_rollout.algorithms import a2c

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
    assert runner.RunSpec.from_json(json.loads(json.dumps(SPEC.to_json()))) == SPEC
    assert runner.default_chunk_updates(976) == 61 and runner.default_chunk_updates(7) == 1


def test_run_completes_with_metrics_per_run_and_update(uninterrupted):
    folder, result = uninterrupted
    assert result.complete and result.updates_done == 7 and result.chunks_done == 3
    assert set(result.metrics) == set(a2c.A2CMetrics._fields) - {"env_steps"}
    assert all(v.shape == (4, 7) for v in result.metrics.values())
    # Before the first gradient step the two grid points act with the same params and keys.
    first = result.metrics["value_loss"][:, 0]
    assert first[0] == first[2] and first[1] == first[3] and first[0] != first[1]
    assert not np.array_equal(result.metrics["value_loss"][0], result.metrics["value_loss"][2])
    assert [p.name for p in folder.glob("checkpoint-*.npz")] == ["checkpoint-000003.npz"]


def test_interrupted_and_resumed_run_is_bit_identical(uninterrupted, tmp_path):
    _, whole = uninterrupted
    part = runner.train(SPEC, tmp_path, stop_after_chunks=1, progress=None)
    assert not part.complete and part.chunks_done == 1 and part.updates_done == 3
    assert json.loads((tmp_path / "checkpoint.json").read_text())["meta"]["chunks_done"] == 1
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


def test_corrupt_or_mismatched_checkpoint_is_a_clear_error(uninterrupted, tmp_path):
    folder, _ = uninterrupted
    for path in folder.glob("checkpoint*"):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    npz = next(tmp_path.glob("checkpoint-*.npz"))
    with pytest.raises(checkpoint.CheckpointError, match="different state structure"):
        checkpoint.load(tmp_path, _template(a2c.A2CConfig(num_envs=4, num_steps=8, total_timesteps=224,
                                                          hidden_sizes=(64, 64, 64))))
    with pytest.raises(checkpoint.CheckpointError, match=r"state leaf \d+ is .*shape.*expects"):
        checkpoint.load(tmp_path, _template(a2c.A2CConfig(num_envs=4, num_steps=8, total_timesteps=224,
                                                          hidden_sizes=(32, 64))))
    data = bytearray(npz.read_bytes())
    data[len(data) // 2] ^= 0xFF
    npz.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError, match="sha256"):
        checkpoint.load(tmp_path, _template())
    npz.unlink()
    with pytest.raises(checkpoint.CheckpointError, match="is missing"):
        checkpoint.load(tmp_path, _template())
    (tmp_path / "checkpoint.json").write_text("{not json")
    with pytest.raises(checkpoint.CheckpointError, match="corrupt checkpoint manifest"):
        checkpoint.load(tmp_path, _template())


def test_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "key": jax.random.split(jax.random.key(0), 2)}
    checkpoint.save(tmp_path, 1, state, {"m": np.ones(3)}, {"chunks_done": 1})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def broken_savez(f, **arrays):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(tmp_path, 2, state, {"m": np.zeros(3)}, {"chunks_done": 2})
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no temp file, nothing replaced
    loaded, extras, manifest = checkpoint.load(tmp_path, jax.eval_shape(lambda: state))
    assert manifest["meta"] == {"chunks_done": 1}
    np.testing.assert_array_equal(loaded["w"], state["w"])
    np.testing.assert_array_equal(jax.random.key_data(loaded["key"]), jax.random.key_data(state["key"]))
    assert jax.dtypes.issubdtype(loaded["key"].dtype, jax.dtypes.prng_key)


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
