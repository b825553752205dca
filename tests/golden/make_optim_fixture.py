"""Regenerates the optimizer golden fixture from the PyTorch references.

    python -m pip install torch==2.13.0   # CPU build, the pinned version
    python -m tests.golden.make_optim_fixture

Writes tests/golden/fixtures/optim.npz (see tests/golden/optim_reference.py):

    in/params/<name>, in/grads/<name>        initial parameters, [200, ...] gradients
    optim/<case>/config                      the case's torch hyperparameters, JSON
    optim/<case>/out/params/<name>           [200, ...] parameters after every step
    optim/<case>/out/state/<moment>/<name>   final optimizer state
    optim/<case>/out/grad_norm               [200] pre-clip norms (clipped cases)
    clip/<case>/in/{w,b,max_norm}, clip/<case>/out/{w,b,total_norm}
    meta/torch, meta/numpy, meta/python
"""

from __future__ import annotations

import json

import numpy as np

from tests.golden import optim_reference as ref
from tests.golden.make_fixtures import meta


def build() -> dict[str, np.ndarray]:
    data = meta()
    for name, value in ref.initial_params().items():
        data[f"in/params/{name}"] = value
    for name, value in ref.gradient_sequence().items():
        data[f"in/grads/{name}"] = value
    for case, config in ref.OPTIMIZER_CASES.items():
        data[f"optim/{case}/config"] = np.array(json.dumps(config, sort_keys=True))
        for key, value in ref.run_optimizer(config).items():
            data[f"optim/{case}/out/{key}"] = value
    for case, inputs in ref.clip_cases().items():
        data[f"clip/{case}/in/w"] = inputs["w"]
        data[f"clip/{case}/in/b"] = inputs["b"]
        data[f"clip/{case}/in/max_norm"] = np.asarray(inputs["max_norm"], np.float64)
        for key, value in ref.run_clip(**inputs).items():
            data[f"clip/{case}/out/{key}"] = value
    return data


def main() -> None:
    from tests.golden.make_fixtures import write_fixture

    write_fixture("optim", build)


if __name__ == "__main__":
    main()
