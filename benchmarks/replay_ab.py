"""Replay buffer A/B: flashbax's item buffer (`algorithms.replay`) against a hand-written ring buffer,
and the compact buffer of `optimize_memory_usage` (`replay.make_compact_replay_buffer`).

Each runs `--steps` iterations of add(B transitions) + sample(batch) in one
jitted `lax.scan`, CartPole-sized transitions (obs [4]), capacity 10,000,
batch 128 (CleanRL dqn.py's sizes). The ring is `.at[idx].set` on
preallocated arrays plus `jax.random.randint` indices. Run times are the
minimum of `--repeats` calls after compilation, the variants alternated.

`--atari` times Atari-shaped transitions instead (uint8 [84, 84, 4] stacks of 4 frames, each observation
the one before moved on by a frame, an episode cut every 1,000 steps; batch 32, CleanRL's `dqn_atari.py`):
the full buffer, the compact one, and the compact one sharing frames (`frame_axis=-1`); no ring.

`--dqn-steps N` also times whole DQN runs (`dqn.make_train`, CleanRL's
config for N env steps of `--dqn-env`, one seed, `--dqn-buffer`
transitions) with the full and the compact buffer, alternated.

Run: python -m benchmarks.replay_ab [--steps 5000] [--envs 1] [--dqn-steps 100000 [--dqn-env Breakout-MinAtar]
     [--dqn-buffer 100000]]
     python -m benchmarks.replay_ab --atari --batch 32 [--steps 5000] [--capacity 10000]
"""

from __future__ import annotations

import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp

from benchmarks import _common
from jaxrl_rollout.algorithms import replay


def main() -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--envs", type=int, default=1)
    p.add_argument("--capacity", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dqn-steps", type=int, default=0)
    p.add_argument("--dqn-env", default="CartPole-v1")
    p.add_argument("--dqn-buffer", type=int, default=10_000)
    p.add_argument("--atari", action="store_true")
    args = p.parse_args()
    machine = dict(_common.machine_info(here=True), loadavg_start=_common.loadavg())
    B, steps = args.envs, args.steps
    ex = replay.Transition(jnp.zeros(4), jnp.int32(0), jnp.float32(0), jnp.zeros(4), jnp.bool_(False), jnp.bool_(False))

    def batch(i):
        return jax.tree.map(lambda x: jnp.broadcast_to(x + i.astype(x.dtype), (B,) + x.shape), ex)

    if args.atari:  # frames i..i+3 stacked; the next observation is the same moved on by one
        ex = replay.Transition(jnp.zeros((84, 84, 4), jnp.uint8), jnp.int32(0), jnp.float32(0),
                               jnp.zeros((84, 84, 4), jnp.uint8), jnp.bool_(False), jnp.bool_(False))

        def batch(i):
            def stack(t):
                return jnp.broadcast_to((t + jnp.arange(4)).astype(jnp.uint8), (B, 84, 84, 4))

            cut = jnp.broadcast_to(i % 1000 == 999, (B,))
            return replay.Transition(stack(i), jnp.zeros(B, jnp.int32), jnp.ones(B, jnp.float32), stack(i + 1),
                                     jnp.zeros(B, bool), cut)

    def buffer_run(rb):
        def run(key):
            def body(c, i):
                s, acc = c
                s = rb.add(s, batch(i))
                drawn = rb.sample(s, jax.random.fold_in(key, i))
                if args.atari:  # read the observations whole, as a network would (else XLA drops their reads)
                    return (s, acc + drawn.reward.sum() + 1e-9 * (jnp.sum(drawn.obs, dtype=jnp.float32)
                                                                   + jnp.sum(drawn.next_obs, dtype=jnp.float32))), None
                return (s, acc + drawn.reward.sum()), None
            return jax.lax.scan(body, (rb.init(ex), 0.0), jnp.arange(steps))[0][1]
        return run

    def ring_run(key):
        cap = args.capacity
        st = jax.tree.map(lambda x: jnp.zeros((cap,) + x.shape, x.dtype), ex)

        def body(c, i):
            st, ptr, size, acc = c
            idx = (ptr + jnp.arange(B)) % cap
            st = jax.tree.map(lambda a, b: a.at[idx].set(b), st, batch(i))
            ptr, size = (ptr + B) % cap, jnp.minimum(size + B, cap)
            j = jax.random.randint(jax.random.fold_in(key, i), (args.batch,), 0, size)
            return (st, ptr, size, acc + st.reward[j].sum()), None
        return jax.lax.scan(body, (st, 0, 0, 0.0), jnp.arange(steps))[0][3]

    compact = replay.make_compact_replay_buffer(args.capacity, args.batch, B, max_episode_steps=500)
    fns = {"flashbax": jax.jit(buffer_run(replay.make_replay_buffer(args.capacity, args.batch))),
           "ring": jax.jit(ring_run), "compact": jax.jit(buffer_run(compact))}
    if args.atari:
        frames = replay.make_compact_replay_buffer(args.capacity, args.batch, B, max_episode_steps=1000, frame_axis=-1,
                                                   num_frames=4)
        fns = {"flashbax": fns["flashbax"],
               "compact": jax.jit(buffer_run(replay.make_compact_replay_buffer(args.capacity, args.batch, B, 1000))),
               "compact, frames shared": jax.jit(buffer_run(frames))}
    if args.dqn_steps:
        from jaxrl_rollout.algorithms import dqn

        for name, optimize in (("dqn full", False), ("dqn compact", True)):
            config = dqn.DQNConfig(env_id=args.dqn_env, total_timesteps=args.dqn_steps, buffer_size=args.dqn_buffer,
                                   optimize_memory_usage=optimize)
            fns[name] = jax.jit(dqn.make_train(config))
    compile_s = {}
    for name, f in fns.items():
        t = time.perf_counter()
        _common.block(f(jax.random.key(0)))
        compile_s[name] = time.perf_counter() - t
    runs = {name: [] for name in fns}
    for r in range(args.repeats):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            t = time.perf_counter()
            _common.block(fns[name](jax.random.key(r + 1)))
            runs[name].append(time.perf_counter() - t)
    rows = [[n, f"{compile_s[n]:.2f} s", f"{min(runs[n]) * 1e3:.1f} ms",
             f"{min(runs[n]) / (args.dqn_steps if n.startswith('dqn') else steps) * 1e6:.2f} us"] for n in fns]
    table = _common.markdown_table(["buffer", "first call (compile + run)",
                                    f"run ({steps} add+sample, or {args.dqn_steps} DQN steps)", "per step"], rows)
    results = {n: dict(first_call_s=compile_s[n], run_s=runs[n]) for n in fns}
    return _common.report("replay_ab", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
