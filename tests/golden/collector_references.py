"""PyTorch references for the collectors (torch-ac, ilpyt, rlplay), written to docs/semantics.md §15.

Each steps NumPy twin envs (`walk.WalkEnvPy`) one call at a time, as the
originals do, computes logits and values with the torch twin of the JAX
networks, and replays the actions the JAX run sampled (teacher forcing: the
torch and JAX random streams cannot agree). Everything else (storage, flags,
resets, masks, logs, estimators, layouts) is computed here independently.
"""

from __future__ import annotations

import numpy as np
import torch

from tests.golden import walk
from tests.golden.references import rlplay_gae


def _categorical(logits, actions):
    dist = torch.distributions.Categorical(logits=logits)
    return dist.log_prob(torch.as_tensor(actions, dtype=torch.int64))


# --- torch-ac collect_experiences (https://github.com/lcswillems/torch-ac; docs/semantics.md §15.1) ---

def torch_ac(weights, actions_per_call, recurrent, reshape, gamma, gae_lambda, max_steps=100):
    feedforward, rec = walk.torch_model(weights)
    P = actions_per_call[0].shape[1]
    envs = [walk.WalkEnvPy(max_steps) for _ in range(P)]
    obs = [env.reset() for env in envs]
    mask = torch.ones(P)
    memory = torch.zeros(P, walk.MEMORY)
    ep_return, ep_reshaped, ep_frames = torch.zeros(P), torch.zeros(P), torch.zeros(P)
    log_return, log_reshaped, log_frames = [0] * P, [0] * P, [0] * P
    out = {}
    for call, actions in enumerate(actions_per_call):
        T = actions.shape[0]
        obss = torch.zeros(T, P, walk.OBS_DIM)
        memories, masks = torch.zeros(T, P, walk.MEMORY), torch.zeros(T, P)
        acts, values, rewards, log_probs = (torch.zeros(T, P) for _ in range(4))
        done_counter = 0
        for i in range(T):
            x = torch.tensor(np.stack(obs))
            with torch.no_grad():
                if recurrent:
                    logits, value, new_memory = rec(x, memory * mask.unsqueeze(1))
                else:
                    logits, value = feedforward(x)
            action = torch.as_tensor(actions[i])
            results = []
            for env, a in zip(envs, actions[i]):
                o, r, terminated, _ = env.step(a)  # time limits are kept out (docs/semantics.md §15.1)
                results.append((env.reset() if terminated else o, r, terminated))
            new_obs = [o for o, _, _ in results]
            reward = [r for _, r, _ in results]
            done = [d for _, _, d in results]
            obss[i] = x
            obs = new_obs
            if recurrent:
                memories[i] = memory
                memory = new_memory
            masks[i] = mask
            mask = 1 - torch.tensor(done, dtype=torch.float)
            acts[i] = action
            values[i] = value
            if reshape:
                rewards[i] = torch.tensor([
                    float(walk.reshape_reward(o_, a_, r_, d_)) for o_, a_, r_, d_ in zip(new_obs, actions[i], reward, done)
                ])
            else:
                rewards[i] = torch.tensor(reward)
            log_probs[i] = _categorical(logits, action)
            ep_return += torch.tensor(np.array(reward), dtype=torch.float)
            ep_reshaped += rewards[i]
            ep_frames += torch.ones(P)
            for p, d in enumerate(done):
                if d:
                    done_counter += 1
                    log_return.append(ep_return[p].item())
                    log_reshaped.append(ep_reshaped[p].item())
                    log_frames.append(ep_frames[p].item())
            ep_return *= mask
            ep_reshaped *= mask
            ep_frames *= mask
        with torch.no_grad():
            x = torch.tensor(np.stack(obs))
            next_value = rec(x, memory * mask.unsqueeze(1))[1] if recurrent else feedforward(x)[1]
        advantages = torch.zeros(T, P)
        for i in reversed(range(T)):
            next_mask = masks[i + 1] if i < T - 1 else mask
            nv = values[i + 1] if i < T - 1 else next_value
            next_adv = advantages[i + 1] if i < T - 1 else 0
            delta = rewards[i] + gamma * nv * next_mask - values[i]
            advantages[i] = delta + gamma * gae_lambda * next_adv * next_mask
        env_major = lambda x: x.transpose(0, 1).reshape(-1, *x.shape[2:])  # noqa: E731
        prefix = f"call{call}/exps/"
        out[prefix + "obs"] = env_major(obss).numpy()
        if recurrent:
            out[prefix + "memory"] = env_major(memories).numpy()
        out[prefix + "mask"] = env_major(masks).unsqueeze(1).numpy()
        out[prefix + "action"] = env_major(acts).numpy()
        out[prefix + "value"] = env_major(values).numpy()
        out[prefix + "reward"] = env_major(rewards).numpy()
        out[prefix + "advantage"] = env_major(advantages).numpy()
        out[prefix + "returnn"] = (env_major(values) + env_major(advantages)).numpy()
        out[prefix + "log_prob"] = env_major(log_probs).numpy()
        keep = max(done_counter, P)
        out[f"call{call}/logs/return_per_episode"] = np.array(log_return[-keep:], np.float64)
        out[f"call{call}/logs/reshaped_return_per_episode"] = np.array(log_reshaped[-keep:], np.float64)
        out[f"call{call}/logs/num_frames_per_episode"] = np.array(log_frames[-keep:], np.float64)
        out[f"call{call}/logs/num_frames"] = np.array(T * P)
        log_return, log_reshaped, log_frames = log_return[-P:], log_reshaped[-P:], log_frames[-P:]
    return out


# --- ilpyt Runner (https://github.com/mitre/ilpyt; docs/semantics.md §15.2) ------------------

class _DummyVecEnv:
    """baselines DummyVecEnv: auto-reset inside step; float32 rewards."""

    def __init__(self, n, max_steps):
        self.envs = [walk.WalkEnvPy(max_steps) for _ in range(n)]

    def reset(self):
        return np.stack([env.reset() for env in self.envs])

    def step(self, actions):
        obs, rewards, dones = [], [], []
        for env, a in zip(self.envs, actions):
            o, r, terminated, truncated = env.step(a)
            done = terminated or truncated
            obs.append(env.reset() if done else o)
            rewards.append(r)
            dones.append(done)
        return np.stack(obs), np.array(rewards, np.float32), np.array(dones), [{}] * len(dones)


def ilpyt(weights, batch_actions, step_actions, num_episodes, max_steps):
    feedforward, _ = walk.torch_model(weights)
    n = batch_actions[0].shape[1]
    venv = _DummyVecEnv(n, max_steps)
    state = torch.tensor(venv.reset())
    stats = {"reward": np.zeros(n), "length": np.zeros(n), "count": np.zeros(n)}
    out = {}
    for call, actions in enumerate(batch_actions):
        T = actions.shape[0]
        states, next_states = torch.empty(T, n, walk.OBS_DIM), torch.empty(T, n, walk.OBS_DIM)
        acts, rewards, dones = torch.empty(T, n), torch.empty(T, n), torch.empty(T, n)
        infos = []
        for step in range(T):
            action = actions[step]
            next_state, reward, done, _ = venv.step(action)
            states[step] = torch.as_tensor(state)
            next_states[step] = torch.as_tensor(next_state)
            acts[step] = torch.tensor(action, dtype=torch.float)
            rewards[step] = torch.as_tensor(reward)
            dones[step] = torch.as_tensor(done)
            stats["reward"] += reward
            stats["length"] += np.ones(n)
            stats["count"] += done
            for i in range(n):
                if done[i]:
                    infos.append([stats["count"][i], {f"reward/{i}": stats["reward"][i], f"length/{i}": stats["length"][i]}])
                    stats["reward"][i] = 0
                    stats["length"][i] = 0
            state = torch.tensor(next_state)
        p = f"batch{call}/"
        out.update({p + "states": states.numpy(), p + "next_states": next_states.numpy(),
                    p + "actions": acts.numpy(), p + "rewards": rewards.numpy(), p + "dones": dones.numpy()})
        out[p + "info_count"] = np.array([c for c, _ in infos], np.float64)
        out[p + "info_env"] = np.array([int(next(iter(d)).split("/")[1]) for _, d in infos])
        out[p + "info_reward"] = np.array([v for _, d in infos for k, v in d.items() if k.startswith("reward")])
        out[p + "info_length"] = np.array([v for _, d in infos for k, v in d.items() if k.startswith("length")])
    # generate_episodes: reset, but keep the stale state; double reset on done; break at N.
    buffers = [dict(states=[], actions=[], rewards=[], dones=[]) for _ in range(n)]
    finished = []
    count, k = 0, 0
    venv.reset()
    while count < num_episodes:
        action = step_actions[k]
        k += 1
        next_state, reward, done, _ = venv.step(action)
        for i in range(n):
            for key, value in zip(("states", "actions", "rewards", "dones"),
                                  (torch.as_tensor(state[i]), torch.as_tensor(action[i]),
                                   torch.as_tensor(reward[i]), torch.as_tensor(done[i]))):
                buffers[i][key].append(value)
            if done[i]:
                finished.append(buffers[i])
                next_state[i] = venv.envs[i].reset()
                buffers[i] = dict(states=[], actions=[], rewards=[], dones=[])
                count += 1
                if count >= num_episodes:
                    break
        state = torch.tensor(next_state)
    merged = {key: sum((ep[key] for ep in finished), []) for key in ("states", "actions", "rewards", "dones")}
    out["episodes/states"] = torch.stack(merged["states"]).numpy()
    out["episodes/actions"] = torch.stack(merged["actions"]).numpy()
    rewards, dones = torch.tensor(merged["rewards"]), torch.tensor(merged["dones"])
    out["episodes/rewards"], out["episodes/dones"] = rewards.numpy(), dones.numpy()
    ends = torch.where(dones)[0] + 1
    starts = torch.cat([torch.zeros(1, dtype=ends.dtype), ends[:-1]])
    out["episodes/rewards_list"] = np.array([torch.sum(rewards[s:e]).item() for s, e in zip(starts, ends)])
    out["episodes/final_obs"] = state.numpy()
    return out


# --- rlplay collect and evaluate (https://github.com/ivannz/rlplay; docs/semantics.md §15.3) ---

def _actor(weights, recurrent):
    feedforward, rec = walk.torch_model(weights)

    def step(obs, hx, actions):
        x = torch.tensor(np.asarray(obs))
        with torch.no_grad():
            if recurrent:
                logits, value, hx = rec(x, hx)
            else:
                logits, value = feedforward(x)
        return {"action": np.asarray(actions), "log_prob": _categorical(logits, actions).numpy(),
                "value": value.numpy()}, hx

    return step


def rlplay_collect(weights, fragment_actions, sticky, recurrent, gamma, gae_lambda, max_steps):
    actor = _actor(weights, recurrent)
    n = fragment_actions[0].shape[1]
    envs = [walk.WalkEnvPy(max_steps) for _ in range(n)]
    ctx = {"stepno": np.zeros(n, np.int32), "obs": np.stack([e.reset() for e in envs]),
           "act": np.zeros(n, np.int32), "rew": np.zeros(n, np.float32), "fin": np.ones(n, bool)}
    hx = torch.zeros(n, walk.MEMORY)
    out = {}
    for f, actions in enumerate(fragment_actions):
        T = actions.shape[0] - 1
        rows, infos, stuck_rows = [], [], []
        stuck = np.zeros(n, bool)
        for t in range(T + 1):
            rows.append({k: v.copy() for k, v in ctx.items()})
            stuck_rows.append(stuck.copy())
            info, new_hx = actor(ctx["obs"], hx, actions[t])
            infos.append(info)
            if t >= T:
                break
            ctx["act"] = actions[t].astype(np.int32)
            stuck = np.zeros(n, bool)
            for j, env in enumerate(envs):
                if sticky and t > 0 and ctx["fin"][j]:
                    ctx["rew"][j] = 0.0
                    stuck[j] = True
                    continue
                o, r, terminated, truncated = env.step(actions[t][j])
                fin = terminated or truncated
                ctx["stepno"][j] += 1
                if fin:
                    ctx["stepno"][j] = 0
                    o = env.reset()
                    new_hx[j] = 0.0
                ctx["obs"][j], ctx["rew"][j], ctx["fin"][j] = o, r, fin
            hx = new_hx
        if sticky:
            for j in range(n):
                if ctx["fin"][j]:
                    hx[j] = 0.0
        p = f"frag{f}/"
        for key in ("stepno", "obs", "act", "rew", "fin"):
            out[p + key] = np.stack([r[key] for r in rows])
        for key in ("action", "log_prob", "value"):
            out[p + "actor." + key] = np.stack([i[key] for i in infos])
        out[p + "stuck"] = np.stack(stuck_rows)
        est = rlplay_gae(out[p + "rew"], out[p + "fin"], out[p + "actor.value"], gamma, gae_lambda)
        out[p + "gae"], out[p + "returns"] = est["advantages"], est["returns"]
    return out


def rlplay_evaluate(weights, info_actions, n_steps, max_steps):
    actor = _actor(weights, False)
    n = info_actions.shape[1]
    envs = [walk.WalkEnvPy(max_steps) for _ in range(n)]
    obs = np.stack([e.reset() for e in envs])
    rew, fin = np.zeros(n, np.float32), np.ones(n, bool)
    rewards, infos, done, t = [], [], False, 0
    while not done and t < n_steps:
        info, _ = actor(obs, None, info_actions[t])
        infos.append(info)
        for j, env in enumerate(envs):
            if fin[j] and t > 0:
                rew[j] = 0.0
                continue
            o, r, terminated, truncated = env.step(info_actions[t][j])
            obs[j], rew[j], fin[j] = o, r, terminated or truncated
        done = bool(np.all(fin))
        rewards.append(rew.copy())
        t += 1
    info, _ = actor(obs, None, info_actions[t])
    infos.append(info)
    out = {"rewards": np.stack(rewards), "num_steps": np.asarray(t)}
    for key in ("action", "log_prob", "value"):
        out["info/" + key] = np.stack([i[key] for i in infos])
    return out
