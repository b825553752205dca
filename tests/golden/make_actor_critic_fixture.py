"""Regenerates the SAC/TD3 golden fixture from the PyTorch references.

    python -m pip install torch==2.13.0   # CPU build, the pinned version
    python -m tests.golden.make_actor_critic_fixture

Writes tests/golden/fixtures/actor_critic.npz (see tests/golden/actor_critic_reference.py):

    in/<name>                          the batch, the draws, log_alpha, in/weights/<net>/<param>
    cleanrl_sac/<name>, sb3_sac/<name>, td3/<name>, td3_delayed/<name>, cleanrl_sac_delayed/<name>
                                       (4 steps of CleanRL's TD3 and SAC loops)
                                       targets, losses, grad/<net>/<param>, params/<net>/<param> after the step
    sb3_clamp/{raw,w,log_std,grad}     SB3's log-std clamp and its gradient
    meta/torch, meta/numpy, meta/python
"""

from __future__ import annotations

import numpy as np

from tests.golden import actor_critic_reference as ref
from tests.golden.make_fixtures import meta


def build() -> dict[str, np.ndarray]:
    data = meta()
    case = ref.make_case()
    data.update({f"in/{k}": np.asarray(v) for k, v in case.items()})
    for name, update in (("cleanrl_sac", ref.cleanrl_sac_update), ("sb3_sac", ref.sb3_sac_update), ("td3", ref.td3_update),
                         ("td3_delayed", ref.td3_delayed_updates), ("cleanrl_sac_delayed", ref.cleanrl_sac_delayed_updates)):
        data.update({f"{name}/{k}": v for k, v in update(case).items()})
    data.update({f"sb3_clamp/{k}": v for k, v in ref.clamp_log_std().items()})
    return data


def main() -> None:
    from tests.golden.make_fixtures import write_fixture

    write_fixture("actor_critic", build)


if __name__ == "__main__":
    main()
