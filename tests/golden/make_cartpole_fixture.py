"""Regenerates the end-to-end CartPole golden fixture from the PyTorch/gymnasium reference.

    python -m pip install torch==2.13.0 gymnasium   # CPU build, the pinned torch
    python -m tests.golden.make_cartpole_fixture

Writes tests/golden/fixtures/cartpole_e2e.npz: the inputs (torch weights,
sampled actions, recorded reset states, settings) under `in/`, the
reference's records under `out/`, and the versions that produced them under
`meta/`. See tests/golden/cartpole_reference.py.
"""

from __future__ import annotations

import gymnasium
import numpy as np

from tests.golden import cartpole_reference
from tests.golden.make_fixtures import meta


def build() -> dict[str, np.ndarray]:
    result = cartpole_reference.collect()
    data = {**meta(), "meta/gymnasium": np.array(gymnasium.__version__)}
    for kind in ("in", "out"):
        for name, value in result[kind].items():
            data[f"{kind}/{name}"] = np.asarray(value)
    return data


def main() -> None:
    from tests.golden.make_fixtures import write_fixture

    write_fixture("cartpole_e2e", build)


if __name__ == "__main__":
    main()
