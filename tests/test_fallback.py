"""Speed machinery that degrades instead of breaking (#26): without the JAX internals behind
prng.FUSED_THREEFRY the package still imports, says so once, and trains on JAX's own threefry."""

import importlib
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from jaxrl_rollout import prng
from jaxrl_rollout._fusion import computed_once
from jaxrl_rollout.algorithms import ppo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 240
# 2 updates of 4 envs x 8 steps: enough to trace, compile and run every PRNG call of a train.
TINY = dict(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, update_epochs=1, num_minibatches=2)
# The internals issue #26 names; the subprocess deletes one of them before importing the package.
DELETED = [
    "jax.extend.random.define_prng_impl",
    "jax.interpreters.mlir.register_lowering",
    "jax.interpreters.batching.primitive_batchers",
]

SCRIPT = textwrap.dedent(
    """
    import importlib, sys, warnings
    import jax, jax.extend.random, jax.interpreters.batching, jax.interpreters.mlir
    import numpy as np

    module, attribute = sys.argv[1].rsplit(".", 1)
    delattr(importlib.import_module(module), attribute)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # a warning given per call would show up once per call
        import jaxrl_rollout
        from jaxrl_rollout import prng
        from jaxrl_rollout._fusion import computed_once
        from jaxrl_rollout.algorithms import ppo

        assert prng.FUSED_THREEFRY is None and not prng.can_fuse(jax.random.key(0))
        key = jax.random.key(1)
        np.testing.assert_array_equal(jax.random.key_data(prng.split(key)), jax.random.key_data(jax.random.split(key)))
        x = jax.random.normal(key, (5,))
        np.testing.assert_array_equal(jax.jit(computed_once)(x), x)
        state, _ = jax.jit(ppo.make_train(ppo.PPOConfig(**{tiny})))(jax.random.key(0))
        leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(state.params)]
        assert all(np.isfinite(leaf).all() for leaf in leaves)
        np.savez(sys.argv[2], *leaves)
    ours = [str(w.message) for w in caught if issubclass(w.category, prng.FusionUnavailableWarning)]
    print("FALLBACK WARNINGS", len(ours))
    for message in ours:
        print("WARNING:", message)
    """
).format(tiny=TINY)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One subprocess per deleted internal, run one after another; {internal: (exit code or None, output, params file)}.

    In turn, not all at once: each falls back to the same program (JAX's own threefry), so the second and third
    load the first's from the test run's shared compilation cache (conftest) instead of compiling it again (this
    file took 37 CPU-seconds with the three at once, 27 in turn, on 2 cores). Each still traces its program, so
    a fallback that traced differently would compile its own, and be compared all the same.
    """
    folder = tmp_path_factory.mktemp("fallback")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu")
    done = {}
    for internal in DELETED:
        out = str(folder / f"{internal}.npz")
        try:
            proc = subprocess.run([sys.executable, "-c", SCRIPT, internal, out], cwd=ROOT, env=env, timeout=TIMEOUT_S,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            done[internal] = (proc.returncode, proc.stdout, out)
        except subprocess.TimeoutExpired as expired:  # run() has killed it
            output = expired.output.decode(errors="replace") if isinstance(expired.output, bytes) else expired.output
            done[internal] = (None, output or "", out)
    return done


@pytest.fixture(scope="module")
def fused_params():
    state, _ = jax.jit(ppo.make_train(ppo.PPOConfig(**TINY)))(jax.random.key(0))
    return [np.asarray(leaf) for leaf in jax.tree.leaves(state.params)]


@pytest.mark.parametrize("internal", DELETED)
def test_without_an_internal_the_package_imports_warns_once_and_trains(runs, fused_params, internal):
    code, output, out = runs[internal]
    if code is None:
        pytest.fail(f"no result in {TIMEOUT_S} s without {internal}:\n{output[-3000:]}")
    assert code == 0, output[-3000:]
    assert "FALLBACK WARNINGS 1\n" in output, output[-3000:]
    warning = output.split("WARNING: ", 1)[1]
    assert internal in warning and "falling back to JAX's own threefry2x32" in warning, warning
    with np.load(out) as saved:
        fallback = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    # JAX's own threefry draws the same bits, so the train is the same run (bit-identical here;
    # the tolerance only allows XLA to round a fused kernel differently).
    assert len(fallback) == len(fused_params)
    for a, b in zip(fallback, fused_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("module, attribute", prng._INTERNALS)
def test_every_internal_is_checked_by_name(monkeypatch, module, attribute):
    monkeypatch.delattr(importlib.import_module(module), attribute)
    assert prng._missing_internal() == f"{module}.{attribute}"


def test_an_internal_that_fails_is_a_warning_not_an_import_error(monkeypatch):
    def refuses(**kwargs):
        raise TypeError("define_prng_impl() got an unexpected keyword argument 'tag'")

    monkeypatch.setattr(prng, "define_prng_impl", refuses)
    with pytest.warns(prng.FusionUnavailableWarning, match="TypeError: define_prng_impl.*falling back"):
        assert prng._define_fused_threefry() == (None, None)


def test_the_tested_jax_has_the_fast_path():
    """CI's JAX must not fall back silently: the fused threefry is built and used on CPU."""
    assert prng._MISSING is None and prng.FUSED_THREEFRY is not None
    if jax.default_backend() == "cpu":
        assert jax.random.key_impl(prng.fused(jax.random.key(0))) == prng.FUSED_THREEFRY
        x = jax.random.normal(jax.random.key(2), (4,))
        np.testing.assert_array_equal(computed_once(x), x)
