"""Rollout overhead: `rollout` with a trivial policy against a bare `lax.scan` of `env.step`.

Both sides run T steps of B CartPole-v1 envs (gymnax) with uniformly random
actions drawn the same way (`action_space.sample` on one key split per env),
jitted, and are timed in alternation. Variants:

- `bare`: `lax.scan` over `vmap(env.step)`, storing nothing but the env state
  it carries (the floor: the stepping itself).
- `bare+store`: the same scan also stacks obs, action, reward, terminated and
  truncated, the least any collector has to keep.
- `rollout`: `jaxrl_rollout.rollout` with `uniform_random_policy`, default
  `bootstrap_truncated=True` (episode statistics, log-prob, value, the
  truncation bootstrap under `lax.cond`, the full `Trajectory`).
- `rollout(bt=False)`: the same without the truncation bootstrap.

Run: python -m benchmarks.rollout_overhead [--sizes 4,64,1024,4096] [--steps 128]
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax

from benchmarks import _common

TARGET = 1.15


def build(env, env_params, num_envs: int, num_steps: int) -> dict:
    """Jitted zero-argument-state functions, one per variant: state -> outputs."""
    import jaxrl_rollout as jr

    space = env.action_space(env_params)
    policy_fn = jr.uniform_random_policy(space)
    step_env = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def bare(store: bool):
        def body(carry, _):
            key, env_state = carry
            key, action_key, step_key = jax.random.split(key, 3)
            action = jax.vmap(space.sample)(jax.random.split(action_key, num_envs))
            obs, env_state, reward, terminated, truncated, _ = step_env(
                jax.random.split(step_key, num_envs), env_state, action, env_params
            )
            out = (obs, action, reward, terminated, truncated) if store else None
            return (key, env_state), out

        def run(state):
            (key, env_state), out = jax.lax.scan(body, (state.key, state.env_state), None, length=num_steps)
            return env_state, out

        return jax.jit(run)

    def full(bootstrap_truncated: bool):
        def run(state):
            return jr.rollout(env, env_params, policy_fn, None, state, num_steps,
                              bootstrap_truncated=bootstrap_truncated)

        return jax.jit(run)

    return {"bare": bare(False), "bare+store": bare(True), "rollout": full(True), "rollout(bt=False)": full(False)}


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", type=_common.int_list, default=[4, 64, 1024, 4096], help="B values")
    p.add_argument("--steps", type=int, default=128, help="T")
    p.add_argument("--rounds", type=int, default=31, help="alternating timing rounds per size")
    p.add_argument("--min-sample", type=float, default=0.05, help="seconds per timing sample")
    p.add_argument("--env", default="CartPole-v1")
    args = p.parse_args(argv)

    import jaxrl_rollout as jr
    from jaxrl_rollout import envs

    machine = _common.machine_info(here=True)
    env, env_params = envs.make(args.env)
    results, rows = [], []
    for b in args.sizes:
        state = jax.jit(lambda k: jr.rollout_init(k, env, env_params, b))(jax.random.key(0))
        fns = build(env, env_params, b, args.steps)
        timed = _common.interleaved({n: (lambda f=f: f(state)) for n, f in fns.items()}, args.rounds, args.min_sample)
        ratio = _common.paired_ratios(timed, "rollout", "bare+store")
        ratio_floor = _common.paired_ratios(timed, "rollout", "bare")
        ratio_nobt = _common.paired_ratios(timed, "rollout(bt=False)", "bare+store")
        load = _common.loadavg()
        steps = b * args.steps
        results.append({
            "num_envs": b, "num_steps": args.steps, "loadavg": load,
            "median_s": {n: t["median_s"] for n, t in timed.items()},
            "samples_s": {n: t["samples_s"] for n, t in timed.items()},
            "ratio_rollout_vs_bare_store": ratio, "ratio_rollout_vs_bare": ratio_floor,
            "ratio_rollout_nobt_vs_bare_store": ratio_nobt,
        })
        rows.append([
            b, args.steps,
            *(_common.fmt_time(timed[n]["median_s"]) for n in fns),
            f"{steps / timed['rollout']['median_s'] / 1e6:.2f}",
            f"**{ratio['median']:.3f}** ({ratio['min']:.2f}-{ratio['max']:.2f})",
            f"{ratio['fastest']:.3f}",
            f"{ratio_nobt['median']:.3f}",
            f"{ratio_floor['median']:.3f}",
            load,
        ])
        print(f"B={b}: done", file=sys.stderr)
    table = _common.markdown_table(
        ["B", "T", "bare", "bare+store", "rollout", "rollout(bt=False)", "rollout Msteps/s",
         "rollout / bare+store (min-max)", "fastest rollout / fastest bare+store",
         "rollout(bt=False) / bare+store", "rollout / bare", "load avg"],
        rows,
    )
    return _common.report("rollout_overhead", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
