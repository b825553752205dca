"""PPO train time with fused threefry hashing (`prng`) against JAX's own, in one process.

The only difference is how the threefry hashes are computed: both programs are
compiled in the same process (`prng.fused` / `prng.can_fuse` switched off
while the second is traced, so every key stays a plain threefry key), then the
two compiled trains run in alternation, the order flipped every round. Both
give bit-identical results (checked here on the whole output before timing).
Each ratio is fused / plain for a pair of adjacent runs; the table gives the
median pair ratio and the ratio of the fastest runs.

Run: python -m benchmarks.prng_ab [--seeds 1,8,64] [--updates 200,60,12] [--rounds 10,10,6]
"""

from __future__ import annotations

import os
import statistics
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _common


def compare(seeds: int, updates: int, rounds: int) -> dict:
    import jax
    import numpy as np

    from jaxrl_rollout import prng
    from jaxrl_rollout.algorithms import ppo

    library = prng.fused, prng.can_fuse
    arg = jax.random.split(jax.random.PRNGKey(30), seeds) if seeds > 1 else jax.random.PRNGKey(30)
    compiled, outputs = {}, {}
    try:
        for name in ("fused", "plain"):
            if name == "plain":
                prng.fused, prng.can_fuse = (lambda key: key), (lambda key: False)
            train = ppo.make_train(ppo.PPOConfig(total_timesteps=4 * 128 * updates))
            fn = jax.jit(jax.vmap(train)) if seeds > 1 else jax.jit(train)
            compiled[name] = fn.lower(arg).compile()
            outputs[name] = jax.block_until_ready(compiled[name](arg))
    finally:
        prng.fused, prng.can_fuse = library
    def data(x):
        return np.asarray(jax.random.key_data(x) if prng.is_key(x) else x)

    identical = all(np.array_equal(data(a), data(b), equal_nan=True)
                    for a, b in zip(jax.tree.leaves(outputs["fused"]), jax.tree.leaves(outputs["plain"])))
    if not identical:
        raise AssertionError("fused and plain hashing gave different trains: prng is not bit-identical here")
    times = _common.alternated_calls({name: lambda c=c: c(arg) for name, c in compiled.items()}, rounds)
    new, old = times["fused"], times["plain"]
    return {"seeds": seeds, "updates": updates, "rounds": rounds, "times": times, "identical": identical,
            "pair_ratio": statistics.median(n / o for n, o in zip(new, old)), "fastest_ratio": min(new) / min(old)}


def main(argv=None) -> dict:
    return _common.ab_main(
        "prng_ab", __doc__, compare,
        ["seeds", "updates", "pairs", "plain threefry (median)", "fused threefry (median)", "bit-identical",
         "fused / plain (median pair)", "fused / plain (fastest runs)"],
        lambda x: [x["seeds"], x["updates"], x["rounds"], f"{statistics.median(x['times']['plain']):.3f} s",
                   f"{statistics.median(x['times']['fused']):.3f} s", "yes" if x["identical"] else "no",
                   f"**{x['pair_ratio']:.3f}**", f"{x['fastest_ratio']:.3f}"],
        argv)


if __name__ == "__main__":
    main()
