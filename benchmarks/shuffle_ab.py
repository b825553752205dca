"""PPO train time with `batching.permutation` against `jax.random.permutation`, in one process.

The minibatch shuffle is the only difference: both programs are compiled in
the same process (the library's `batching.permutation` swapped for
`jax.random.permutation` while the first is traced), then the two compiled
trains run in alternation, the order flipped every round. Each ratio is new /
old for a pair of adjacent runs; the table gives the median pair ratio and the
ratio of the fastest runs. In one process the two sides share every load burst,
which fresh-process comparisons on this machine do not (their single rounds
move by 10-30%).

Run: python -m benchmarks.shuffle_ab [--seeds 1,8,64] [--updates 200,60,12] [--rounds 10,10,6]
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
    import jax.numpy as jnp

    from jaxrl_rollout import batching
    from jaxrl_rollout.algorithms import ppo

    library = batching.permutation
    variants = {"jax.random.permutation": lambda key, n: jax.random.permutation(key, n).astype(jnp.int32),
                "batching.permutation": library}
    arg = jax.random.split(jax.random.PRNGKey(30), seeds) if seeds > 1 else jax.random.PRNGKey(30)
    compiled = {}
    try:
        for name, permutation in variants.items():
            batching.permutation = permutation
            train = ppo.make_train(ppo.PPOConfig(total_timesteps=4 * 128 * updates))
            fn = jax.jit(jax.vmap(train)) if seeds > 1 else jax.jit(train)
            compiled[name] = fn.lower(arg).compile()
            jax.block_until_ready(compiled[name](arg))
    finally:
        batching.permutation = library
    times = _common.alternated_calls({name: lambda c=c: c(arg) for name, c in compiled.items()}, rounds)
    old, new = times["jax.random.permutation"], times["batching.permutation"]
    return {"seeds": seeds, "updates": updates, "rounds": rounds, "times": times,
            "pair_ratio": statistics.median(n / o for n, o in zip(new, old)), "fastest_ratio": min(new) / min(old)}


def main(argv=None) -> dict:
    return _common.ab_main(
        "shuffle_ab", __doc__, compare,
        ["seeds", "updates", "pairs", "jax.random.permutation (median)", "batching.permutation (median)",
         "new / old (median pair)", "new / old (fastest runs)"],
        lambda x: [x["seeds"], x["updates"], x["rounds"],
                   f"{statistics.median(x['times']['jax.random.permutation']):.3f} s",
                   f"{statistics.median(x['times']['batching.permutation']):.3f} s", f"**{x['pair_ratio']:.3f}**",
                   f"{x['fastest_ratio']:.3f}"],
        argv)


if __name__ == "__main__":
    main()
