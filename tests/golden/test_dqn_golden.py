"""DQN against the PyTorch reference (tests/golden/dqn_reference.py), live: torch 2.13.0 runs in the test.

The same weights go into both (torch's `nn.Linear` init, seeded); on fixed
batches with terminations and truncations the JAX side must give CleanRL's
targets, Q(s, a), loss, gradients and the parameters after one Adam step, for
both bootstraps ("done": CleanRL's `1 - done`; "time_limits": SB3's
`handle_timeout_termination`, done = terminated); then the epsilon schedule
at many steps and the hard and Polyak target updates. Max abs error 1e-5.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout import optim
from jaxrl_rollout.algorithms import dqn, replay
from tests.golden.conftest import requires_torch

ATOL = 1e-5
CASES = {  # name -> (obs_dim, action_dim, hidden_sizes, batch size, gamma, lr)
    "cartpole_sizes": (4, 2, (120, 84), 128, 0.99, 2.5e-4),
    "wider": (6, 5, (32, 16), 64, 0.9, 1e-2),
}


def to_flax(sd: dict, hidden_sizes) -> dict:
    """torch Sequential state_dict ("0.weight" (out, in), ...) -> flax QNetwork params (Dense_i kernel (in, out))."""
    return {"params": {f"Dense_{i}": {"kernel": jnp.asarray(sd[f"{2 * i}.weight"].T),
                                      "bias": jnp.asarray(sd[f"{2 * i}.bias"])}
                       for i in range(len(hidden_sizes) + 1)}}


def from_flax(params: dict, hidden_sizes) -> dict:
    p = params["params"]
    out = {}
    for i in range(len(hidden_sizes) + 1):
        out[f"{2 * i}.weight"] = np.asarray(p[f"Dense_{i}"]["kernel"]).T
        out[f"{2 * i}.bias"] = np.asarray(p[f"Dense_{i}"]["bias"])
    return out


def make_batch(rng: np.random.Generator, n: int, obs_dim: int, action_dim: int) -> dict:
    terminated = rng.random(n) < 0.2
    truncated = rng.random(n) < 0.2
    assert (truncated & ~terminated).any() and terminated.any()
    return dict(
        obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
        action=rng.integers(0, action_dim, n).astype(np.int32),
        reward=rng.normal(size=n).astype(np.float32),
        next_obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
        terminated=terminated, truncated=truncated,
    )


def assert_max_abs(actual, expected, what: str):
    err = float(np.max(np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))))
    assert err <= ATOL, f"{what}: max abs error {err:.3g} > {ATOL}"


@requires_torch
@pytest.mark.parametrize("bootstrap", replay.BOOTSTRAP)
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_step_matches_torch(case, bootstrap):
    import torch

    from tests.golden import dqn_reference as ref

    obs_dim, action_dim, hidden, n, gamma, lr = CASES[case]
    torch.manual_seed(0)
    q_sd = ref.state_dict_numpy(ref.q_network(obs_dim, action_dim, hidden))
    target_sd = ref.state_dict_numpy(ref.q_network(obs_dim, action_dim, hidden))
    batch = make_batch(np.random.default_rng(1), n, obs_dim, action_dim)
    want = ref.dqn_step(q_sd, target_sd, batch, gamma, lr, bootstrap, hidden)

    module = dqn.QNetwork(action_dim, hidden)
    params, target = to_flax(q_sd, hidden), to_flax(target_sd, hidden)
    tb = replay.Transition(**{k: jnp.asarray(batch[k]) for k in replay.Transition._fields})

    @jax.jit
    def step(params, target):
        (loss, (q_mean, td)), grads = jax.value_and_grad(dqn.dqn_loss, argnums=1, has_aux=True)(
            module.apply, params, target, tb, gamma, bootstrap)
        tx = optim.torch_adam(lr)
        updates, _ = tx.update(grads, tx.init(params), params)
        return loss, q_mean, td, grads, jax.tree.map(lambda p, u: p + u, params, updates)

    loss, q_mean, td, grads, new_params = step(params, target)
    old_val = np.take_along_axis(np.asarray(module.apply(params, batch["obs"])), batch["action"][:, None], 1)[:, 0]
    assert_max_abs(td, want["td_target"], "td_target")
    assert_max_abs(old_val, want["old_val"], "Q(s, a)")
    assert_max_abs(q_mean, want["old_val"].mean(), "mean Q(s, a)")
    assert_max_abs(loss, want["loss"], "loss")
    for k, g in from_flax(grads, hidden).items():
        assert_max_abs(g, want["grads"][k], f"grad {k}")
    for k, p in from_flax(new_params, hidden).items():
        assert_max_abs(p, want["params"][k], f"updated {k}")
    # the bootstraps differ exactly on the truncated-but-not-terminated rows
    mask = np.asarray(replay.discount_mask(tb.terminated, tb.truncated, bootstrap))
    cut = batch["terminated"] | (batch["truncated"] if bootstrap == "done" else False)
    np.testing.assert_array_equal(mask, 1.0 - cut)


@requires_torch  # dqn_reference imports torch
def test_epsilon_schedule_matches_cleanrl():
    from tests.golden import dqn_reference as ref

    for start_e, end_e, fraction, total in [(1.0, 0.05, 0.5, 500_000), (1.0, 0.01, 0.1, 10_000),
                                            (0.5, 0.5, 0.3, 1000), (0.9, 0.1, 0.37, 12_345)]:
        duration = fraction * total
        ts = np.unique(np.concatenate([np.linspace(0, total, 997).astype(np.int64),
                                       [0, 1, int(duration) - 1, int(duration), int(duration) + 1, total - 1]]))
        got = np.asarray(jax.jit(jax.vmap(dqn.epsilon_schedule, in_axes=(None, None, None, 0)))(
            start_e, end_e, duration, jnp.asarray(ts, jnp.int32)))
        want = np.array([ref.linear_schedule(start_e, end_e, duration, int(t)) for t in ts])
        assert_max_abs(got, want, f"epsilon {start_e}->{end_e} over {duration}")


@requires_torch
@pytest.mark.parametrize("tau", [1.0, 0.005, 0.5])
def test_target_updates_match_cleanrl(tau):
    import torch

    from tests.golden import dqn_reference as ref

    hidden, period = (120, 84), 500
    torch.manual_seed(3)
    q_sd = ref.state_dict_numpy(ref.q_network(4, 2, hidden))
    target_sd = ref.state_dict_numpy(ref.q_network(4, 2, hidden))
    fn = jax.jit(lambda p, t, g: dqn.update_target(p, t, tau, g, period))
    for step in (0, 10, 490, 500, 510, 1000, 1500, 12_340):
        got = from_flax(fn(to_flax(q_sd, hidden), to_flax(target_sd, hidden), jnp.int32(step)), hidden)
        want = ref.target_update(q_sd, target_sd, tau, step, period)
        for k in want:
            assert_max_abs(got[k], want[k], f"target {k} at step {step}, tau {tau}")
        if step % period:
            for k in want:
                np.testing.assert_array_equal(got[k], target_sd[k])
        elif tau == 1.0:
            for k in want:
                np.testing.assert_array_equal(got[k], q_sd[k])  # a hard copy, bit for bit
