"""Regenerates the golden fixtures from the PyTorch references.

    python -m pip install torch==2.13.0   # CPU build, the pinned version
    python -m pip install stable-baselines3==2.9.2 --no-deps   # for sb3_td3 (make_sb3_td3_fixture)
    python -m tests.golden.make_fixtures

Writes tests/golden/fixtures/*.npz with the inputs, the references' outputs
and the versions that produced them (float32 throughout, on CPU): the
estimator recipes, the collectors (torch-ac, ilpyt, rlplay) and the
end-to-end CartPole run (tests/golden/cartpole_reference.py), and SB3's own
TD3 steps (tests/golden/sb3_td3_reference.py).
"""

from __future__ import annotations

import pathlib
import platform

import numpy as np
import torch

from tests.golden import cases, references

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
TORCH_PIN = "2.13.0"


def meta() -> dict:
    return {
        "meta/torch": np.array(torch.__version__),
        "meta/numpy": np.array(np.__version__),
        "meta/python": np.array(platform.python_version()),
    }


def estimator_fixtures() -> dict:
    data = meta()
    for case, recipes in cases.all_cases():
        for recipe, inputs in recipes.items():
            outputs = references.ESTIMATOR_REFERENCES[recipe](**inputs)
            for k, v in inputs.items():
                data[f"{case}/{recipe}/in/{k}"] = np.asarray(v)
            for k, v in outputs.items():
                data[f"{case}/{recipe}/out/{k}"] = np.asarray(v)
    return data


def distribution_fixtures() -> dict:
    """Categorical log-probs and entropies (both torch paths) and the A2C loss with gradients."""
    from tests.golden import cases

    data = meta()
    for case, inputs in cases.distribution_cases():
        outputs = references.categorical(**{k: inputs[k] for k in ("logits", "probs", "actions")})
        outputs.update({f"a2c/{k}": v for k, v in references.a2c_loss(**inputs["a2c"]).items()})
        for k, v in inputs.items():
            if k == "a2c":
                for kk, vv in v.items():
                    data[f"{case}/in/a2c/{kk}"] = np.asarray(vv)
            else:
                data[f"{case}/in/{k}"] = np.asarray(v)
        for k, v in outputs.items():
            data[f"{case}/out/{k}"] = np.asarray(v)
    return data


def update_fixtures() -> dict:
    """One CleanRL PPO update and one A2C agent update (docs/semantics.md §9) from the same weights and batch."""
    from tests.golden import ppo_reference

    case = ppo_reference.make_case()
    data = meta()
    for k, v in case.items():
        if k == "weights":
            data.update({f"in/weights/{name}": w for name, w in v.items()})
        else:
            data[f"in/{k}"] = np.asarray(v)
    data.update({f"ppo/{k}": np.asarray(v) for k, v in ppo_reference.ppo_update(case).items()})
    data.update({f"a2c/{k}": np.asarray(v) for k, v in ppo_reference.a2c_update(case).items()})
    return data


def collector_fixtures() -> dict:
    """JAX runs sample the actions; the PyTorch references replay them and compute the rest."""
    from tests.golden import collector_references as ref
    from tests.golden import collector_runs as runs
    from tests.golden import walk

    weights = walk.make_weights()
    data = meta()

    def put(run, inputs, outputs):
        for k, v in inputs.items():
            data[f"{run}/in/{k}"] = np.asarray(v)
        for k, v in outputs.items():
            data[f"{run}/out/{k}"] = np.asarray(v)

    g, lam = runs.GAMMA, runs.LAM
    for recurrent in (False, True):
        jax_out = runs.torch_ac_run(recurrent)
        actions = [jax_out["call0/actions"], jax_out["call1/actions"]]
        outputs = ref.torch_ac(weights, actions, recurrent, reshape=not recurrent, gamma=g, gae_lambda=lam)
        put(f"torch_ac_{'recurrent' if recurrent else 'feedforward'}",
            {"call0/actions": actions[0], "call1/actions": actions[1]}, outputs)
    jax_out = runs.ilpyt_run()
    inputs = {k: jax_out[k] for k in ("batch0/actions", "batch1/actions", "episodes/step_actions")}
    outputs = ref.ilpyt(weights, [inputs["batch0/actions"], inputs["batch1/actions"]],
                        inputs["episodes/step_actions"], num_episodes=5, max_steps=6)
    put("ilpyt", inputs, outputs)
    for sticky in (False, True):
        for recurrent in (False, True):
            jax_out = runs.rlplay_run(sticky, recurrent)
            inputs = {k: jax_out[k] for k in ("frag0/actor.action", "frag1/actor.action")}
            outputs = ref.rlplay_collect(weights, [inputs["frag0/actor.action"], inputs["frag1/actor.action"]],
                                         sticky, recurrent, g, lam, max_steps=6)
            put(f"rlplay_{'sticky' if sticky else 'plain'}_{'recurrent' if recurrent else 'feedforward'}",
                inputs, outputs)
    jax_out = runs.rlplay_evaluate_run()
    put("rlplay_evaluate", {"info/action": jax_out["info/action"]},
        ref.rlplay_evaluate(weights, jax_out["info/action"], n_steps=20, max_steps=6))
    return data


def write_fixture(name: str, build) -> None:
    """Builds one fixture with the pinned torch on one thread and writes fixtures/<name>.npz."""
    if not torch.__version__.startswith(TORCH_PIN):
        raise SystemExit(f"fixtures are generated with torch=={TORCH_PIN}, found {torch.__version__}")
    torch.set_num_threads(1)  # torch's orthogonal_ init depends on the thread count
    FIXTURES.mkdir(exist_ok=True)
    path = FIXTURES / f"{name}.npz"
    np.savez_compressed(path, **build())
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


def main() -> None:
    from tests.golden import (
        make_actor_critic_fixture,
        make_cartpole_fixture,
        make_network_fixture,
        make_optim_fixture,
        make_sb3_td3_fixture,
    )

    builders = [
        ("estimators", estimator_fixtures),
        ("collectors", collector_fixtures),
        ("distributions", distribution_fixtures),
        ("updates", update_fixtures),
        ("optim", make_optim_fixture.build),
        ("networks", make_network_fixture.build),
        ("cartpole_e2e", make_cartpole_fixture.build),
        ("actor_critic", make_actor_critic_fixture.build),
        ("sb3_td3", make_sb3_td3_fixture.build),
    ]
    for name, build in builders:
        write_fixture(name, build)


if __name__ == "__main__":
    main()
