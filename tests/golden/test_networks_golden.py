"""`ActorCriticMLP` and `DiagGaussian` against CleanRL's torch `Agent` and `torch.distributions.Normal`.

The torch weights stored in fixtures/networks.npz are copied into the flax
module (Dense kernel = Linear weight transposed, log_std = actor_logstd[0]);
logits / means, values, log-probs of the stored actions and entropies must
agree within rtol 1e-5, atol 1e-5 (docs/semantics.md §18). Each config is
checked at CleanRL's init and with perturbed weights (outputs of order 1 to
1e3, where the init's 0.01 actor head would hide a wrong head).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout.distributions import Categorical, DiagGaussian, diag_gaussian
from jaxrl_rollout.networks import ActorCriticMLP
from tests.golden.conftest import assert_close, load, requires_torch

DATA = load("networks")
TOL = dict(rtol=1e-5, atol=1e-5)
TORCH_PIN = "2.13.0"


def _cases(family: str) -> dict:
    cases: dict = {}
    for key, value in DATA.items():
        if key.startswith(family + "/"):
            rest = key[len(family) + 1:]
            for kind in ("/in/", "/out/"):
                if kind in rest:
                    case, name = rest.split(kind, 1)
                    cases.setdefault(case, {"in": {}, "out": {}})[kind.strip("/")][name] = value
    return cases


MLP = _cases("mlp")
NORMAL = _cases("normal")


def module_for(inputs: dict) -> ActorCriticMLP:
    return ActorCriticMLP(
        action_dim=int(inputs["action_dim"]),
        continuous=bool(inputs["continuous"]),
        hidden_sizes=tuple(int(h) for h in inputs["hidden_sizes"]),
        activation=str(inputs["activation"]),
        shared_trunk=bool(inputs["shared_trunk"]),
    )


def flax_params_from_torch(inputs: dict) -> dict:
    """torch state_dict -> flax params: `{p}_trunk.{2i}` -> `{p}_hidden_{i}`, kernels transposed."""
    params: dict = {}
    for key, w in inputs.items():
        if not key.startswith("weights/"):
            continue
        name = key[len("weights/"):]
        if name == "actor_logstd":
            params["log_std"] = jnp.asarray(w.reshape(-1))
            continue
        layer, kind = name.rsplit(".", 1)
        if "_trunk." in layer:
            prefix, index = layer.split("_trunk.")
            layer = f"{prefix}_hidden_{int(index) // 2}"
        params.setdefault(layer, {})["kernel" if kind == "weight" else "bias"] = jnp.asarray(
            w.T if kind == "weight" else w
        )
    return {"params": params}


def jax_outputs(inputs: dict) -> dict:
    module = module_for(inputs)
    dist, value = module.apply(flax_params_from_torch(inputs), inputs["obs"])
    out = {"value": value, "log_prob": dist.log_prob(inputs["actions"]), "entropy": dist.entropy()}
    if isinstance(dist, DiagGaussian):
        out.update(mean=dist.mean, std=jnp.exp(dist.log_std))
    else:
        assert isinstance(dist, Categorical)
        out.update(logits=dist.logits, probs=dist.probs)
    return out


@functools.cache
def all_jax_outputs() -> dict:
    """Every MLP and Normal case in one jitted program (one compile instead of one per case).

    The fixture's arrays enter as constants; module configs are static.
    """

    def run():
        out = {f"mlp/{case}": jax_outputs(c["in"]) for case, c in MLP.items()}
        for case, c in NORMAL.items():
            dist = diag_gaussian(c["in"]["mean"], c["in"]["log_std"])
            out[f"normal/{case}"] = {"log_prob": dist.log_prob(c["in"]["x"]), "entropy": dist.entropy()}
        return out

    return jax.tree.map(np.asarray, jax.jit(run)())


def test_fixture_was_made_with_the_pinned_torch():
    assert str(DATA["meta/torch"]).startswith(TORCH_PIN)
    assert len(MLP) == 8 and set(NORMAL) == {"moderate", "pendulum", "broadcast", "extreme"}


@pytest.mark.parametrize("case", sorted(c for c in MLP if c.endswith("/init")))
def test_torch_weights_fill_the_flax_param_tree(case):
    # Every flax parameter has a torch counterpart of the same shape and vice versa.
    inputs = MLP[case]["in"]
    init = jax.eval_shape(module_for(inputs).init, jax.random.key(0), inputs["obs"])
    copied = flax_params_from_torch(inputs)
    assert jax.tree.structure(init) == jax.tree.structure(copied)
    assert jax.tree.map(jnp.shape, init) == jax.tree.map(jnp.shape, copied)


@pytest.mark.parametrize("case", sorted(MLP))
def test_mlp_matches_torch(case):
    got = all_jax_outputs()[f"mlp/{case}"]
    expected = MLP[case]["out"]
    assert set(got) == set(expected)
    for name, ref in expected.items():
        np.testing.assert_allclose(got[name], ref, err_msg=f"{case}/{name}", **TOL)


@pytest.mark.parametrize("case", sorted(NORMAL))
def test_diag_gaussian_matches_torch_normal(case):
    expected = NORMAL[case]["out"]
    got = all_jax_outputs()[f"normal/{case}"]
    log_prob, entropy = got["log_prob"], got["entropy"]
    np.testing.assert_allclose(log_prob, expected["log_prob"], err_msg=f"{case}/log_prob", **TOL)
    np.testing.assert_allclose(entropy, expected["entropy"], err_msg=f"{case}/entropy", **TOL)
    assert np.all(np.isfinite(log_prob))  # sigma^2 = inf rows stay finite, as in torch


@requires_torch
def test_live_reference_reproduces_fixture():
    import torch

    from tests.golden import make_network_fixture

    # The fixture is generated single-threaded: with more threads torch's
    # orthogonal_ (a LAPACK QR) moves init weights by up to 2.5e-7 (measured), and another
    # processor's LAPACK kernels by up to 3e-6 in the outputs (a Xeon, against the fixture's
    # machine), so floats are held to the golden tolerance.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        live = make_network_fixture.build()
    finally:
        torch.set_num_threads(threads)
    assert set(live) == set(DATA)
    for key, ref in DATA.items():
        if key.startswith("meta/"):
            continue
        if ref.dtype.kind in "fc":
            assert_close(live[key], ref, err_msg=key)
        else:
            np.testing.assert_array_equal(live[key], ref, err_msg=key)
