"""Shared helpers for the golden tests."""

import importlib.util
import pathlib

import numpy as np
import pytest

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
HAS_TORCH = importlib.util.find_spec("torch") is not None


def load(name: str) -> dict:
    with np.load(FIXTURES / f"{name}.npz") as data:
        return {k: data[k] for k in data.files}


def grouped(data: dict) -> dict:
    """{(case, recipe): {"in": {...}, "out": {...}}} from the flat npz keys."""
    out: dict = {}
    for key, value in data.items():
        if key.startswith("meta/"):
            continue
        case, recipe, kind, name = key.split("/")
        out.setdefault((case, recipe), {"in": {}, "out": {}})[kind][name] = value
    return out


def assert_close(actual, expected, rtol=1e-5, scale_atol=1e-5, err_msg=""):
    """docs/semantics.md §18: rtol 1e-5, atol 1e-5 * max(1, max|ref|)."""
    expected = np.asarray(expected)
    scale = max(1.0, float(np.nanmax(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=scale_atol * scale, err_msg=err_msg)


requires_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch==2.13.0 not installed (CI installs it)")
