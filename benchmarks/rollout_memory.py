"""Peak memory of a jitted rollout against the size of the Trajectory it returns.

For each (B, T) the rollout is lowered and compiled, and XLA's own buffer
assignment (`compiled.memory_analysis()`) gives the bytes of the arguments,
the outputs, the temporaries and the peak. The Trajectory's size is the sum
of its leaves' nbytes (from `jax.eval_shape`, nothing is run). No hidden
copies means: the output is the Trajectory plus the small RolloutState, the
temporaries are one step's worth (they do not grow with T), and the peak per
step and env approaches the Trajectory's own bytes per step and env. The
last column is what the peak holds beyond the unavoidable: the Trajectory, the
returned RolloutState and the arguments (input state, network parameters).

Two policies: the trivial `uniform_random_policy`, and the 64x64 tanh
actor-critic PPO uses (`networks.feedforward_policy`), whose parameters are
an argument.

Run: python -m benchmarks.rollout_memory [--sizes 64x128,1024x128,4096x128,64x2048]
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax

from benchmarks import _common

FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes",
          "peak_memory_in_bytes")


def nbytes(tree) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


def policies(env, env_params):
    """{name: (policy_fn, params)} for the two policies measured."""
    import jaxrl_rollout as jr
    from jaxrl_rollout.algorithms import _common as alg

    built = alg.setup("CartPole-v1", "mlp", (64, 64), "tanh")
    state = jr.rollout_init(jax.random.key(0), env, env_params, 1)
    params = built.module.init(jax.random.key(1), state.obs)
    return {
        "uniform": (jr.uniform_random_policy(env.action_space(env_params)), None),
        "mlp 64x64": (built.policy_fn, params),
    }


def parse_sizes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",") if s]


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", type=parse_sizes, default=[(64, 128), (1024, 128), (4096, 128), (64, 2048)],
                   help="BxT,BxT,...")
    args = p.parse_args(argv)

    import jaxrl_rollout as jr
    from jaxrl_rollout import envs

    machine = _common.machine_info(here=True)
    env, env_params = envs.make("CartPole-v1")
    results, rows = [], []
    for policy_name, (policy_fn, params) in policies(env, env_params).items():
        for b, t in args.sizes:
            state = jax.eval_shape(lambda k: jr.rollout_init(k, env, env_params, b), jax.random.key(0))

            def run(params, state, policy_fn=policy_fn, t=t):
                return jr.rollout(env, env_params, policy_fn, params, state, t)

            compiled = jax.jit(run).lower(params, state).compile()
            stats = compiled.memory_analysis()
            mem = {f: int(getattr(stats, f)) for f in FIELDS if hasattr(stats, f)}
            out_state, traj = jax.eval_shape(run, params, state)
            traj_bytes, state_bytes = nbytes(traj), nbytes(out_state)
            steps = b * t
            # XLA's peak of live buffers (arguments, outputs, temporaries); older
            # jaxlibs without it: outputs plus temporaries, an upper bound.
            peak = mem.get("peak_memory_in_bytes") or mem["output_size_in_bytes"] + mem["temp_size_in_bytes"]
            entry = {"policy": policy_name, "B": b, "T": t, "memory_analysis": mem, "trajectory_bytes": traj_bytes,
                     "rollout_state_bytes": state_bytes, "peak_bytes": peak,
                     "peak_per_step_env": peak / steps, "trajectory_per_step_env": traj_bytes / steps,
                     "extra_over_trajectory": peak / (traj_bytes + state_bytes + mem["argument_size_in_bytes"]) - 1}
            results.append(entry)
            rows.append([
                policy_name, b, t, _common.fmt_bytes(traj_bytes), _common.fmt_bytes(mem["output_size_in_bytes"]),
                _common.fmt_bytes(mem["temp_size_in_bytes"]), _common.fmt_bytes(mem.get("peak_memory_in_bytes", 0)),
                f"{traj_bytes / steps:.1f}", f"{peak / steps:.2f}", f"{100 * entry['extra_over_trajectory']:.2f}%",
            ])
            print(f"{policy_name} B={b} T={t}: done", file=sys.stderr)
    table = _common.markdown_table(
        ["policy", "B", "T", "Trajectory", "XLA output", "XLA temp", "XLA peak", "Trajectory B/step/env",
         "peak B/step/env", "peak beyond Trajectory + state + arguments"],
        rows,
    )
    return _common.report("rollout_memory", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
