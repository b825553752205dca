"""Collector recipes (torch-ac, ilpyt, rlplay) against their PyTorch references.

The JAX runs sample actions with jax.random; the references replay them, so
the fixture's action inputs must equal what the JAX run samples today.
"""

import numpy as np
import pytest

from tests.golden import collector_runs as runs
from tests.golden.conftest import assert_close, load, requires_torch

DATA = load("collectors")
RUNS = {}
for key, value in DATA.items():
    if key.startswith("meta/"):
        continue
    run, kind, name = key.split("/", 2)
    RUNS.setdefault(run, {"in": {}, "out": {}})[kind][name] = value

JAX = {
    "torch_ac_feedforward": lambda: runs.torch_ac_run(False),
    "torch_ac_recurrent": lambda: runs.torch_ac_run(True),
    "ilpyt": runs.ilpyt_run,
    "rlplay_plain_feedforward": lambda: runs.rlplay_run(False, False),
    "rlplay_plain_recurrent": lambda: runs.rlplay_run(False, True),
    "rlplay_sticky_feedforward": lambda: runs.rlplay_run(True, False),
    "rlplay_sticky_recurrent": lambda: runs.rlplay_run(True, True),
    "rlplay_evaluate": runs.rlplay_evaluate_run,
}
EXACT = ("action", "act", "stepno", "fin", "dones", "mask", "stuck", "info_count", "info_env", "num_frames", "num_steps", "states", "obs")


def test_every_collector_has_a_fixture():
    assert set(RUNS) == set(JAX)


@pytest.mark.parametrize("run", sorted(JAX))
def test_collector_matches_reference(run):
    got = JAX[run]()
    entry = RUNS[run]
    for name, forced in entry["in"].items():
        np.testing.assert_array_equal(got[name], forced, err_msg=f"{run}: teacher-forced {name} drifted")
    for name, expected in entry["out"].items():
        assert name in got, f"{run}: JAX run lacks {name}"
        actual = got[name]
        if run.startswith("rlplay") and name.endswith("/act"):
            # Row 0 of the first fragment is rlplay's undefined a_{-1}; stuck rows hold
            # actions that were never taken (docs/semantics.md §15.3): both sides record them anyway.
            pass
        assert np.shape(actual) == np.shape(expected), f"{run}/{name}: {np.shape(actual)} vs {np.shape(expected)}"
        if name.split("/")[-1].split(".")[-1] in EXACT or name.endswith(("actions", "info_length")):
            np.testing.assert_array_equal(np.asarray(actual, np.float64), np.asarray(expected, np.float64), err_msg=f"{run}/{name}")
        else:
            assert_close(actual, expected, err_msg=f"{run}/{name}")


@requires_torch
@pytest.mark.parametrize("run", sorted(JAX))
def test_live_reference_reproduces_fixture(run):
    from tests.golden import collector_references as ref
    from tests.golden import walk

    w, entry = walk.make_weights(), RUNS[run]
    inp = entry["in"]
    if run.startswith("torch_ac"):
        rec = run.endswith("recurrent")
        live = ref.torch_ac(w, [inp["call0/actions"], inp["call1/actions"]], rec, not rec, runs.GAMMA, runs.LAM)
    elif run == "ilpyt":
        live = ref.ilpyt(w, [inp["batch0/actions"], inp["batch1/actions"]], inp["episodes/step_actions"], 5, 6)
    elif run == "rlplay_evaluate":
        live = ref.rlplay_evaluate(w, inp["info/action"], 20, 6)
    else:
        _, mode, kind = run.split("_")
        live = ref.rlplay_collect(w, [inp["frag0/actor.action"], inp["frag1/actor.action"]],
                                  mode == "sticky", kind == "recurrent", runs.GAMMA, runs.LAM, 6)
    assert set(live) == set(entry["out"])
    for name, expected in entry["out"].items():
        np.testing.assert_allclose(np.asarray(live[name], np.float64), np.asarray(expected, np.float64),
                                   rtol=1e-6, atol=1e-6, err_msg=f"{run}/{name}")
