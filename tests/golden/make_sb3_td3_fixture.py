"""Regenerates the SB3 TD3 golden fixture by running Stable-Baselines3 itself.

    python -m pip install torch==2.13.0                      # CPU build, the pinned version
    python -m pip install stable-baselines3==2.9.2 --no-deps  # its other needs (gymnasium, numpy, cloudpickle) are the test extra's
    python -m tests.golden.make_sb3_td3_fixture

Writes tests/golden/fixtures/sb3_td3.npz (see tests/golden/sb3_td3_reference.py):

    in/<name>                          the replay buffer, the draws and indices SB3 used per gradient step,
                                       in/gradient_steps (one entry per train() call), in/weights/<net>/<param>
    sb3/<name>                         what SB3 did: dones as sampled, mu_target and next_actions per step,
                                       n_updates, critic_loss, actor_loss (NaN: no actor step) per call,
                                       params/<net>/<param> after each call
    meta/torch, meta/numpy, meta/python, meta/stable_baselines3
"""

from __future__ import annotations

import numpy as np

from tests.golden import sb3_td3_reference as ref
from tests.golden.make_fixtures import meta


def build() -> dict[str, np.ndarray]:
    data = meta()
    data.update(ref.run())
    return data


def main() -> None:
    from tests.golden.make_fixtures import write_fixture

    write_fixture("sb3_td3", build)


if __name__ == "__main__":
    main()
