"""Regenerates the actor-critic and Normal golden fixture from the PyTorch reference.

    python -m pip install torch==2.13.0   # CPU build, the pinned torch
    python -m tests.golden.make_network_fixture

Writes tests/golden/fixtures/networks.npz with keys
`mlp/<config>/<init|perturbed>/{in,out}/<name>` (torch weights under
`in/weights/`, torch layout), `normal/<case>/{in,out}/<name>` and the versions
that produced them under `meta/`. See tests/golden/network_reference.py.
"""

from __future__ import annotations

import pathlib
import platform

import numpy as np
import torch

from tests.golden import network_reference

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "networks.npz"
TORCH_PIN = "2.13.0"


def build() -> dict[str, np.ndarray]:
    data = {
        "meta/torch": np.array(torch.__version__),
        "meta/numpy": np.array(np.__version__),
        "meta/python": np.array(platform.python_version()),
    }
    for family, cases in (("mlp", network_reference.mlp_cases()), ("normal", network_reference.normal_cases())):
        for case, result in cases.items():
            for kind in ("in", "out"):
                for name, value in result[kind].items():
                    data[f"{family}/{case}/{kind}/{name}"] = np.asarray(value)
    return data


def main() -> None:
    if not torch.__version__.startswith(TORCH_PIN):
        raise SystemExit(f"the network fixture is generated with torch=={TORCH_PIN}, found {torch.__version__}")
    torch.set_num_threads(1)
    FIXTURE.parent.mkdir(exist_ok=True)
    np.savez_compressed(FIXTURE, **build())
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
