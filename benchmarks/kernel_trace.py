"""Where a compiled PPO train spends its time, kernel by kernel (XLA CPU thunk trace).

Runs one compiled `train` (the reference CartPole-v1 config, or PPO on
Pendulum-v1 with --algo ppo-pendulum; vmapped over --seeds) under
`jax.profiler`, reads the trace back with `jax.profiler.ProfileData`, and
attributes every XLA CPU thunk it ran (a fusion, dot, copy, sort, ...) to the
`while` loop whose body holds it, from the compiled HLO. It reports:

- per loop: iterations per update, kernels per iteration and its share of
  the summed kernel time (the rollout step, the gradient step, GAE, ...);
- per thread: busy time, and the parallel factor (kernel time / wall span);
- for the loop with the most kernel time (the gradient step at 8 and 64
  seeds): its top kernels with their shapes and source, and, per iteration,
  the wall span against the kernel time and against the busiest thread's
  share, which say how much of the step ran on one thread.

Tracing adds about a microsecond per thunk, so the traced run is slower than
an untraced one (both are printed) and the shares of small kernels are
inflated; the big kernels' times and the per-thread picture are what to read.

With --algo rejax-ppo or rejax-ppo-pendulum it traces rejax 0.1.3's PPO on the
same config instead (`benchmarks.rejax_ppo`), for a kernel-by-kernel
comparison; run it then in an interpreter that has rejax (the anchor's venv,
with this repository on PYTHONPATH). --algo pqn and rejax-pqn trace the two
PQNs of `vs_rejax_offpolicy` (CartPole-v1, 32 envs x 64 steps, 4 epochs x 16
minibatches: 64 rollout steps and 64 gradient steps an update, so both loops
get both role names; their sources tell them apart).

Run: python -m benchmarks.kernel_trace [--seeds 1,8,64] [--updates 100,40,10] [--loops 2]
       [--algo ppo|ppo-pendulum|rejax-ppo|rejax-ppo-pendulum|pqn|rejax-pqn]
"""

from __future__ import annotations

import bisect
import collections
import glob
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax

from benchmarks import _common

ALGOS = ("ppo", "ppo-pendulum", "rejax-ppo", "rejax-ppo-pendulum", "pqn", "rejax-pqn")
CONTROL = ("while", "conditional", "call")  # thunks that run nested thunk sequences


class Hlo:
    """The compiled HLO's computations: which computation each instruction is in,
    which instruction calls each computation, and each instruction's opcode,
    shape and source (`op_name` metadata)."""

    def __init__(self, text: str):
        self.computation_of, self.caller_of, self.opcode, self.shape, self.source = {}, {}, {}, {}, {}
        self._loops: dict = {}
        current = None
        for line in text.splitlines():
            head = re.match(r"^(?:ENTRY )?%(\S+) .*\{$", line)
            if head:
                current = head.group(1)
                continue
            inst = re.match(r"^\s+(?:ROOT )?%(\S+) = (\S+)", line)
            if not (inst and current):
                continue
            name = inst.group(1)
            self.computation_of[name] = current
            self.shape[name] = inst.group(2)
            op = re.search(r" ([a-z][\w-]*)\((?:%|\))", line)
            self.opcode[name] = op.group(1) if op else "?"
            source = re.search(r'op_name="([^"]*)"', line)
            self.source[name] = source.group(1) if source else ""
            for refs in re.findall(r"(?:body|condition|branch_computations|true_computation|false_computation|"
                                   r"to_apply|calls)=\{?([^,}]*(?:, %[^,}]*)*)\}?", line):
                for ref in re.findall(r"%([\w.\-]+)", refs):
                    self.caller_of[ref] = name

    def loops(self, name: str) -> list[str]:
        """The `while` instructions around `name`, innermost first."""
        if name not in self._loops:
            out, computation = [], self.computation_of.get(name)
            while computation in self.caller_of:
                caller = self.caller_of[computation]
                if self.opcode.get(caller) == "while":
                    out.append(caller)
                computation = self.computation_of.get(caller)
            self._loops[name] = out
        return self._loops[name]

    def in_body_of(self, name: str, loop: str) -> bool:
        """Whether `name` is an instruction of `loop`'s body itself (not of a nested call or branch)."""
        return self.caller_of.get(self.computation_of.get(name)) == loop


def short_source(op_name: str) -> str:
    """An HLO op's source scope without the jit/vmap/scan prefixes, e.g.
    'transpose(jvp(ActorCriticMLP))/actor_hidden_1/dot_general'."""
    return re.sub(r"^.*closed_call/", "", re.sub(r"^jit\(train\)/(vmap\(\)/)?", "", op_name))


def make_train(algo: str, updates: int):
    """`train(key)` for `updates` PPO updates of the benchmark's config, and the
    loop roles by iterations per update (rollout step, gradient step, ...)."""
    if algo in ("pqn", "rejax-pqn"):
        return make_pqn_train(algo, updates)
    if algo.startswith("rejax-"):
        return make_rejax_train(algo.removeprefix("rejax-ppo").removeprefix("-") or "cartpole", updates)
    from benchmarks.vs_purejaxrl import PENDULUM, PENDULUM_HPARAMS
    from jaxrl_rollout.algorithms import ppo

    extra = PENDULUM if algo == "ppo-pendulum" else {}
    batch = ppo.PPOConfig(**extra).batch_size
    config = ppo.PPOConfig(total_timesteps=batch * updates, **extra)
    roles = collections.defaultdict(list)
    for count, role in ((config.num_steps, "rollout step"), (config.updates_per_iteration, "gradient step"),
                        (config.update_epochs, "epoch"), (1, "update")):
        roles[count].append(role)
    made = ppo.make_train(config)
    if algo == "ppo-pendulum":
        hparams = ppo.PPOHParams(**PENDULUM_HPARAMS)
        return (lambda key: made(key, hparams)), roles
    return made, roles


def make_pqn_train(algo: str, updates: int):
    """PQN on `vs_rejax_offpolicy`'s CartPole config (`rejax_offpolicy.SPECS["pqn"]`), ours or rejax 0.1.3's,
    for `updates` updates (rollouts of num_envs x num_steps); the loop roles by iterations per update."""
    from benchmarks.rejax_offpolicy import SPECS

    spec = SPECS["pqn"]
    total = spec["num_envs"] * spec["num_steps"] * updates
    if algo == "rejax-pqn":
        from benchmarks.rejax_offpolicy import make_algo

        learner = make_algo("pqn", total)
        train = lambda key: learner.train(key)[0]  # noqa: E731
    else:
        from benchmarks.vs_rejax_offpolicy import make_train as make_ours

        train = make_ours("pqn", total)
    roles = collections.defaultdict(list)
    for count, role in ((spec["num_steps"], "rollout step"), (spec["num_epochs"] * spec["num_minibatches"],
                                                              "gradient step"),
                        (spec["num_epochs"], "epoch"), (1, "update")):
        roles[count].append(role)
    return train, roles


def make_rejax_train(config_name: str, updates: int):
    """rejax 0.1.3's PPO on the same config (`benchmarks.rejax_ppo`; run this script in a venv that has rejax)."""
    from benchmarks import rejax_ppo

    train, _ = rejax_ppo.make_train(config_name, updates)
    config = rejax_ppo.CONFIGS[config_name]
    roles = collections.defaultdict(list)
    for count, role in ((config["num_steps"], "rollout step"),
                        (config["num_epochs"] * config["num_minibatches"], "gradient step"),
                        (config["num_epochs"], "epoch"), (1, "update")):
        roles[count].append(role)
    return train, roles


def trace_events(compiled, arg, directory: str) -> tuple[float, list[tuple[str, str, int, int]]]:
    """The traced call's seconds, and (thread, thunk name, start ns, duration ns) of every thunk it ran."""
    from jax.profiler import ProfileData

    jax.profiler.start_trace(directory)
    start = time.perf_counter()
    jax.block_until_ready(compiled(arg))
    seconds = time.perf_counter() - start
    jax.profiler.stop_trace()
    path = sorted(glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True))[-1]
    events = []
    for plane in ProfileData.from_file(path).planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            if not line.name.startswith(("tf_XLAEigen", "tf_XLAPjRtCpuClient")):
                continue  # XLA's compute threads (the caller's thread runs none here)
            for e in line.events:
                if e.name.startswith(("end: ", "ThreadpoolListener", "ThunkExecutor")):
                    continue
                events.append((line.name, e.name, int(e.start_ns), int(e.duration_ns)))
    return seconds, events


def once_per_iteration(hlo: Hlo, counts: collections.Counter, loop: str) -> tuple[str, int] | None:
    """A kernel of `loop`'s body itself and how often it ran: the most common such count, which is
    the loop's iterations (a kernel of a nested branch may run less often). None for no such kernel."""
    direct = {n: c for n, c in counts.items() if hlo.in_body_of(n, loop)}
    if not direct:
        return None
    runs = collections.Counter(direct.values()).most_common(1)[0][0]
    return next(n for n, c in direct.items() if c == runs), runs


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=_common.int_list, default=[1, 8, 64],
                   help="vmapped seeds, one traced run each (1: no vmap)")
    p.add_argument("--updates", type=_common.int_list, default=[100, 40, 10],
                   help="PPO updates per traced run, one per seed count")
    p.add_argument("--algo", choices=ALGOS, default="ppo",
                   help="our PPO (or PQN), or rejax 0.1.3's on the same config (rejax-*; run in a venv with rejax)")
    p.add_argument("--top", type=int, default=12, help="kernels listed for the busiest loop")
    p.add_argument("--loops", type=int, default=1, help="loops whose top kernels are listed, busiest first")
    args = p.parse_args(argv)
    if args.algo.startswith("rejax-"):
        from benchmarks._common import REJAX_HINT, require

        require("rejax", REJAX_HINT)
    if len(args.seeds) != len(args.updates):
        p.error(f"--seeds and --updates need one value each per run, got {args.seeds} and {args.updates}")
    if min(args.seeds + args.updates) < 1:
        p.error("--seeds and --updates must be positive")
    machine = _common.machine_info(here=True)
    results, tables = [], []
    for seeds, updates in zip(args.seeds, args.updates):
        result, table = analyse(args.algo, seeds, updates, args.top, args.loops)
        results.append(result)
        tables.append(table)
    return _common.report("kernel_trace", args, machine, results, "\n\n".join(tables), _common.command_line())


def analyse(algo: str, seeds: int, updates: int, top_n: int, n_loops: int = 1) -> tuple[dict, str]:
    """One traced run: the results record and its tables."""
    train, roles = make_train(algo, updates)
    fn = jax.jit(jax.vmap(train)) if seeds > 1 else jax.jit(train)
    arg = jax.random.split(jax.random.PRNGKey(30), seeds) if seeds > 1 else jax.random.PRNGKey(30)
    compiled = fn.lower(arg).compile()
    hlo = Hlo(compiled.as_text())
    jax.block_until_ready(compiled(arg))
    start = time.perf_counter()
    jax.block_until_ready(compiled(arg))
    untraced_s = time.perf_counter() - start
    directory = tempfile.mkdtemp(prefix="kernel_trace_")
    try:
        traced_s, events = trace_events(compiled, arg, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    leaves = [e for e in events if hlo.opcode.get(e[1]) not in CONTROL]
    if not leaves:
        raise RuntimeError("the trace holds no XLA CPU thunks (is this the CPU backend?)")
    span_ns = max(s + d for _, _, s, d in events) - min(s for _, _, s, _ in events)
    kernel_ns = sum(d for *_, d in leaves)
    threads = collections.Counter()
    for thread, _, _, d in leaves:
        threads[thread] += d
    threads = collections.Counter({t: ns for t, ns in threads.items() if ns >= 1e6})  # threads that ran kernels

    by_loop, kernels_by_loop, per_kernel = collections.Counter(), {}, collections.Counter()
    for _, name, _, d in leaves:
        loop = (hlo.loops(name) or ["(top level)"])[0]
        by_loop[loop] += d
        kernels_by_loop.setdefault(loop, collections.Counter())[name] += 1
        per_kernel[name] += d

    def runs(loop: str) -> int:  # iterations run in all
        found = once_per_iteration(hlo, kernels_by_loop[loop], loop)
        return found[1] if found else min(kernels_by_loop[loop].values())

    # The training loop: the outermost loop that runs once per update. Roles are read off the
    # iteration counts only inside it; other loops (the init's) are "outside the updates".
    update_loops = [lp for lp in kernels_by_loop if lp != "(top level)" and not hlo.loops(lp) and runs(lp) == updates]
    loops = []
    for loop, ns in by_loop.most_common():
        iterations = runs(loop) / updates
        if ns < 0.005 * kernel_ns:
            continue
        inside = loop in update_loops or any(lp in update_loops for lp in hlo.loops(loop))
        role = (" / ".join(roles.get(round(iterations), [])) or "?") if inside else "outside the updates"
        sources = collections.Counter()
        for name, _n in kernels_by_loop[loop].items():
            scope = short_source(hlo.source.get(name, ""))
            scope = scope.split("/")[-2] if "/" in scope else scope
            if scope:
                sources[scope] += per_kernel[name]
        loops.append({
            "loop": loop, "role": role,
            "iterations_per_update": iterations,
            "kernels_per_iteration": sum(kernels_by_loop[loop].values()) / max(iterations * updates, 1),
            "share": ns / kernel_ns, "kernel_ms": ns / 1e6,
            "top_scopes": [s for s, _ in sources.most_common(3)],
        })

    if not loops:
        raise RuntimeError("no loop holds 0.5% of the kernel time")
    busiest = loops[0]["loop"]

    def top_kernels(entry: dict) -> list:
        iterations = max(entry["iterations_per_update"] * updates, 1)
        counts = collections.Counter({n: per_kernel[n] for n in kernels_by_loop[entry["loop"]]})
        return [{"kernel": name, "us_per_iteration": per_kernel[name] / iterations / 1e3,
                 "shape": hlo.shape.get(name, ""), "opcode": hlo.opcode.get(name, ""),
                 "source": short_source(hlo.source.get(name, ""))}
                for name, _ in counts.most_common(top_n)]

    top = top_kernels(loops[0])
    others = {x["loop"]: top_kernels(x) for x in loops[1:max(n_loops, 1)]}
    # One window per iteration of the busiest loop: between consecutive starts of a kernel of its body.
    found = once_per_iteration(hlo, kernels_by_loop[busiest], busiest)
    marker = found[0] if found else None
    by_start = sorted(leaves, key=lambda e: e[2])
    starts = [e[2] for e in by_start]
    marks = [e[2] for e in by_start if e[1] == marker]
    windows = list(zip(marks, marks[1:]))
    spans, sums, one_thread = [], [], []
    for lo, hi in windows:
        per_thread = collections.Counter()
        for t, _, _, d in by_start[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, hi)]:
            per_thread[t] += d
        spans.append((hi - lo) / 1e3)
        sums.append(sum(per_thread.values()) / 1e3)
        one_thread.append(max(per_thread.values(), default=0) / max(hi - lo, 1))
    step = {
        "loop": busiest, "iterations": len(windows),
        "median_span_us": statistics.median(spans) if spans else float("nan"),
        "median_kernel_us": statistics.median(sums) if sums else float("nan"),
        "median_busiest_thread_share": statistics.median(one_thread) if one_thread else float("nan"),
        "span_us_quartiles": statistics.quantiles(spans, n=4) if len(spans) > 1 else spans,
    }
    results = {
        "seeds": seeds, "updates": updates, "algo": algo,
        "untraced_s": untraced_s, "traced_s": traced_s, "thunks": len(leaves),
        "kernel_s": kernel_ns / 1e9, "span_s": span_ns / 1e9, "parallel_factor": kernel_ns / span_ns,
        "threads": {t: ns / 1e9 for t, ns in threads.most_common()},
        "loops": loops, "busiest_loop_top_kernels": top, "busiest_loop_iterations": step,
        "other_loops_top_kernels": others,
    }
    table = _common.markdown_table(
        ["loop", "role (by iterations)", "iterations / update", "kernels / iteration", "share of kernel time",
         "main sources"],
        [[x["loop"], x["role"], f"{x['iterations_per_update']:g}", f"{x['kernels_per_iteration']:.0f}",
          f"{x['share']:.1%}", ", ".join(x["top_scopes"])] for x in loops],
    )
    table += "\n\n" + _common.markdown_table(
        [f"top kernels of {busiest}", "us / iteration", "shape", "source"],
        [[x["kernel"], f"{x['us_per_iteration']:.1f}", x["shape"], x["source"]] for x in top],
    )
    for loop, kernels in others.items():
        table += "\n\n" + _common.markdown_table(
            [f"top kernels of {loop}", "us / iteration", "shape", "source"],
            [[x["kernel"], f"{x['us_per_iteration']:.1f}", x["shape"], x["source"]] for x in kernels],
        )
    table += (
        f"\n\n{algo}, {seeds} seed(s), {updates} updates: untraced {untraced_s:.3f} s, traced "
        f"{traced_s:.3f} s; {len(leaves)} thunks, kernel time {kernel_ns / 1e9:.3f} s over a {span_ns / 1e9:.3f} s "
        f"span (parallel factor {kernel_ns / span_ns:.2f}); busy per thread: "
        + ", ".join(f"{ns / 1e9:.3f} s" for _, ns in threads.most_common())
        + f"\n{busiest}, per iteration (median of {len(windows)}): span {step['median_span_us']:.0f} us, kernel "
        f"time {step['median_kernel_us']:.0f} us, busiest thread {step['median_busiest_thread_share']:.0%} of the span"
    )
    return results, table


if __name__ == "__main__":
    main()
