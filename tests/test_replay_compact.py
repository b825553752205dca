"""The compact replay buffer (`replay.make_compact_replay_buffer`, the learners' `optimize_memory_usage`)
against a plain Python record of every transition added."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout.algorithms import replay
from tests.trees import host_leaves

B = 3


def vector_steps(steps: int, *, limit: int, seed: int, p_terminate: float, first, following):
    """B envs' vector steps, each episode cut at `limit` steps and ended by a termination with probability
    `p_terminate` a step; `first(b)` is env b's first observation of an episode, `following(b)` its next one.

    Returns (batches, record): the `Transition` [B] of each step, and per env its transitions as tuples (obs,
    action, reward, next_obs as the compact buffer gives it, terminated, truncated): at a termination the next
    episode's first observation, once it is added (the newest transition's is still the one its step gave)."""
    rng = np.random.default_rng(seed)
    length = np.zeros(B, np.int64)
    current = [first(b) for b in range(B)]
    batches, record = [], [[] for _ in range(B)]
    for _ in range(steps):
        rows = []
        for b in range(B):
            length[b] += 1
            terminated = bool(rng.random() < p_terminate)
            truncated = bool(length[b] >= limit)
            after = following(b)  # the next observation, the true final one where the episode ended
            done = terminated or truncated
            reset = first(b) if done else after
            length[b] = 0 if done else length[b]
            action, reward = np.int32(rng.integers(4)), np.float32(rng.normal())
            rows.append((current[b], action, reward, after, terminated, truncated))
            record[b].append((current[b], action, reward, reset if terminated else after, terminated, truncated))
            current[b] = reset
        batches.append(jax.tree.map(lambda *xs: np.stack(xs), *[replay.Transition(*r) for r in rows]))
    for b in range(B):
        record[b][-1] = (*record[b][-1][:3], rows[b][3], *record[b][-1][4:])
    return batches, record


def _episodes(steps: int, *, limit: int, seed: int, p_terminate: float = 0.08):
    """`vector_steps` with observations that name themselves (env, count)."""
    count = np.zeros(B, np.int64)  # observations each env has made

    def observe(b):
        count[b] += 1
        return {"id": np.float32(1000 * b + count[b]), "pair": np.array([b, count[b] % 7], np.int32)}

    return vector_steps(steps, limit=limit, seed=seed, p_terminate=p_terminate, first=observe, following=observe)


def _key(t):
    obs, action, reward, next_obs, terminated, truncated = t
    return (float(obs["id"]), tuple(np.asarray(obs["pair"]).tolist()), int(action), float(reward),
            float(next_obs["id"]), tuple(np.asarray(next_obs["pair"]).tolist()), bool(terminated), bool(truncated))


def fill(rb, batches):
    state = rb.init(jax.tree.map(lambda x: x[0], batches[0]))
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *batches)
    state, _ = jax.jit(lambda s, xs: jax.lax.scan(lambda s, x: (rb.add(s, x), None), s, xs))(state, stacked)
    return state


def _sampled(rb, state, draws: int):
    keys = jax.random.split(jax.random.key(1), draws)
    out = jax.jit(jax.vmap(rb.sample, in_axes=(None, 0)))(state, keys)
    flat = jax.tree.map(lambda x: np.asarray(x).reshape(-1, *np.shape(x)[2:]), out)
    return {_key(jax.tree.map(lambda x: x[i], tuple(flat))) for i in range(len(flat.reward))}


@pytest.mark.parametrize("limit, p_terminate", [(5, 0.08), (8, 0.0)])
def test_samples_are_the_last_transitions_of_each_env_with_true_final_observations(limit, p_terminate):
    """Every sampled transition is one of each env's last L = buffer_size // B, its next observation the true
    final one where a time limit cut the episode; every one of them is drawn, and none older. (Cut every 8
    steps, the stream holds as many final observations as its size allows: ceil((L - 1) / 8).)"""
    L, steps = 24, 70
    batches, record = _episodes(steps, limit=limit, seed=limit, p_terminate=p_terminate)
    rb = replay.make_compact_replay_buffer(L * B + 2, 32, B, max_episode_steps=limit)
    state = fill(rb, batches)
    held = {_key(t) for b in range(B) for t in record[b][-L:]}
    assert rb.buffer_size == L * B and int(rb.size(state)) == L * B
    assert sum(t[5] and not t[4] for t in record[0][-L:]) >= 2  # truncations were held
    assert _sampled(rb, state, 200) == held


def test_it_holds_about_half_the_full_buffers_bytes():
    obs = {"id": np.zeros((), np.float32), "pair": np.zeros(2, np.int32)}
    one = replay.Transition(obs, np.int32(0), np.float32(0), obs, np.bool_(False), np.bool_(False))
    image = replay.Transition(np.zeros((84, 84, 4), np.uint8), np.int32(0), np.float32(0),
                              np.zeros((84, 84, 4), np.uint8), np.bool_(False), np.bool_(False))

    def nbytes(rb, example):
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(jax.eval_shape(rb.init, example)))

    full, compact = (nbytes(replay.make_replay_buffer(3000, 32), image),
                     nbytes(replay.make_compact_replay_buffer(3000, 32, B, max_episode_steps=1000), image))
    assert 0.5 < compact / full < 0.51, (compact, full)
    assert nbytes(replay.make_compact_replay_buffer(3000, 32, B), one) < nbytes(replay.make_replay_buffer(3000, 32), one)


def test_when_episodes_are_cut_more_often_than_sized_for_the_oldest_drop_out():
    """Sized for a time limit of 1000 but cut every 3 steps: the stream holds fewer than L transitions per env,
    and what is sampled is still right, only the newest ones, all of them."""
    L = 24
    batches, record = _episodes(60, limit=3, seed=3, p_terminate=0.0)
    rb = replay.make_compact_replay_buffer(L * B, 16, B, max_episode_steps=1000)
    state = fill(rb, batches)
    S = L + 2  # L + 1 + ceil(23 / 1000)
    # each env's stream: 1 position per transition, 2 for a truncated one; held are those with both in it
    kept = []
    for b in range(B):
        starts = np.cumsum([0] + [2 if t[5] and not t[4] else 1 for t in record[b]])[:-1]  # each obs's position
        top = starts[-1] + 1  # the newest position: the last transition's next observation
        kept.append([t for t, x in zip(record[b], starts) if x >= top - S + 1][-L:])
    assert int(rb.size(state)) == sum(map(len, kept)) < L * B
    assert _sampled(rb, state, 200) == {_key(t) for k in kept for t in k}


def test_vmapped_buffers_equal_single_ones_and_adds_check_their_batch():
    batches, _ = _episodes(10, limit=4, seed=0)
    rb = replay.make_compact_replay_buffer(12, 5, B, max_episode_steps=4)
    one = fill(rb, batches)
    two = jax.vmap(lambda k: rb.sample(one, k))(jax.random.split(jax.random.key(0), 2))
    np.testing.assert_array_equal(two.reward[1], rb.sample(one, jax.random.split(jax.random.key(0), 2)[1]).reward)
    with pytest.raises(ValueError, match=r"num_envs=3 adds one transition per env at a time: expected leaves \[3, "):
        rb.add(one, jax.tree.map(lambda x: x[:2], batches[0]))
    for kwargs, words in (({"num_envs": 0}, "num_envs must be a positive int, got 0"),
                          ({"num_envs": 13}, "num_envs=13 is more than buffer_size=12"),
                          ({"num_envs": 3, "max_episode_steps": 0}, "max_episode_steps must be a positive int or None")):
        with pytest.raises(ValueError, match=words):
            replay.make_compact_replay_buffer(12, 5, **kwargs)
    from jaxrl_rollout.algorithms import dqn, sac, td3

    for config in (dqn.DQNConfig, sac.SACConfig, td3.TD3Config):
        with pytest.raises(ValueError, match=r"optimize_memory_usage must be a bool, got 'true'\."):
            config(optimize_memory_usage="true")


def test_dqn_with_it_learns_cartpole_and_seed_i_of_a_vmapped_call_equals_a_single_run():
    """test_dqn.py's learning check with the compact buffer (about 10 s on 2 CPU cores), in which CartPole's
    500-step time limit cuts episodes late in the run."""
    from jaxrl_rollout.algorithms import dqn

    cfg = dqn.DQNConfig(total_timesteps=20_000, learning_starts=1_000, target_network_frequency=500, log_interval=10,
                        optimize_memory_usage=True)
    hp = dqn.DQNHParams(lr=1e-3, exploration_fraction=0.2)
    train = dqn.make_train(cfg)
    keys = jax.random.split(jax.random.key(0), 2)
    state, m = jax.jit(jax.vmap(train, in_axes=(0, None)))(keys, hp)
    final = np.nanmean(np.asarray(m.episode_return)[:, -300:], axis=1)
    assert (final > 100).all(), final
    assert isinstance(state.buffer, replay.CompactState) and state.buffer.obs.shape == (2, 10_000 + 1 + 20, 1, 4)  # E = ceil(9_999 / 500)
    # the first 500 updates (5,000 steps, 400 gradient steps): later, float32 rounding of the batched network
    # (README) flips a greedy action and the runs part, with the full buffer too (measured: from update 676)
    _, one = jax.jit(train)(keys[1], hp)
    for name in ("loss", "episode_return"):
        np.testing.assert_allclose(np.asarray(getattr(one, name))[:500], np.asarray(getattr(m, name))[1, :500],
                                   rtol=1e-5, err_msg=name)


def test_sac_with_it_resumes_bit_identical_and_td3_keeps_its_time_limits_final_observations(tmp_path):
    """Pendulum's 200-step limit cuts each episode: the stream keeps one final observation per cut. A SAC run
    stopped after 2 chunks and resumed from its checkpoint (the compact buffer in it) ends as the whole run."""
    import json

    from jaxrl_rollout import runner
    from jaxrl_rollout.algorithms import sac, td3

    small = dict(total_timesteps=600, buffer_size=600, batch_size=16, learning_starts=100, hidden_sizes=(16, 16),
                 log_interval=100, optimize_memory_usage=True)
    state, m = jax.jit(td3.make_train(td3.TD3Config(**small)))(jax.random.key(0))
    assert np.isfinite(np.asarray(m.critic_loss)[np.asarray(m.trained)]).all() and np.asarray(m.trained).any()
    buf = state.buffer
    assert int(buf.count) == 600 and int(buf.truncated.sum()) == 3 and int(buf.head[0]) == 600 + 3  # a final observation per cut
    assert buf.obs.shape == (600 + 1 + 3, 1, 3)  # L + 1 + ceil(599 / 200)

    spec = runner.RunSpec("sac", sac.SACConfig(**small), (sac.SACHParams(),), 2, chunk_updates=2)
    full = runner.train(spec, progress=None)
    (tmp_path / "config.json").write_text(json.dumps(spec.to_json()))
    part = runner.train(spec, tmp_path, stop_after_chunks=2, progress=None)
    assert not part.complete and isinstance(runner.load_run(tmp_path)[1].buffer, replay.CompactState)
    resumed = runner.train(spec, tmp_path, resume=True, progress=None)
    for a, b in zip(host_leaves(full.state), host_leaves(resumed.state)):
        np.testing.assert_array_equal(a, b)
    for name in full.metrics:
        np.testing.assert_array_equal(full.metrics[name], resumed.metrics[name], err_msg=name)
