"""PQN's Q(lambda) targets against a float64 loop, and its loss and one optimiser step against torch 2.13.0.

The loop is the recursion of arXiv:2407.04811 and purejaxql's `_get_target`
(https://github.com/mttga/purejaxql, `pqn_gymnax.py`), written here with
terminations and truncations apart (docs/semantics.md §4):

    G_t = r_t + gamma (1 - term_t) [lambda G_{t+1} + (1 - lambda) max_a Q(s_{t+1}, a)]

with s_{t+1} the true next state (the final observation where truncated),
the lambda trace cut where the episode ended, and G_{T-1} bootstrapped from
max_a Q of the observation after the rollout.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout.algorithms import pqn
from tests.golden.conftest import requires_torch


def reference_targets(reward, q_next_obs, q_final_obs, terminated, truncated, gamma, lam, time_limit_bootstrap=True):
    """float64 loop. q_next_obs[t] = Q(obs[t + 1]) (the reset observation where done, Q(obs after the rollout)
    at t = T - 1); q_final_obs[t] = Q(final observation of t), read where truncated."""
    reward, q_next_obs, q_final_obs = (np.asarray(x, np.float64) for x in (reward, q_next_obs, q_final_obs))
    T, B = reward.shape
    G = np.zeros((T, B))
    for b in range(B):
        following = None  # G_{t+1}
        for t in reversed(range(T)):
            term, trunc = bool(terminated[t, b]), bool(truncated[t, b])
            if not time_limit_bootstrap:
                term = term or trunc
            if trunc and time_limit_bootstrap:
                next_q = q_final_obs[t, b].max()
            else:
                next_q = q_next_obs[t, b].max()
            if t == T - 1 or term or trunc:
                inner = next_q  # the trace is cut: one-step bootstrap
            else:
                inner = lam * following + (1 - lam) * next_q
            G[t, b] = reward[t, b] + gamma * (0.0 if term else 1.0) * inner
            following = G[t, b]
    return G


def purejaxql_targets(reward, q_next_obs, done, gamma, lam):
    """purejaxql's `_get_target` scan, transcribed as a float64 loop: `done` ends bootstrap and trace."""
    reward, q_next_obs = np.asarray(reward, np.float64), np.asarray(q_next_obs, np.float64)
    d = np.asarray(done, np.float64)
    T = reward.shape[0]
    next_q = q_next_obs.max(-1)
    G = np.zeros_like(reward)
    G[-1] = reward[-1] + gamma * next_q[-1] * (1 - d[-1])
    for t in reversed(range(T - 1)):
        bootstrap = reward[t] + gamma * (1 - d[t]) * next_q[t]
        g = bootstrap + gamma * lam * (G[t + 1] - next_q[t])
        G[t] = (1 - d[t]) * g + d[t] * reward[t]
    return G


def random_batch(seed, T=17, B=9, A=3):
    rng = np.random.default_rng(seed)
    reward = rng.normal(size=(T, B)).astype(np.float32)
    q_next_obs = rng.normal(size=(T, B, A)).astype(np.float32)
    q_final_obs = rng.normal(size=(T, B, A)).astype(np.float32)
    terminated = rng.random((T, B)) < 0.12
    truncated = (rng.random((T, B)) < 0.12) & ~terminated
    terminated[-1, 0], truncated[-1, 1] = True, True  # an end at the last step, both kinds
    truncated[0, 2], terminated[1, 2] = True, True  # back to back
    return reward, q_next_obs, q_final_obs, terminated, truncated


def rollout_next_q(q_next_obs, q_final_obs, truncated):
    """What the rollout gives as next_value: max Q of the final observation where truncated, else of obs[t + 1]."""
    return np.where(truncated, q_final_obs.max(-1), q_next_obs.max(-1)).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("gamma, lam", [(0.99, 0.65), (0.99, 0.95), (0.9, 0.0), (0.97, 1.0)])
def test_q_lambda_targets_match_float64_loop(seed, gamma, lam):
    reward, q_next_obs, q_final_obs, terminated, truncated = random_batch(seed)
    got = pqn.q_lambda_targets(jnp.asarray(reward), jnp.asarray(rollout_next_q(q_next_obs, q_final_obs, truncated)),
                               jnp.asarray(terminated), jnp.asarray(truncated), gamma, lam)
    want = reference_targets(reward, q_next_obs, q_final_obs, terminated, truncated, gamma, lam)
    assert np.max(np.abs(np.asarray(got, np.float64) - want)) < 1e-5


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("lam", [0.65, 0.95])
def test_without_time_limit_bootstrap_targets_are_purejaxqls(seed, lam):
    """bootstrap_on_truncation=False: the rollout's next_value is Q(obs[t + 1]) everywhere, purejaxql's targets."""
    reward, q_next_obs, q_final_obs, terminated, truncated = random_batch(seed)
    next_q = q_next_obs.max(-1)
    got = pqn.q_lambda_targets(jnp.asarray(reward), jnp.asarray(next_q), jnp.asarray(terminated),
                               jnp.asarray(truncated), 0.99, lam, bootstrap_on_truncation=False)
    want = purejaxql_targets(reward, q_next_obs, terminated | truncated, 0.99, lam)
    assert np.max(np.abs(np.asarray(got, np.float64) - want)) < 1e-5
    loop = reference_targets(reward, q_next_obs, q_final_obs, terminated, truncated, 0.99, lam,
                             time_limit_bootstrap=False)
    np.testing.assert_allclose(want, loop, atol=1e-12)


def test_truncation_bootstraps_from_final_observation_and_termination_does_not():
    """One env, T = 3: truncated at t = 0, terminated at t = 1, running at t = 2."""
    reward = jnp.array([[1.0], [2.0], [3.0]])
    next_q = jnp.array([[10.0], [20.0], [30.0]])
    terminated = jnp.array([[False], [True], [False]])
    truncated = jnp.array([[True], [False], [False]])
    got = np.asarray(pqn.q_lambda_targets(reward, next_q, terminated, truncated, 0.5, 0.65))[:, 0]
    np.testing.assert_allclose(got, [1.0 + 0.5 * 10.0, 2.0, 3.0 + 0.5 * 30.0], rtol=1e-6)


# ------------------------------------------------------------------ loss and one optimiser step against torch

OBS_DIM, ACTIONS, HIDDEN, BATCH = 4, 3, (8, 8), 32


def _flax_and_batch(seed=0):
    module = pqn.QNetwork(ACTIONS, HIDDEN)
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(BATCH, OBS_DIM)).astype(np.float32)
    action = rng.integers(0, ACTIONS, size=BATCH).astype(np.int32)
    target = rng.normal(size=BATCH).astype(np.float32)
    params = module.init(jax.random.key(seed), jnp.asarray(obs[:1]))
    # Non-trivial LayerNorm scales and biases, so the copy into torch is checked for them too.
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x + 0.1 * jnp.asarray(rng.normal(size=x.shape), x.dtype)
        if "LayerNorm" in jax.tree_util.keystr(path) else x, params)
    return module, params, obs, action, target


def _torch_net(params):
    import torch

    p = params["params"]
    layers = []
    for i in range(len(HIDDEN)):
        dense, norm = p[f"Dense_{i}"], p[f"LayerNorm_{i}"]
        lin = torch.nn.Linear(*np.asarray(dense["kernel"]).shape)
        ln = torch.nn.LayerNorm(HIDDEN[i], eps=1e-6)  # flax's LayerNorm epsilon
        with torch.no_grad():
            lin.weight.copy_(torch.tensor(np.asarray(dense["kernel"]).T))
            lin.bias.copy_(torch.tensor(np.asarray(dense["bias"])))
            ln.weight.copy_(torch.tensor(np.asarray(norm["scale"])))
            ln.bias.copy_(torch.tensor(np.asarray(norm["bias"])))
        layers += [lin, ln, torch.nn.ReLU()]
    head = p[f"Dense_{len(HIDDEN)}"]
    lin = torch.nn.Linear(*np.asarray(head["kernel"]).shape)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(np.asarray(head["kernel"]).T))
        lin.bias.copy_(torch.tensor(np.asarray(head["bias"])))
    return torch.nn.Sequential(*layers, lin)


def _torch_params(net):
    """The torch net's tensors in the flax tree's layout, as numpy."""
    out, mods = {}, list(net)
    lins = [m for m in mods if m.__class__.__name__ == "Linear"]
    lns = [m for m in mods if m.__class__.__name__ == "LayerNorm"]
    for i, lin in enumerate(lins):
        out[f"Dense_{i}"] = {"kernel": lin.weight.detach().numpy().T, "bias": lin.bias.detach().numpy()}
    for i, ln in enumerate(lns):
        out[f"LayerNorm_{i}"] = {"scale": ln.weight.detach().numpy(), "bias": ln.bias.detach().numpy()}
    return {"params": out}


def _assert_tree_close(a, b, tol):
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=tol, rtol=tol, err_msg=jax.tree_util.keystr(path))


@requires_torch
@pytest.mark.parametrize("max_grad_norm", [10.0, 0.05])  # the clip inactive, then active
def test_loss_and_one_adam_step_match_torch(max_grad_norm):
    import torch

    module, params, obs, action, target = _flax_and_batch()
    net = _torch_net(params)
    q = net(torch.tensor(obs))
    chosen = q.gather(1, torch.tensor(action, dtype=torch.int64)[:, None])[:, 0]
    loss_t = 0.5 * ((chosen - torch.tensor(target)) ** 2).mean()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    opt.zero_grad()
    loss_t.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), max_grad_norm)
    opt.step()

    (loss, chosen_j), grads = jax.value_and_grad(
        lambda p: pqn.q_loss(module, p, jnp.asarray(obs), jnp.asarray(action), jnp.asarray(target)), has_aux=True
    )(params)
    assert abs(float(loss) - loss_t.item()) < 1e-5
    np.testing.assert_allclose(np.asarray(chosen_j), chosen.detach().numpy(), atol=1e-5)

    config = pqn.PQNConfig(num_envs=4, num_steps=8, total_timesteps=64, num_minibatches=1, hidden_sizes=HIDDEN,
                           optimizer="adam", anneal_lr=False)
    tx = pqn.make_optimizer(config, pqn.PQNHParams(lr=1e-3, max_grad_norm=max_grad_norm))
    updates, _ = tx.update(grads, tx.init(params), params)
    import optax

    _assert_tree_close(optax.apply_updates(params, updates), _torch_params(net), 1e-5)
