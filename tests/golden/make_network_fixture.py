"""Regenerates the actor-critic and Normal golden fixture from the PyTorch reference.

    python -m pip install torch==2.13.0   # CPU build, the pinned torch
    python -m tests.golden.make_network_fixture

Writes tests/golden/fixtures/networks.npz with keys
`mlp/<config>/<init|perturbed>/{in,out}/<name>` (torch weights under
`in/weights/`, torch layout), `normal/<case>/{in,out}/<name>` and the versions
that produced them under `meta/`. See tests/golden/network_reference.py.
"""

from __future__ import annotations

import numpy as np

from tests.golden import network_reference
from tests.golden.make_fixtures import meta


def build() -> dict[str, np.ndarray]:
    data = meta()
    for family, cases in (("mlp", network_reference.mlp_cases()), ("normal", network_reference.normal_cases())):
        for case, result in cases.items():
            for kind in ("in", "out"):
                for name, value in result[kind].items():
                    data[f"{family}/{case}/{kind}/{name}"] = np.asarray(value)
    return data


def main() -> None:
    from tests.golden.make_fixtures import write_fixture

    write_fixture("networks", build)


if __name__ == "__main__":
    main()
