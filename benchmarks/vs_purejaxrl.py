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

PureJaxRL runs from `--purejaxrl-dir` (default `../shared/anchors/purejaxrl`,
beside the repository) with `--purejaxrl-python` (default
`/tmp/pjr_venv/bin/python`, the venv its README sets up). If either is
missing, only our side is timed and the script says why.

With `--rejax`, rejax 0.1.3's PPO (benchmarks/rejax_ppo.py, run with
`--rejax-python`, by default the PureJaxRL venv's interpreter) is timed in the
same rounds as a second anchor, and the table has a row per anchor.

With `--algo a2c`, our A2C (`algorithms.a2c`, its defaults apart from the
reference batch shape of 4 envs x 128 steps) runs against the PPO-shaped
baseline that fits it: PureJaxRL's ppo.py with 1 epoch x 1 minibatch
(benchmarks/purejaxrl_shaped.py), so that both sides take one gradient step on
the whole batch per update. The losses still differ (A2C's n-step returns and
plain policy gradient, PPO's GAE and clipped ratio), so this ratio says how
fast our A2C update is against the nearest anchor, not that the two learn alike.

With `--algo ppo-pendulum`, PPO trains Pendulum-v1 (continuous actions) on
both sides with `PENDULUM` below: 16 envs x 128 steps, 10 epochs x 32
minibatches, lr 3e-4, no entropy bonus, observation and reward normalisation
(CleanRL's continuous-action recipe with 16 envs instead of 1). PureJaxRL's
ppo.py is discrete-only and its continuous script is not in the anchor folder,
so the anchor is rejax (`--rejax --no-purejaxrl`).

Run: python -m benchmarks.vs_purejaxrl [--seeds 1,8,64] [--rounds 3] [--rejax] [--algo a2c|ppo-pendulum]
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

DEFAULT_ANCHOR = os.path.join(os.path.dirname(_common.REPO_ROOT), "shared", "anchors", "purejaxrl")
DEFAULT_PJR_PYTHON = "/tmp/pjr_venv/bin/python"
TARGETS = {1: 0.9, 8: 0.85, 64: 0.85}  # run-time ratio targets (issue #14); compile <= 1.0
LINE = re.compile(r"compile=([\d.]+)s run1=([\d.]+)s run2=([\d.]+)s mean_final_return=(-?[\d.]+|nan)")


# PPO on Pendulum-v1 for --algo ppo-pendulum; benchmarks/rejax_ppo.py's `pendulum` config is the same.
PENDULUM = dict(env_id="Pendulum-v1", num_envs=16, num_steps=128, update_epochs=10, num_minibatches=32,
                normalize_observations=True, normalize_rewards=True)
PENDULUM_HPARAMS = dict(lr=3e-4, ent_coef=0.0)


def child(num_seeds: int, total_steps: int, algo: str = "ppo") -> None:
    """Our side of one measurement, printed in the anchor's line format."""
    import numpy as np

    from jaxrl_rollout.algorithms import a2c, ppo

    if algo == "a2c":
        train = a2c.make_train(a2c.A2CConfig(num_envs=4, num_steps=128, total_timesteps=total_steps))
    elif algo == "ppo-pendulum":
        made = ppo.make_train(ppo.PPOConfig(total_timesteps=total_steps, **PENDULUM))
        hparams = ppo.PPOHParams(**PENDULUM_HPARAMS)
        train = lambda key: made(key, hparams)  # noqa: E731
    else:
        train = ppo.make_train(ppo.PPOConfig(total_timesteps=total_steps))
    compile_s, run1_s, run2_s, (_, metrics) = _common.anchor_protocol(train, num_seeds)
    final = float(np.nanmean(np.asarray(metrics.episode_return)[..., -10:]))
    print(_common.anchor_line(compile_s, run1_s, run2_s, final))


def measure(cmd: list[str], cwd: str, timeout: float, retries: int) -> dict:
    """Runs one timing process and parses its line.

    A process that outlives `timeout` is killed and run again, up to `retries`
    times: PureJaxRL's flax orthogonal init (LAPACK QR under vmap) can
    deadlock XLA's CPU pool on 2 cores (its README says so). The record counts
    the retries.
    """
    env = dict(os.environ, JAX_PLATFORMS="cpu")
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
    if not os.path.isfile(os.path.join(anchor_dir, "time_ppo.py")):
        return f"no PureJaxRL anchor at {anchor_dir} (time_ppo.py missing); pass --purejaxrl-dir"
    if not os.access(python, os.X_OK):
        return (f"no PureJaxRL interpreter at {python}; set up its venv as the anchor's README says, "
                "or pass --purejaxrl-python")
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


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=_common.int_list, default=[1, 8, 64], help="seed counts, one vmapped call each")
    p.add_argument("--rounds", type=rounds_arg, default="1:5,8:3,64:1",
                   help="alternated rounds: one int for every seed count, or SEEDS:ROUNDS pairs (default 1:5,8:3,64:1; "
                   "a 64-seed round takes about 20 min here)")
    p.add_argument("--no-purejaxrl", action="store_true", help="time our side only (e.g. with a short --total-steps)")
    p.add_argument("--rejax", action="store_true", help="also time rejax 0.1.3's PPO (benchmarks/rejax_ppo.py) "
                   "as a second anchor, in the same rounds")
    p.add_argument("--algo", choices=["ppo", "a2c", "ppo-pendulum"], default="ppo",
                   help="ppo: PPO against PureJaxRL's ppo.py (and rejax); a2c: our A2C against ppo.py with 1 epoch x "
                   "1 minibatch; ppo-pendulum: PPO on Pendulum-v1 against rejax (needs --rejax --no-purejaxrl)")
    p.add_argument("--total-steps", type=int, default=500_000, help="env steps per seed (ours; the anchor's is 5e5)")
    p.add_argument("--purejaxrl-dir", default=DEFAULT_ANCHOR)
    p.add_argument("--purejaxrl-python", default=DEFAULT_PJR_PYTHON)
    p.add_argument("--rejax-python", help="interpreter with rejax 0.1.3 (default: --purejaxrl-python)")
    p.add_argument("--timeout", type=float, help="seconds per timing process before it is killed and retried "
                   "(default 180 + 12 s per seed)")
    p.add_argument("--retries", type=int, default=2, help="reruns of a timed-out process")
    p.add_argument("--child", type=int, metavar="SEEDS", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        child(args.child, args.total_steps, args.algo)
        return {}
    if args.algo == "a2c" and args.rejax:
        p.error("--rejax times PPO only (rejax 0.1.3 has no A2C); leave it out with --algo a2c")
    if args.algo == "ppo-pendulum" and not (args.rejax and args.no_purejaxrl):
        p.error("--algo ppo-pendulum needs --rejax --no-purejaxrl: PureJaxRL's ppo.py has discrete actions only")

    import jax  # for the machine record only (version, backend); the timing runs in fresh processes

    del jax
    problems = {"purejaxrl": "--no-purejaxrl" if args.no_purejaxrl else anchor_problem(args.purejaxrl_dir,
                                                                                         args.purejaxrl_python)}
    rejax_python = args.rejax_python or args.purejaxrl_python
    if args.rejax:
        problems["rejax"] = rejax_problem(rejax_python)
    for name, problem in problems.items():
        if problem:
            print(f"{ANCHOR_NAMES[name]} skipped: {problem}.", file=sys.stderr)
    anchors = [name for name, problem in problems.items() if not problem]
    machine = _common.machine_info()
    commands = {
        "ours": lambda s: ([sys.executable, "-m", "benchmarks.vs_purejaxrl", "--child", str(s), "--total-steps",
                            str(args.total_steps), "--algo", args.algo], _common.REPO_ROOT),
        "purejaxrl": lambda s: (
            [args.purejaxrl_python, "time_ppo.py", str(s)] if args.algo == "ppo" else
            [args.purejaxrl_python, os.path.join(_common.REPO_ROOT, "benchmarks", "purejaxrl_shaped.py"), str(s), "1",
             "1"], args.purejaxrl_dir),
        "rejax": lambda s: ([rejax_python, os.path.join(_common.REPO_ROOT, "benchmarks", "rejax_ppo.py"), str(s),
                             "pendulum" if args.algo == "ppo-pendulum" else "cartpole"], _common.REPO_ROOT),
    }
    results, rows = [], []
    for seeds in args.seeds:
        sides = ["ours", *anchors]
        samples = {side: [] for side in sides}
        rounds = args.rounds.get(seeds, args.rounds.get(None, 1))
        for r in range(rounds):
            order = sides[r % len(sides):] + sides[:r % len(sides)]  # each side leads in turn
            for side in order:
                cmd, cwd = commands[side](seeds)
                timeout = args.timeout or 180.0 + 12.0 * seeds * args.total_steps / 500_000
                samples[side].append(measure(cmd, cwd, timeout, args.retries))
                x = samples[side][-1]
                print(f"seeds={seeds} round={r} {side}: compile {x['compile_s']:.2f} s, run2 {x['run2_s']:.3f} s, "
                      f"return {x['final_return']:.1f}", file=sys.stderr)
        result = {"seeds": seeds, "algo": args.algo, "samples": samples}
        med = lambda side, k: statistics.median(x[k] for x in samples[side])  # noqa: E731
        for anchor in anchors:
            run_ratios = [a["run2_s"] / b["run2_s"] for a, b in zip(samples["ours"], samples[anchor])]
            compile_ratios = [a["compile_s"] / b["compile_s"] for a, b in zip(samples["ours"], samples[anchor])]
            suffix = "" if anchor == "purejaxrl" else f"_{anchor}"
            result.update({f"run_ratio{suffix}": statistics.median(run_ratios), f"run_ratios{suffix}": run_ratios,
                           f"compile_ratio{suffix}": statistics.median(compile_ratios),
                           f"compile_ratios{suffix}": compile_ratios})
            target = TARGETS.get(seeds, 0.85)
            met = result[f"run_ratio{suffix}"] <= target and result[f"compile_ratio{suffix}"] <= 1.0
            anchor_name = "PureJaxRL ppo.py, 1 epoch x 1 minibatch" if args.algo == "a2c" else ANCHOR_NAMES[anchor]
            rows.append([seeds, anchor_name, rounds, f"{med('ours', 'run2_s'):.2f} s",
                         f"{med(anchor, 'run2_s'):.2f} s",
                         f"**{result[f'run_ratio{suffix}']:.3f}** ({min(run_ratios):.2f}-{max(run_ratios):.2f})",
                         f"{med('ours', 'compile_s'):.2f} s", f"{med(anchor, 'compile_s'):.2f} s",
                         f"**{result[f'compile_ratio{suffix}']:.3f}** "
                         f"({min(compile_ratios):.2f}-{max(compile_ratios):.2f})",
                         f"{med('ours', 'final_return'):.1f}", f"{med(anchor, 'final_return'):.1f}",
                         f"run <= {target}, compile <= 1.0: " + ("yes" if met else "no")])
        if not anchors:
            rows.append([seeds, "none", rounds, f"{med('ours', 'run2_s'):.2f} s", "n/a", "n/a",
                         f"{med('ours', 'compile_s'):.2f} s", "n/a", "n/a", f"{med('ours', 'final_return'):.1f}",
                         "n/a", "n/a"])
        results.append(result)
    table = _common.markdown_table(
        ["seeds", "anchor", "rounds", "run: ours", "run: anchor", "run ratio (range)", "compile: ours",
         "compile: anchor", "compile ratio (range)", "final return: ours", "final return: anchor", "target"],
        rows,
    )
    skipped = [f"{ANCHOR_NAMES[n]} skipped: {p}." for n, p in problems.items() if p]
    if skipped:
        table += "\n\n" + " ".join(skipped)
    return _common.report("vs_purejaxrl", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
