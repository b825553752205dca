"""Every algorithm's init and training chunk lower for a GPU, checked on a CPU-only machine.

A device is lent to only some sessions, so a change that works on the CPU but
cannot be lowered for CUDA (a CPU-only custom call, a host callback in the
training path, a `platform_dependent` branch whose accelerator side no longer
traces) would otherwise be found by the next GPU user. `jax.export` lowers for
a platform without its device. Here the two programs the runner compiles for
`train` (the init, and the chunk: updates scanned with the periodic
evaluation, the command line's default, vmapped over two runs) are exported
for "cuda" from abstract shapes, for each algorithm at its command-line
network, and for PPO with the CNN and the GRU too. Lowering only: nothing is
compiled or run, so the full-size default networks cost seconds in all.
"""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import pytest

from jaxrl_rollout import algorithms, periodic_eval, runner

RUNS = 2

# The algorithms' default configs (their command-line defaults: networks, batch sizes) with runs short
# enough that every config check passes; the shapes inside one update are the defaults'.
CASES = {
    "ppo": ("ppo", dict(total_timesteps=2_048)),
    "ppo-cnn": ("ppo", dict(env_id="Breakout-MinAtar", total_timesteps=2_048)),
    "ppo-gru": ("ppo", dict(network="gru", total_timesteps=2_048)),
    "a2c": ("a2c", dict(total_timesteps=800)),
    "dqn": ("dqn", dict(total_timesteps=12_000, learning_starts=1_000)),
    "pqn": ("pqn", dict(total_timesteps=4_096)),
    "sac": ("sac", dict(total_timesteps=2_000, learning_starts=500, buffer_size=2_000)),
    "td3": ("td3", dict(total_timesteps=2_000, learning_starts=500, buffer_size=2_000)),
}


def _custom_calls(text: str) -> set:
    """The custom-call targets a lowered module calls."""
    return set(re.findall(r"stablehlo\.custom_call @([\w.]+)", text))


def _exported(algo: str, changes: dict, platform: str) -> tuple[str, str]:
    """(init, chunk): the runner's two programs (`runner._program`) for `RUNS` runs, lowered for `platform`."""
    entry = algorithms.get(algo)
    config = dataclasses.replace(entry.config(), **changes)
    spec = runner.RunSpec(algo, config, (entry.hparams(),), RUNS, eval_every=1, eval_episodes=2)
    algorithm = runner.make_algorithm(spec)
    init, chunk = (jax.jit(runner._program(spec, algorithm, kind, 2)) for kind in ("init", "chunk"))
    shape_of = lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)  # noqa: E731
    keys, hparams, eval_keys = shape_of((spec.run_keys(), spec.run_hparams(), spec.eval_keys()))
    state = jax.eval_shape(init, keys, hparams)
    best = jax.eval_shape(jax.vmap(lambda s: periodic_eval.no_best(algorithm, s)), state)  # each run's best policy
    init_text = jax.export.export(init, platforms=(platform,))(keys, hparams).mlir_module()
    chunk_text = jax.export.export(chunk, platforms=(platform,))(
        state, hparams, eval_keys, jax.ShapeDtypeStruct((), jnp.int32), best).mlir_module()
    return init_text, chunk_text


@pytest.mark.parametrize("case", sorted(CASES))
def test_init_and_chunk_lower_for_cuda(case):
    algo, changes = CASES[case]
    init_text, chunk_text = _exported(algo, changes, "cuda")
    assert "stablehlo.while" in chunk_text  # the scanned updates, evaluation inside
    for text in (init_text, chunk_text):
        calls = _custom_calls(text)
        # no call back to the host, nothing built for the CPU
        assert not {c for c in calls if "callback" in c or "lapack" in c or c.startswith("cpu")}, calls


def test_the_export_lowers_per_platform():
    # The platform-dependent pieces take their accelerator branch in the CUDA export: PPO's gradient clip
    # stacks its per-leaf norms into one reduction there (optim.clip_grad_norm), so the CUDA chunk has
    # fewer reductions than the CPU one; a host callback is refused outright.
    cpu, cuda = (_exported("ppo", CASES["ppo"][1], p)[1] for p in ("cpu", "cuda"))
    assert cuda.count("stablehlo.reduce") < cpu.count("stablehlo.reduce")
    with pytest.raises(ValueError, match="platform"):
        shape = jax.ShapeDtypeStruct((4,), jnp.float32)
        jax.export.export(jax.jit(lambda x: jax.pure_callback(lambda a: a, shape, x)), platforms=("cuda",))(shape)
