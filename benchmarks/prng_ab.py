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
import time

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
    data = lambda x: np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)  # noqa: E731
    identical = all(np.array_equal(data(a), data(b), equal_nan=True)
                    for a, b in zip(jax.tree.leaves(outputs["fused"]), jax.tree.leaves(outputs["plain"])))
    if not identical:
        raise AssertionError("fused and plain hashing gave different trains: prng is not bit-identical here")
    times = {name: [] for name in compiled}
    for r in range(rounds):
        for name in (list(compiled) if r % 2 == 0 else list(compiled)[::-1]):
            start = time.perf_counter()
            jax.block_until_ready(compiled[name](arg))
            times[name].append(time.perf_counter() - start)
    new, old = times["fused"], times["plain"]
    return {"seeds": seeds, "updates": updates, "rounds": rounds, "times": times, "identical": identical,
            "pair_ratio": statistics.median(n / o for n, o in zip(new, old)), "fastest_ratio": min(new) / min(old)}


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=_common.int_list, default=[1, 8, 64])
    p.add_argument("--updates", type=_common.int_list, default=[200, 60, 12], help="PPO updates per run, per seed count")
    p.add_argument("--rounds", type=_common.int_list, default=[10, 10, 6], help="alternated pairs, per seed count")
    args = p.parse_args(argv)
    if not len(args.seeds) == len(args.updates) == len(args.rounds):
        p.error("--seeds, --updates and --rounds need one value per seed count")
    import jax  # before the machine record, which reads jax's version and backend

    del jax
    machine = _common.machine_info()
    results = [compare(s, u, r) for s, u, r in zip(args.seeds, args.updates, args.rounds)]
    rows = [[x["seeds"], x["updates"], x["rounds"], f"{statistics.median(x['times']['plain']):.3f} s",
             f"{statistics.median(x['times']['fused']):.3f} s", "yes" if x["identical"] else "no",
             f"**{x['pair_ratio']:.3f}**", f"{x['fastest_ratio']:.3f}"] for x in results]
    table = _common.markdown_table(
        ["seeds", "updates", "pairs", "plain threefry (median)", "fused threefry (median)", "bit-identical",
         "fused / plain (median pair)", "fused / plain (fastest runs)"], rows)
    return _common.report("prng_ab", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
