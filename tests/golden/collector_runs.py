"""The JAX side of the collector goldens: each compat collector run with fixed keys.

Shared by the fixture generator (which hands the sampled actions to the
PyTorch references) and the tests (which compare against the fixtures).
Every function returns a flat dict of NumPy arrays.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import jaxrl_rollout as jr
from jaxrl_rollout.compat import ilpyt, rlplay, torch_ac
from tests.golden import walk

B = 3
GAMMA, LAM = 0.99, 0.95


def _np(tree, prefix):
    flat = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        name = prefix + "".join(str(getattr(p, "name", getattr(p, "key", getattr(p, "idx", p)))) + "." for p in path)
        flat[name.rstrip(".")] = np.asarray(leaf)
    return flat


def _logs_to_arrays(logs: dict, prefix: str) -> dict:
    return {
        f"{prefix}return_per_episode": np.asarray(logs["return_per_episode"], np.float64),
        f"{prefix}reshaped_return_per_episode": np.asarray(logs["reshaped_return_per_episode"], np.float64),
        f"{prefix}num_frames_per_episode": np.asarray(logs["num_frames_per_episode"], np.float64),
        f"{prefix}num_frames": np.asarray(logs["num_frames"]),
    }


@functools.cache
def torch_ac_run(recurrent: bool) -> dict:
    T, calls = 16, 2
    env = walk.WalkEnv()
    params = {k: jnp.asarray(v) for k, v in walk.make_weights().items()}
    if recurrent:
        policy_fn, carry, reshape = walk.jax_recurrent_policy, jnp.zeros((B, walk.MEMORY)), None
    else:
        policy_fn, carry, reshape = jr.categorical_policy(walk.jax_apply), None, walk.reshape_reward
    collect = jax.jit(
        lambda state: torch_ac.collect_experiences(
            env, env.default_params, policy_fn, params, state, T, GAMMA, LAM, reshape_reward=reshape
        )
    )
    state = torch_ac.init_state(jax.random.key(11), env, env.default_params, B, initial_memory=carry)
    logger = torch_ac.TorchAcLogger(B)
    out = {}
    for call in range(calls):
        state, exps, log_inputs = collect(state)
        out.update(_np(exps._asdict(), f"call{call}/exps/"))
        out.update(_logs_to_arrays(logger.update(log_inputs), f"call{call}/logs/"))
        # Time-major [T, P] actions for the reference to replay.
        out[f"call{call}/actions"] = np.asarray(exps.action).reshape(B, T).T.copy()
    return out


@functools.cache
def ilpyt_run() -> dict:
    T, calls, episodes, max_steps = 10, 2, 5, 40
    env = walk.WalkEnv()
    env_params = env.default_params.replace(max_steps_in_episode=6)
    params = {k: jnp.asarray(v) for k, v in walk.make_weights().items()}
    policy_fn = jr.categorical_policy(walk.jax_apply)
    batch_fn = jax.jit(lambda s: ilpyt.generate_batch(env, env_params, policy_fn, params, s, T))
    state = jr.rollout_init(jax.random.key(12), env, env_params, B)
    stats = ilpyt.IlpytEpisodeStats(B)
    out = {}
    for call in range(calls):
        state, batch = batch_fn(state)
        out.update(_np(batch, f"batch{call}/"))
        infos = stats.infos(batch["rewards"], batch["dones"])
        out[f"batch{call}/info_count"] = np.array([c for c, _ in infos], np.float64)
        out[f"batch{call}/info_env"] = np.array([int(next(iter(d)).split("/")[1]) for _, d in infos])
        out[f"batch{call}/info_reward"] = np.array([v for _, d in infos for k, v in d.items() if k.startswith("reward")])
        out[f"batch{call}/info_length"] = np.array([v for _, d in infos for k, v in d.items() if k.startswith("length")])
        out[f"batch{call}/actions"] = np.asarray(batch["actions"]).astype(np.int64)
    state, eps = jax.jit(
        lambda k, s: ilpyt.generate_episodes(env, env_params, policy_fn, params, k, s, episodes, max_steps)
    )(jax.random.key(13), state)
    lists = ilpyt.episodes_to_lists(eps, episodes)
    out.update(_np(lists, "episodes/"))
    out["episodes/rewards_list"] = np.asarray(ilpyt.episode_rewards_list(lists["rewards"], lists["dones"]))
    # The reference replays the actions row by row (every env acts at every step).
    out["episodes/step_actions"] = np.asarray(eps.actions).astype(np.int64)
    out["episodes/final_obs"] = np.asarray(state.obs)
    return out


@functools.cache
def rlplay_run(sticky: bool, recurrent: bool) -> dict:
    T, fragments = 8, 2
    env = walk.WalkEnv()
    env_params = env.default_params.replace(max_steps_in_episode=6)
    params = {k: jnp.asarray(v) for k, v in walk.make_weights().items()}
    if recurrent:
        policy_fn, hx = walk.jax_recurrent_policy, jnp.zeros((B, walk.MEMORY))
    else:
        policy_fn, hx = jr.categorical_policy(walk.jax_apply), None
    ctx = rlplay.context(jax.random.key(14), env, env_params, B, hx)
    collect = jax.jit(lambda c: rlplay.collect(env, env_params, policy_fn, params, c, T, sticky=sticky))
    out = {}
    for f in range(fragments):
        ctx, frag = collect(ctx)
        out.update(_np(frag._replace(hx=None), f"frag{f}/"))
        out[f"frag{f}/gae"] = np.asarray(rlplay.gae(frag.rew, frag.fin, frag.actor.value, GAMMA, LAM))
        out[f"frag{f}/returns"] = np.asarray(rlplay.returns(frag.rew, frag.fin, frag.actor.value, GAMMA))
    return out


@functools.cache
def rlplay_evaluate_run() -> dict:
    env = walk.WalkEnv()
    env_params = env.default_params.replace(max_steps_in_episode=6)
    params = {k: jnp.asarray(v) for k, v in walk.make_weights().items()}
    policy_fn = jr.categorical_policy(walk.jax_apply)
    rewards, info, n = jax.jit(lambda k: rlplay.evaluate(env, env_params, policy_fn, params, k, B, 20))(
        jax.random.key(15)
    )
    n = int(n)
    out = _np(info._asdict(), "info/")
    out = {k: v[: n + 1] for k, v in out.items()}
    out.update({"rewards": np.asarray(rewards)[:n], "num_steps": np.asarray(n)})
    return out
