"""Estimator recipes against the PyTorch references' fixtures (and live when torch is installed)."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout import advantages
from jaxrl_rollout.compat import a2c, arena, cleanrl, ilpyt, rlplay, sb3, torch_ac
from tests.golden import cases
from tests.golden.conftest import assert_close, grouped, load, requires_torch

FIXTURE = grouped(load("estimators"))


def _pair(advantages_, returns_):
    return {"advantages": advantages_, "returns": returns_}


JAX_RECIPES = {
    "cleanrl": lambda **kw: _pair(*cleanrl.compute_gae(**kw)),
    "torch_ac": lambda **kw: _pair(*torch_ac.compute_gae(**kw)),
    "arena": lambda **kw: {"advantages": arena.compute_advantages(**kw)},
    "sb3": lambda **kw: _pair(*sb3.compute_returns_and_advantage(**kw)),
    "torchrl": lambda **kw: _pair(*advantages.gae(**kw)),
    "a2c": lambda **kw: {"returns": a2c.runner_returns(**kw)},
    "ilpyt": lambda **kw: {"returns": ilpyt.compute_target(**kw)},
    "rlplay": lambda rew, fin, value, gamma, gae_lambda: {
        "advantages": rlplay.gae(rew, fin, value, gamma, gae_lambda),
        "returns": rlplay.returns(rew, fin, value, gamma),
    },
}


def test_every_case_and_recipe_has_a_fixture():
    expected = {(case, recipe) for case, recipes in cases.all_cases() for recipe in recipes}
    assert set(FIXTURE) == expected
    assert set(JAX_RECIPES) == {recipe for _, recipe in FIXTURE}


@pytest.mark.parametrize("case,recipe", sorted(FIXTURE))
def test_recipe_matches_reference_fixture(case, recipe):
    entry = FIXTURE[(case, recipe)]
    got = JAX_RECIPES[recipe](**entry["in"])
    assert set(got) == set(entry["out"])
    for name, expected in entry["out"].items():
        assert got[name].dtype == jnp.float32
        assert_close(got[name], expected, err_msg=f"{case}/{recipe}/{name}")


def test_fixture_inputs_are_the_cases():
    # The committed inputs are what cases.py builds today: neither side drifted.
    for case, recipes in cases.all_cases():
        for recipe, inputs in recipes.items():
            for name, value in inputs.items():
                np.testing.assert_array_equal(FIXTURE[(case, recipe)]["in"][name], value)


@requires_torch
@pytest.mark.parametrize("case,recipe", sorted(FIXTURE))
def test_live_reference_reproduces_fixture(case, recipe):
    from tests.golden import references

    entry = FIXTURE[(case, recipe)]
    live = references.ESTIMATOR_REFERENCES[recipe](**entry["in"])
    for name, expected in entry["out"].items():
        np.testing.assert_allclose(live[name], expected, rtol=1e-6, atol=1e-6, err_msg=f"{case}/{recipe}/{name}")


def test_torchrl_truncation_differs_from_treating_it_as_termination():
    # Guards the truncation case: bootstrapping from V(final obs) must matter there.
    entry = FIXTURE[("truncation", "torchrl")]
    kw = dict(entry["in"])
    kw["terminated"] = kw["done"]
    as_termination = advantages.gae(**kw)[0]
    assert not np.allclose(as_termination, entry["out"]["advantages"], atol=1e-3)
