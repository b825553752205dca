"""What a first call costs: the console script's imports and an eager `rollout_init`.

- `jaxrl_rollout._deferred`: the console script's process defers the plotting
  modules that gymnax's package import loads for two envs' `render` alone;
  the modules still work the moment something uses them, and a caller of
  `cli.main` from Python keeps its own `sys.modules`.
- `stepping.env_reset`: called outside a trace (by an eager `rollout_init` or
  rlplay's `context`) it resets through one compiled program cached per env,
  instead of dispatching the reset's operations one by one; under a trace it
  is traced into the caller's program.
"""

import ast
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from gymnax.environments import environment

import jaxrl_rollout as jr
from jaxrl_rollout import stepping
from jaxrl_rollout.compat import rlplay
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
        sys.argv = ["jaxrl-rollout", "train", "--seeds", "0"]  # refused by the parser, which imports gymnax
        from jaxrl_rollout import cli
        try:
            cli.entry()
        except SystemExit:
            pass
    """)
    # gymnax was imported (the parser reads its envs' defaults); the three plotting modules were not
    assert "MODULES {'seaborn': '_Deferred', 'matplotlib.pyplot': '_Deferred', 'scipy.stats': 'NoneType'} True" in out


def test_the_help_of_every_command_imports_no_jax(monkeypatch):
    """`jaxrl-rollout --help` took 2 to 4 s on this host, for jax's import (the parser's train options read the
    algorithms' configs); the top-level, evaluate's and rollout's help need none of it, and print the same.
    `train --help` took 1.7 to 1.9 s: its options now come from `_option_table.TABLE`, the same help."""
    out = _python("""
        import contextlib, io, os, sys
        os.environ["COLUMNS"] = "100"  # argparse's width, as below
        from jaxrl_rollout import cli
        for argv in (["--help"], ["-h"], ["evaluate", "--help"], ["rollout", "-h"], ["evaluate", "runs/x", "-h"],
                     ["train", "--help"], ["train", "--algo", "sac", "-h"]):
            text = io.StringIO()
            with contextlib.redirect_stdout(text):
                try:
                    cli.main(argv)
                except SystemExit as exit:
                    assert exit.code == 0, (argv, exit.code)
            print("HELP", repr((argv, text.getvalue())))
        print("JAX", "jax" in sys.modules)
    """)
    assert "JAX False" in out, out
    from jaxrl_rollout import cli

    monkeypatch.setenv("COLUMNS", "100")
    full = cli.build_parser()
    commands = full._subparsers._group_actions[0].choices
    wanted = {"--help": full.format_help(), "-h": full.format_help(), "evaluate": commands["evaluate"].format_help(),
              "rollout": commands["rollout"].format_help(), "train": commands["train"].format_help()}
    assert "--policy-lr X[,X...]" in wanted["train"] and "default: ppo: 4, a2c: 16, dqn: 1" in wanted["train"]
    helps = [ast.literal_eval(line.removeprefix("HELP ")) for line in out.splitlines() if line.startswith("HELP ")]
    assert len(helps) == 7
    for argv, text in helps:
        assert text == wanted[argv[0]], argv  # the help the full parser prints


def test_the_option_table_is_the_algorithms():
    """`train --help` prints its options from `_option_table.TABLE`; every other use of them reads the
    algorithms' classes. A field added, removed or given another default without writing the table again
    (`python -m jaxrl_rollout._option_table`) fails here."""
    from jaxrl_rollout import _option_table, cli

    assert _option_table.TABLE == cli.option_table()


def test_the_console_script_draws_on_agg_whatever_mplbackend_says():
    """An unknown MPLBACKEND (a typo, a backend of another machine) failed matplotlib's import inside gymnax's, a
    traceback before any option was read; the command's figures are drawn on Agg canvases, so it runs as with
    none (here: the parser, which imports gymnax, refuses --seeds 0 in its one line)."""
    import os

    env = dict(os.environ, MPLBACKEND="bogus")
    done = subprocess.run([sys.executable, "-m", "jaxrl_rollout", "train", "--seeds", "0"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr == ("jaxrl-rollout train: error: argument --seeds: expected a positive integer, got 0 (see "
                           "jaxrl-rollout train --help)\n")


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
            cli.main(["train", "--seeds", "0"])  # refused by the parser, which imports gymnax
        except SystemExit:
            pass
        print("TYPES", type(sys.modules.get("seaborn")).__name__)
    """)
    assert "TYPES module" in out  # gymnax's own import of seaborn, untouched


@pytest.fixture
def resets(monkeypatch):
    """Records each run of `stepping.env_reset`'s reset: ("compiled", traced) for a trace of its cached program,
    ("in place", traced) for a reset traced into the caller's program (traced True) or run op by op (False)."""
    calls = []
    real = stepping._reset_batch

    def recorder(path):
        def reset(env, keys, env_params):
            calls.append((path, isinstance(keys, jax.core.Tracer)))
            return real(env, keys, env_params)
        reset.__name__ = "recorded_" + path.replace(" ", "_")  # the name a nested call of it has in a jaxpr
        return reset

    monkeypatch.setattr(stepping, "_reset_batch", recorder("in place"))
    monkeypatch.setattr(stepping, "_compiled_reset", jax.jit(recorder("compiled"), static_argnums=0))  # a fresh cache
    return calls


def _compiled(calls):
    return [c for c in calls if c[0] == "compiled"]


def test_an_eager_rollout_init_resets_through_one_cached_program(resets):
    env = toy_envs.CountingEnv()
    first = jr.rollout_init(jax.random.key(0), env, None, 4)
    assert _compiled(resets) == [("compiled", True)]  # traced once, into the compiled program
    second = jr.rollout_init(jax.random.key(1), env, None, 4)
    assert _compiled(resets) == [("compiled", True)]  # the same env: the program is reused
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(first.obs), jax.tree.leaves(second.obs)))
    jr.rollout_init(jax.random.key(0), toy_envs.CountingEnv(), None, 4)
    assert _compiled(resets) == [("compiled", True)] * 2  # another env object: its own program
    # rlplay's context, the other eager caller, resets through a cached program too (its own: its keys are
    # jax.random.split's, not rollout_init's fused ones)
    rlplay.context(jax.random.key(2), env, None, 4)
    rlplay.context(jax.random.key(3), env, None, 4)
    assert _compiled(resets) == [("compiled", True)] * 3
    assert ("in place", False) not in resets  # nothing ran op by op


def test_under_a_trace_and_for_an_unhashable_env_the_reset_runs_in_place(resets):
    env = toy_envs.CountingEnv()
    jaxpr = jax.make_jaxpr(lambda key: jr.rollout_init(key, env, None, 4))(jax.random.key(0))
    # traced into the caller's program as it was: no nested call of the cached program
    assert not _compiled(resets) and "name=recorded_compiled" not in str(jaxpr), jaxpr

    class Unhashable(toy_envs.CountingEnv):  # gymnax jits reset and step with the env static: undo that too
        __hash__ = None
        reset = environment.Environment.reset.__wrapped__
        step = environment.Environment.step.__wrapped__

    resets.clear()
    state = jr.rollout_init(jax.random.key(0), Unhashable(), None, 4)
    assert ("in place", False) in resets and not _compiled(resets)  # op by op, on concrete keys
    reference = jr.rollout_init(jax.random.key(0), env, None, 4)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(reference)):
        if not jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(a, b)  # same keys, same reset, either way
