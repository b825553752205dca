"""What recording a video's episode holds on the device: one program for the whole episode, or a block at a time.

`video.record_episodes` keeps every step's env state in a buffer as long as the
episode's time limit, and `write_episode_videos` (so `evaluate --video`,
`train --video-every` and `rollout --video`) recorded through it until
2026-12-05; it now records `_EpisodeWriter.RECORD_BLOCK` steps per call. For
each env this script compiles both programs for one episode (XLA's
`memory_analysis`: the bytes the program's outputs take), without running the
whole-episode one, which may not fit. With `--write` it then writes one video
of a uniform random policy's episode through `write_episode_videos` in a
child process and reports its peak memory (`ru_maxrss`) and the episode's
length. Needs the `video` extra for `--write`, and each env's suite.

    python -m benchmarks.video_recording --env craftax/Craftax-Symbolic-v1 --env craftax/Craftax-Classic-Symbolic-v1 --write
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import (  # noqa: E402
    child_env,
    command_line,
    fmt_bytes,
    machine_info,
    markdown_table,
    parser,
    report,
)

ENVS = ("craftax/Craftax-Symbolic-v1", "craftax/Craftax-Classic-Symbolic-v1")

_WRITE = """
import resource, sys, time, jax, jaxrl_rollout as jr
from jaxrl_rollout import envs, video
env, params = envs.make(sys.argv[1])
policy = jr.uniform_random_policy(env.action_space(params))
start = time.perf_counter()
(clip,) = video.write_episode_videos(sys.argv[2], env, params, policy, None, jax.random.split(jax.random.key(0), 1), "0")
print(clip.length, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def programs(env_id: str) -> dict:
    """Output bytes of the whole-episode recording and of one block's, an env state's bytes and the time limit."""
    import jax
    import jax.numpy as jnp

    import jaxrl_rollout as jr
    from jaxrl_rollout import _memory, envs, video

    env, params = envs.make(env_id)
    policy = jr.uniform_random_policy(env.action_space(params))
    key = jax.random.key(0)
    start = time.perf_counter()
    whole = jax.jit(lambda k: video.record_episodes(env, params, policy, None, k, 1)).lower(key).compile()
    whole_s = time.perf_counter() - start
    writer = video._EpisodeWriter(env, params, policy)
    state = writer._start(key)
    start = time.perf_counter()
    block = writer._steps.lower(None, state, jnp.ones((1,), bool), jnp.int32(0)).compile()
    block_s = time.perf_counter() - start
    return {
        "env": env_id, "time_limit": writer._max_steps, "record_block": video._EpisodeWriter.RECORD_BLOCK,
        "state_bytes": _memory.tree_bytes(state.env_state),
        "whole_output_bytes": whole.memory_analysis().output_size_in_bytes, "whole_compile_s": whole_s,
        "block_output_bytes": block.memory_analysis().output_size_in_bytes, "block_compile_s": block_s,
    }


def written(env_id: str) -> dict:
    """One random policy's video written in a child process: its peak memory, the episode's length, the time."""
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run([sys.executable, "-c", _WRITE, env_id, folder], capture_output=True, text=True,
                             env=child_env(), timeout=1800)
    if out.returncode != 0:
        return {"exit": out.returncode, "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    length, seconds, peak_kib = out.stdout.split()[-3:]  # (the child's own ru_maxrss, in KiB on Linux)
    return {"exit": 0, "length": int(length), "seconds": float(seconds), "peak_rss_bytes": int(peak_kib) * 1024}


def main(argv=None) -> dict:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--env", action="append", help=f"an env id (repeatable; default: {', '.join(ENVS)})")
    p.add_argument("--write", action="store_true", help="also write one random policy's video of each env")
    args = p.parse_args(argv)
    machine = machine_info(here=True)
    results = []
    for env_id in args.env or ENVS:
        result = programs(env_id)
        if args.write:
            result["write"] = written(env_id)
        results.append(result)
        print(result, flush=True)
    columns = ["env", "time limit", "one state", "whole episode's program: outputs", "a block's program: outputs",
               "video written (random policy)"]
    rows = []
    for r in results:
        w = r.get("write")
        video_text = ("not asked" if w is None else f"exit {w['exit']}: {w['error']}" if w["exit"] else
                      f"{w['length']} steps, peak {fmt_bytes(w['peak_rss_bytes'])}, {w['seconds']:.0f} s")
        rows.append([r["env"], f"{r['time_limit']:,}", fmt_bytes(r["state_bytes"]), fmt_bytes(r["whole_output_bytes"]),
                     f"{fmt_bytes(r['block_output_bytes'])} ({r['record_block']} steps)", video_text])
    return report("video_recording", args, machine, results, markdown_table(columns, rows), command_line())


if __name__ == "__main__":
    main()
