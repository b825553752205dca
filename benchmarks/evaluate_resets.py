"""`evaluate` on a suite adapter or a gymnax env: stepped without its auto-reset against stepped with it.

`collect.evaluate` discards whatever an env does after its episode ends, so it
steps an adapter built on `envs._base.SameStepEnv`, and a gymnax env with
gymnax's own `step` (since 2026-12-06), without the auto-reset
(`stepping.env_step(..., reset_done=False)`). Before, `env_step` stepped it with
its resets: every env's reset at every step (the vmapped gymnax-style `step`),
or for craftax (`resets_only_done`) the finished envs' resets in a loop. For
each env id this builds both, in one process: `evaluate` as it is, and
`evaluate` traced with `env_step` made to reset as it did before (its
`reset_done` forced True). `--clip-action` wraps an env of continuous
actions in `envs.ClipAction`, as the algorithms do (what `train`'s periodic
evaluation and the command line's `evaluate` step). Each side is `jax.jit` of `evaluate` with a uniform
random policy over N episodes, lowered and compiled once (the times are
printed), then run in alternated rounds (`_common.interleaved`); the returns,
lengths and completed flags of the two are compared element for element.

    python -m benchmarks.evaluate_resets --num-episodes 2 --rounds 4
    python -m benchmarks.evaluate_resets --env craftax/Craftax-Classic-Symbolic-v1 --num-episodes 10
    python -m benchmarks.evaluate_resets --env CartPole-v1 --env brax/ant --clip-action --num-episodes 2
"""

from __future__ import annotations

import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import command_line, fmt_time, interleaved, machine_info, markdown_table, parser, report

SIDES = ("no reset after the end", "as before")
ENVS = ("craftax/Craftax-Classic-Symbolic-v1", "jumanji/Snake-v1", "xminigrid/MiniGrid-Empty-5x5", "brax/inverted_pendulum")


def resetting_as_before(trace):
    """`trace()` with `stepping.env_step` resetting finished envs whatever its caller asks (`reset_done=True`)."""
    from jaxrl_rollout import stepping

    step = stepping.env_step

    def as_before(*args, reset_done=True, **kwargs):
        return step(*args, reset_done=True, **kwargs)

    stepping.env_step = as_before
    try:
        return trace()
    finally:
        stepping.env_step = step


def compare(env_id: str, num_episodes: int, rounds: int, max_steps: int | None, clip_action: bool = False) -> dict:
    import jax
    import numpy as np
    from gymnax.environments import spaces

    import jaxrl_rollout as jr
    from jaxrl_rollout import envs, stepping

    env, params = envs.make(env_id)
    clipped = clip_action and isinstance(env.action_space(params), spaces.Box)
    if clipped:  # as the algorithms wrap an env of continuous actions (what `train` evaluates)
        env = envs.ClipAction(env)
    policy = jr.uniform_random_policy(env.action_space(params))
    key = jax.random.key(0)
    compiled, trace_s, compile_s, outputs = {}, {}, {}, {}
    for name in SIDES:
        def trace():
            return jax.jit(lambda k: jr.evaluate(env, params, policy, None, k, num_episodes, max_steps)).lower(key)

        start = time.perf_counter()
        lowered = trace() if name == SIDES[0] else resetting_as_before(trace)
        middle = time.perf_counter()
        compiled[name] = lowered.compile()
        trace_s[name], compile_s[name] = middle - start, time.perf_counter() - middle
        outputs[name] = jax.block_until_ready(compiled[name](key))
    times = interleaved({name: (lambda c=c: c(key)) for name, c in compiled.items()}, rounds)
    first, second = (outputs[name] for name in SIDES)
    same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(first, second))
    return {
        "env": f"{env_id} in ClipAction" if clipped else env_id, "num_episodes": num_episodes, "rounds": rounds,
        "trace_s": trace_s, "compile_s": compile_s,
        "run_s": {name: t["median_s"] for name, t in times.items()},
        "samples": {name: t["samples_s"] for name, t in times.items()},
        "mean_length": float(np.mean(np.asarray(first.lengths))), "same_results": same,
        "before": "finished envs' resets" if stepping._resets_only_done(env) else "every env's reset",
    }


def main(argv=None) -> dict:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--env", action="append", help=f"an env id (repeatable; default: {', '.join(ENVS)})")
    p.add_argument("--num-episodes", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=None, help="evaluate's max_steps (default: the env's time limit)")
    p.add_argument("--clip-action", action="store_true",
                   help="an env of continuous actions in envs.ClipAction, as the algorithms (and so train) step it")
    args = p.parse_args(argv)
    machine = machine_info(here=True)
    results = []
    for env_id in args.env or ENVS:
        results.append(compare(env_id, args.num_episodes, args.rounds, args.max_steps, args.clip_action))
        print(results[-1]["env"], results[-1]["compile_s"], flush=True)
    names = SIDES
    columns = ["env", "before: resets computed", "episodes (mean length)", "compile: no reset / before",
               "trace + lower", "run: no reset / before", "returns, lengths, completed"]
    rows = [[r["env"], r["before"], f"{r['num_episodes']} ({r['mean_length']:.0f})",
             f"{r['compile_s'][names[0]]:.1f} / {r['compile_s'][names[1]]:.1f} s",
             f"{r['trace_s'][names[0]]:.1f} / {r['trace_s'][names[1]]:.1f} s",
             f"{fmt_time(r['run_s'][names[0]])} / {fmt_time(r['run_s'][names[1]])}",
             "the same" if r["same_results"] else "DIFFER"] for r in results]
    return report("evaluate_resets", args, machine, results, markdown_table(columns, rows), command_line())


if __name__ == "__main__":
    main()
