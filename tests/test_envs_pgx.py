"""The pgx adapter on tic-tac-toe, with games worked out by hand.

Board cells are numbered

    0 1 2
    3 4 5
    6 7 8

The agent's observation is pgx's [3, 3, 2] board from its own point of view:
plane 0 holds its marks, plane 1 the opponent's. The scripted agent plays
`seq[k]` when it has k marks on the board; `lowest_opponent` always plays the
lowest legal cell, so every game below is fixed.
"""

import functools
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pgx  # noqa: F401  (in the test extra: a missing pgx fails here rather than skipping)
import pytest

import jaxrl_rollout as jr
from jaxrl_rollout import envs
from jaxrl_rollout.distributions import categorical_from_logits
from jaxrl_rollout.envs import pgx as pgx_envs

# Agent sequences against `lowest_opponent`, agent first (seat 0):
# WIN:  agent 4, opp 0, agent 8, opp 1, agent 2, opp 3, agent 6: diagonal 2-4-6 on its 4th move.
# LOSS: agent 8, opp 0, agent 7, opp 1, agent 5, opp 2: the reply completes 0-1-2 on the 3rd move.
WIN = [4, 8, 2, 6, 0]
LOSS = [8, 7, 5, 0, 0]
# Agent second (seat 1): opp 0, agent 4, opp 1, agent 2, opp 3, agent 6: 2-4-6 on its 3rd move.
WIN_SECOND = [4, 2, 6, 0, 0]


def lowest_opponent(params, obs, legal_action_mask, key):
    del params, obs, key
    return jnp.argmax(legal_action_mask).astype(jnp.int32)


def board(obs):
    """(own, opponent) boolean planes [..., 9] of an agent observation."""
    x = np.asarray(obs["observation"])
    return x[..., 0].reshape(x.shape[:-3] + (9,)), x[..., 1].reshape(x.shape[:-3] + (9,))


def cells(*idx):
    out = np.zeros(9, bool)
    out[list(idx)] = True
    return out


def encode(own, opp):
    """The board as a number: bit i for an own mark on cell i, bit 9 + i for an opponent's."""
    return float(np.sum(np.asarray(own) * 2 ** np.arange(9)) + np.sum(np.asarray(opp) * 2 ** np.arange(9, 18)))


def toy_value(obs):
    """V(obs) = `encode` of the board (exact in float32), so a value pins down the board it was taken on."""
    planes = obs["observation"].astype(jnp.float32).reshape(obs["observation"].shape[:-3] + (9, 2))
    return planes[..., 0] @ 2.0 ** jnp.arange(9) + planes[..., 1] @ 2.0 ** jnp.arange(9, 18)


def scripted_policy(seqs):
    """Env b plays seqs[b][k] when it has k marks on the board."""
    seqs = jnp.asarray(seqs, jnp.int32)

    def policy_fn(params, obs, key):
        del params, key
        moves = jnp.sum(obs["observation"][..., 0], axis=(-2, -1)).astype(jnp.int32)
        action = jnp.take_along_axis(seqs, moves[:, None], axis=1)[:, 0]
        return jr.PolicyOutput(action, jnp.zeros(action.shape), toy_value(obs))

    return policy_fn


def make_env(**kwargs):
    kwargs.setdefault("opponent", lowest_opponent)
    return envs.make("pgx/tic_tac_toe", **kwargs)


@functools.cache
def cached_env(agent_seat=0, max_steps=None):
    """One env per configuration, with its jitted reset and step, so each compiles once."""
    env, params = make_env(agent_seat=agent_seat, max_steps=max_steps)
    return env, params, jax.jit(env.reset), jax.jit(env.step)


@functools.cache
def scripted_rollout(seqs, num_steps, agent_seat=0, max_steps=None, key=0):
    env, params, _, _ = cached_env(agent_seat, max_steps)

    @jax.jit
    def run(key):
        state = jr.rollout_init(key, env, params, len(seqs))
        return jr.rollout(env, params, scripted_policy(seqs), None, state, num_steps)

    return run(jax.random.key(key))


def play(actions, agent_seat=0, max_steps=None, key=0):
    """Steps one env through `actions`: [(obs, state), then (obs, state, reward, terminated, truncated, info)...]."""
    _, params, reset, step = cached_env(agent_seat, max_steps)
    obs, state = reset(jax.random.key(key), params)
    results = [(obs, state)]
    for i, a in enumerate(actions):
        obs, state, reward, terminated, truncated, info = step(jax.random.key(100 + i), state, jnp.int32(a), params)
        results.append((obs, state, float(reward), bool(terminated), bool(truncated), info))
    return results


def test_spaces_and_params():
    env, params = make_env()
    assert params is None and env.default_params is None
    assert env.action_space(params).n == 9
    space = env.observation_space(params)
    assert set(space.spaces) == {"observation", "legal_action_mask"}
    assert space.spaces["observation"].shape == (3, 3, 2)
    assert space.spaces["legal_action_mask"].shape == (9,)
    assert env.name == "pgx/tic_tac_toe"


def test_win_and_loss_against_the_lowest_index_opponent_through_rollout():
    _, traj = scripted_rollout((tuple(WIN), tuple(LOSS)), 5)
    # Env 0 wins on its 4th move (t = 3); env 1 loses on the reply to its 3rd (t = 2).
    np.testing.assert_array_equal(traj.reward, [[0, 0], [0, 0], [0, -1], [1, 0], [0, 0]])
    np.testing.assert_array_equal(traj.terminated, [[0, 0], [0, 0], [0, 1], [1, 0], [0, 0]])
    assert not np.any(traj.truncated)
    np.testing.assert_array_equal(traj.first, [[1, 1], [0, 0], [0, 0], [0, 1], [1, 0]])
    np.testing.assert_array_equal(traj.action[:, 0], [4, 8, 2, 6, 4])
    np.testing.assert_array_equal(traj.action[:, 1], [8, 7, 5, 8, 7])
    np.testing.assert_array_equal(traj.completed_return[:, 0], [0, 0, 0, 1, 0])
    np.testing.assert_array_equal(traj.completed_return[:, 1], [0, 0, -1, 0, 0])
    np.testing.assert_array_equal(traj.completed_length[:, 0], [0, 0, 0, 4, 0])
    # Before its 4th move env 0 sees own {4, 8, 2} and the replies {0, 1, 3}.
    own, opp = board(jax.tree.map(lambda x: x[3, 0], traj.obs))
    np.testing.assert_array_equal(own, cells(4, 8, 2))
    np.testing.assert_array_equal(opp, cells(0, 1, 3))


def test_loss_final_observation_shows_the_opponents_winning_move():
    *_, (obs, state, reward, terminated, truncated, info) = play(LOSS[:3])
    assert (reward, terminated, truncated) == (-1.0, True, False)
    own, opp = board(info["final_observation"])
    np.testing.assert_array_equal(own, cells(8, 7, 5))
    np.testing.assert_array_equal(opp, cells(0, 1, 2))  # the agent's view even though the opponent moved last
    # Reset in the same step: an empty board, all moves legal.
    own, opp = board(obs)
    assert not own.any() and not opp.any()
    assert bool(np.all(obs["legal_action_mask"]))
    assert int(state.num_moves) == 0


def test_legal_action_mask_in_the_observation():
    results = play(WIN[:2])
    obs0 = results[0][0]
    np.testing.assert_array_equal(obs0["legal_action_mask"], np.ones(9, bool))
    obs2 = results[2][0]  # after agent 4, opp 0, agent 8, opp 1
    own, opp = board(obs2)
    np.testing.assert_array_equal(own, cells(4, 8))
    np.testing.assert_array_equal(opp, cells(0, 1))
    np.testing.assert_array_equal(obs2["legal_action_mask"], ~cells(0, 1, 4, 8))


def test_truncation_after_max_steps_agent_moves_bootstraps_from_the_final_board():
    *_, (obs, state, reward, terminated, truncated, info) = play([4, 8], max_steps=2)
    assert (reward, terminated, truncated) == (0.0, False, True)
    own, opp = board(info["final_observation"])
    np.testing.assert_array_equal(own, cells(4, 8))
    np.testing.assert_array_equal(opp, cells(0, 1))
    assert not board(obs)[0].any() and not board(obs)[1].any() and int(state.num_moves) == 0

    _, traj = scripted_rollout((tuple(WIN),), 3, max_steps=2)
    np.testing.assert_array_equal(traj.truncated[:, 0], [False, True, False])
    np.testing.assert_array_equal(traj.terminated[:, 0], [False, False, False])
    np.testing.assert_array_equal(traj.reward[:, 0], [0, 0, 0])
    np.testing.assert_array_equal(traj.first[:, 0], [True, False, True])
    # next_value at the truncation is V(final_observation): the board after agent 4, opp 0, agent 8, opp 1.
    np.testing.assert_allclose(traj.next_value[1, 0], encode(cells(4, 8), cells(0, 1)))
    # The policy then acts on the reset board.
    np.testing.assert_allclose(traj.value[2, 0], 0.0)
    np.testing.assert_array_equal(traj.obs["legal_action_mask"][2, 0], np.ones(9, bool))
    # Not truncated: V(obs[t + 1]), the board after agent 4 and opp 0.
    np.testing.assert_allclose(traj.next_value[0, 0], encode(cells(4), cells(0)))


def test_agent_as_second_seat_sees_the_opponents_opening_move():
    # opp 0 | agent 4, opp 1 | agent 2, opp 3 | agent 6 wins (2-4-6) | opp 0 on the new board.
    _, traj = scripted_rollout((tuple(WIN_SECOND),), 4, agent_seat=1)
    np.testing.assert_allclose(traj.value[:, 0], [
        encode(cells(), cells(0)),
        encode(cells(4), cells(0, 1)),
        encode(cells(4, 2), cells(0, 1, 3)),
        encode(cells(), cells(0)),
    ])
    np.testing.assert_array_equal(traj.obs["legal_action_mask"][0, 0], ~cells(0))
    np.testing.assert_array_equal(traj.reward[:, 0], [0, 0, 1, 0])
    np.testing.assert_array_equal(traj.terminated[:, 0], [0, 0, 1, 0])
    np.testing.assert_array_equal(traj.first[:, 0], [1, 0, 0, 1])


@pytest.mark.parametrize("seat", [0, 1])
def test_seat_is_turn_order_whatever_player_id_pgx_draws(seat):
    env, _, _, _ = cached_env(seat)
    obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(jax.random.split(jax.random.key(3), 16), None)
    # pgx draws the first mover's id at random: both ids occur.
    assert set(np.asarray(state.agent_player).tolist()) == {0, 1}
    # It is the agent's turn, and the agent holds the seat's colour (0 moves first).
    np.testing.assert_array_equal(state.game.current_player, state.agent_player)
    np.testing.assert_array_equal(state.game._x.color, np.full(16, seat))
    np.testing.assert_array_equal(board(obs)[1].sum(-1), np.full(16, seat))


def test_random_seat_draws_both_seats():
    env, _, _, _ = cached_env("random")
    obs, _ = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(jax.random.split(jax.random.key(5), 32), None)
    opening = board(obs)[1].sum(-1)
    assert set(opening.tolist()) == {0, 1}


def test_illegal_agent_move_ends_the_game_with_the_pgx_penalty():
    # agent 4, opp 0; then the agent plays the occupied cell 0.
    *_, (obs, state, reward, terminated, truncated, info) = play([4, 0])
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert bool(info["illegal_action"])
    assert not board(obs)[0].any()


def pref_apply(params, obs):
    """Logits = params (one preference per cell) for every row; value 0."""
    batch = obs.shape[0]
    return jnp.broadcast_to(params, (batch, 9)), jnp.zeros(batch)


def test_self_play_opponent_follows_the_env_params():
    policy_fn = pgx_envs.masked_categorical_policy(pref_apply, deterministic=True)
    opponent = pgx_envs.opponent_from_policy(policy_fn)
    prefer_8 = jnp.zeros(9).at[8].set(5.0)
    prefer_2 = jnp.zeros(9).at[2].set(5.0)
    env, params = envs.make("pgx/tic_tac_toe", opponent=opponent, opponent_params=prefer_8, agent_seat=1)
    assert params is prefer_8

    @jax.jit
    def self_play(env_params, agent_params):
        state = jr.rollout_init(jax.random.key(0), env, env_params, 2)
        return jr.rollout(env, env_params, policy_fn, agent_params, state, 1)

    # The opponent opens where the env params say; the agent answers where its own params say.
    _, traj = self_play(prefer_8, prefer_2)
    own, opp = board(traj.obs)
    np.testing.assert_array_equal(opp[0], np.stack([cells(8)] * 2))
    np.testing.assert_array_equal(traj.action[0], [2, 2])
    _, traj = self_play(prefer_2, prefer_8)
    own, opp = board(traj.obs)
    np.testing.assert_array_equal(opp[0], np.stack([cells(2)] * 2))
    np.testing.assert_array_equal(traj.action[0], [8, 8])
    assert self_play._cache_size() == 1  # env params are traced: one compilation
    # None falls back to the params given to make.
    obs, _ = jax.jit(env.reset)(jax.random.key(1), None)
    np.testing.assert_array_equal(board(obs)[1], cells(8))


def test_masked_policy_never_picks_an_illegal_action():
    env, params = envs.make("pgx/tic_tac_toe", agent_seat="random")
    w = jax.random.normal(jax.random.key(0), (18, 9)) * 3.0

    def apply_fn(p, x):
        x = x.reshape(x.shape[0], -1).astype(jnp.float32)
        return x @ p + 2.0, jnp.zeros(x.shape[0])  # the bias favours cells that may be taken

    policy_fn = pgx_envs.masked_categorical_policy(apply_fn)

    @jax.jit
    def run(key, w):
        return jr.rollout(env, params, policy_fn, w, jr.rollout_init(key, env, params, 16), 25)

    _, traj = run(jax.random.key(1), w)
    legal = np.take_along_axis(np.asarray(traj.obs["legal_action_mask"]), np.asarray(traj.action)[..., None], -1)
    assert legal.all()  # 400 steps, no illegal action
    assert np.isfinite(traj.log_prob).all()
    assert set(np.unique(traj.reward).tolist()) <= {-1.0, 0.0, 1.0}
    assert int(jr.episode_metrics(traj).num_episodes) > 20
    # Random play against the random opponent: wins, draws and losses all happen.
    done_returns = np.asarray(traj.completed_return)[np.asarray(traj.done)]
    assert {-1.0, 1.0} <= set(done_returns.tolist())


def test_masked_categorical_distribution_stays_finite():
    logits = jnp.array([[1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.5]])
    mask = jnp.array([[True, False, True, False], [True, True, True, False]])

    def loss(logits):
        dist = categorical_from_logits(pgx_envs.masked_logits(logits, mask))
        return jnp.sum(dist.log_prob(jnp.array([2, 1]))) + jnp.sum(dist.entropy())

    dist = jax.jit(lambda logits: categorical_from_logits(pgx_envs.masked_logits(logits, mask)))(logits)
    np.testing.assert_array_equal(np.asarray(dist.probs)[~np.asarray(mask)], 0.0)
    expected = [np.log(np.e**3 / (np.e + np.e**3)), np.log(1 / 3)]  # softmax over the legal logits only
    np.testing.assert_allclose(dist.log_prob(jnp.array([2, 0])), expected, rtol=1e-6)
    assert np.isneginf(dist.log_prob(jnp.array([1, 3]))).all()
    np.testing.assert_allclose(dist.entropy()[1], np.log(3.0), rtol=1e-6)
    value, grads = jax.jit(jax.value_and_grad(loss))(logits)
    assert np.isfinite(value) and np.isfinite(grads).all()
    np.testing.assert_array_equal(np.asarray(grads)[~np.asarray(mask)], 0.0)


def test_evaluate_with_an_explicit_max_steps():
    env, _, _, _ = cached_env()
    result = jax.jit(lambda key: jr.evaluate(env, None, scripted_policy([WIN, LOSS]), None, key, 2, max_steps=9))(
        jax.random.key(0)
    )
    np.testing.assert_array_equal(result.returns, [1.0, -1.0])
    np.testing.assert_array_equal(result.lengths, [4, 3])
    assert result.completed.all()


def test_unknown_name_suggests_close_matches():
    with pytest.raises(ValueError, match=r"unknown pgx env name 'tic_tac_to'.*tic_tac_toe.*Known names:.*connect_four"):
        envs.make("pgx/tic_tac_to")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"agent_seat": 2}, "agent_seat must be 0 .* or 1 .*'random'"),
        ({"agent_seat": True}, "agent_seat"),
        ({"max_steps": 0}, "max_steps must be a positive int"),
        ({"opponent": "lowest"}, "opponent must be a callable"),
        ({"opponent_params": jnp.zeros(9)}, "opponent_params is given but opponent is None"),
        ({"board_size": 4}, "takes no options; got unknown board_size"),
    ],
)
def test_bad_arguments_raise_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        envs.make("pgx/tic_tac_toe", **kwargs)


def test_masked_policy_wants_the_dict_observation():
    policy_fn = pgx_envs.masked_categorical_policy(pref_apply)
    with pytest.raises(ValueError, match="keys 'observation' and 'legal_action_mask'"):
        policy_fn(jnp.zeros(9), jnp.zeros((2, 3, 3, 2)), jax.random.key(0))


def test_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pgx", None)
    with pytest.raises(ImportError, match=r"pgx.*pip install 'jaxrl-rollout\[pgx\]'"):
        envs.make("pgx/tic_tac_toe")


def test_importing_the_package_does_not_import_pgx():
    code = (
        "import sys, jaxrl_rollout, jaxrl_rollout.envs, jaxrl_rollout.envs.pgx; "
        "assert 'pgx' not in sys.modules, 'pgx was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_ppo_trains_two_player_games_by_self_play_and_evaluates_against_random():
    """Default PPO on pgx/tic_tac_toe: self-play with the current params, W/D/L against the random opponent."""
    from jaxrl_rollout.algorithms import ppo
    from jaxrl_rollout.networks import ActorCriticMultiInput

    config = ppo.PPOConfig(env_id="pgx/tic_tac_toe", num_envs=4, num_steps=8, total_timesteps=64,
                           update_epochs=1, num_minibatches=2, hidden_sizes=(16, 16))
    algo = ppo.make_ppo(config)
    assert isinstance(algo.module, ActorCriticMultiInput)
    # Evaluation plays the uniform random opponent from a random seat; training plays the current policy.
    assert algo.env._opponent is pgx_envs.random_opponent and algo.env._agent_seat == "random"
    state, metrics = jax.jit(algo.train)(jax.random.key(0))
    assert np.isfinite(metrics.entropy).all() and np.isfinite(metrics.policy_loss).all()
    assert (np.asarray(metrics.entropy) < np.log(9)).all()  # masked: fewer than 9 legal moves on average
    assert int(np.sum(metrics.num_episodes)) > 0

    # The self-play opponent plays with the params passed as env params: with an actor head that
    # prefers low cells it replies on the lowest legal cell, with one that prefers high cells the highest.
    built = ppo._common.setup(config.env_id, config.network, config.hidden_sizes, config.activation)
    assert built.self_play and ppo._common.rollout_env_params(built, state.params) is state.params

    def with_preference(sign):
        head = dict(state.params["params"]["actor_head"], bias=sign * 100.0 * jnp.arange(9.0),
                    kernel=jnp.zeros_like(state.params["params"]["actor_head"]["kernel"]))
        return {"params": {**state.params["params"], "actor_head": head}}

    @jax.jit
    def opponent_marks(params, key):
        obs, env_state = built.env.reset(key, params)
        obs, *_ = built.env.step(jax.random.fold_in(key, 1), env_state, jnp.int32(4), params)
        return obs["observation"].reshape(9, 2)[:, 1]

    for key in jax.random.split(jax.random.key(5), 4):
        low, high = opponent_marks(with_preference(-1.0), key), opponent_marks(with_preference(1.0), key)
        assert low[0] and not low[8] and high[8] and not high[0]

    returns = jax.jit(lambda p, k: jr.evaluate(algo.env, algo.env_params, algo.eval_policy_fn, p, k, 20).returns)(
        algo.policy_params(state), jax.random.key(1)
    )
    assert set(np.unique(returns).tolist()) <= {-1.0, 0.0, 1.0}
    rates = pgx_envs.outcome_rates(returns)
    np.testing.assert_allclose(rates.sum(), 1.0)
    np.testing.assert_allclose(rates, [np.mean(returns > 0), np.mean(returns == 0), np.mean(returns < 0)])
    np.testing.assert_allclose(pgx_envs.outcome_rates(np.array([[1.0, 0.0, -1.0, 1.0]])), [[0.5, 0.25, 0.25]])


def test_the_rollout_command_plays_legal_moves_against_the_random_opponent(capsys):
    """`jaxrl-rollout rollout --env pgx/...` stopped at evaluate's missing time limit, and its uniform policy
    played illegal moves (each a lost game at once); it now plays uniformly over the legal moves, against the
    random opponent from a random seat with the trainer's evaluation cap."""
    from jaxrl_rollout import cli

    result = cli.run_rollout("pgx/tic_tac_toe", 4, 20, 0, 8)
    assert bool(result["eval"].completed.all()) and "evaluate: 8 episodes" in capsys.readouterr().out
    env, env_params = envs.make("pgx/tic_tac_toe")
    policy = cli._random_policy(env, env_params)
    state = jr.rollout_init(jax.random.key(0), env, env_params, 8)
    _, traj = jax.jit(lambda s: jr.rollout(env, env_params, policy, None, s, 30))(state)
    legal = np.asarray(traj.obs["legal_action_mask"])
    assert np.take_along_axis(legal, np.asarray(traj.action)[..., None], -1).all()
    assert int(np.asarray(traj.terminated).sum()) > 8  # whole games were played


def test_the_command_lines_time_limit_hint_names_pgxs_own_option(capsys):
    """It advised max_episode_steps, which pgx refuses ("takes no options"): its time limit is max_steps; and the
    option it advises is taken, by the command line itself."""
    from jaxrl_rollout import cli

    assert cli.main(["rollout", "--env", "pgx/2048"]) == 2
    err = capsys.readouterr().err
    assert "the env has no time limit" in err and "give it one: --env-option max_steps=N." in err, err
    assert cli.main(["rollout", "--env", "pgx/2048", "--env-option", "max_steps=7", "--num-envs", "2",
                     "--num-steps", "20", "--num-eval", "2"]) == 0
    out = capsys.readouterr().out
    assert "uniform random policy on pgx/2048 (max_steps=7), 2 envs x 20 steps" in out, out
    assert re.search(r"evaluate: 2 episodes, .* 2 completed", out) and "mean length 7.0" in out, out
