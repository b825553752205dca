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
import pathlib
import platform

import numpy as np
import torch

from tests.golden import optim_reference as ref

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "optim.npz"
TORCH_PIN = "2.13.0"


def build() -> dict[str, np.ndarray]:
    data = {
        "meta/torch": np.array(torch.__version__),
        "meta/numpy": np.array(np.__version__),
        "meta/python": np.array(platform.python_version()),
    }
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
    if not torch.__version__.startswith(TORCH_PIN):
        raise SystemExit(f"the optimizer fixture is generated with torch=={TORCH_PIN}, found {torch.__version__}")
    torch.set_num_threads(1)
    FIXTURE.parent.mkdir(exist_ok=True)
    np.savez_compressed(FIXTURE, **build())
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
