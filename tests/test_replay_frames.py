"""Frame sharing in the compact replay buffer (`make_compact_replay_buffer(..., frame_axis=...)`, the learners'
`frame_stack_axis`): what is sampled is what was added, bit for bit, and the same draws as the compact buffer
without frames, in about a frame per transition rather than a stack."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl_rollout.algorithms import replay
from tests.test_replay_compact import B, fill, vector_steps

K = 4


def _episodes(steps: int, *, limit: int, seed: int, p_terminate: float, axis: int = -1, pad: str = "repeat",
              stacked: bool = True, cycle: int | None = None, dtype=np.float32):
    """B envs' vector steps whose observations are stacks of the env's last K frames along `axis`; every frame
    [2, 3] float32 holds one number naming its env and count. An episode's first stack repeats its first frame
    (pad="repeat", as envpool and gymnasium's FrameStackObservation) or has zero frames before it (pad="zeros",
    as SB3's VecFrameStack). stacked=False: each observation is K new frames (nothing to share). cycle=M: the
    numbers repeat, count % M, with 0 written as -0.0 in every other frame (frames that differ only there).
    dtype=np.uint8: the numbers mod 256 (Atari's frames; their stacks along the last axis are sampled through
    32-bit words).

    Returns `test_replay_compact.vector_steps`'s (batches, record)."""
    count = np.zeros(B, np.int64)
    history: list = [None] * B

    def frame(b):
        count[b] += 1
        if cycle is None:
            return np.full((2, 3), (1000 * b + count[b]) % (256 if dtype == np.uint8 else 2**24), dtype)
        number = count[b] % cycle
        return np.full((2, 3), -0.0 if number == 0 and count[b] % 2 else number, np.float32)

    def reset(b):
        first = frame(b)
        history[b] = [first] * K if pad == "repeat" else [np.zeros_like(first)] * (K - 1) + [first]
        return np.stack(history[b], axis=axis)

    def step(b):
        history[b] = history[b][1:] + [frame(b)] if stacked else [frame(b) for _ in range(K)]
        return np.stack(history[b], axis=axis)

    return vector_steps(steps, limit=limit, seed=seed, p_terminate=p_terminate, first=reset, following=step)


def _key(t):
    obs, action, reward, next_obs, terminated, truncated = t
    return (np.asarray(obs).tobytes(), int(action), float(reward), np.asarray(next_obs).tobytes(), bool(terminated),
            bool(truncated))


def _draws(rb, state, draws: int = 200):
    keys = jax.random.split(jax.random.key(1), draws)
    return jax.jit(jax.vmap(rb.sample, in_axes=(None, 0)))(state, keys)


def _keys_of(out):
    flat = jax.tree.map(lambda x: np.asarray(x).reshape(-1, *np.shape(x)[2:]), out)
    return {_key(jax.tree.map(lambda x: x[i], tuple(flat))) for i in range(len(flat.reward))}


def _newest(record, valid):
    return {_key(t) for b in range(B) for t in record[b][len(record[b]) - int(valid[b]):]}


@pytest.mark.parametrize("axis, pad, dtype", [(-1, "repeat", np.uint8), (-1, "zeros", np.float32),
                                              (0, "zeros", np.float32), (1, "repeat", np.uint8)])
def test_frame_stacks_give_the_compact_buffers_samples_bit_for_bit(axis, pad, dtype):
    """Episodes cut by a time limit of 40 and random terminations, 3L steps: every transition of each env's last
    L fits (the ring is sized for episodes of 32 steps on average), the draws are the compact buffer's without
    frames, leaf for leaf, and each env's frames are one per observation plus K - 1 per episode's first."""
    L, limit = 96, 40
    batches, record = _episodes(3 * L, limit=limit, seed=7, p_terminate=0.01, axis=axis, pad=pad, dtype=dtype)
    compact = replay.make_compact_replay_buffer(L * B, 32, B, max_episode_steps=limit)
    frames = replay.make_compact_replay_buffer(L * B, 32, B, max_episode_steps=limit, frame_axis=axis, num_frames=K)
    plain, shared = fill(compact, batches), fill(frames, batches)
    assert isinstance(shared, replay.FrameStackState) and shared.frames.shape[1:] == (B, 2, 3)
    assert int(frames.size(shared)) == int(compact.size(plain)) == L * B
    a, b = _draws(compact, plain), _draws(frames, shared)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert _keys_of(b) == _newest(record, shared.valid)
    for env, steps in enumerate(record):
        # frames taken: the first observation's K (1 where it is 3 zero frames and one: the ring starts as zeros),
        # then K for each episode's first observation and 1 for every other one, the final observations of the
        # truncated episodes included, and 1 for the last step's next observation where it has no position yet
        first = K if pad == "repeat" else 1
        starts = sum(t[4] or t[5] for t in steps[:-1])
        cuts = sum(t[5] and not t[4] for t in steps)
        last = 0 if steps[-1][5] and not steps[-1][4] else 1
        assert int(shared.frame_head[env]) == first + (len(steps) - 1 - starts) + K * starts + cuts + last, env


@pytest.mark.parametrize("stacked", [True, False])
def test_when_the_frames_do_not_fit_the_oldest_drop_out_and_what_is_sampled_is_still_right(stacked):
    """Episodes of 5 steps (the ring is sized for 32) or observations that share no frames: fewer than L
    transitions per env can be sampled, and what is sampled is the newest of them, exactly as added."""
    L = 24
    batches, record = _episodes(3 * L, limit=5, seed=5, p_terminate=0.08, stacked=stacked)
    rb = replay.make_compact_replay_buffer(L * B, 16, B, max_episode_steps=1000, frame_axis=-1, num_frames=K)
    state = fill(rb, batches)
    valid = np.asarray(state.valid)
    assert (valid < L).all() and (valid > 0).all() and int(rb.size(state)) == valid.sum()
    assert _keys_of(_draws(rb, state, 300)) == _newest(record, valid)


@pytest.mark.parametrize("cycle, p_terminate", [(3, 0.0), (3, 0.1), (1, 0.0), (1, 0.1)])
def test_frames_that_repeat_are_still_sampled_bit_for_bit(cycle, p_terminate):
    """Frames of 3 values, one of them 0.0 or -0.0, or of 0.0 and -0.0 only (cycle 1): many a stack equals an
    older one, and one stored where an earlier one stood (after a truncation, whose final observation takes a
    position of its own) must not be taken for it; 0.0 and -0.0 are not one frame. What is sampled is what was
    added; with only the time limit's cuts (which the ring is sized for) every transition fits and the draws are
    the compact buffer's. (Both mistakes were made on purpose once, and each failed here.)"""
    L, limit = 48, 6
    batches, record = _episodes(3 * L, limit=limit, seed=3, p_terminate=p_terminate, cycle=cycle)
    compact = replay.make_compact_replay_buffer(L * B, 32, B, max_episode_steps=limit)
    frames = replay.make_compact_replay_buffer(L * B, 32, B, max_episode_steps=limit, frame_axis=-1, num_frames=K)
    plain, shared = fill(compact, batches), fill(frames, batches)
    b = _draws(frames, shared, 300)
    assert _keys_of(b) == _newest(record, shared.valid)
    if p_terminate == 0.0:
        assert int(frames.size(shared)) == int(compact.size(plain)) == L * B
        for x, y in zip(jax.tree.leaves(_draws(compact, plain, 300)), jax.tree.leaves(b)):
            np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))


def test_it_holds_about_a_frame_a_transition():
    """Atari's stacks of 4 84 x 84 frames, 10,000 transitions: about a quarter of the compact buffer's bytes (the
    ring has room for an episode start every 32 steps), an eighth of the full buffer's."""
    image = np.zeros((84, 84, 4), np.uint8)
    one = replay.Transition(image, np.int32(0), np.float32(0), image, np.bool_(False), np.bool_(False))

    def nbytes(rb):
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(jax.eval_shape(rb.init, one)))

    full = nbytes(replay.make_replay_buffer(10_000, 32))
    compact = nbytes(replay.make_compact_replay_buffer(10_000, 32, 1, max_episode_steps=27_000))
    frames = nbytes(replay.make_compact_replay_buffer(10_000, 32, 1, max_episode_steps=27_000, frame_axis=-1,
                                                      num_frames=4))
    assert 0.25 < frames / compact < 0.28 and frames / full < 0.14, (frames, compact, full)


def test_frame_options_are_checked_where_they_are_given():
    obs = np.zeros((2, 3, 4), np.float32)
    one = replay.Transition(obs, np.int32(0), np.float32(0), obs, np.bool_(False), np.bool_(False))
    for kwargs, words in (({"frame_axis": -1}, "frame_axis and num_frames are given together"),
                          ({"frame_axis": 1.0, "num_frames": 4}, "frame_axis must be an int, got 1.0"),
                          ({"frame_axis": -1, "num_frames": 1}, r"num_frames must be an int >= 2")):
        with pytest.raises(ValueError, match=words):
            replay.make_compact_replay_buffer(12, 4, 3, **kwargs)
    for axis, frames, words in ((3, 4, r"frame_axis=3 is not an axis of the observation of shape \(2, 3, 4\)"),
                                (0, 4, r"num_frames=4, but the observation of shape \(2, 3, 4\) has 2 frames"),
                                (-1, 2, r"num_frames=2, but the observation of shape \(2, 3, 4\) has 4 frames")):
        rb = replay.make_compact_replay_buffer(12, 4, 3, frame_axis=axis, num_frames=frames)
        with pytest.raises(ValueError, match=words):
            rb.init(one)
    rb = replay.make_compact_replay_buffer(12, 4, 3, frame_axis=-1, num_frames=4)
    pair = replay.Transition({"a": obs}, np.int32(0), np.float32(0), {"a": obs}, np.bool_(False), np.bool_(False))
    with pytest.raises(ValueError, match="frames are shared between observations that are one array, got a dict"):
        rb.init(pair)
    with pytest.raises(ValueError, match=r"has 1 frame along it"):
        replay.check_frame_stack(0, spaces.Box(0, 1, (1, 5)), name="frame_stack_axis")

    from jaxrl_rollout.algorithms import dqn, sac, td3

    for config in (dqn.DQNConfig, sac.SACConfig, td3.TD3Config):
        with pytest.raises(ValueError, match=r"frame_stack_axis=-1 shares frames within the compact replay buffer, "
                                             r"which optimize_memory_usage=True turns on"):
            config(frame_stack_axis=-1)
        with pytest.raises(ValueError, match=r"frame_stack_axis must be None or an int axis"):
            config(frame_stack_axis="-1", optimize_memory_usage=True)
    # CartPole's observation [4] is no stack of frames (4 numbers are not 4 frames), nor is Pendulum's
    with pytest.raises(ValueError, match=r"frame_stack_axis=-1 needs observations of stacked frames, at least 2-D: "
                                         r"the observation space Box has shape \(4,\)"):
        dqn.make_train(dqn.DQNConfig(optimize_memory_usage=True, frame_stack_axis=-1))
    with pytest.raises(ValueError, match=r"frame_stack_axis=0 needs observations of stacked frames"):
        td3.make_train(td3.TD3Config(optimize_memory_usage=True, frame_stack_axis=0))


@struct.dataclass
class _StackState(environment.EnvState):
    inner: environment.EnvState
    frames: jax.Array


class _FrameStackCartPole(environment.Environment):
    """gymnax's CartPole-v1 observed as its last K observations, stacked along the last axis ([4, K]); an
    episode's first stack repeats its first observation."""

    def __init__(self):
        import gymnax

        super().__init__()
        self.inner, _ = gymnax.make("CartPole-v1")

    @property
    def default_params(self):
        return self.inner.default_params

    def reset_env(self, key, params):
        obs, inner = self.inner.reset_env(key, params)
        frames = jnp.repeat(obs[:, None], K, axis=1)
        return frames, _StackState(time=inner.time, inner=inner, frames=frames)

    def step_env(self, key, state, action, params):
        obs, inner, reward, done, info = self.inner.step_env(key, state.inner, action, params)
        frames = jnp.concatenate([state.frames[:, 1:], obs[:, None]], axis=1)
        return frames, _StackState(time=inner.time, inner=inner, frames=frames), reward, done, info

    def action_space(self, params=None):
        return self.inner.action_space(params)

    def observation_space(self, params=None):
        return spaces.Box(-jnp.inf, jnp.inf, (4, K), jnp.float32)


def test_dqn_trains_the_same_with_and_without_frame_sharing():
    """DQN on CartPole observed as stacks of 4: with frame_stack_axis=-1 the buffer holds each observation's
    newest frame, and the run (3,000 steps, 200 gradient steps, two seeds vmapped) equals the compact buffer's
    bit for bit; its frames are one a step plus 3 an episode."""
    from jaxrl_rollout.algorithms import dqn

    env = _FrameStackCartPole()
    small = dict(total_timesteps=3_000, learning_starts=1_000, log_interval=100, buffer_size=4_000,
                 optimize_memory_usage=True)
    keys = jax.random.split(jax.random.key(0), 2)
    runs = [jax.jit(jax.vmap(dqn.make_train(dqn.DQNConfig(**small, frame_stack_axis=axis), env=env,
                                            env_params=env.default_params)))(keys)
            for axis in (None, -1)]
    (plain, m_plain), (shared, m_shared) = runs
    assert isinstance(shared.buffer, replay.FrameStackState) and shared.buffer.frames.shape[-2:] == (1, 4)
    for name in m_plain._fields:
        np.testing.assert_array_equal(getattr(m_plain, name), getattr(m_shared, name), err_msg=name)
    for x, y in zip(jax.tree.leaves(plain.params), jax.tree.leaves(shared.params)):
        np.testing.assert_array_equal(x, y)
    episodes = np.asarray(m_shared.num_episodes).sum(axis=1)
    assert (episodes > 50).all()
    # (K for the first observation, 1 a step, K - 1 more an episode; the last one's reset may be still to come,
    # and an episode cut at 500 steps has its final observation's frame too)
    taken = np.asarray(shared.buffer.frame_head[:, 0]) - (K + 3_000 + (K - 1) * episodes)
    assert ((taken >= -(K - 1)) & (taken <= 6)).all(), taken


def test_cli_dqn_on_envpools_atari_shares_its_frames_and_resumes(tmp_path, monkeypatch, capsys):
    """`--optimize-memory-usage true --frame-stack-axis -1` on envpool's Pong (frames made 20 x 24 to keep it
    fast, its episodes cut at 100 steps): a relative --out, a stop after the first chunk, --resume and evaluate.
    The checkpoint holds the frames, about one a step (envpool stacks 4), and what the buffer gives back is
    envpool's own stacks."""
    from jaxrl_rollout import cli, runner

    monkeypatch.chdir(tmp_path)
    argv = ["train", "--algo", "dqn", "--env", "envpool/Pong-v5", "--env-option", "img_height=20", "--env-option",
            "img_width=24", "--env-option", "max_episode_steps=100", "--seeds", "2", "--total-steps", "600",
            "--learning-starts", "200", "--buffer-size", "400", "--batch-size", "16", "--log-interval", "100",
            "--hidden-sizes", "16", "--eval-every", "off", "--chunk-updates", "3", "--optimize-memory-usage", "true",
            "--frame-stack-axis", "-1", "--out", "runs/pong"]
    assert cli.main([*argv, "--stop-after-chunks", "1"]) == 0
    assert "continue with: jaxrl-rollout train --resume runs/pong" in capsys.readouterr().out
    assert cli.main(["train", "--resume", "runs/pong", "--num-eval", "1"]) == 0
    assert "step 600/600 (100.0%)" in capsys.readouterr().err
    spec, state = runner.load_run("runs/pong")[:2]
    assert spec.config.frame_stack_axis == -1 and isinstance(state.buffer, replay.FrameStackState)
    buf = jax.tree.map(lambda x: x[0], state.buffer)  # run 0
    assert buf.frames.shape[1:] == (1, 20, 24) and int(buf.count) == 600 and int(buf.valid[0]) == 400
    # 600 steps in episodes of 100 (the resume, after 300, starts a new one where one began anyway): 4 frames for
    # the first stack, 1 for each step's next observation (a cut's final one too) and 4 for each next episode's
    # first stack, the last cut's next episode not begun; without sharing, 4 an observation
    assert int(buf.frame_head[0]) == 4 + 600 + 5 * 4, int(buf.frame_head[0])
    frames = replay.make_compact_replay_buffer(400, 16, 1, 100, frame_axis=-1, num_frames=4)
    drawn = frames.sample(buf, jax.random.key(0))
    assert drawn.obs.shape == (16, 20, 24, 4) and drawn.obs.dtype == np.uint8
    # each stack is 4 consecutive frames of the game: a sampled next observation's first 3 are its obs's last 3
    # (except after an episode's end)
    ended = np.asarray(drawn.terminated | drawn.truncated)
    np.testing.assert_array_equal(np.asarray(drawn.next_obs)[~ended][..., :3], np.asarray(drawn.obs)[~ended][..., 1:])
    assert cli.main(["evaluate", "runs/pong", "--num-episodes", "1"]) == 0
    assert "DQN on envpool/Pong-v5 (img_height=20, img_width=24, max_episode_steps=100), checkpoint final" in \
        capsys.readouterr().out


def test_cli_says_when_the_frame_axis_shares_nothing(tmp_path, monkeypatch, capsys):
    """MinAtar's [10, 10, 4] channels are objects (paddle, ball, trail, bricks), not frames: along -1 no
    observation shares frames with the one before, every transition takes 4 frames, and the buffer holds about a
    quarter of what it could. The run says so in one line, naming the option; the same run without the axis
    does not."""
    from jaxrl_rollout import cli

    monkeypatch.chdir(tmp_path)
    argv = ["train", "--algo", "dqn", "--env", "Breakout-MinAtar", "--seeds", "1", "--total-steps", "800",
            "--learning-starts", "100", "--buffer-size", "400", "--batch-size", "16", "--log-interval", "100",
            "--eval-every", "off", "--num-eval", "1", "--optimize-memory-usage", "true"]
    assert cli.main([*argv, "--frame-stack-axis", "-1", "--out", "shared"]) == 0
    out = capsys.readouterr().out
    note = [line for line in out.splitlines() if line.startswith("  note: the replay buffers hold ")]
    assert len(note) == 1 and "of the 400 transitions they could" in note[0], out
    assert "--frame-stack-axis -1 stores a frame once only where" in note[0]
    held = int(note[0].split("hold ")[1].split(" of")[0])
    assert 90 < held < 130, note  # (400 + 1 + 25 + 3 x 26 frames) / 4 a transition: 126 at most
    assert cli.main([*argv, "--out", "plain"]) == 0
    assert "note: the replay buffers" not in capsys.readouterr().out
