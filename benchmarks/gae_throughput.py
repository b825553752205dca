"""Estimator throughput: `advantages.gae` (jitted) against a NumPy loop and a torch loop.

All three compute the same GAE on float32 [T, B] inputs with separate
terminated and done flags and explicit next values (the signature of
`jaxrl_rollout.advantages.gae`). The NumPy and torch sides are CleanRL's
reverse Python loop over t, vectorised over B; the torch side runs under
`torch.no_grad()` with `--torch-threads` intra-op threads. Before timing, the
three results are checked to agree (rtol 1e-5). Timed in alternation.

Run: python -m benchmarks.gae_throughput [--shapes 128x4096,2048x64]
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import numpy as np

from benchmarks import _common


def loop_gae(zeros_like, rewards, values, next_values, terminated, done, gamma, lam):
    """CleanRL-style reverse loop over t, vectorised over B; works on NumPy arrays and torch tensors alike."""
    advantages = zeros_like(rewards)
    last = zeros_like(rewards[0])
    not_term, not_done = 1.0 - terminated, 1.0 - done
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * next_values[t] * not_term[t] - values[t]
        last = delta + gamma * lam * not_done[t] * last
        advantages[t] = last
    return advantages, advantages + values


def numpy_gae(*args):
    """The loop in NumPy; inputs [T, B] float32 (flags as float32 0/1)."""
    return loop_gae(np.zeros_like, *args)


def torch_gae(torch, *args):
    """The same loop on torch tensors (CleanRL's code path), without autograd."""
    with torch.no_grad():
        return loop_gae(torch.zeros_like, *args)


def make_inputs(t: int, b: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    done = (rng.random((t, b)) < 0.02).astype(np.float32)
    terminated = done * (rng.random((t, b)) < 0.8)
    return {
        "rewards": rng.normal(size=(t, b)).astype(np.float32),
        "values": rng.normal(size=(t, b)).astype(np.float32),
        "next_values": rng.normal(size=(t, b)).astype(np.float32),
        "terminated": terminated.astype(np.float32),
        "done": done,
    }


def parse_shapes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",") if s]


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--shapes", type=parse_shapes, default=[(128, 4096), (2048, 64)], help="TxB,TxB,...")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--min-sample", type=float, default=0.1)
    p.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads (0: leave torch's default)")
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args(argv)
    if not args.no_torch:
        _common.require("torch", _common.TORCH_HINT + ", or pass --no-torch")

    from jaxrl_rollout.advantages import gae

    torch = None
    if not args.no_torch:
        import torch

        if args.torch_threads:
            torch.set_num_threads(args.torch_threads)
    machine = _common.machine_info(here=True)
    if torch is not None:
        machine["torch_threads"] = torch.get_num_threads()
    gamma, lam = 0.99, 0.95

    # Flags go in as bool, as a Trajectory holds them.
    jax_gae = jax.jit(lambda r, v, nv, term, d: gae(r, v, nv, term, d, gamma, lam))
    results, rows = [], []
    for t, b in args.shapes:
        x = make_inputs(t, b)
        jx = [jax.device_put(x[k]) for k in ("rewards", "values", "next_values")]
        jx += [jax.device_put(x[k].astype(bool)) for k in ("terminated", "done")]
        fns = {
            "jax": lambda: jax_gae(*jx),
            "numpy": lambda: numpy_gae(*(x[k] for k in x), gamma, lam),
        }
        reference = numpy_gae(*(x[k] for k in x), gamma, lam)[0]
        np.testing.assert_allclose(np.asarray(fns["jax"]()[0]), reference, rtol=1e-5, atol=1e-5)
        if torch is not None:
            tx = [torch.from_numpy(x[k]) for k in x]
            fns["torch"] = lambda: torch_gae(torch, *tx, gamma, lam)
            np.testing.assert_allclose(fns["torch"]()[0].numpy(), reference, rtol=1e-5, atol=1e-5)
        timed = _common.interleaved(fns, args.rounds, args.min_sample)
        load = _common.loadavg()
        entry = {"T": t, "B": b, "loadavg": load, "median_s": {n: v["median_s"] for n, v in timed.items()},
                 "samples_s": {n: v["samples_s"] for n, v in timed.items()},
                 "speedup_vs_numpy": _common.paired_ratios(timed, "numpy", "jax")}
        row = [f"[{t}, {b}]"] + [_common.fmt_time(timed[n]["median_s"]) for n in ("jax", "numpy")]
        row.append(f"{t * b / timed['jax']['median_s'] / 1e6:.0f}")
        row.append(f"{entry['speedup_vs_numpy']['median']:.1f}x")
        if torch is not None:
            entry["speedup_vs_torch"] = _common.paired_ratios(timed, "torch", "jax")
            row[3:3] = [_common.fmt_time(timed["torch"]["median_s"])]
            row.append(f"{entry['speedup_vs_torch']['median']:.1f}x")
        row.append(load)
        results.append(entry)
        rows.append(row)
    columns = ["[T, B]", "jax jit", "numpy loop"] + (["torch loop"] if torch is not None else [])
    columns += ["jax M elements/s", "jax vs numpy"] + (["jax vs torch"] if torch is not None else []) + ["load avg"]
    table = _common.markdown_table(columns, rows)
    return _common.report("gae_throughput", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
