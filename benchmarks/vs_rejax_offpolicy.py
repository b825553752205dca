"""DQN, PQN, SAC and TD3 against rejax 0.1.3's: run and compile time, alternated, as ratios from one run.

Both sides train the config `benchmarks.rejax_offpolicy.SPECS` gives each
algorithm, with the protocol of `vs_purejaxrl` (PureJaxRL's `time_ppo.py`):
`jax.jit(train)` on `PRNGKey(30)` (or `jax.jit(jax.vmap(train))` on its split
into S keys), compile = `.lower(args).compile()`, then two calls of the
compiled function, each blocked until ready; run = the second call. Each
measurement is a fresh process; ours and rejax's alternate within a round
(who goes first flips every round), so load bursts hit both. Each ratio is
the median of the per-round ratios ours / rejax's (below 1: we are faster).
Each process also reports the CPU seconds (user + system) of its compile and
of run 2, and the table gives their ratios too: on a shared host these move
far less with other work than wall time does. The targets are on wall time.
Python's garbage collector is timed within each compile as well
(`rejax_offpolicy.timed`): the table gives the compile ratio less the
collector's seconds and how many full collections fell inside the compiles
on each side, since one full collection (~130 ms on a 2-core host) lands in
one side's compile or the other's by the allocation history of its process.
rejax runs `benchmarks/rejax_offpolicy.py` with `--rejax-python` (default
`/tmp/rejax_venv/bin/python`, a venv with `rejax==0.1.3`; its jax, flax,
optax and gymnax are the versions ours has).

What is matched (rejax option = ours):
- env: CartPole-v1 (DQN, PQN), Pendulum-v1 (SAC, TD3), gymnax's, on both;
  rejax steps it through `rejax_ppo.FiveValueStep` (done = terminated |
  truncated). Ours uses `bootstrap="done"` (DQN, SAC, TD3) and
  `bootstrap_on_truncation=False` (PQN), so a time limit stops the bootstrap
  on both sides, as in rejax.
- networks: hidden (64, 64) ReLU everywhere (rejax fixes DQN's, PQN's and
  TD3's at (64, 64); SAC's `hidden_layer_sizes` is set); PQN's Dense ->
  LayerNorm -> ReLU on both; twin critics for SAC and TD3.
- steps, envs, update ratio: the same total env steps and `num_envs`. DQN: 10
  envs, one gradient step per vector step (rejax `num_epochs=1`, ours
  `train_frequency=1`), i.e. CleanRL's 1 per 10 env steps; hard target copy
  every 500 env steps (rejax `polyak=0, target_update_freq=500`, ours `tau=1,
  target_network_frequency=50` iterations). PQN: 32 envs x 64 steps, 4
  epochs x 16 minibatches. SAC: 1 env, one critic, one actor and one
  temperature step per env step (rejax `num_epochs=1`, ours
  `policy_frequency=1`), Polyak 0.005 every step. TD3: 1 env, a critic step
  per env step, an actor step and Polyak 0.005 of both targets every 2 (rejax
  `policy_delay=2`, ours `policy_frequency=2`).
- replay: the same `buffer_size` and `batch_size`; learning (and, for SAC
  and TD3, uniform random actions) starts after the same number of env steps
  (rejax `fill_buffer`, ours `learning_starts` in iterations).
- hyperparameters: learning rates (SAC: one rate for actor, critics and
  temperature, rejax has one), gamma, epsilon schedules (DQN 1 -> 0.05 over
  half the run, PQN over a fifth), PQN's lambda 0.95, TD3's noises in action
  units (ours are in units of the squashed action: half of rejax's on
  Pendulum, whose scale is 2), target entropy -A. PQN: constant learning
  rate and Adam on both (ours `anneal_lr=False, optimizer="adam"`), reward
  scale 1 (rejax has none).
- evaluation: off on rejax's side (no initial evaluation, one empty
  callback); ours has none inside `train`.

What differs and stays (the semantics of each library, not options):
- replay sampling: rejax draws a batch without replacement with
  `jax.random.choice(p=...)` over the whole capacity (a Gumbel top-k over
  `buffer_size` entries per gradient step); ours is flashbax's uniform
  sampling with replacement over the stored entries. rejax's cost grows with
  `buffer_size`, ours does not, so the DQN, SAC and TD3 ratios depend on it.
- next observations: ours stores the true final observation where an episode
  ended (docs/semantics.md §4), rejax the reset one (its mask is 0 there, so
  the targets agree with `bootstrap="done"`).
- losses: rejax uses `optax.l2_loss` (0.5 x squared error), ours CleanRL's
  MSE for DQN and the critics (PQN: 0.5 x on both); Adam normalises the scale
  away but not bit for bit.
- optimiser: rejax chains `optax.clip(max_grad_norm)` (element-wise, inf =
  none, for DQN, SAC, TD3) before `optax.adam`; ours is torch's Adam. PQN:
  rejax clips each element at 10, ours the global norm at 10.
- acting before learning starts: rejax's DQN acts uniformly at random until
  `fill_buffer`, ours epsilon-greedily from the start (1.0 decaying).
- SAC: rejax takes the actor step before the critic step on the same batch
  and reuses the actor step's log-probabilities for the temperature; ours
  takes the critic step first and draws a fresh actor sample for the
  temperature (CleanRL's order: one more actor forward pass per step). rejax
  bounds log_std by clipping to [-10, 2], ours by tanh to [-5, 2]; rejax's
  temperature loss is -alpha (log pi + H), ours CleanRL's.
- DQN/PQN epsilon-greedy: rejax draws through distrax's `EpsilonGreedy`,
  ours with two uniform draws.
- outputs: ours returns per-update metrics with the train state, rejax the
  train state only.

At more than one seed our side is also measured with the host's CPU split
into `--host-devices` JAX devices (default: one per usable core) and the S
seed keys sharded over them ("ours-cores", `devices.shard_runs`): the layout
the command line trains its runs in by default. rejax runs as its users run
it, `jax.jit(jax.vmap(train))` on one device. `--host-devices 1` leaves the
second layout out.

`--memory` instead bisects, for each side, the most vmapped seeds whose
compiled program fits `--budget-gib` (`rejax_offpolicy.max_seeds`: XLA's
memory analysis of the whole train program plus the process's resident set,
compile only), with the full configs, doubling from `--memory-start` seeds
and bisecting to `--memory-precision`.

Run: python -m benchmarks.vs_rejax_offpolicy [--algo dqn,pqn,sac,td3] [--seeds 1,8] [--rounds 3] [--host-devices N]
         [--total-steps sac=5000] [--json PATH]
     python -m benchmarks.vs_rejax_offpolicy --memory [--budget-gib 8] [--memory-start 256]
         [--memory-precision 0.02]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _common
from benchmarks.rejax_offpolicy import SPECS, timed
from benchmarks.vs_purejaxrl import LINE, rejax_problem

CPU = re.compile(r"cpu_compile=([\d.]+)s cpu_run2=([\d.]+)s")
GC = re.compile(r"gc_compile=([\d.]+)s gc_full_compile=(\d+)")

DEFAULT_REJAX_PYTHON = "/tmp/rejax_venv/bin/python"
RUN_TARGET, COMPILE_TARGET = 0.8, 1.0  # issue #27 item 6
ALGOS = tuple(SPECS)
OURS = ("ours", "ours-cores")  # one CPU device; the host split into --host-devices devices, the seeds sharded


def make_train(algo: str, total_steps: int | None = None):
    """Our `train(key)` for `algo` on `SPECS[algo]` (with `total_steps` in place of the spec's, if given)."""
    from jaxrl_rollout.algorithms import dqn, pqn, sac, td3

    s = SPECS[algo]
    steps = total_steps or s["total_steps"]
    n = s["num_envs"]
    if algo == "dqn":
        config = dqn.DQNConfig(
            env_id=s["env"], total_timesteps=steps, num_envs=n, buffer_size=s["buffer_size"],
            batch_size=s["batch_size"], learning_starts=s["learning_starts"] // n, train_frequency=1,
            target_network_frequency=s["target_every"] // n, hidden_sizes=s["hidden"], bootstrap="done")
        hparams = dqn.DQNHParams(lr=s["lr"], gamma=s["gamma"], tau=1.0, start_e=s["eps_start"], end_e=s["eps_end"],
                                 exploration_fraction=s["exploration_fraction"])
        made = dqn.make_train(config)
    elif algo == "pqn":
        config = pqn.PQNConfig(
            env_id=s["env"], num_envs=n, num_steps=s["num_steps"], total_timesteps=steps,
            update_epochs=s["num_epochs"], num_minibatches=s["num_minibatches"], hidden_sizes=s["hidden"],
            bootstrap_on_truncation=False, anneal_lr=False, optimizer="adam")
        hparams = pqn.PQNHParams(lr=s["lr"], gamma=s["gamma"], q_lambda=s["td_lambda"],
                                 max_grad_norm=s["max_grad_norm"], reward_scale=1.0, epsilon_start=s["eps_start"],
                                 epsilon_finish=s["eps_end"], epsilon_decay=s["exploration_fraction"])
        made = pqn.make_train(config)
    elif algo == "sac":
        config = sac.SACConfig(
            env_id=s["env"], total_timesteps=steps, num_envs=n, buffer_size=s["buffer_size"],
            batch_size=s["batch_size"], learning_starts=s["learning_starts"] // n, policy_frequency=1,
            target_network_frequency=1, hidden_sizes=s["hidden"], bootstrap="done")
        hparams = sac.SACHParams(policy_lr=s["lr"], q_lr=s["lr"], gamma=s["gamma"], tau=s["tau"])
        made = sac.make_train(config)
    else:
        config = td3.TD3Config(
            env_id=s["env"], total_timesteps=steps, num_envs=n, buffer_size=s["buffer_size"],
            batch_size=s["batch_size"], learning_starts=s["learning_starts"] // n,
            policy_frequency=s["policy_delay"], hidden_sizes=s["hidden"], bootstrap="done")
        made = td3.make_train(config)
        scale = 2.0  # Pendulum's action scale: ours takes the noises in units of the squashed action
        hparams = td3.TD3HParams(lr=s["lr"], gamma=s["gamma"], tau=s["tau"], policy_noise=s["target_noise"] / scale,
                                 exploration_noise=s["exploration_noise"] / scale,
                                 noise_clip=s["target_noise_clip"] / scale)
    return lambda key: made(key, hparams)


def child(algo: str, seeds: int, total_steps: int | None, host_devices: int = 1) -> None:
    """Our side of one measurement, printed as rejax's side prints it (`rejax_offpolicy.timed`).

    With `host_devices` > 1 the host's CPU is first split into that many JAX
    devices and the seed keys are sharded over them (`devices.shard_runs`),
    as the command line lays out its runs by default.
    """
    from jaxrl_rollout import devices

    if host_devices > 1:
        devices.use_host_cores(host_devices)  # before anything below starts a backend
    print(timed(make_train(algo, total_steps), seeds, devices.shard_runs if host_devices > 1 else None))


def measure_cpu(cmd: list[str], timeout: float) -> dict:
    """`vs_purejaxrl.measure` (wall seconds) plus the CPU seconds of the compile and of run 2."""
    env = _common.child_env()
    proc = subprocess.run(cmd, cwd=_common.REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    match, cpu = LINE.search(proc.stdout), CPU.search(proc.stdout)
    if proc.returncode != 0 or match is None or cpu is None:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}")
    compile_s, run1, run2, _ = match.groups()
    record = {"compile_s": float(compile_s), "run1_s": float(run1), "run2_s": float(run2),
              "cpu_compile_s": float(cpu.group(1)), "cpu_run2_s": float(cpu.group(2)), "loadavg": _common.loadavg()}
    collector = GC.search(proc.stdout)  # absent from a side whose `timed` predates it
    if collector is not None:
        record.update(gc_compile_s=float(collector.group(1)), gc_full_compile=int(collector.group(2)),
                      compile_less_gc_s=float(compile_s) - float(collector.group(1)))
    return record


def alternated_samples(command, sides: list[str], rounds: int, timeout: float, label: str) -> dict:
    """{side: [measure_cpu record per round]}: each side's `command(side)` in fresh processes, alternated.

    Within a round the sides run one after the other, and who goes first flips every round, so load bursts
    hit both. Each measurement is printed to stderr after `label`.
    """
    samples = {side: [] for side in sides}
    for r in range(rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            samples[side].append(measure_cpu(command(side), timeout))
            x = samples[side][-1]
            print(f"{label} round={r} {side}: compile {x['compile_s']:.2f} s, run1 "
                  f"{x['run1_s']:.3f} s, run2 {x['run2_s']:.3f} s (cpu: compile {x['cpu_compile_s']:.2f} s, run2 "
                  f"{x['cpu_run2_s']:.2f} s)"
                  + (f", GC in compile {x['gc_compile_s']:.3f} s ({x['gc_full_compile']} full)"
                     if "gc_compile_s" in x else "")
                  + f", load {x['loadavg']}", file=sys.stderr)
    return samples


def round_ratios(samples: dict, side: str, other: str, key: str) -> list[float]:
    """Per-round ratios side / other of one measured quantity (`run2_s`, `compile_s`, `cpu_run2_s`, ...)."""
    return [a[key] / b[key] for a, b in zip(samples[side], samples[other])]


def steps_arg(text: str) -> dict:
    """'sac=5000,td3=5000' -> {'sac': 5000, 'td3': 5000} (for argparse)."""
    out = {}
    for item in (i for i in text.split(",") if i):
        algo, _, steps = item.partition("=")
        if algo not in ALGOS or not steps.isdigit():
            raise argparse.ArgumentTypeError(f"expected ALGO=STEPS,... with ALGO one of {', '.join(ALGOS)}; got {text!r}")
        out[algo] = int(steps)
    return out


def memory(args, rejax_python: str | None, machine: dict) -> dict:
    """The most seeds of each learner in --budget-gib, both sides (compile only)."""
    env = _common.child_env()
    results, rows = [], []
    for algo in args.algo:
        record = {"algo": algo}
        search = [str(args.memory_start), str(args.memory_precision)]
        cmds = {"ours": [sys.executable, "-m", "benchmarks.vs_rejax_offpolicy", "--memory-child", algo,
                         "--budget-gib", str(args.budget_gib), "--memory-start", search[0],
                         "--memory-precision", search[1]]}
        if rejax_python:
            cmds["rejax"] = [rejax_python, os.path.join(_common.REPO_ROOT, "benchmarks", "rejax_offpolicy.py"), algo,
                             "--memory", str(args.budget_gib), *search]
        for side, cmd in cmds.items():
            out = subprocess.run(cmd, cwd=_common.REPO_ROOT, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
            record[side] = json.loads(out.stdout.strip().splitlines()[-1])
            r = record[side]
            print(f"{algo} {side}: {r['max_seeds']} seeds", file=sys.stderr)
        results.append(record)
        row = [algo]
        for side in ("ours", "rejax"):
            r = record.get(side)
            row += ([f"**{r['max_seeds']}**", _common.fmt_bytes(r["per_seed_total_bytes"])] if r else ["n/a", "n/a"])
        rows.append(row + [_common.fmt_bytes(record["ours"]["process_rss_bytes"])])
    table = _common.markdown_table(
        ["algorithm", f"ours: seeds in {args.budget_gib:g} GiB", "ours: program at 1 seed",
         f"rejax: seeds in {args.budget_gib:g} GiB", "rejax: program at 1 seed", "our process RSS (1 seed)"], rows)
    return _common.report("vs_rejax_offpolicy_memory", args, machine, results, table, _common.command_line())


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--algo", type=lambda t: [a for a in t.split(",") if a], default=list(ALGOS),
                   help=f"comma-separated, run in this order (of {', '.join(ALGOS)})")
    p.add_argument("--seeds", type=_common.int_list, default=[1, 8], help="seed counts, one vmapped call each")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds per algorithm and seed count")
    p.add_argument("--total-steps", type=steps_arg, default={}, metavar="ALGO=STEPS,...",
                   help="env steps in place of SPECS' for an algorithm (both sides)")
    p.add_argument("--rejax-python", default=DEFAULT_REJAX_PYTHON)
    p.add_argument("--host-devices", type=int, default=None, metavar="N",
                   help="CPU devices of our second side at more than one seed, the seeds sharded over them as the "
                        "command line does (default: one per usable core with --platform cpu, else 1; 1: that "
                        "side is left out)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per timing process before it fails")
    p.add_argument("--memory", action="store_true", help="bisect the seeds that fit --budget-gib instead of timing")
    p.add_argument("--budget-gib", type=float, default=8.0)
    p.add_argument("--memory-start", type=int, default=256, help="--memory: seeds of the first probe after one")
    p.add_argument("--memory-precision", type=float, default=0.02,
                   help="--memory: stop bisecting when the bracket is this fraction of the seeds that fit")
    p.add_argument("--child", type=int, metavar="SEEDS", help=argparse.SUPPRESS)
    p.add_argument("--memory-child", metavar="ALGO", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_start < 2 or not 0 < args.memory_precision < 1:
        p.error(f"--memory-start must be >= 2 and --memory-precision in (0, 1); got {args.memory_start} and "
                f"{args.memory_precision}")
    bad = [a for a in args.algo if a not in ALGOS]
    if bad:
        p.error(f"--algo: unknown {', '.join(bad)}; choose from {', '.join(ALGOS)}")
    if args.child is not None:
        if len(args.algo) != 1:
            p.error("--child times one algorithm")
        child(args.algo[0], args.child, args.total_steps.get(args.algo[0]), args.host_devices or 1)
        return {}
    if args.memory_child:
        from benchmarks.rejax_offpolicy import max_seeds

        record = max_seeds(make_train(args.memory_child), args.budget_gib * 1024**3, args.memory_start,
                           args.memory_precision)
        print(json.dumps(dict(record, side="ours", algo=args.memory_child)))
        return record

    import jax  # for the machine record only; the timing runs in fresh processes

    from jaxrl_rollout import devices

    del jax
    if args.host_devices is not None and args.host_devices < 1:
        p.error(f"--host-devices must be >= 1, got {args.host_devices}")
    # the host's cores as devices is a CPU layout: on an accelerator our second side would repeat the first
    host_devices = args.host_devices or (devices.usable_cores() if args.platform == "cpu" else 1)
    problem = rejax_problem(args.rejax_python)
    if problem:
        print(f"rejax skipped: {problem}.", file=sys.stderr)
    machine = _common.machine_info()
    if args.memory:
        return memory(args, None if problem else args.rejax_python, machine)

    def command(side: str, algo: str, seeds: int) -> list[str]:
        steps = args.total_steps.get(algo)
        if side in OURS:
            return [sys.executable, "-m", "benchmarks.vs_rejax_offpolicy", "--child", str(seeds), "--algo", algo,
                    "--host-devices", str(host_devices if side == "ours-cores" else 1)] + (
                ["--total-steps", f"{algo}={steps}"] if steps else [])
        return [args.rejax_python, os.path.join(_common.REPO_ROOT, "benchmarks", "rejax_offpolicy.py"), algo,
                str(seeds)] + ([str(steps)] if steps else [])

    layout = {"ours": "1 device", "ours-cores": f"{host_devices} host devices"}
    results, rows = [], []
    for algo in args.algo:
        for seeds in args.seeds:
            ours = ["ours"] + (["ours-cores"] if seeds > 1 and host_devices > 1 else [])
            sides = ours + ([] if problem else ["rejax"])
            samples = alternated_samples(lambda side: command(side, algo, seeds), sides, args.rounds, args.timeout,
                                         f"{algo} seeds={seeds}")
            steps = args.total_steps.get(algo) or SPECS[algo]["total_steps"]
            result = {"algo": algo, "seeds": seeds, "total_steps": steps, "samples": samples,
                      "layouts": {our: layout[our] for our in ours}}
            med = lambda side, k: statistics.median(x[k] for x in samples[side])  # noqa: E731
            for our in ours:
                head = [algo, seeds, layout[our], f"{steps:,}", args.rounds, f"{med(our, 'run2_s'):.2f} s"]
                if "rejax" not in samples:
                    rows.append(head + ["n/a", "n/a", f"{med(our, 'compile_s'):.2f} s"] + ["n/a"] * 7)
                    continue
                run, comp, cpu_run, cpu_comp = (round_ratios(samples, our, "rejax", k)
                                                for k in ("run2_s", "compile_s", "cpu_run2_s", "cpu_compile_s"))
                ratios = dict(run_ratio=statistics.median(run), run_ratios=run,
                              compile_ratio=statistics.median(comp), compile_ratios=comp,
                              cpu_run_ratio=statistics.median(cpu_run), cpu_run_ratios=cpu_run,
                              cpu_compile_ratio=statistics.median(cpu_comp), cpu_compile_ratios=cpu_comp)
                # one device's ratios at the top level, as the records before --host-devices; the layouts' under theirs
                result.update(ratios) if our == "ours" else result.setdefault("by_layout", {}).update({our: ratios})
                met = ratios["run_ratio"] <= RUN_TARGET and ratios["compile_ratio"] <= COMPILE_TARGET
                if all("compile_less_gc_s" in x for side in (our, "rejax") for x in samples[side]):
                    less_gc = round_ratios(samples, our, "rejax", "compile_less_gc_s")
                    ratios.update(compile_less_gc_ratio=statistics.median(less_gc), compile_less_gc_ratios=less_gc)
                    less_gc_cell = f"{ratios['compile_less_gc_ratio']:.3f} ({min(less_gc):.2f}-{max(less_gc):.2f})"
                    full = lambda side: sum(x["gc_full_compile"] for x in samples[side])  # noqa: E731
                    full_cell = f"{full(our)} / {full('rejax')}"
                else:
                    less_gc_cell = full_cell = "n/a"
                rows.append(head + [f"{med('rejax', 'run2_s'):.2f} s",
                                    f"**{ratios['run_ratio']:.3f}** ({min(run):.2f}-{max(run):.2f})",
                                    f"{med(our, 'compile_s'):.2f} s", f"{med('rejax', 'compile_s'):.2f} s",
                                    f"**{ratios['compile_ratio']:.3f}** ({min(comp):.2f}-{max(comp):.2f})",
                                    f"{ratios['cpu_run_ratio']:.3f}", f"{ratios['cpu_compile_ratio']:.3f}",
                                    less_gc_cell, full_cell, "yes" if met else "no"])
            results.append(result)
    table = _common.markdown_table(
        ["algorithm", "seeds", "ours on", "env steps", "rounds", "run: ours", "run: rejax", "run ratio (range)",
         "compile: ours",
         "compile: rejax", "compile ratio (range)", "CPU-time run ratio", "CPU-time compile ratio",
         "compile less GC: ratio (range)", "full GCs in compile: ours / rejax",
         f"run <= {RUN_TARGET}, compile <= {COMPILE_TARGET}"], rows)
    if problem:
        table += f"\n\nrejax skipped: {problem}."
    return _common.report("vs_rejax_offpolicy", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
