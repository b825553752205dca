"""Times PureJaxRL's ppo.py `make_train` on the reference CartPole-v1 config with other epochs / minibatches.

Runs in the anchor's venv with the anchor folder as working directory (so
`import ppo` finds its `ppo.py`): `benchmarks.vs_purejaxrl --algo a2c` starts it
with 1 epoch and 1 minibatch, the PPO-shaped baseline for A2C (one gradient
step on the whole 4 x 128 batch per update, as A2C takes). Everything else is
the config of the anchor's own `time_ppo.py`, with its timing protocol
(`_common.anchor_protocol`) and its final-return measure (the mean return of the
episodes that ended in the last 10 updates, of seed 0... S-1 together).

Usage: python purejaxrl_shaped.py SEEDS EPOCHS MINIBATCHES
Prints: compile=Xs run1=Ys run2=Zs mean_final_return=R (the anchor's line).
"""

import os
import sys

import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository, for _common
sys.path.insert(0, os.getcwd())  # the anchor folder, for its ppo.py

from benchmarks import _common  # noqa: E402  (standard library only: runs in the anchor's venv)


def main(num_seeds: int, epochs: int, minibatches: int) -> None:
    from ppo import make_train

    config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": epochs,
              "NUM_MINIBATCHES": minibatches, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
              "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
              "ANNEAL_LR": True, "DEBUG": False}
    compile_s, run1_s, run2_s, out = _common.anchor_protocol(make_train(config), num_seeds)
    metrics = out["metrics"]
    returns, ended = metrics["returned_episode_returns"], metrics["returned_episode"]
    last = (slice(-10, None),) if num_seeds == 1 else (slice(None), slice(-10, None))  # the update axis
    r, d = returns[last], ended[last]
    final = float((r * d).sum() / jnp.maximum(d.sum(), 1))
    print(_common.anchor_line(compile_s, run1_s, run2_s, final))


if __name__ == "__main__":
    if len(sys.argv) != 4 or not all(a.isdigit() and int(a) > 0 for a in sys.argv[1:]):
        raise SystemExit(f"usage: python purejaxrl_shaped.py SEEDS EPOCHS MINIBATCHES (positive ints), got {sys.argv[1:]}")
    main(*(int(a) for a in sys.argv[1:4]))
