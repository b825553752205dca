"""Where a rollout and a PPO update spend their work: jaxpr and optimised-HLO op counts.

Counts, for the jitted rollout with the PPO network (64x64 tanh actor and
critic) and for one whole PPO `train`:

- jaxpr equations by primitive (`jax.make_jaxpr`), inside every sub-jaxpr
  (scan bodies, cond branches), so a second policy forward shows up as a
  second set of `dot_general`s;
- in XLA's optimised HLO (`compiled.as_text()`): instructions by opcode, the
  `dot`s (matrix products: one per Dense layer per forward), `f64` values
  (float64 leaks), host transfers (`infeed` / `outfeed` / `send` / `recv` /
  custom-call callbacks: host syncs) and `copy` instructions;
- trace + lower and compile seconds.

Run: python -m benchmarks.profile_rollout [--num-envs 4] [--num-steps 128] [--total-steps 4096]
"""

from __future__ import annotations

import collections
import os
import re
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.extend

from benchmarks import _common

HOST_OPS = ("infeed", "outfeed", "send", "recv", "send-done", "recv-done")


def jaxpr_counts(closed) -> collections.Counter:
    """Primitive counts over a jaxpr and all its sub-jaxprs."""
    counts = collections.Counter()

    def visit(jaxpr):
        for eqn in jaxpr.eqns:
            counts[eqn.primitive.name] += 1
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                visit(sub)

    visit(closed.jaxpr)
    return counts


def hlo_counts(text: str) -> dict:
    """Opcode counts of an optimised HLO module, plus the markers listed in the module docstring."""
    opcodes = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?[\w.\-]+ = [^=]*? ([a-z][\w\-]*)\(", line)
        if m:
            opcodes[m.group(1)] += 1
    return {
        "instructions": sum(opcodes.values()),
        "dot": opcodes["dot"],
        "fusion": opcodes["fusion"],
        "copy": opcodes["copy"],
        "while": opcodes["while"],
        "conditional": opcodes["conditional"],
        "f64_values": len(re.findall(r"\bf64\[", text)),
        "host_ops": sum(opcodes[o] for o in HOST_OPS),
        "host_callbacks": len(re.findall(r'custom_call_target="xla_(?:python_)?\w*callback', text)),
        "top_opcodes": opcodes.most_common(12),
    }


def profile(name: str, fn, *args) -> dict:
    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    jcounts = jaxpr_counts(jax.make_jaxpr(fn)(*args))
    return {
        "name": name, "lower_s": t1 - t0, "compile_s": t2 - t1,
        "jaxpr_equations": sum(jcounts.values()), "jaxpr_dot_general": jcounts["dot_general"],
        "jaxpr_cond": jcounts["cond"], "jaxpr_scan": jcounts["scan"],
        "jaxpr_top": jcounts.most_common(10), "hlo": hlo_counts(compiled.as_text()),
    }


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--total-steps", type=int, default=4096, help="PPO train length (the program does not grow with it)")
    args = p.parse_args(argv)

    import jaxrl_rollout as jr
    from jaxrl_rollout.algorithms import _common as alg
    from jaxrl_rollout.algorithms import ppo

    machine = _common.machine_info(here=True)
    built = alg.setup("CartPole-v1", "mlp", (64, 64), "tanh")
    env, env_params = built.env, built.env_params
    state = jr.rollout_init(jax.random.key(0), env, env_params, args.num_envs)
    params = built.module.init(jax.random.key(1), state.obs[:1])
    b, t = args.num_envs, args.num_steps

    def rollout(bootstrap_truncated):
        return lambda params, state: jr.rollout(env, env_params, built.policy_fn, params, state, t,
                                                bootstrap_truncated=bootstrap_truncated)

    def one_forward(params, obs, key):
        return built.policy_fn(params, obs, key)

    train = ppo.make_train(ppo.PPOConfig(num_envs=b, num_steps=t, total_timesteps=args.total_steps))
    results = [
        profile("policy forward (once)", one_forward, params, state.obs, jax.random.key(2)),
        profile("rollout", rollout(True), params, state),
        profile("rollout(bootstrap_truncated=False)", rollout(False), params, state),
        profile("PPO train (whole)", train, jax.random.key(3)),
    ]
    rows = []
    for r in results:
        h = r["hlo"]
        rows.append([r["name"], r["jaxpr_equations"], r["jaxpr_dot_general"], r["jaxpr_cond"], h["instructions"],
                     h["dot"], h["fusion"], h["copy"], h["conditional"], h["f64_values"],
                     h["host_ops"] + h["host_callbacks"], f"{r['lower_s']:.2f} s", f"{r['compile_s']:.2f} s"])
    table = _common.markdown_table(
        ["program", "jaxpr eqns", "jaxpr dot_general", "jaxpr cond", "HLO instrs", "HLO dot", "HLO fusion",
         "HLO copy", "HLO conditional", "f64 values", "host transfers", "trace+lower", "compile"],
        rows,
    )
    return _common.report("profile_rollout", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
