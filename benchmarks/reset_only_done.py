"""Env stepping with every env's reset at every step against the done envs' resets only.

`stepping.env_step` steps an adapter built on `envs._base.SameStepEnv` whose
`resets_only_done` is True (craftax's) with only the done envs' resets computed;
before, it stepped `jax.vmap(env.step)`, which computes every env's reset at every
step and selects the done envs' (a select cannot skip one). For each env id this times
both, in one process: a jitted `lax.scan` of T steps of B envs under a uniform
random policy (its actions drawn from the env's action space), each program
compiled once, then timed in alternated rounds (`_common.interleaved`). It also
says whether the two programs' outputs (obs, rewards, flags, final obs, env
states) are bit-identical, and how many envs were done per step. The other
adapters, which keep the vmapped step (`resets_only_done = False`), are timed
both ways too: the figures are why.

    python -m benchmarks.reset_only_done --num-envs 16 --num-steps 100
    python -m benchmarks.reset_only_done --env craftax/Craftax-Classic-Symbolic-v1 --num-envs 64
"""

from __future__ import annotations

import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import command_line, fmt_time, interleaved, machine_info, markdown_table, parser, report

ENVS = ("craftax/Craftax-Classic-Symbolic-v1", "xminigrid/MiniGrid-Empty-5x5", "jumanji/Snake-v1", "pgx/tic_tac_toe")


def _program(env, params, num_envs: int, num_steps: int, every_reset: bool):
    """`run(key)`: reset B envs, then T steps under random actions; per step (obs, reward, terminated,
    truncated, final obs, env state)."""
    import jax

    from jaxrl_rollout import stepping

    space = env.action_space(params)

    def run(key):
        _, state = stepping.env_reset(env, jax.random.split(key, num_envs), params)

        def one(state, key):
            act_key, step_key = jax.random.split(key)
            action = jax.vmap(space.sample)(jax.random.split(act_key, num_envs))
            keys = jax.random.split(step_key, num_envs)
            if every_reset:
                obs, state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                    keys, state, action, params)
                out = (obs, reward, terminated, truncated, info["final_observation"], state)
            else:  # what env_step does for an adapter with resets_only_done (run here for every adapter)
                obs, state, reward, terminated, truncated, info = stepping._step_resetting_done(
                    env, params, keys, state, action, num_envs)
                out = (obs, reward, terminated, truncated, info["final_observation"], state)
            return out[-1], out

        return jax.lax.scan(one, state, jax.random.split(key, num_steps))[1]

    return run


def _differing(a, b) -> int:
    """Elements that differ between two output trees (PRNG keys by their data; NaN equal to NaN only)."""
    import jax
    import numpy as np

    def data(x):
        return np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)

    differing = 0
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        x, y = data(x), data(y)
        same = x == y
        if np.issubdtype(x.dtype, np.inexact):
            same |= np.isnan(x) & np.isnan(y)
        differing += int(np.sum(~same))
    return differing


def compare(env_id: str, num_envs: int, num_steps: int, rounds: int) -> dict:
    import jax
    import numpy as np

    from jaxrl_rollout import envs, stepping

    env, params = envs.make(env_id)
    key = jax.random.key(0)
    compiled, compile_s, outputs = {}, {}, {}
    for name, every_reset in (("every reset", True), ("done only", False)):
        start = time.perf_counter()
        compiled[name] = jax.jit(_program(env, params, num_envs, num_steps, every_reset)).lower(key).compile()
        compile_s[name] = time.perf_counter() - start
        outputs[name] = jax.block_until_ready(compiled[name](key))
    times = interleaved({name: (lambda c=c: c(key)) for name, c in compiled.items()}, rounds)
    done = np.asarray(outputs["every reset"][2] | outputs["every reset"][3]).sum(axis=1)
    return {
        "env": env_id, "num_envs": num_envs, "num_steps": num_steps, "rounds": rounds,
        "adapter_resets_only_done": stepping._resets_only_done(env),
        "every_reset_s": times["every reset"]["median_s"], "done_only_s": times["done only"]["median_s"],
        "samples": {name: t["samples_s"] for name, t in times.items()},
        "compile_s": compile_s, "done_per_step_mean": float(done.mean()),
        "steps_without_done": int((done == 0).sum()),
        "differing_elements": _differing(outputs["every reset"], outputs["done only"]),
        "total_elements": sum(int(np.size(x)) for x in jax.tree.leaves(outputs["every reset"])),
    }


def main(argv=None) -> dict:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--env", action="append", help=f"an env id (repeatable; default: {', '.join(ENVS)})")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args(argv)
    machine = machine_info(here=True)
    results = []
    for env_id in args.env or ENVS:
        results.append(compare(env_id, args.num_envs, args.num_steps, args.rounds))
        print(results[-1]["env"], fmt_time(results[-1]["every_reset_s"]), fmt_time(results[-1]["done_only_s"]),
              flush=True)
    columns = ["env", "B x T", "every reset", "done only", "time ratio", "compile (every / done only)",
               "done per step (steps with none)", "outputs", "adapter steps"]
    rows = [[r["env"], f"{r['num_envs']} x {r['num_steps']}", fmt_time(r["every_reset_s"]), fmt_time(r["done_only_s"]),
             f"{r['done_only_s'] / r['every_reset_s']:.3f}",
             f"{r['compile_s']['every reset']:.1f} / {r['compile_s']['done only']:.1f} s",
             f"{r['done_per_step_mean']:.2f} ({r['steps_without_done']})",
             "bit-identical" if r["differing_elements"] == 0 else
             f"{r['differing_elements']:,} of {r['total_elements']:,} elements differ",
             "done only" if r["adapter_resets_only_done"] else "every reset"] for r in results]
    return report("reset_only_done", args, machine, results, markdown_table(columns, rows), command_line())


if __name__ == "__main__":
    main()
