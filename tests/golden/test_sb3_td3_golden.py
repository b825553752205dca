"""Whole Stable-Baselines3 TD3 training steps against SB3 itself (docs/semantics.md §21.7).

The fixture (tests/golden/sb3_td3_reference.py) is SB3 2.9.2's own
`TD3.train` on torch 2.13.0: six calls, eight gradient steps, `_n_updates`
1..8. Here the same eight steps are rebuilt from
`jaxrl_rollout.actor_critic_losses` (plain-function MLPs on SB3's
state-dict layout, the library's torch-exact Adam) as one jitted `lax.scan`,
the delayed update under `lax.cond` on `delayed_update_due(n_updates,
policy_delay)`, and compared with what SB3 did: the dones it sampled, the
target actor's output and the smoothed next actions at every step, the
losses it logged and every parameter (online and target) after every call.
Max abs error 1e-5.
"""

import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl_rollout import actor_critic_losses as acl
from jaxrl_rollout import optim
from tests.golden.conftest import load, requires_torch

DATA = load("sb3_td3")
IN = {k[len("in/"):]: v for k, v in DATA.items() if k.startswith("in/")}
SB3 = {k[len("sb3/"):]: v for k, v in DATA.items() if k.startswith("sb3/")}
ATOL = 1e-5  # max abs error, float32

# Mirrors tests/golden/sb3_td3_reference.py (kept apart so these tests run without torch and SB3).
LR, GAMMA, TAU, POLICY_DELAY, POLICY_NOISE, NOISE_CLIP = 1e-3, 0.99, 0.05, 2, 0.3, 0.4
NETS = ("actor", "actor_target", "critic", "critic_target")
CALL_ENDS = np.cumsum(IN["gradient_steps"])  # _n_updates after each train() call

requires_sb3 = pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None,
                                  reason="stable-baselines3==2.9.2 not installed (CI installs it)")


def weights(net: str) -> dict:
    prefix = f"weights/{net}/"
    return {k[len(prefix):]: jnp.asarray(v) for k, v in IN.items() if k.startswith(prefix)}


def mlp(p: dict, prefix: str, x):
    """SB3's `create_mlp` Sequential: Linear, ReLU, Linear, ReLU, Linear (torch layout, W [out, in])."""
    for i in (0, 2, 4):
        x = x @ p[f"{prefix}.{i}.weight"].T + p[f"{prefix}.{i}.bias"]
        x = jax.nn.relu(x) if i < 4 else x
    return x


def actor(p: dict, obs):
    """SB3's TD3 `Actor`: tanh at the end, actions in the scaled space [-1, 1]."""
    return jnp.tanh(mlp(p, "mu", obs))


def q_value(p: dict, i: int, obs, action):
    """SB3's `ContinuousCritic` head `qf{i}` on cat(obs, action): [B]."""
    return mlp(p, f"qf{i}", jnp.concatenate([obs, action], axis=1))[:, 0]


@functools.cache
def rebuild(first_update: int = 1, bootstrap_on_truncation: bool = True) -> dict:
    """SB3's eight gradient steps from the library's functions; `first_update` is the counter at the first step."""
    buf = {k: jnp.asarray(IN[k]) for k in ("obs", "next_obs", "actions", "rewards", "terminated", "truncated")}
    c_tx, a_tx = optim.torch_adam(LR), optim.torch_adam(LR)
    online = {"actor": weights("actor"), "critic": weights("critic")}
    targets = {"actor": weights("actor_target"), "critic": weights("critic_target")}

    def step(state, inputs):
        online, targets, c_state, a_state = state
        n_updates, inds, noise = inputs
        b = jax.tree.map(lambda x: x[inds], buf)  # the transitions SB3's sample drew
        mu_target = actor(targets["actor"], b["next_obs"])
        # SB3's smoothing in its scaled action space: scale 1, bounds -1 and 1
        next_actions = acl.td3_target_actions(mu_target, noise, 1.0, POLICY_NOISE, NOISE_CLIP, -1.0, 1.0)
        target = acl.td3_critic_target(q_value(targets["critic"], 0, b["next_obs"], next_actions),
                                       q_value(targets["critic"], 1, b["next_obs"], next_actions),
                                       b["rewards"], b["terminated"], b["truncated"], GAMMA,
                                       bootstrap_on_truncation=bootstrap_on_truncation)
        critic_loss, grads = jax.value_and_grad(lambda p: acl.twin_critic_loss(  # SB3's TD3: the plain sum
            q_value(p, 0, b["obs"], b["actions"]), q_value(p, 1, b["obs"], b["actions"]), target, scale=1.0)[0])(online["critic"])
        updates, c_state = c_tx.update(grads, c_state, online["critic"])
        online = {**online, "critic": optax.apply_updates(online["critic"], updates)}

        def delayed(operand):
            online, targets, a_state = operand
            loss, grads = jax.value_and_grad(lambda p: acl.td3_actor_loss(
                q_value(online["critic"], 0, b["obs"], actor(p, b["obs"])))[0])(online["actor"])
            updates, a_state = a_tx.update(grads, a_state, online["actor"])
            online = {**online, "actor": optax.apply_updates(online["actor"], updates)}
            return online, acl.polyak_update(online, targets, TAU), a_state, loss

        def skip(operand):
            return (*operand, jnp.float32(jnp.nan))

        online, targets, a_state, actor_loss = jax.lax.cond(
            acl.delayed_update_due(n_updates, POLICY_DELAY), delayed, skip, (online, targets, a_state))
        done = acl.bootstrap_done(b["terminated"], b["truncated"], bootstrap_on_truncation=bootstrap_on_truncation)
        record = {"critic_loss": critic_loss, "actor_loss": actor_loss, "dones": done, "mu_target": mu_target,
                  "next_actions": next_actions, "params": {"actor": online["actor"], "actor_target": targets["actor"],
                                                           "critic": online["critic"], "critic_target": targets["critic"]}}
        return (online, targets, c_state, a_state), record

    init = (online, targets, c_tx.init(online["critic"]), a_tx.init(online["actor"]))
    steps = len(IN["noise"])
    xs = (jnp.arange(first_update, first_update + steps), jnp.asarray(IN["batch_inds"]), jnp.asarray(IN["noise"]))
    _, rec = jax.jit(lambda s, xs: jax.lax.scan(step, s, xs))(init, xs)
    rec = jax.tree.map(np.asarray, rec)
    ends = CALL_ENDS - 1
    starts = np.concatenate([[0], CALL_ENDS[:-1]])
    out = {k: rec[k] for k in ("dones", "mu_target", "next_actions")}
    # what SB3 logs per call: the mean of the call's critic losses, of its actor losses (none: NaN here)
    out["critic_loss"] = np.array([rec["critic_loss"][s:e].mean() for s, e in zip(starts, CALL_ENDS, strict=True)])
    out["actor_loss"] = np.array([
        np.nan if np.all(np.isnan(a := rec["actor_loss"][s:e])) else np.nanmean(a) for s, e in zip(starts, CALL_ENDS, strict=True)])
    out["n_updates"] = CALL_ENDS + (first_update - 1)
    out.update({f"params/{net}/{k}": v[ends] for net, p in rec["params"].items() for k, v in p.items()})
    return out


def max_errors(got: dict) -> dict:
    return {k: float(np.nanmax(np.abs(np.asarray(got[k], np.float64) - SB3[k]))) for k in SB3}


def test_fixture_was_made_with_the_pinned_torch_and_sb3():
    assert str(DATA["meta/torch"]).startswith("2.13.0")
    assert str(DATA["meta/stable_baselines3"]) == "2.9.2"


def test_sb3_td3_steps_match_sb3():
    got = rebuild()
    assert set(got) == set(SB3)
    np.testing.assert_array_equal(got["n_updates"], SB3["n_updates"])
    for key, value in SB3.items():
        # NaN where SB3 logged no actor loss, and only there
        np.testing.assert_allclose(got[key], value, rtol=0, atol=ATOL, equal_nan=True, err_msg=key)
    assert max(max_errors(got).values()) <= ATOL


def test_the_case_exercises_every_branch():
    inds = IN["batch_inds"]
    term, trunc = IN["terminated"][inds], IN["truncated"][inds]
    # every flag combination is sampled, pure time limits included, and SB3's buffer keeps only terminations
    assert (term & trunc).any() and (trunc & ~term).any() and (term & ~trunc).any() and (~term & ~trunc).any()
    np.testing.assert_array_equal(SB3["dones"], term.astype(np.float32))
    # the noise clip binds, and the smoothed actions are clipped at both bounds of [-1, 1]
    assert np.any(np.abs(IN["noise"] * POLICY_NOISE) > NOISE_CLIP)
    assert np.any(SB3["next_actions"] == 1.0) and np.any(SB3["next_actions"] == -1.0)
    # SB3's counter: 1..5 over five calls of one step, then 8 after a call of three
    np.testing.assert_array_equal(SB3["n_updates"], [1, 2, 3, 4, 5, 8])
    # the actor and the targets move exactly at the even counts: not in calls 1, 3, 5 (n = 1, 3, 5)
    np.testing.assert_array_equal(np.isnan(SB3["actor_loss"]), [True, False, True, False, True, False])
    for net in ("actor", "actor_target", "critic_target"):
        for key in (k for k in SB3 if k.startswith(f"params/{net}/")):
            before = np.concatenate([IN[f"weights/{key[len('params/'):]}"][None], SB3[key]])
            moved = [not np.array_equal(before[i], before[i + 1]) for i in range(len(SB3[key]))]
            assert moved == [False, True, False, True, False, True], key
    # the critics step every time
    key = "params/critic/qf0.0.weight"
    assert not np.array_equal(SB3[key][0], IN["weights/critic/qf0.0.weight"])


@pytest.mark.parametrize(("first_update", "bootstrap_on_truncation"), [(0, True), (1, False)])
def test_the_golden_tells_a_wrong_counter_or_timeout_handling_apart(first_update, bootstrap_on_truncation):
    """Counting from 0 (the actor moves on odd steps), or a time limit ending the bootstrap, misses SB3 by far more than 1e-5."""
    errors = max_errors(rebuild(first_update, bootstrap_on_truncation))
    assert max(v for k, v in errors.items() if k.startswith("params/")) > 100 * ATOL


@requires_torch
@requires_sb3
def test_live_sb3_reproduces_fixture():
    from tests.golden import sb3_td3_reference as ref

    live = ref.run()
    fixture = {k: v for k, v in DATA.items() if not k.startswith("meta/") or k == "meta/stable_baselines3"}
    assert set(live) == set(fixture)
    for k, v in live.items():
        if v.dtype.kind in "biU":
            np.testing.assert_array_equal(v, fixture[k], err_msg=k)
        else:
            np.testing.assert_allclose(v, fixture[k], rtol=1e-6, atol=1e-6, equal_nan=True, err_msg=k)
