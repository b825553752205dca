"""PQN on CartPole-v1 against purejaxql's `pqn_gymnax.py`: run and compile time, alternated, as ratios from one run.

purejaxql (github.com/mttga/purejaxql) is PQN's reference code and is not a
package: pass its `purejaxql/pqn_gymnax.py` with `--purejaxql-file` (a
checkout's file; nothing of it is in this repository). Its side runs in this
process's Python (the same jax, flax, optax and gymnax as ours); three shims
let its code, written for gymnax before 1.0 and jax before 0.6, run on
today's and without its experiment tooling: its env (gymnax's `LogWrapper`
around `FlattenObservationWrapper`) steps through `rejax_ppo.FiveValueStep`,
which folds gymnax 1.0's `terminated | truncated` into the one `done` its code
unpacks (as rejax's side of `vs_rejax_offpolicy` does); `jax.tree_map`
(removed in jax 0.6) is set to `jax.tree.map` when missing; and the modules
it imports only for its command line and logging (`hydra`, `omegaconf`,
`wandb`) are stubbed when not installed (with `WANDB_MODE` "disabled" its
train never calls them).

Both sides train purejaxql's own CartPole config (`purejaxql/config/alg/
pqn_cartpole.yaml`, which our `PQNConfig` / `PQNHParams` defaults follow):
32 envs x 64 steps, 4 epochs x 16 minibatches, two hidden layers of 256 with
LayerNorm and ReLU, RAdam at 1e-4 decayed linearly over the run, the global
gradient norm clipped at 10, epsilon 1 -> 0.2 over a fifth of the run, reward
scale 0.1, gamma 0.99, lambda 0.95, and the same total env steps (default
500,000, the config's; 244 updates). Ours uses `bootstrap_on_truncation=False`
(purejaxql's `done` ends the bootstrap at a time limit too). purejaxql's
in-training test episodes (`TEST_DURING_TRAINING`) are off (ours has none
inside `train`), and so is its wandb logging.

What differs and stays (each library's semantics, not options): purejaxql's
network also runs a BatchNorm over the input whose output it drops (its
statistics are still updated in every minibatch step); its optimiser is
optax's `radam`, ours torch's RAdam; its epsilon-greedy draws a split, a
uniform and a randint per env, ours one uniform draw of [2, B]
(`_common.epsilon_draws`); its outputs are per-update metrics averaged over
every env step, ours per-update episode metrics.

The protocol is `vs_rejax_offpolicy`'s: `jax.jit(train)` on `PRNGKey(30)` (or
`jax.jit(jax.vmap(train))` on its split into S keys), compile =
`.lower(args).compile()`, then two blocked calls, run = the second; each
measurement a fresh process, the sides alternating within a round (who goes
first flips every round); each ratio is the median of the per-round ratios
ours / purejaxql's, with the CPU-second ratios beside them.

Run: python -m benchmarks.vs_purejaxql_pqn --purejaxql-file PATH [--seeds 1,8] [--rounds 3]
         [--total-steps 500000] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import types

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _common
from benchmarks.rejax_offpolicy import timed
from benchmarks.vs_rejax_offpolicy import COMPILE_TARGET, RUN_TARGET, alternated_samples, round_ratios

DEFAULT_FILE = "/tmp/purejaxql/purejaxql/pqn_gymnax.py"
TOTAL_STEPS = 500_000

# purejaxql/config/alg/pqn_cartpole.yaml, with its test episodes and logging off (see the module docstring)
PUREJAXQL_CONFIG = dict(
    ALG_NAME="pqn", NUM_ENVS=32, NUM_STEPS=64, EPS_START=1.0, EPS_FINISH=0.2, EPS_DECAY=0.2, NUM_MINIBATCHES=16,
    NUM_EPOCHS=4, NORM_INPUT=False, HIDDEN_SIZE=256, NUM_LAYERS=2, NORM_TYPE="layer_norm", LR=1e-4,
    MAX_GRAD_NORM=10, LR_LINEAR_DECAY=True, REW_SCALE=0.1, GAMMA=0.99, LAMBDA=0.95, ENV_NAME="CartPole-v1",
    ENV_KWARGS={}, TEST_DURING_TRAINING=False, WANDB_MODE="disabled")


def purejaxql_problem(path: str) -> str | None:
    """Why purejaxql's side cannot run from `path`, or None."""
    if not os.path.isfile(path):
        return f"no file at --purejaxql-file {path} (a checkout's purejaxql/pqn_gymnax.py)"
    with open(path) as f:
        if "def make_train(config)" not in f.read():
            return f"--purejaxql-file {path} has no make_train(config); expected purejaxql/pqn_gymnax.py"
    return None


def load_purejaxql(path: str) -> types.ModuleType:
    """purejaxql's module from `path`, with the shims of the module docstring."""
    import jax

    if not hasattr(jax, "tree_map"):
        jax.tree_map = jax.tree.map
    for name in ("hydra", "omegaconf", "wandb"):
        if importlib.util.find_spec(name) is None:
            stub = types.ModuleType(name)
            stub.main = lambda *a, **k: (lambda fn: fn)  # hydra.main(...) as a decorator that changes nothing
            stub.OmegaConf = None
            sys.modules[name] = stub
    spec = importlib.util.spec_from_file_location("purejaxql_pqn_gymnax", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from benchmarks.rejax_ppo import FiveValueStep

    log_wrapper = module.LogWrapper
    module.LogWrapper = lambda env: FiveValueStep(log_wrapper(env))
    return module


def purejaxql_train(path: str, total_steps: int):
    config = dict(PUREJAXQL_CONFIG, TOTAL_TIMESTEPS=total_steps, TOTAL_TIMESTEPS_DECAY=total_steps)
    return load_purejaxql(path).make_train(config)


def our_train(total_steps: int):
    from jaxrl_rollout.algorithms import pqn

    made = pqn.make_train(pqn.PQNConfig(total_timesteps=total_steps, bootstrap_on_truncation=False))
    return lambda key: made(key)


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--purejaxql-file", default=DEFAULT_FILE, help=f"purejaxql's pqn_gymnax.py (default {DEFAULT_FILE})")
    p.add_argument("--seeds", type=_common.int_list, default=[1, 8], help="seed counts, one vmapped call each")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds per seed count")
    p.add_argument("--total-steps", type=int, default=TOTAL_STEPS, help="env steps, both sides")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per timing process before it fails")
    p.add_argument("--child", choices=("ours", "purejaxql"), help=argparse.SUPPRESS)
    p.add_argument("--child-seeds", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.total_steps < 2048:
        p.error(f"--total-steps: at least one update of 32 envs x 64 steps (2048); got {args.total_steps}")
    problem = purejaxql_problem(args.purejaxql_file)
    if problem:
        p.error(problem)
    if args.child:
        train = (our_train(args.total_steps) if args.child == "ours"
                 else purejaxql_train(args.purejaxql_file, args.total_steps))
        print(timed(train, args.child_seeds))
        return {}

    import jax  # for the machine record only; the timing runs in fresh processes

    del jax
    machine = _common.machine_info()
    sides = ("ours", "purejaxql")

    def command(side: str, seeds: int) -> list[str]:
        return [sys.executable, "-m", "benchmarks.vs_purejaxql_pqn", "--child", side, "--child-seeds", str(seeds),
                "--total-steps", str(args.total_steps), "--purejaxql-file", os.path.abspath(args.purejaxql_file)]

    results, rows = [], []
    for seeds in args.seeds:
        samples = alternated_samples(lambda side: command(side, seeds), list(sides), args.rounds, args.timeout,
                                     f"pqn seeds={seeds}")
        ratios = {k: round_ratios(samples, "ours", "purejaxql", k)
                  for k in ("run2_s", "compile_s", "cpu_run2_s", "cpu_compile_s")}
        med = {k: statistics.median(v) for k, v in ratios.items()}
        result = {"seeds": seeds, "total_steps": args.total_steps, "samples": samples, "ratios": ratios,
                  "run_ratio": med["run2_s"], "compile_ratio": med["compile_s"],
                  "cpu_run_ratio": med["cpu_run2_s"], "cpu_compile_ratio": med["cpu_compile_s"]}
        results.append(result)

        def median(side, k):
            return statistics.median(x[k] for x in samples[side])

        met = med["run2_s"] <= RUN_TARGET and med["compile_s"] <= COMPILE_TARGET
        rows.append([seeds, f"{args.total_steps:,}", args.rounds, f"{median('ours', 'run2_s'):.2f} s",
                     f"{median('purejaxql', 'run2_s'):.2f} s",
                     f"**{med['run2_s']:.3f}** ({min(ratios['run2_s']):.2f}-{max(ratios['run2_s']):.2f})",
                     f"{median('ours', 'compile_s'):.2f} s", f"{median('purejaxql', 'compile_s'):.2f} s",
                     f"**{med['compile_s']:.3f}** ({min(ratios['compile_s']):.2f}-{max(ratios['compile_s']):.2f})",
                     f"{med['cpu_run2_s']:.3f}", f"{med['cpu_compile_s']:.3f}", "yes" if met else "no"])
    table = _common.markdown_table(
        ["seeds", "env steps", "rounds", "run: ours", "run: purejaxql", "run ratio (range)", "compile: ours",
         "compile: purejaxql", "compile ratio (range)", "CPU-time run ratio", "CPU-time compile ratio",
         f"run <= {RUN_TARGET}, compile <= {COMPILE_TARGET}"], rows)
    return _common.report("vs_purejaxql_pqn", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
