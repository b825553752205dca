"""Categorical (torch's logits and probs paths) and the A2C loss, values and gradients."""

import jax
import numpy as np
import pytest

from jaxrl_rollout.compat import a2c
from jaxrl_rollout.distributions import categorical_from_logits, categorical_from_probs
from tests.golden import cases
from tests.golden.conftest import load, requires_torch

DATA = load("distributions")
CASES = {}
for key, value in DATA.items():
    if not key.startswith("meta/"):
        case, kind, name = key.split("/", 2)
        CASES.setdefault(case, {"in": {}, "out": {}})[kind][name] = value
TOL = dict(rtol=1e-5, atol=1e-5)  # docs/semantics.md §18 for distributions and the A2C loss


def jax_outputs(inp):
    a2c_in = {k[len("a2c/"):]: v for k, v in inp.items() if k.startswith("a2c/")}
    logits, probs = categorical_from_logits(inp["logits"]), categorical_from_probs(inp["probs"])

    def total(values, probs_):
        return a2c.a2c_loss(values, probs_, a2c_in["actions"], a2c_in["returns"],
                            a2c_in["value_loss_coef"], a2c_in["entropy_coef"])

    (loss, parts), (g_values, g_probs) = jax.value_and_grad(total, argnums=(0, 1), has_aux=True)(
        a2c_in["values"], a2c_in["probs"]
    )
    out = {
        "logits_log_prob": logits.log_prob(inp["actions"]), "logits_entropy": logits.entropy(),
        "probs_log_prob": probs.log_prob(inp["actions"]), "probs_entropy": probs.entropy(),
        "a2c/total": loss, "a2c/grad_values": g_values, "a2c/grad_probs": g_probs,
    }
    out.update({f"a2c/{k}": v for k, v in parts.items()})
    return out


def test_cases_and_fixture_agree():
    assert set(CASES) == {name for name, _ in cases.distribution_cases()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torch(case):
    got = jax_outputs(CASES[case]["in"])
    expected = CASES[case]["out"]
    assert set(got) == set(expected)
    for name, ref in expected.items():
        np.testing.assert_allclose(np.asarray(got[name]), ref, err_msg=f"{case}/{name}", **TOL)
    # The probs path saturates at log(eps) where a probability is 0; log_softmax would not.
    assert np.min(np.asarray(got["probs_log_prob"])) >= np.log(np.finfo(np.float32).eps) - 1e-4
    # -inf logits: torch's clamp gives a finite entropy where a naive one is NaN.
    assert np.all(np.isfinite(np.asarray(got["logits_entropy"])))


@requires_torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_live_reference_reproduces_fixture(case):
    from tests.golden import references

    inp = CASES[case]["in"]
    a2c_in = {k[len("a2c/"):]: v for k, v in inp.items() if k.startswith("a2c/")}
    live = references.categorical(inp["logits"], inp["probs"], inp["actions"])
    live.update({f"a2c/{k}": v for k, v in references.a2c_loss(**a2c_in).items()})
    for name, ref in CASES[case]["out"].items():
        np.testing.assert_allclose(live[name], ref, rtol=1e-6, atol=1e-6, err_msg=f"{case}/{name}")
