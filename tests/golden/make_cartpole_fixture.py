"""Regenerates the end-to-end CartPole golden fixture from the PyTorch/gymnasium reference.

    python -m pip install torch==2.13.0 gymnasium   # CPU build, the pinned torch
    python -m tests.golden.make_cartpole_fixture

Writes tests/golden/fixtures/cartpole_e2e.npz: the inputs (torch weights,
sampled actions, recorded reset states, settings) under `in/`, the
reference's records under `out/`, and the versions that produced them under
`meta/`. See tests/golden/cartpole_reference.py.
"""

from __future__ import annotations

import pathlib
import platform

import gymnasium
import numpy as np
import torch

from tests.golden import cartpole_reference

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "cartpole_e2e.npz"
TORCH_PIN = "2.13.0"


def build() -> dict[str, np.ndarray]:
    result = cartpole_reference.collect()
    data = {
        "meta/torch": np.array(torch.__version__),
        "meta/numpy": np.array(np.__version__),
        "meta/gymnasium": np.array(gymnasium.__version__),
        "meta/python": np.array(platform.python_version()),
    }
    for kind in ("in", "out"):
        for name, value in result[kind].items():
            data[f"{kind}/{name}"] = np.asarray(value)
    return data


def main() -> None:
    if not torch.__version__.startswith(TORCH_PIN):
        raise SystemExit(f"the CartPole fixture is generated with torch=={TORCH_PIN}, found {torch.__version__}")
    torch.set_num_threads(1)
    FIXTURE.parent.mkdir(exist_ok=True)
    np.savez_compressed(FIXTURE, **build())
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
