"""SAC (CleanRL's and SB3's) and TD3 (CleanRL's) update math against PyTorch (docs/semantics.md §21).

From the fixture's weights, batch and standard-normal draws, one iteration of
each reference's loop is rebuilt from `jaxrl_rollout.actor_critic_losses`
with plain-function MLPs on torch-layout parameter dicts, the library's
torch-exact Adam and `optax.incremental_update`, and every quantity the
reference records is compared: sampled actions and log-probs, targets, each
loss, the gradients w.r.t. every parameter, the parameters after each Adam
step and the target networks after the Polyak update. Max abs error 1e-5.
`td3_delayed` runs CleanRL's TD3 loop for four steps as one jitted scan with
the delayed update under `lax.cond` on `delayed_update_due`;
`cleanrl_sac_delayed` runs CleanRL's SAC loop for four steps, with its
policy_frequency actor and temperature iterations at the due steps.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl_rollout import actor_critic_losses as acl
from jaxrl_rollout import optim
from tests.golden.conftest import load, requires_torch

DATA = load("actor_critic")
CASE = {k[len("in/"):]: v for k, v in DATA.items() if k.startswith("in/")}
ATOL = 1e-5  # max abs error, float32

# Mirrors tests/golden/actor_critic_reference.py (kept apart so these tests run without torch).
SAC_LOW, SAC_HIGH = np.array([-2.0, -0.5], np.float32), np.array([2.0, 1.5], np.float32)
TD3_LOW, TD3_HIGH = np.array([-2.0, -2.0], np.float32), np.array([2.0, 2.0], np.float32)
GAMMA, TAU, POLICY_NOISE, NOISE_CLIP = 0.99, 0.005, 0.2, 0.5
TARGET_ENTROPY = -2.0  # -prod(action_shape)


def weights(net: str) -> dict:
    prefix = f"weights/{net}/"
    return {k[len(prefix):]: jnp.asarray(v) for k, v in CASE.items() if k.startswith(prefix)}


def linear(p: dict, name: str, x):
    """torch `nn.Linear`: x W^T + b with W [out, in]."""
    return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]


def q_value(p: dict, obs, action):
    """CleanRL's `SoftQNetwork(obs, action).view(-1)`: [B]."""
    x = jnp.concatenate([obs, action], axis=1)
    return linear(p, "fc3", jax.nn.relu(linear(p, "fc2", jax.nn.relu(linear(p, "fc1", x)))))[:, 0]


def sac_actor(p: dict, obs, sb3: bool):
    h = jax.nn.relu(linear(p, "fc2", jax.nn.relu(linear(p, "fc1", obs))))
    raw = linear(p, "fc_logstd", h)
    return linear(p, "fc_mean", h), acl.clip_log_std(raw) if sb3 else acl.tanh_squash_log_std(raw)


def td3_actor(p: dict, obs, scale, bias):
    h = jax.nn.relu(linear(p, "fc2", jax.nn.relu(linear(p, "fc1", obs))))
    return jnp.tanh(linear(p, "fc_mu", h)) * scale + bias


def adam_step(lr, params, grads):
    tx = optim.torch_adam(lr)
    updates, _ = tx.update(grads, tx.init(params), params)
    return optax.apply_updates(params, updates)


def flat(prefix: str, tree: dict) -> dict:
    return {f"{prefix}/{net}/{k}": np.asarray(v) for net, p in tree.items() for k, v in p.items()}


@functools.cache
def cleanrl_sac() -> dict:
    """CleanRL's loop: critic step, actor step with the new critics, temperature step on a fresh sample, Polyak."""
    c = {k: jnp.asarray(v) for k, v in CASE.items() if not k.startswith("weights/")}
    scale, bias = acl.action_scale_and_bias(SAC_LOW, SAC_HIGH)
    actor, log_alpha = weights("sac_actor"), c["log_alpha"]
    critics = {"qf1": weights("qf1"), "qf2": weights("qf2")}
    targets = {"qf1": weights("qf1_target"), "qf2": weights("qf2_target")}
    alpha = jnp.exp(log_alpha)[0]

    def sample(p, obs, noise):
        return acl.tanh_gaussian_sample(*sac_actor(p, obs, sb3=False), noise, scale, bias)

    nxt = sample(actor, c["next_obs"], c["noise_next"])
    target = acl.sac_critic_target(
        q_value(targets["qf1"], c["next_obs"], nxt.action), q_value(targets["qf2"], c["next_obs"], nxt.action),
        nxt.log_prob, c["rewards"], c["terminated"], c["truncated"], GAMMA, alpha, bootstrap_on_truncation=False,
    )

    def critic_loss(q):
        return acl.twin_critic_loss(q_value(q["qf1"], c["obs"], c["sac_actions"]),
                                    q_value(q["qf2"], c["obs"], c["sac_actions"]), target)

    (qf_loss, q_parts), q_grads = jax.value_and_grad(critic_loss, has_aux=True)(critics)
    critics = adam_step(1e-3, critics, q_grads)

    def actor_loss(p):
        s = sample(p, c["obs"], c["noise_pi"])
        loss, _ = acl.sac_actor_loss(s.log_prob, q_value(critics["qf1"], c["obs"], s.action),
                                     q_value(critics["qf2"], c["obs"], s.action), alpha)
        return loss, s

    (a_loss, pi), a_grads = jax.value_and_grad(actor_loss, has_aux=True)(actor)
    actor = adam_step(3e-4, actor, a_grads)

    alpha_sample = sample(actor, c["obs"], c["noise_alpha"])
    (alpha_loss, _), alpha_grad = jax.value_and_grad(
        lambda la: acl.sac_temperature_loss(la, alpha_sample.log_prob, TARGET_ENTROPY, form="cleanrl"), has_aux=True
    )(log_alpha)
    new_log_alpha = adam_step(1e-3, {"a": log_alpha}, {"a": alpha_grad})["a"]
    targets = acl.polyak_update(critics, targets, TAU)
    out = {
        "next_actions": nxt.action, "next_log_pi": nxt.log_prob, "target": target,
        "qf1_loss": q_parts["qf1_loss"], "qf2_loss": q_parts["qf2_loss"], "qf_loss": qf_loss,
        "pi": pi.action, "log_pi": pi.log_prob, "actor_loss": a_loss, "alpha_log_pi": alpha_sample.log_prob,
        "alpha_loss": alpha_loss, "log_alpha": new_log_alpha, "grad/log_alpha": alpha_grad,
        "mean_action_after": sample(actor, c["obs"], c["noise_pi"]).mean_action,
    }
    out.update(flat("grad", {**q_grads, "actor": a_grads}))
    out.update(flat("params", {**critics, "actor": actor, "qf1_target": targets["qf1"], "qf2_target": targets["qf2"]}))
    return out


@functools.cache
def sb3_sac() -> dict:
    """SB3's `SAC.train` step: temperature first, target with the old alpha, critic (0.5 x), actor, Polyak."""
    c = {k: jnp.asarray(v) for k, v in CASE.items() if not k.startswith("weights/")}
    actor, log_alpha = weights("sb3_actor"), c["log_alpha"]
    critics = {"qf1": weights("qf1"), "qf2": weights("qf2")}
    targets = {"qf1": weights("qf1_target"), "qf2": weights("qf2_target")}

    def sample(p, obs, noise):
        return acl.tanh_gaussian_sample(*sac_actor(p, obs, sb3=True), noise, sum_correction_separately=True)

    pi0 = sample(actor, c["obs"], c["noise_pi"])
    alpha = jnp.exp(log_alpha)[0]  # before the temperature step, as SB3's ent_coef
    (alpha_loss, _), alpha_grad = jax.value_and_grad(
        lambda la: acl.sac_temperature_loss(la, pi0.log_prob, TARGET_ENTROPY, form="sb3"), has_aux=True
    )(log_alpha)
    new_log_alpha = adam_step(3e-4, {"a": log_alpha}, {"a": alpha_grad})["a"]

    nxt = sample(actor, c["next_obs"], c["noise_next"])
    target = acl.sac_critic_target(
        q_value(targets["qf1"], c["next_obs"], nxt.action), q_value(targets["qf2"], c["next_obs"], nxt.action),
        nxt.log_prob, c["rewards"], c["terminated"], c["truncated"], GAMMA, alpha, bootstrap_on_truncation=True,
    )

    def critic_loss(q):
        return acl.twin_critic_loss(q_value(q["qf1"], c["obs"], c["sb3_actions"]),
                                    q_value(q["qf2"], c["obs"], c["sb3_actions"]), target, scale=0.5)

    (c_loss, _), q_grads = jax.value_and_grad(critic_loss, has_aux=True)(critics)
    critics = adam_step(3e-4, critics, q_grads)

    def actor_loss(p):
        s = sample(p, c["obs"], c["noise_pi"])  # the same draw SB3 took before the critic step
        return acl.sac_actor_loss(s.log_prob, q_value(critics["qf1"], c["obs"], s.action),
                                  q_value(critics["qf2"], c["obs"], s.action), alpha)[0]

    a_loss, a_grads = jax.value_and_grad(actor_loss)(actor)
    actor = adam_step(3e-4, actor, a_grads)
    targets = acl.polyak_update(critics, targets, TAU)
    out = {
        "done": acl.bootstrap_done(c["terminated"], c["truncated"], bootstrap_on_truncation=True),
        "next_actions": nxt.action, "next_log_pi": nxt.log_prob, "target": target, "critic_loss": c_loss,
        "pi": pi0.action, "log_pi": pi0.log_prob, "actor_loss": a_loss, "alpha_loss": alpha_loss,
        "log_alpha": new_log_alpha, "grad/log_alpha": alpha_grad, "log_std_after": sac_actor(actor, c["obs"], sb3=True)[1],
    }
    out.update(flat("grad", {**q_grads, "actor": a_grads}))
    out.update(flat("params", {**critics, "actor": actor, "qf1_target": targets["qf1"], "qf2_target": targets["qf2"]}))
    return out


@functools.cache
def td3() -> dict:
    """CleanRL's TD3 loop at a delayed-update step: smoothed target, critic step, actor step on -Q1, Polyak."""
    c = {k: jnp.asarray(v) for k, v in CASE.items() if not k.startswith("weights/")}
    scale, bias = acl.action_scale_and_bias(TD3_LOW, TD3_HIGH)
    actor, target_actor = weights("td3_actor"), weights("td3_target_actor")
    critics = {"qf1": weights("qf1"), "qf2": weights("qf2")}
    targets = {"qf1": weights("qf1_target"), "qf2": weights("qf2_target")}
    next_actions = acl.td3_target_actions(td3_actor(target_actor, c["next_obs"], scale, bias), c["noise_td3"], scale,
                                          POLICY_NOISE, NOISE_CLIP, float(TD3_LOW[0]), float(TD3_HIGH[0]))
    target = acl.td3_critic_target(q_value(targets["qf1"], c["next_obs"], next_actions),
                                   q_value(targets["qf2"], c["next_obs"], next_actions),
                                   c["rewards"], c["terminated"], c["truncated"], GAMMA, bootstrap_on_truncation=True)

    def critic_loss(q):
        return acl.twin_critic_loss(q_value(q["qf1"], c["obs"], c["td3_actions"]),
                                    q_value(q["qf2"], c["obs"], c["td3_actions"]), target)

    (qf_loss, q_parts), q_grads = jax.value_and_grad(critic_loss, has_aux=True)(critics)
    critics = adam_step(3e-4, critics, q_grads)
    a_loss, a_grads = jax.value_and_grad(
        lambda p: acl.td3_actor_loss(q_value(critics["qf1"], c["obs"], td3_actor(p, c["obs"], scale, bias)))[0]
    )(actor)
    actor = adam_step(3e-4, actor, a_grads)
    new_targets = acl.polyak_update({"actor": actor, **critics}, {"actor": target_actor, **targets}, TAU)
    out = {"next_actions": next_actions, "target": target, "qf1_loss": q_parts["qf1_loss"],
           "qf2_loss": q_parts["qf2_loss"], "qf_loss": qf_loss, "actor_loss": a_loss}
    out.update(flat("grad", {**q_grads, "actor": a_grads}))
    out.update(flat("params", {**critics, "actor": actor, "target_actor": new_targets["actor"],
                               "qf1_target": new_targets["qf1"], "qf2_target": new_targets["qf2"]}))
    return out


@functools.cache
def td3_delayed() -> dict:
    """CleanRL's TD3 loop for global_step 1..4 as one jitted `lax.scan`, the delayed update under `lax.cond`."""
    c = {k: jnp.asarray(v) for k, v in CASE.items() if not k.startswith("weights/")}
    scale, bias = acl.action_scale_and_bias(TD3_LOW, TD3_HIGH)
    q_tx, a_tx = optim.torch_adam(3e-4), optim.torch_adam(3e-4)
    critics, actor = {"qf1": weights("qf1"), "qf2": weights("qf2")}, weights("td3_actor")
    targets = {"actor": weights("td3_target_actor"), "qf1": weights("qf1_target"), "qf2": weights("qf2_target")}

    def step(state, inputs):
        critics, actor, targets, q_state, a_state = state
        global_step, noise = inputs
        next_actions = acl.td3_target_actions(td3_actor(targets["actor"], c["next_obs"], scale, bias), noise, scale,
                                              POLICY_NOISE, NOISE_CLIP, float(TD3_LOW[0]), float(TD3_HIGH[0]))
        target = acl.td3_critic_target(q_value(targets["qf1"], c["next_obs"], next_actions),
                                       q_value(targets["qf2"], c["next_obs"], next_actions),
                                       c["rewards"], c["terminated"], c["truncated"], GAMMA)
        qf_loss, q_grads = jax.value_and_grad(lambda q: acl.twin_critic_loss(
            q_value(q["qf1"], c["obs"], c["td3_actions"]), q_value(q["qf2"], c["obs"], c["td3_actions"]), target)[0])(critics)
        q_updates, q_state = q_tx.update(q_grads, q_state, critics)
        critics = optax.apply_updates(critics, q_updates)

        def delayed(operand):
            actor, targets, a_state = operand
            loss, grads = jax.value_and_grad(lambda p: acl.td3_actor_loss(
                q_value(critics["qf1"], c["obs"], td3_actor(p, c["obs"], scale, bias)))[0])(actor)
            updates, a_state = a_tx.update(grads, a_state, actor)
            actor = optax.apply_updates(actor, updates)
            return actor, acl.polyak_update({"actor": actor, **critics}, targets, TAU), a_state, loss

        def skip(operand):
            return (*operand, jnp.float32(jnp.nan))

        actor, targets, a_state, actor_loss = jax.lax.cond(
            acl.delayed_update_due(global_step, 2), delayed, skip, (actor, targets, a_state))
        return (critics, actor, targets, q_state, a_state), (qf_loss, actor_loss)

    init = (critics, actor, targets, q_tx.init(critics), a_tx.init(actor))
    steps = jnp.arange(1, c["noise_td3_steps"].shape[0] + 1)
    (critics, actor, targets, _, _), (qf_loss, actor_loss) = jax.jit(
        lambda s, xs: jax.lax.scan(step, s, xs))(init, (steps, c["noise_td3_steps"]))
    assert np.all(np.isnan(np.asarray(actor_loss)[::2]))  # global_step 1 and 3: no actor step
    out = {"qf_loss": qf_loss, "actor_loss": np.asarray(actor_loss)[1::2]}
    out.update(flat("params", {**critics, "actor": actor, "target_actor": targets["actor"],
                               "qf1_target": targets["qf1"], "qf2_target": targets["qf2"]}))
    return out


@functools.cache
def cleanrl_sac_delayed() -> dict:
    """CleanRL's SAC loop for global_step 1..4: policy_frequency actor and temperature steps when due, Polyak every step."""
    c = {k: jnp.asarray(v) for k, v in CASE.items() if not k.startswith("weights/")}
    scale, bias = acl.action_scale_and_bias(SAC_LOW, SAC_HIGH)
    q_tx, a_tx, t_tx = optim.torch_adam(1e-3), optim.torch_adam(3e-4), optim.torch_adam(1e-3)
    critics, actor = {"qf1": weights("qf1"), "qf2": weights("qf2")}, weights("sac_actor")
    targets = {"qf1": weights("qf1_target"), "qf2": weights("qf2_target")}
    log_alpha = {"a": c["log_alpha"]}
    q_state, a_state, t_state = q_tx.init(critics), a_tx.init(actor), t_tx.init(log_alpha)
    alpha = jnp.exp(log_alpha["a"])[0]
    policy_frequency = c["noise_sac_pi_steps"].shape[1]

    def sample(p, obs, noise):
        return acl.tanh_gaussian_sample(*sac_actor(p, obs, sb3=False), noise, scale, bias)

    @jax.jit
    def critic_step(critics, q_state, targets, actor, alpha, noise):
        nxt = sample(actor, c["next_obs"], noise)
        target = acl.sac_critic_target(
            q_value(targets["qf1"], c["next_obs"], nxt.action), q_value(targets["qf2"], c["next_obs"], nxt.action),
            nxt.log_prob, c["rewards"], c["terminated"], c["truncated"], GAMMA, alpha, bootstrap_on_truncation=False)
        loss, grads = jax.value_and_grad(lambda q: acl.twin_critic_loss(
            q_value(q["qf1"], c["obs"], c["sac_actions"]), q_value(q["qf2"], c["obs"], c["sac_actions"]), target)[0])(critics)
        updates, q_state = q_tx.update(grads, q_state, critics)
        return optax.apply_updates(critics, updates), q_state, loss

    @jax.jit
    def actor_and_temperature_step(actor, a_state, log_alpha, t_state, critics, alpha, noise_pi, noise_alpha):
        def loss_fn(p):
            s = sample(p, c["obs"], noise_pi)
            return acl.sac_actor_loss(s.log_prob, q_value(critics["qf1"], c["obs"], s.action),
                                      q_value(critics["qf2"], c["obs"], s.action), alpha)[0]

        a_loss, grads = jax.value_and_grad(loss_fn)(actor)
        updates, a_state = a_tx.update(grads, a_state, actor)
        actor = optax.apply_updates(actor, updates)
        log_pi = sample(actor, c["obs"], noise_alpha).log_prob
        t_loss, t_grads = jax.value_and_grad(lambda la: acl.sac_temperature_loss(la["a"], log_pi, TARGET_ENTROPY)[0])(log_alpha)
        t_updates, t_state = t_tx.update(t_grads, t_state, log_alpha)
        log_alpha = optax.apply_updates(log_alpha, t_updates)
        return actor, a_state, log_alpha, t_state, a_loss, t_loss

    qf_losses, actor_losses, alpha_losses = [], [], []
    for i, global_step in enumerate(range(1, c["noise_sac_next_steps"].shape[0] + 1)):
        critics, q_state, qf_loss = critic_step(critics, q_state, targets, actor, alpha, c["noise_sac_next_steps"][i])
        qf_losses.append(qf_loss)
        if acl.delayed_update_due(global_step, policy_frequency):
            for j in range(policy_frequency):
                actor, a_state, log_alpha, t_state, a_loss, t_loss = actor_and_temperature_step(
                    actor, a_state, log_alpha, t_state, critics, alpha, c["noise_sac_pi_steps"][i, j],
                    c["noise_sac_alpha_steps"][i, j])
                alpha = jnp.exp(log_alpha["a"])[0]
                actor_losses.append(a_loss)
                alpha_losses.append(t_loss)
        targets = acl.polyak_update(critics, targets, TAU)
    out = {"qf_loss": np.array(qf_losses), "actor_loss": np.array(actor_losses), "alpha_loss": np.array(alpha_losses),
           "log_alpha": log_alpha["a"]}
    out.update(flat("params", {**critics, "actor": actor, "qf1_target": targets["qf1"], "qf2_target": targets["qf2"]}))
    return out


UPDATES = {"cleanrl_sac": cleanrl_sac, "sb3_sac": sb3_sac, "td3": td3, "td3_delayed": td3_delayed,
           "cleanrl_sac_delayed": cleanrl_sac_delayed}


def expected(name: str) -> dict:
    return {k[len(name) + 1:]: v for k, v in DATA.items() if k.startswith(name + "/")}


def test_fixture_was_made_with_the_pinned_torch():
    assert str(DATA["meta/torch"]).startswith("2.13.0")


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_update_matches_torch(name):
    got, ref = UPDATES[name](), expected(name)
    assert set(got) == set(ref)
    for key, value in ref.items():
        np.testing.assert_allclose(np.asarray(got[key]).reshape(np.shape(value)), value, rtol=0, atol=ATOL, err_msg=f"{name}/{key}")


def test_the_case_exercises_every_branch():
    term, trunc = CASE["terminated"], CASE["truncated"]
    assert (term & trunc).any() and (trunc & ~term).any() and (term & ~trunc).any() and (~term & ~trunc).any()
    # the two done conventions give different targets exactly at pure time limits
    sac = expected("cleanrl_sac")
    assert np.all(expected("sb3_sac")["done"][trunc & ~term] == 0)
    assert np.all(sac["target"][trunc & ~term] == CASE["rewards"][trunc & ~term])
    # TD3's target actions hit the bound
    assert np.any(expected("td3")["next_actions"] == TD3_HIGH[0])
    # the delayed updates moved the targets (that they stay put in between is in the final parameters)
    assert not np.array_equal(expected("td3_delayed")["params/target_actor/fc_mu.weight"], CASE["weights/td3_target_actor/fc_mu.weight"])
    # every gradient is informative (not all zero)
    for name in UPDATES:
        for key, value in expected(name).items():
            if key.startswith("grad/"):
                assert np.any(value != 0), f"{name}/{key}"


def test_sb3_log_std_clamp_and_its_gradient_match_torch():
    ref = expected("sb3_clamp")
    log_std, grad = jax.value_and_grad(lambda r: jnp.sum(ref["w"] * acl.clip_log_std(r)))(jnp.asarray(ref["raw"]))
    np.testing.assert_array_equal(acl.clip_log_std(jnp.asarray(ref["raw"])), ref["log_std"])
    np.testing.assert_array_equal(grad, ref["grad"])  # 1 at the bounds themselves, as torch


@requires_torch
def test_live_clamp_reference_reproduces_fixture():
    from tests.golden import actor_critic_reference as ref

    for k, v in ref.clamp_log_std().items():
        np.testing.assert_array_equal(v, expected("sb3_clamp")[k], err_msg=k)


@requires_torch
@pytest.mark.parametrize("name", sorted(UPDATES))
def test_live_reference_reproduces_fixture(name):
    import torch

    from tests.golden import actor_critic_reference as ref

    torch.set_num_threads(1)
    case = ref.make_case()
    assert set(case) == set(CASE)
    for k, v in case.items():
        np.testing.assert_array_equal(v, CASE[k], err_msg=k)
    live = {"cleanrl_sac": ref.cleanrl_sac_update, "sb3_sac": ref.sb3_sac_update, "td3": ref.td3_update,
            "td3_delayed": ref.td3_delayed_updates, "cleanrl_sac_delayed": ref.cleanrl_sac_delayed_updates}[name](case)
    fixture = expected(name)
    assert set(live) == set(fixture)
    for k, v in live.items():
        np.testing.assert_allclose(v, fixture[k], rtol=1e-6, atol=1e-6, err_msg=f"{name}/{k}")
