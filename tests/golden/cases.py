"""Deterministic estimator cases, written in each reference's own argument conventions.

NumPy only, so the fixture generator (with torch) and the tests (without)
build the same inputs. A case is canonical data (rewards, values, the value
of the true next state, terminated and done end flags, the start flag of
obs[0], gamma, lambda) converted into each recipe's native arguments
(docs/semantics.md §3 to §6 and §15).
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def _canonical(seed, shape, pattern, gamma, lam):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=shape).astype(F32)
    v = rng.normal(size=shape).astype(F32)
    bootstrap = rng.normal(size=shape[1:]).astype(F32)
    if pattern == "random":
        done = rng.random(shape) < 0.1
    elif pattern == "all_done":
        done = np.ones(shape, bool)
    elif pattern == "no_done":
        done = np.zeros(shape, bool)
    elif pattern == "last_done":
        done = np.zeros(shape, bool)
        done[-1] = True
    elif pattern == "truncation":
        done = rng.random(shape) < 0.1
        done[shape[0] // 2] = True  # a time limit mid-rollout in every env
    else:
        raise ValueError(pattern)
    terminated = done.copy()
    if pattern == "truncation":
        terminated = done & (rng.random(shape) < 0.5)
        terminated[shape[0] // 2] = False
    first0 = rng.random(shape[1:]) < 0.5
    # V of the true next state: values[t + 1], V(final obs) where truncated, bootstrap at T - 1.
    next_values = np.concatenate([v[1:], bootstrap[None]])
    truncated = done & ~terminated
    final_values = rng.normal(size=shape).astype(F32)
    next_values = np.where(truncated, final_values, next_values).astype(F32)
    return dict(
        rewards=r, values=v, next_values=next_values, terminated=terminated, done=done,
        bootstrap=bootstrap, first0=first0, gamma=F32(gamma), lam=F32(lam),
    )


CASE_SPECS = [
    # name, seed, shape, pattern, gamma, lambda
    ("random_5x3", 0, (5, 3), "random", 0.99, 0.95),
    ("random_128x4", 1, (128, 4), "random", 0.99, 0.95),
    ("random_16x2x3", 2, (16, 2, 3), "random", 0.9, 0.8),
    ("single_step", 3, (1, 1), "random", 0.99, 0.95),
    ("all_done", 4, (12, 3), "all_done", 0.99, 0.95),
    ("no_done", 5, (64, 2), "no_done", 0.99, 0.95),
    ("last_done", 6, (10, 3), "last_done", 0.99, 0.95),
    ("truncation", 7, (40, 4), "truncation", 0.99, 0.95),
    ("gamma_lambda_0", 8, (30, 3), "random", 0.9, 0.0),
    ("gamma_lambda_1", 9, (30, 3), "random", 1.0, 1.0),
    ("long_2048", 10, (2048, 2), "random", 0.99, 0.95),
    ("long_2048_no_done", 11, (2048, 2), "no_done", 0.999, 0.99),
]


def _starts(ends, first0):
    return np.concatenate([first0[None], ends[:-1]])


def native_inputs(c: dict) -> dict:
    """Each recipe's arguments, in its own convention, from one canonical case."""
    starts = _starts(c["done"], c["first0"])
    term_starts = _starts(c["terminated"], np.zeros_like(c["first0"]))
    trunc = c["done"] & ~c["terminated"]
    g, lam = c["gamma"], c["lam"]
    out = {
        # Truncation counts as termination in CleanRL, torch-ac and the A2C runner.
        "cleanrl": dict(rewards=c["rewards"], values=c["values"], dones=starts,
                        next_value=c["bootstrap"], next_done=c["done"][-1], gamma=g, gae_lambda=lam),
        "torch_ac": dict(rewards=c["rewards"], values=c["values"], masks=(1 - starts).astype(F32),
                         next_value=c["bootstrap"], next_mask=(1 - c["done"][-1]).astype(F32),
                         discount=g, gae_lambda=lam),
        # ARENA sees terminations only: truncation is ignored (its documented quirk).
        "arena": dict(next_value=c["bootstrap"], next_terminated=c["terminated"][-1],
                      rewards=c["rewards"], values=c["values"], terminated=term_starts,
                      gamma=g, gae_lambda=lam),
        # SB3 stores the reward augmented by gamma * V(terminal obs) on a time limit.
        "sb3": dict(rewards=np.where(trunc, c["rewards"] + g * c["next_values"], c["rewards"]).astype(F32),
                    values=c["values"], episode_starts=starts, last_values=c["bootstrap"],
                    dones=c["done"][-1], gamma=g, gae_lambda=lam),
        "torchrl": dict(rewards=c["rewards"], values=c["values"], next_values=c["next_values"],
                        terminated=c["terminated"], done=c["done"], gamma=g, gae_lambda=lam),
        "ilpyt": dict(rewards=c["rewards"], dones=c["done"], next_value=c["bootstrap"], gamma=g),
        # rlplay fragments: T + 1 rows; row 0 is the carried context (rew 0).
        "rlplay": dict(rew=np.concatenate([np.zeros_like(c["rewards"][:1]), c["rewards"]]),
                       fin=np.concatenate([c["first0"][None], c["done"]]),
                       value=np.concatenate([c["values"], c["bootstrap"][None]]),
                       gamma=g, gae_lambda=lam),
    }
    if c["rewards"].ndim == 2:  # the A2C runner is env-major [N, T]
        out["a2c"] = dict(rewards=c["rewards"].T.copy(), dones=c["done"].T.copy(),
                          last_values=c["bootstrap"], gamma=g)
    return out


def all_cases():
    for name, seed, shape, pattern, gamma, lam in CASE_SPECS:
        yield name, native_inputs(_canonical(seed, shape, pattern, gamma, lam))


def distribution_cases():
    """Logits with -inf entries and extreme scales; probs with zeros and saturated rows."""
    for name, seed, batch, num_actions, scale in [
        ("small", 20, 6, 3, 1.0), ("wide", 21, 32, 7, 5.0), ("saturated", 22, 16, 4, 40.0),
    ]:
        rng = np.random.default_rng(seed)
        logits = (rng.normal(size=(batch, num_actions)) * scale).astype(F32)
        logits[0, 1] = -np.inf
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs = (probs / probs.sum(-1, keepdims=True)).astype(F32)
        probs[1] = 0.0
        probs[1, 0] = 1.0
        actions = rng.integers(0, num_actions, size=batch)
        actions[0] = 0
        values = rng.normal(size=batch).astype(F32)
        returns = rng.normal(size=batch).astype(F32) * 3
        yield name, {
            "logits": logits, "probs": probs, "actions": actions,
            "a2c": {"values": values, "probs": probs, "actions": actions, "returns": returns,
                    "value_loss_coef": F32(0.5), "entropy_coef": F32(0.01)},
        }
