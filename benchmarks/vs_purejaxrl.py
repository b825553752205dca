"""PPO against PureJaxRL's single-file ppo.py: run and compile time, alternated, as ratios from one run.

Both sides train the reference CartPole-v1 config (4 envs x 128 steps, 5e5
steps, 4 epochs x 4 minibatches, CleanRL's hyperparameters) with the same
protocol as the anchor's `time_ppo.py`: `jax.jit(train)` (or
`jax.jit(jax.vmap(train))` for S seeds) on `PRNGKey(30)` (split S ways), then
`compile` = `.lower(args).compile()` (trace, lowering and XLA), `run1` and
`run2` = two calls of the compiled function, each blocked until ready. The
run time compared is run2 (caches warm on both sides).

Each measurement is a fresh process, and the sides alternate within a round
(order flipped every round), so load bursts hit both. Each ratio is the median
of the per-round ratios ours / PureJaxRL's; below 1 means we are faster.

PureJaxRL (https://github.com/luchris429/purejaxrl: its `ppo.py` unchanged,
with a timing script `time_ppo.py` beside it) runs from a checkout given by
`--purejaxrl-dir` (default: the `PUREJAXRL_DIR` environment variable) with
`--purejaxrl-python` (default `/tmp/pjr_venv/bin/python`: a venv with the same
jax, flax, optax and gymnax versions as ours, plus distrax). If either is
missing, only our side is timed and the script says why.

With `--rejax`, rejax 0.1.3's PPO (benchmarks/rejax_ppo.py, run with
`--rejax-python`, by default the PureJaxRL venv's interpreter) is timed in the
same rounds as a second anchor, and the table has a row per anchor.

`--algo` takes a comma-separated list, so that one run measures every
comparison of issue #14 (`--algo ppo,ppo-pendulum,a2c --rejax`, with
`--algo-seeds` giving an algorithm its own seed counts and rounds).

With `--algo a2c`, our A2C (`algorithms.a2c`, its defaults apart from the
reference batch shape of 4 envs x 128 steps) runs against the PPO-shaped
baseline that fits it: PureJaxRL's ppo.py with 1 epoch x 1 minibatch
(benchmarks/purejaxrl_shaped.py), so that both sides take one gradient step on
the whole batch per update. The losses still differ (A2C's n-step returns and
plain policy gradient, PPO's GAE and clipped ratio), so this ratio says how
fast our A2C update is against the nearest anchor, not that the two learn alike.

Our side runs twice where S > 1: as above on one CPU device ("ours", the
protocol's plain `jax.jit(jax.vmap(train))`), and with the host split into
`--host-devices` CPU devices (default: one per usable core) and the S keys
sharded over them with `devices.shard_runs` ("ours-cores"; what the
`jaxrl-rollout` command line does by default). Both are alternated with the
anchors in the same rounds, and each gets its row per anchor. The anchors run
their scripts unchanged, on one device. `--host-devices 1` leaves the second
side out.

With `--algo ppo-pendulum`, PPO trains Pendulum-v1 (continuous actions) on
both sides with `PENDULUM` below: 16 envs x 128 steps, 10 epochs x 32
minibatches, lr 3e-4, no entropy bonus, observation and reward normalisation
(CleanRL's continuous-action recipe with 16 envs instead of 1). PureJaxRL's
ppo.py is discrete-only and its continuous script is not in the anchor folder,
so its anchor is rejax, whatever the other flags say.

Run: python -m benchmarks.vs_purejaxrl [--seeds 1,8,64] [--rounds 3] [--rejax] [--algo ppo,ppo-pendulum,a2c]
         [--algo-seeds ppo-pendulum=1:5,8:1]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _common

DEFAULT_ANCHOR = os.environ.get("PUREJAXRL_DIR", "")
DEFAULT_PJR_PYTHON = "/tmp/pjr_venv/bin/python"
TARGETS = {1: 0.9, 8: 0.85, 64: 0.85}  # run-time ratio targets (issue #14); compile <= 1.0
LINE = re.compile(r"compile=([\d.]+)s run1=([\d.]+)s run2=([\d.]+)s mean_final_return=(-?[\d.]+|nan)")


# PPO on Pendulum-v1 for --algo ppo-pendulum; benchmarks/rejax_ppo.py's `pendulum` config is the same.
PENDULUM = dict(env_id="Pendulum-v1", num_envs=16, num_steps=128, update_epochs=10, num_minibatches=32,
                normalize_observations=True, normalize_rewards=True)
PENDULUM_HPARAMS = dict(lr=3e-4, ent_coef=0.0)


def make_train(algo: str, total_steps: int):
    """Our `train(key)` for `algo` ("ppo", "ppo-pendulum" or "a2c"), the config this benchmark compares."""
    from jaxrl_rollout.algorithms import a2c, ppo

    if algo == "a2c":
        return a2c.make_train(a2c.A2CConfig(num_envs=4, num_steps=128, total_timesteps=total_steps))
    if algo == "ppo-pendulum":
        made = ppo.make_train(ppo.PPOConfig(total_timesteps=total_steps, **PENDULUM))
        hparams = ppo.PPOHParams(**PENDULUM_HPARAMS)
        return lambda key: made(key, hparams)
    return ppo.make_train(ppo.PPOConfig(total_timesteps=total_steps))


def child(num_seeds: int, total_steps: int, algo: str = "ppo", host_devices: int = 1) -> None:
    """Our side of one measurement, printed in the anchor's line format.

    With `host_devices` > 1 the host's CPU is split into that many devices
    first and the seed keys are sharded over them.
    """
    import numpy as np

    from jaxrl_rollout import devices

    if host_devices > 1:
        devices.use_host_cores(host_devices)  # before anything below starts a backend
    train = make_train(algo, total_steps)
    place = devices.shard_runs if host_devices > 1 else None
    compile_s, run1_s, run2_s, (_, metrics) = _common.anchor_protocol(train, num_seeds, place)
    final = float(np.nanmean(np.asarray(metrics.episode_return)[..., -10:]))
    print(_common.anchor_line(compile_s, run1_s, run2_s, final))


def measure(cmd: list[str], cwd: str, timeout: float, retries: int) -> dict:
    """Runs one timing process and parses its line.

    A process that outlives `timeout` is killed and run again, up to `retries`
    times: PureJaxRL's flax orthogonal init (LAPACK QR under vmap) can
    deadlock XLA's CPU pool on 2 cores (its README says so). The record counts
    the retries.
    """
    env = _common.child_env()
    for attempt in range(retries + 1):
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            break
        except subprocess.TimeoutExpired:
            print(f"{' '.join(cmd)}: no result after {timeout:.0f} s (attempt {attempt + 1}), killed", file=sys.stderr)
    else:
        raise RuntimeError(f"{' '.join(cmd)} timed out {retries + 1} times")
    match = LINE.search(proc.stdout)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}")
    compile_s, run1, run2, final = match.groups()
    return {"compile_s": float(compile_s), "run1_s": float(run1), "run2_s": float(run2), "final_return": float(final),
            "loadavg": _common.loadavg(), "retries": attempt}


def rounds_arg(text: str) -> dict:
    """'3' -> {None: 3}; '1:5,8:3' -> {1: 5, 8: 3} (for argparse)."""
    if ":" not in text:
        return {None: int(text)}
    return {int(k): int(v) for k, v in (item.split(":") for item in text.split(",") if item)}


def anchor_problem(anchor_dir: str, python: str) -> str | None:
    """Why PureJaxRL cannot be timed here, or None."""
    if not anchor_dir:
        return "no PureJaxRL checkout given; pass --purejaxrl-dir DIR or set PUREJAXRL_DIR"
    if not os.path.isfile(os.path.join(anchor_dir, "time_ppo.py")):
        return f"no PureJaxRL anchor at {anchor_dir} (time_ppo.py missing); pass --purejaxrl-dir"
    if not os.access(python, os.X_OK):
        return (f"no PureJaxRL interpreter at {python}; set up its venv as the anchor's README says, "
                "or pass --purejaxrl-python")
    probe = subprocess.run([python, "-c", "import distrax, flax, optax, gymnax"], capture_output=True, text=True)
    if probe.returncode != 0:  # our side was timed, then the anchor's child failed on its imports
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"PureJaxRL's packages are not importable with {python} ({last}); set up its venv as its README says"
    return None


def rejax_problem(python: str) -> str | None:
    """Why rejax 0.1.3 cannot be timed with `python`, or None."""
    if not os.access(python, os.X_OK):
        return f"no interpreter at {python}; pass --rejax-python"
    probe = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('rejax'))"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"rejax is not installed for {python} (pip install rejax==0.1.3 pyyaml there)"
    if probe.stdout.strip() != "0.1.3":
        return f"{python} has rejax {probe.stdout.strip()}, not 0.1.3"
    return None


ANCHOR_NAMES = {"purejaxrl": "PureJaxRL", "rejax": "rejax"}
OURS = ("ours", "ours-cores")  # one CPU device; the host split into --host-devices devices
ALGOS = ("ppo", "ppo-pendulum", "a2c")


def anchors_for(algo: str, with_rejax: bool) -> list[str]:
    """The anchors an algorithm is timed against: PPO on CartPole against PureJaxRL (and rejax with
    --rejax), PPO on Pendulum against rejax (PureJaxRL's ppo.py is discrete-only), A2C against
    PureJaxRL's ppo.py with 1 epoch x 1 minibatch (rejax has no A2C)."""
    return {"ppo": ["purejaxrl"] + (["rejax"] if with_rejax else []), "ppo-pendulum": ["rejax"],
            "a2c": ["purejaxrl"]}[algo]


def algo_list(text: str) -> list[str]:
    """'ppo,a2c' -> ['ppo', 'a2c'] (for argparse)."""
    algos = [a for a in text.split(",") if a]
    bad = [a for a in algos if a not in ALGOS]
    if bad or not algos:
        raise argparse.ArgumentTypeError(f"algorithms must be a comma-separated list of {', '.join(ALGOS)}; "
                                         f"got {text!r}")
    return algos


def algo_seeds(text: str) -> tuple[str, list[tuple[int, int | None]]]:
    """'ppo-pendulum=1:5,8:1' -> ('ppo-pendulum', [(1, 5), (8, 1)]); a seed count without :ROUNDS
    takes --rounds' (for argparse)."""
    algo, sep, items = text.partition("=")
    try:
        if not sep or algo not in ALGOS:
            raise ValueError
        pairs = [item.split(":") for item in items.split(",") if item]
        parsed = [(int(p[0]), int(p[1]) if len(p) == 2 else None) for p in pairs if 1 <= len(p) <= 2]
        if not parsed or len(parsed) != len(pairs) or any(s < 1 or (r is not None and r < 1) for s, r in parsed):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ALGO=SEEDS[:ROUNDS],... with ALGO one of {', '.join(ALGOS)} "
                                         f"(e.g. ppo-pendulum=1:5,8:1); got {text!r}") from None
    return algo, parsed


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=_common.int_list, default=[1, 8, 64], help="seed counts, one vmapped call each")
    p.add_argument("--algo-seeds", type=algo_seeds, action="append", default=[], metavar="ALGO=SEEDS[:ROUNDS],...",
                   help="seed counts (and rounds) for one algorithm, in place of --seeds and --rounds "
                   "(e.g. ppo-pendulum=1:5,8:1); repeatable")
    p.add_argument("--rounds", type=rounds_arg, default="1:5,8:3,64:1",
                   help="alternated rounds: one int for every seed count, or SEEDS:ROUNDS pairs (default 1:5,8:3,64:1; "
                   "a 64-seed round of PPO takes about 15 min here, 23 with --rejax)")
    p.add_argument("--no-purejaxrl", action="store_true", help="time our side only (e.g. with a short --total-steps)")
    p.add_argument("--rejax", action="store_true", help="also time rejax 0.1.3's PPO (benchmarks/rejax_ppo.py) "
                   "as a second anchor for CartPole, in the same rounds")
    p.add_argument("--algo", type=algo_list, default=["ppo"], metavar="ALGOS",
                   help="comma-separated, run in this order: ppo (PPO on CartPole against PureJaxRL's ppo.py, and "
                   "rejax with --rejax), ppo-pendulum (PPO on Pendulum-v1 against rejax), a2c (our A2C against "
                   "ppo.py with 1 epoch x 1 minibatch)")
    p.add_argument("--total-steps", type=int, default=500_000, help="env steps per seed (ours; the anchor's is 5e5)")
    p.add_argument("--purejaxrl-dir", default=DEFAULT_ANCHOR)
    p.add_argument("--purejaxrl-python", default=DEFAULT_PJR_PYTHON)
    p.add_argument("--rejax-python", help="interpreter with rejax 0.1.3 (default: --purejaxrl-python)")
    p.add_argument("--timeout", type=float, help="seconds per timing process before it is killed and retried "
                   "(default 180 + 12 s per seed)")
    p.add_argument("--retries", type=int, default=2, help="reruns of a timed-out process")
    p.add_argument("--host-devices", type=int, default=None, metavar="N",
                   help="CPU devices for our second side (seeds sharded over them; default: one per usable core; "
                   "1: no second side)")
    p.add_argument("--child", type=int, metavar="SEEDS", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        if len(args.algo) != 1:
            p.error("--child times one algorithm")
        child(args.child, args.total_steps, args.algo[0], args.host_devices or 1)
        return {}
    if args.host_devices is not None and args.host_devices < 1:
        p.error(f"--host-devices must be >= 1, got {args.host_devices}")
    named = [a for a, _ in args.algo_seeds]
    unused = sorted(set(named) - set(args.algo))
    if unused:
        p.error(f"--algo-seeds names {', '.join(unused)}, which --algo does not run")
    repeated = sorted({a for a in named if named.count(a) > 1})
    if repeated:
        p.error(f"--algo-seeds gives {', '.join(repeated)} more than once; give each algorithm once")
    plan = {a: [(s, None) for s in args.seeds] for a in args.algo}  # algo -> [(seeds, rounds or None)]
    plan.update(dict(args.algo_seeds))

    import jax  # for the machine record only (version, backend); the timing runs in fresh processes

    del jax
    from jaxrl_rollout import devices

    host_devices = args.host_devices or devices.usable_cores()
    rejax_python = args.rejax_python or args.purejaxrl_python
    needed = {anchor for algo in args.algo for anchor in anchors_for(algo, args.rejax)}
    problems = {}
    if "purejaxrl" in needed:
        problems["purejaxrl"] = ("--no-purejaxrl" if args.no_purejaxrl
                                 else anchor_problem(args.purejaxrl_dir, args.purejaxrl_python))
    if "rejax" in needed:
        problems["rejax"] = rejax_problem(rejax_python)
    for name, problem in problems.items():
        if problem:
            print(f"{ANCHOR_NAMES[name]} skipped: {problem}.", file=sys.stderr)
    machine = _common.machine_info()

    def command(side: str, algo: str, seeds: int) -> tuple[list[str], str]:
        if side in OURS:
            return ([sys.executable, "-m", "benchmarks.vs_purejaxrl", "--child", str(seeds), "--total-steps",
                     str(args.total_steps), "--algo", algo,
                     "--host-devices", str(host_devices if side == "ours-cores" else 1)], _common.REPO_ROOT)
        if side == "rejax":
            return ([rejax_python, os.path.join(_common.REPO_ROOT, "benchmarks", "rejax_ppo.py"), str(seeds),
                     "pendulum" if algo == "ppo-pendulum" else "cartpole"], _common.REPO_ROOT)
        if algo == "a2c":
            return ([args.purejaxrl_python, os.path.join(_common.REPO_ROOT, "benchmarks", "purejaxrl_shaped.py"),
                     str(seeds), "1", "1"], args.purejaxrl_dir)
        return [args.purejaxrl_python, "time_ppo.py", str(seeds)], args.purejaxrl_dir

    results, rows = [], []
    for algo in args.algo:
        anchors = [a for a in anchors_for(algo, args.rejax) if not problems.get(a)]
        for seeds, rounds in plan[algo]:
            ours = ["ours"] + (["ours-cores"] if seeds > 1 and host_devices > 1 else [])
            sides = [*ours, *anchors]
            samples = {side: [] for side in sides}
            rounds = rounds or args.rounds.get(seeds, args.rounds.get(None, 1))
            for r in range(rounds):
                order = sides[r % len(sides):] + sides[:r % len(sides)]  # each side leads in turn
                for side in order:
                    cmd, cwd = command(side, algo, seeds)
                    timeout = args.timeout or 180.0 + 12.0 * seeds * args.total_steps / 500_000
                    samples[side].append(measure(cmd, cwd, timeout, args.retries))
                    x = samples[side][-1]
                    print(f"{algo} seeds={seeds} round={r} {side}: compile {x['compile_s']:.2f} s, "
                          f"run2 {x['run2_s']:.3f} s, return {x['final_return']:.1f}", file=sys.stderr)
            result = {"seeds": seeds, "algo": algo, "samples": samples}
            med = lambda side, k: statistics.median(x[k] for x in samples[side])  # noqa: E731
            layout = {"ours": "1 device", "ours-cores": f"{host_devices} host devices"}
            for our, anchor in [(o, a) for a in anchors for o in ours]:
                run_ratios = [a["run2_s"] / b["run2_s"] for a, b in zip(samples[our], samples[anchor])]
                compile_ratios = [a["compile_s"] / b["compile_s"] for a, b in zip(samples[our], samples[anchor])]
                # "ours" keeps the keys of earlier records; "ours-cores" adds _cores.
                suffix = ("" if our == "ours" else "_cores") + ("" if anchor == "purejaxrl" else f"_{anchor}")
                result.update({f"run_ratio{suffix}": statistics.median(run_ratios), f"run_ratios{suffix}": run_ratios,
                               f"compile_ratio{suffix}": statistics.median(compile_ratios),
                               f"compile_ratios{suffix}": compile_ratios})
                target = TARGETS.get(seeds, 0.85)
                met = result[f"run_ratio{suffix}"] <= target and result[f"compile_ratio{suffix}"] <= 1.0
                anchor_name = "PureJaxRL ppo.py, 1 epoch x 1 minibatch" if algo == "a2c" else ANCHOR_NAMES[anchor]
                rows.append([algo, seeds, layout[our], anchor_name, rounds, f"{med(our, 'run2_s'):.2f} s",
                             f"{med(anchor, 'run2_s'):.2f} s",
                             f"**{result[f'run_ratio{suffix}']:.3f}** ({min(run_ratios):.2f}-{max(run_ratios):.2f})",
                             f"{med(our, 'compile_s'):.2f} s", f"{med(anchor, 'compile_s'):.2f} s",
                             f"**{result[f'compile_ratio{suffix}']:.3f}** "
                             f"({min(compile_ratios):.2f}-{max(compile_ratios):.2f})",
                             f"{med(our, 'final_return'):.1f}", f"{med(anchor, 'final_return'):.1f}",
                             f"run <= {target}, compile <= 1.0: " + ("yes" if met else "no")])
            if not anchors:
                for our in ours:
                    rows.append([algo, seeds, layout[our], "none", rounds, f"{med(our, 'run2_s'):.2f} s", "n/a",
                                 "n/a", f"{med(our, 'compile_s'):.2f} s", "n/a", "n/a",
                                 f"{med(our, 'final_return'):.1f}", "n/a", "n/a"])
            results.append(result)
    table = _common.markdown_table(
        ["algorithm", "seeds", "ours on", "anchor", "rounds", "run: ours", "run: anchor", "run ratio (range)", "compile: ours",
         "compile: anchor", "compile ratio (range)", "final return: ours", "final return: anchor", "target"],
        rows,
    )
    skipped = [f"{ANCHOR_NAMES[n]} skipped: {p}." for n, p in problems.items() if p]
    if skipped:
        table += "\n\n" + " ".join(skipped)
    return _common.report("vs_purejaxrl", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
