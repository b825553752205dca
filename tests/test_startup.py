"""What a first call costs: the console script's imports and an eager `rollout_init`.

- `jaxrl_rollout._deferred`: the console script's process defers the plotting
  modules that gymnax's package import loads for two envs' `render` alone;
  the modules still work the moment something uses them, and a caller of
  `cli.main` from Python keeps its own `sys.modules`.
- `collect._reset`: `rollout_init` called outside a trace resets through one
  compiled program cached per env, instead of dispatching the reset's
  operations one by one; under a trace it is traced into the caller's program.
"""

import subprocess
import sys
import textwrap
import types

import jax
import numpy as np
import pytest
from gymnax.environments import environment

import jaxrl_rollout as jr
from jaxrl_rollout import collect, stepping
from tests import toy_envs


def _python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_console_script_starts_without_the_render_only_modules():
    out = _python("""
        import atexit, sys
        def report():
            seen = {n: type(sys.modules.get(n)).__name__ for n in ("seaborn", "matplotlib.pyplot", "scipy.stats")}
            print("MODULES", seen, "gymnax" in sys.modules)
        atexit.register(report)
        sys.argv = ["jaxrl-rollout", "train", "--help"]
        from jaxrl_rollout import cli
        cli.entry()
    """)
    # gymnax was imported (the help lists its envs' defaults); the three plotting modules were not
    assert "MODULES {'seaborn': '_Deferred', 'matplotlib.pyplot': '_Deferred', 'scipy.stats': 'NoneType'} True" in out


def test_deferred_modules_work_when_used():
    out = _python("""
        import sys
        from jaxrl_rollout import _deferred
        _deferred.defer()
        import gymnax  # Pong's `import seaborn as sns` and Catch's `import matplotlib.pyplot as plt` bind stand-ins
        from gymnax.environments.misc import pong
        stand_in = sys.modules["seaborn"]
        assert getattr(stand_in, "__file__", None) is None and sys.modules["seaborn"] is stand_in  # not imported
        palette = pong.sns.color_palette("cubehelix", 3)  # what Pong's render reads: the real seaborn's answer
        assert len(palette) == 3 and sys.modules["seaborn"] is not stand_in, palette
        assert sys.modules["seaborn"].__file__.endswith("__init__.py")
        import matplotlib.pyplot as plt
        figure = plt.figure()
        assert type(figure).__name__ == "Figure" and sys.modules["matplotlib.pyplot"].__name__ == "matplotlib.pyplot"
        import seaborn.palettes  # a submodule of a deferred package imports too
        print("OK", "scipy.stats" in sys.modules)
    """)
    assert "OK True" in out  # seaborn, once used, brought scipy.stats with it


def test_calling_main_from_python_defers_nothing():
    out = _python("""
        import sys
        from jaxrl_rollout import cli
        try:
            cli.main(["train", "--help"])
        except SystemExit:
            pass
        print("TYPES", type(sys.modules.get("seaborn")).__name__)
    """)
    assert "TYPES module" in out  # gymnax's own import of seaborn, untouched


@pytest.fixture
def traced_resets(monkeypatch):
    """Records, for each call of `stepping.env_reset`, whether its keys were traced."""
    calls = []
    real = stepping.env_reset

    def recording(env, keys, env_params):
        calls.append(isinstance(keys, jax.core.Tracer))
        return real(env, keys, env_params)

    # collect's view of stepping only: the env checks' own traced resets are not counted
    monkeypatch.setattr(collect, "stepping", types.SimpleNamespace(**{**vars(stepping), "env_reset": recording}))
    monkeypatch.setattr(collect, "_jitted_reset", jax.jit(recording, static_argnums=0))  # a fresh cache
    return calls


def test_an_eager_rollout_init_resets_through_one_cached_program(traced_resets):
    env = toy_envs.CountingEnv()
    first = jr.rollout_init(jax.random.key(0), env, None, 4)
    assert traced_resets == [True]  # traced once, into the compiled program
    second = jr.rollout_init(jax.random.key(1), env, None, 4)
    assert traced_resets == [True]  # the same env: the program is reused
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(first.obs), jax.tree.leaves(second.obs)))
    jr.rollout_init(jax.random.key(0), toy_envs.CountingEnv(), None, 4)
    assert traced_resets == [True, True]  # another env object: its own program


def test_under_a_trace_and_for_an_unhashable_env_the_reset_runs_in_place(traced_resets):
    env = toy_envs.CountingEnv()
    jaxpr = jax.make_jaxpr(lambda key: jr.rollout_init(key, env, None, 4))(jax.random.key(0))
    # traced once, into the caller's program as it was: no nested call of the cached program
    assert traced_resets == [True] and "name=recording" not in str(jaxpr), jaxpr

    class Unhashable(toy_envs.CountingEnv):  # gymnax jits reset and step with the env static: undo that too
        __hash__ = None
        reset = environment.Environment.reset.__wrapped__
        step = environment.Environment.step.__wrapped__

    state = jr.rollout_init(jax.random.key(0), Unhashable(), None, 4)
    assert traced_resets == [True, False]  # eagerly, on concrete keys
    reference = jr.rollout_init(jax.random.key(0), env, None, 4)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(reference)):
        if not jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(a, b)  # same keys, same reset, either way
