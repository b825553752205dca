"""Variants of an off-policy learner against each other (and rejax 0.1.3's) in one process, alternated.

For a GPU check, where a fresh process per sample costs a start-up that the
device's minutes cannot spare, and for A/B tests of a change on the CPU: each
variant's `train` (the config of `vs_rejax_offpolicy.make_train`, i.e.
`rejax_offpolicy.SPECS`) is compiled once (`jax.jit`, vmapped over the seeds
above one), its launches read off the compiled program
(`hlo_launches.count`), then ROUNDS rounds call every variant once each, in an
order that rotates every round. Reported per variant: compile seconds, launches,
the median and range of the run times and the ratio of medians to the first
variant and to rejax's (when it is among the variants).

Variants (`--variants`, comma-separated, the first is the reference):
  committed       the algorithm module as it is in this checkout
  rev=REV         the algorithm's module as in git revision REV (`git show REV:jaxrl_rollout/algorithms/ALGO.py`),
                  run against this checkout's shared modules (`_common`, `replay`, ...)
  file=PATH       the same from a file (where no git history travels, e.g. to a device machine)
  carried         the committed module with `_common.merged_update` reducing each update's metrics in the scan
                  carry instead of stacking one row per learner step and merging them after (`merge_rows`)
  rejax           rejax 0.1.3's learner (`rejax_offpolicy.make_algo`; rejax must be importable)

Each variant's final metrics are printed too, so that a variant that should
train the same numbers shows it (`carried` and a layout-only change such as
the twin critics' stacking train bit-identical states on the CPU).

    python -m benchmarks.offpolicy_variants --algo td3 --seeds 1,8 --variants committed,rev=HEAD~1,rejax --rounds 5
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import time
import types

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def carried_merged_update(learner_step, steps, resolve):
    """`_common.merged_update` with each metric reduced in the scan's carry (the `carried` variant).

    Equal to `merge_rows` over the stacked rows: sums, per-episode weighted
    sums with their episode counts, OR / any flags, the last value, and NaN-
    skipping sums with their counts for the rest. Only the reductions move:
    the learner steps and so the trained state are the same program's.
    """
    import jax
    import jax.numpy as jnp

    from jaxrl_rollout.algorithms import _common

    def zero_acc(row):
        acc = {}
        for name, x in row._asdict().items():
            how = _common.ROW_MERGE.get(name, "nanmean")
            if how in ("per_episode", "nanmean"):
                acc[name] = (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))
            else:
                acc[name] = jnp.zeros_like(x)
        return acc

    def add(acc, row):
        out = {}
        n = row.num_episodes
        for name, x in row._asdict().items():
            how = _common.ROW_MERGE.get(name, "nanmean")
            a = acc[name]
            if how == "sum":
                out[name] = a + x
            elif how == "per_episode":
                out[name] = (a[0] + jnp.where(n > 0, x * n, 0.0), a[1] + n)
            elif how in ("or", "any"):
                out[name] = a | x
            elif how == "last":
                out[name] = x
            else:
                ok = ~jnp.isnan(x)
                out[name] = (a[0] + jnp.where(ok, x, 0.0), a[1] + ok)
        return out

    def finish(acc, row_type, template):
        out = {}
        for name, x in template._asdict().items():
            how = _common.ROW_MERGE.get(name, "nanmean")
            a = acc[name]
            if how in ("per_episode", "nanmean"):  # (weighted) sum / count, NaN where nothing was counted
                out[name] = jnp.where(a[1] > 0, a[0] / jnp.maximum(a[1], 1), jnp.nan).astype(x.dtype)
            else:
                out[name] = a.astype(x.dtype)
        return row_type(**out)

    def update(state, hparams=None):
        hp = resolve(hparams)
        if steps == 1:
            return learner_step(state, hp)
        template = jax.eval_shape(lambda s: learner_step(s, hp)[1], state)

        def body(carry, _):
            s, acc = carry
            s, row = learner_step(s, hp)
            return (s, add(acc, row)), None

        (state, acc), _ = jax.lax.scan(body, (state, zero_acc(template)), None, length=steps)
        return state, finish(acc, type(template), template)

    return update


def module_variant(algo: str, source: str, name: str):
    """The algorithm module executed from `source` under `name`, beside this checkout's package."""
    real = importlib.import_module(f"jaxrl_rollout.algorithms.{algo}")
    module = types.ModuleType(name)
    module.__file__ = real.__file__
    module.__package__ = "jaxrl_rollout.algorithms"
    sys.modules[name] = module
    exec(compile(source, real.__file__, "exec"), module.__dict__)
    return module


def make_variant(algo: str, variant: str, total_steps: int | None):
    """`train(key)` of one variant."""
    from benchmarks import vs_rejax_offpolicy as vro
    from jaxrl_rollout import algorithms
    from jaxrl_rollout.algorithms import _common

    if variant == "rejax":
        from benchmarks.rejax_offpolicy import make_algo

        learner = make_algo(algo, total_steps)
        return lambda key: learner.train(key)[0]
    module_name = f"jaxrl_rollout.algorithms.{algo}"
    real = importlib.import_module(module_name)
    saved_update = _common.merged_update
    try:
        if variant == "carried":
            _common.merged_update = carried_merged_update
        elif variant.startswith(("rev=", "file=")):
            if variant.startswith("rev="):
                source = subprocess.run(["git", "show", f"{variant[4:]}:jaxrl_rollout/algorithms/{algo}.py"],
                                        cwd=REPO, check=True, capture_output=True, text=True).stdout
            else:
                with open(variant[5:]) as f:
                    source = f.read()
            sys.modules[module_name] = module_variant(algo, source, module_name)
            setattr(algorithms, algo, sys.modules[module_name])
        elif variant != "committed":
            raise SystemExit(f"--variants: unknown variant {variant!r} (committed, rev=REV, file=PATH, carried or rejax)")
        return vro.make_train(algo, total_steps)
    finally:
        _common.merged_update = saved_update
        sys.modules[module_name] = real
        setattr(algorithms, algo, real)


def final_metrics(out) -> str:
    """A few final numbers of a train's output, to see that variants trained the same."""
    import jax
    import numpy as np

    def checksum(tree) -> float:
        leaves = [np.asarray(x) for x in jax.tree.leaves(tree)]
        return sum(float(np.sum(x, dtype=np.float64)) for x in leaves if np.issubdtype(x.dtype, np.floating))

    if not isinstance(out, tuple):  # rejax: the train state only
        return f"state checksum {checksum(out):.9g}"
    state, metrics = out
    names = [n for n in ("episode_return", "critic_loss", "loss") if n in metrics._fields]
    last = {n: float(np.nanmean(np.asarray(getattr(metrics, n))[..., -5:])) for n in names}
    return f"state checksum {checksum(state):.9g} " + " ".join(f"{n}={v:.6g}" for n, v in last.items())


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", default="td3", help="dqn, pqn, sac or td3 (comma-separated for several)")
    p.add_argument("--seeds", default="1,8", help="seed counts, comma-separated")
    p.add_argument("--variants", default="committed,rejax", help="comma-separated; the first is the reference")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--total-steps", type=int, default=None, help="env steps (default: the spec's)")
    p.add_argument("--json", metavar="PATH", help="also write the results (and machine record) as JSON here")
    args = p.parse_args(argv)
    if "rejax" in args.variants.split(","):  # before the other variants compile
        from benchmarks._common import REJAX_HINT, require

        require("rejax", REJAX_HINT)

    import jax

    from benchmarks import _common, hlo_launches

    machine = _common.machine_info(here=True)
    if jax.default_backend() == "gpu":
        machine["gpus"] = _common.gpu_names()
    print(f"{machine['cpu']}; jax {jax.__version__} on {jax.devices()[0]}; rounds {args.rounds}", flush=True)
    variants = args.variants.split(",")
    results, table = [], []
    for algo in args.algo.split(","):
        for seeds in (int(s) for s in args.seeds.split(",")):
            keys = jax.random.split(jax.random.PRNGKey(30), seeds) if seeds > 1 else jax.random.PRNGKey(30)
            compiled, rows = {}, {}
            for v in variants:
                train = make_variant(algo, v, args.total_steps)
                fn = jax.jit(jax.vmap(train)) if seeds > 1 else jax.jit(train)
                t0 = time.perf_counter()
                compiled[v] = fn.lower(keys).compile()
                c = time.perf_counter() - t0
                launches = hlo_launches.count(compiled[v].as_text())["launches"]
                out = jax.block_until_ready(compiled[v](keys))  # the first call, untimed
                rows[v] = {"algo": algo, "seeds": seeds, "variant": v, "compile_s": c, "launches": launches,
                           "final": final_metrics(out), "runs_s": []}
                print(f"{algo} seeds={seeds} {v}: compile {c:.2f} s, {launches} launches; {rows[v]['final']}",
                      flush=True)
            for r in range(args.rounds):
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for v in order:
                    t0 = time.perf_counter()
                    jax.block_until_ready(compiled[v](keys))
                    rows[v]["runs_s"].append(time.perf_counter() - t0)
            ref = statistics.median(rows[variants[0]]["runs_s"])
            rejax = statistics.median(rows["rejax"]["runs_s"]) if "rejax" in rows else None
            for v in variants:
                row = rows[v]
                med = statistics.median(row["runs_s"])
                row.update(median_s=med, vs_first=med / ref, vs_rejax=(med / rejax) if rejax else None)
                results.append(row)
                table.append([algo, seeds, v, f"{row['compile_s']:.2f} s", row["launches"], f"{med:.4f} s",
                              f"{min(row['runs_s']):.4f}-{max(row['runs_s']):.4f} s", f"{med / ref:.3f}",
                              f"{med / rejax:.3f}" if rejax else "n/a"])
                print(f"{algo} seeds={seeds} {v}: run median {med:.4f} s, {med / ref:.3f} of {variants[0]}"
                      + (f", {med / rejax:.3f} of rejax" if rejax else ""), flush=True)
    columns = ["algo", "seeds", "variant", "compile", "launches", "run (median)", "range",
               f"/ {variants[0]}", "/ rejax"]
    return _common.report("offpolicy_variants", args, machine, results, _common.markdown_table(columns, table),
                          _common.command_line())


if __name__ == "__main__":
    main()
