"""What one training video costs per frame, stage by stage, for one or more checkouts of this repository.

`train --video-every N` draws one deterministic evaluation episode between
chunks, on the host, while training waits. This script times the host stages
of such a video on a fixed episode: the env's render hook (`draw`), the frame
label (`label`, drawn on the hook's frames in place where the side does so, as
`train` does for a built-in hook), the mp4 encode (`mp4`, imageio-ffmpeg's libx264) and the
TensorBoard GIF (`gif`: frames thinned to at most 320 pixels wide, as
`loggers.TensorBoardLogger.log_video` does, then `video.gif_bytes`). The
episode is `--steps` steps of a uniform random policy from key 0 (auto-resets
included: the cost of a frame does not depend on the policy). Each sample is a
fresh process that imports its side's `jaxrl_rollout` (a checkout, e.g. a
`git worktree` of the commit before a change, and `.`), draws a few frames
first so that imports and the renderer's set-up are not counted, then times
each stage once. Sides alternate, the order flipping every round; figures are
medians over rounds. Needs the `video` extra.

    python -m benchmarks.video_cost --side before=/tmp/base --side after=. --env CartPole-v1,Pendulum-v1 --rounds 3
    python -m benchmarks.video_cost --side before=/tmp/base --side after=. --env brax/ant --steps 300 --rounds 2
"""

from __future__ import annotations

import os
import statistics
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import checkout_sides, command_line, machine_info, markdown_table, parser, report
from benchmarks.checkout_ab import run_child

STAGES = ("draw", "label", "mp4", "gif")

CHILD = """
import inspect, json, os, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import jax, numpy as np
import jaxrl_rollout
from jaxrl_rollout import envs, video
name, steps = sys.argv[2], int(sys.argv[3])
env, params = envs.make(name)
space = env.action_space(params)

def step(state, key):
    k_act, k_step = jax.random.split(key)
    _, state, *_ = env.step(k_step, state, space.sample(k_act), params)
    return state, state

first = env.reset(jax.random.key(0), params)[1]
_, states = jax.jit(lambda k: jax.lax.scan(step, first, jax.random.split(k, steps)))(jax.random.key(1))
states = jax.tree.map(np.asarray, states)
draw = video.find_renderer(env)
draw(params, jax.tree.map(lambda x: x[:3], states))  # imports and the renderer's set-up, not timed
video._label(np.zeros((1, 64, 64, 3), np.uint8), ["warm"])
times, sizes = {}, {}
t = time.perf_counter(); frames = draw(params, states); times["draw"] = time.perf_counter() - t
texts = [f"seed0  update 100  t={i}  return={i * 1.0:.1f}" for i in range(len(frames))]
# as a training video labels a built-in hook's frames: in place, where the side can
in_place = {"in_place": True} if "in_place" in inspect.signature(video._label).parameters else {}
t = time.perf_counter(); frames = video._label(frames, texts, **in_place); times["label"] = time.perf_counter() - t
with tempfile.TemporaryDirectory() as folder:
    t = time.perf_counter(); path = video.write_video(os.path.join(folder, "v.mp4"), frames, fps=30)
    times["mp4"] = time.perf_counter() - t
    sizes["mp4"] = os.path.getsize(path)
stride = max(1, -(-frames.shape[2] // 320))
t = time.perf_counter()
gif = video.gif_bytes(frames[:, ::stride, ::stride])  # a view, as log_video passes it (copied where a side copies)
times["gif"] = time.perf_counter() - t
sizes["gif"] = len(gif)
print(json.dumps({"src": jaxrl_rollout.__file__, "frames": len(frames), "shape": list(frames.shape[1:3]),
                  "ms_per_frame": {k: 1e3 * v / len(frames) for k, v in times.items()}, "bytes": sizes}))
"""


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--side", action="append", required=True, metavar="NAME=PATH", help="a checkout (one or more)")
    p.add_argument("--env", default="CartPole-v1",
                   help="env ids (gymnax's, or SUITE/NAME), comma-separated (default: CartPole-v1)")
    p.add_argument("--steps", type=int, default=500, help="frames per video (default: 500)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default: 3)")
    args = p.parse_args()
    sides = checkout_sides(p, args.side)
    machine = machine_info()
    results, rows = {}, []
    for env_name in args.env.split(","):
        samples = {name: [] for name, _ in sides}
        for r in range(args.rounds):
            for name, path in (sides if r % 2 == 0 else sides[::-1]):
                samples[name].append(run_child(path, CHILD, env_name, str(args.steps)))
        results[env_name] = samples
        base_total = None
        for name, _ in sides:
            per_stage = {k: statistics.median(s["ms_per_frame"][k] for s in samples[name]) for k in STAGES}
            total = statistics.median(sum(s["ms_per_frame"].values()) for s in samples[name])
            base_total = total if base_total is None else base_total
            shape = samples[name][0]["shape"]
            rows.append([env_name, f"{shape[0]} x {shape[1]}", name] + [f"{per_stage[k]:.2f}" for k in STAGES]
                        + [f"{total:.2f}", f"{total / base_total:.2f}",
                           f"{samples[name][0]['bytes']['gif'] / 1e3:.0f} kB"])
    table = markdown_table(["env", "frame", "side"] + [f"{k} ms/frame" for k in STAGES]
                           + ["total ms/frame", f"total / {sides[0][0]}", "TensorBoard GIF"], rows)
    report("video_cost", args, machine, results, table, command_line())


if __name__ == "__main__":
    main()
