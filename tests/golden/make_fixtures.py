"""Regenerates the golden fixtures from the PyTorch references.

    python -m pip install torch==2.13.0   # CPU build, the pinned version
    python -m tests.golden.make_fixtures

Writes tests/golden/fixtures/*.npz with the inputs, the references' outputs
and the versions that produced them (float32 throughout, on CPU).
"""

from __future__ import annotations

import pathlib
import platform

import numpy as np
import torch

from tests.golden import cases, references

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
TORCH_PIN = "2.13.0"


def _meta() -> dict:
    return {
        "meta/torch": np.array(torch.__version__),
        "meta/numpy": np.array(np.__version__),
        "meta/python": np.array(platform.python_version()),
    }


def estimator_fixtures() -> dict:
    data = _meta()
    for case, recipes in cases.all_cases():
        for recipe, inputs in recipes.items():
            outputs = references.ESTIMATOR_REFERENCES[recipe](**inputs)
            for k, v in inputs.items():
                data[f"{case}/{recipe}/in/{k}"] = np.asarray(v)
            for k, v in outputs.items():
                data[f"{case}/{recipe}/out/{k}"] = np.asarray(v)
    return data


def main() -> None:
    if not torch.__version__.startswith(TORCH_PIN):
        raise SystemExit(f"fixtures are generated with torch=={TORCH_PIN}, found {torch.__version__}")
    torch.set_num_threads(1)
    FIXTURES.mkdir(exist_ok=True)
    for name, build in [("estimators", estimator_fixtures)]:
        path = FIXTURES / f"{name}.npz"
        np.savez_compressed(path, **build())
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
