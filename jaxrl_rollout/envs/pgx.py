"""Two-player pgx board games as single-agent environments for the rollout.

`make("tic_tac_toe")` (or `envs.make("pgx/tic_tac_toe")`) gives a `PgxEnv`:
the learning agent plays one seat of a pgx game and an opponent function plays
the other, so the game looks like an ordinary gymnax>=1.0.1 environment with
same-step auto-reset. One-player pgx games ("2048", the MinAtar games) work
too, with no opponent; games of three or more players do not.

Observation: a dict
  `{"observation": pgx's observation from the agent's point of view,
    "legal_action_mask": [A] bool, the agent's legal actions}`,
described by a gymnax `Dict` space. At a terminal state pgx makes every
action legal, so the mask in a finished game's `info["final_observation"]`
is all True. `masked_categorical_policy` turns an
`apply_fn(params, obs_array) -> (logits [B, A], value [B])` into a policy that
never samples an illegal action.

One `step`:
  1. the agent's action is played;
  2. while the game is not over and it is not the agent's turn, the opponent
     moves (several times in a row if the game gives it consecutive turns);
  3. reward = the agent's pgx reward summed over its move and the replies;
     `terminated` = the game ended; `truncated` = the agent has made
     `max_steps` moves (if given) or pgx truncated the game, without the game
     ending. A finished game is reset in the same step with a fresh key and
     `info["final_observation"]` holds the observation it ended on.
`info["illegal_action"]` says whether the agent's action was illegal. pgx
does not reject an illegal action: it ends the game at once with its illegal
action penalty for the mover (-1 in most games, -3 in backgammon) and the
opposite for the other player, so the agent's step is terminated with reward
-1 (-3). pgx still applies the move first, so `info["final_observation"]` may
show it (in tic-tac-toe the illegal mark overwrites the occupied cell). At reset, when the opponent moves first (the agent plays the second
seat), its opening moves are made before the first observation is returned.

Seats and player ids: pgx draws at random which player id (`current_player`)
moves first, and games with colours keep the map seat -> player id in
`state._player_order` (chess, go, hex, shogi). `agent_seat` counts in turn
order (0: the agent moves first, 1: second) and the adapter resolves it to the
agent's player id at every reset; the state keeps that id
(`PgxState.agent_player`). `agent_seat="random"` draws the seat per episode.

Opponents are pure functions
`opponent(opponent_params, obs, legal_action_mask, key) -> action` for a
single game (obs from the opponent's point of view, unbatched), and the
opponent's params are the env params: `make` returns them as `env_params` and
they are traced like any env params. The default opponent (`random_opponent`)
plays uniformly among the legal actions and takes `env_params` None.

Self-play: build the opponent from the agent's own policy and pass the
current policy parameters as the env params on every call::

    policy_fn = masked_categorical_policy(apply_fn)
    env, _ = envs.make("pgx/tic_tac_toe", opponent=opponent_from_policy(policy_fn),
                       opponent_params=params, agent_seat="random")
    state = rollout_init(key, env, params, num_envs)            # env_params=params
    state, traj = rollout(env, params, policy_fn, params, state, num_steps)

so that the opponent is always the latest policy (or keep a frozen copy of old
params as env_params for a league of past selves). PPO and A2C do this for
every two-player game (`two_player`) with their default `network="auto"`
(`ActorCriticMultiInput`, which applies `legal_action_mask`), with
`agent_seat="random"`, and evaluate against `random_opponent` from a random
seat, summarised by `outcome_rates` (win, draw, loss). A fixed opponent keeps
fixed `opponent_params`. `evaluate` bounds episodes by `max_steps` if given; without it pass
`evaluate` an explicit `max_steps`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxrl_rollout import _checks
from jaxrl_rollout.distributions import masked_logits
from jaxrl_rollout.envs import _base
from jaxrl_rollout.policies import categorical_policy
from jaxrl_rollout.types import PolicyOutput

__all__ = [
    "Opponent",
    "PgxEnv",
    "PgxState",
    "make",
    "masked_apply_fn",
    "masked_categorical_policy",
    "masked_logits",
    "opponent_from_policy",
    "outcome_rates",
    "random_opponent",
    "two_player",
]

Opponent = Callable[[Any, jax.Array, jax.Array, jax.Array], jax.Array]
"""`opponent(opponent_params, obs, legal_action_mask [A], key) -> action` (int scalar), one game."""

# pgx.make builds these with options other than the class defaults; passing
# **env_kwargs rebuilds the class, so the name's own options come first.
_MAKE_OPTIONS = {"go_9x9": {"size": 9, "komi": 7.5}, "go_19x19": {"size": 19, "komi": 7.5}}


def random_opponent(opponent_params: Any, obs: jax.Array, legal_action_mask: jax.Array, key: jax.Array) -> jax.Array:
    """The default opponent: a uniform draw among the legal actions (params and obs unused).

    It plays the k-th legal action for k = floor(u * num_legal), u ~ U[0, 1):
    one scalar draw instead of `jax.random.categorical`'s [A] Gumbel draws,
    which inside the batched opponent loop cost several times more to compile.
    """
    del opponent_params, obs
    num_legal = jnp.sum(legal_action_mask, dtype=jnp.int32)
    k = jnp.minimum(jnp.floor(jax.random.uniform(key) * num_legal).astype(jnp.int32), num_legal - 1)
    return jnp.argmax(jnp.cumsum(legal_action_mask, dtype=jnp.int32) > k).astype(jnp.int32)


def _split_obs(obs: Any) -> tuple[Any, jax.Array]:
    if not isinstance(obs, Mapping) or set(obs) != {"observation", "legal_action_mask"}:
        got = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
        raise ValueError(
            "obs must be a pgx adapter observation, a dict with keys 'observation' and "
            f"'legal_action_mask'; got {got}."
        )
    return obs["observation"], obs["legal_action_mask"]


def masked_apply_fn(
    apply_fn: Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]],
) -> Callable[[Any, Mapping], tuple[jax.Array, jax.Array]]:
    """Wraps `apply_fn(params, obs_array) -> (logits [B, A], value [B])` to take the adapter's dict observations.

    The wrapped function calls `apply_fn` on `obs["observation"]` and masks the
    logits with `obs["legal_action_mask"]` (`masked_logits`). A learner that
    recomputes log-probabilities from stored observations should use it too,
    so that they match the rollout's.
    """
    if not callable(apply_fn):
        raise ValueError(f"apply_fn must be a callable (params, obs) -> (logits, value), got {apply_fn!r}.")

    def masked(params, obs):
        observation, legal = _split_obs(obs)
        logits, value = apply_fn(params, observation)
        if jnp.shape(logits) != jnp.shape(legal):
            raise ValueError(
                f"apply_fn must return logits of the legal action mask's shape [B, A]={jnp.shape(legal)}, "
                f"got shape {jnp.shape(logits)}."
            )
        return masked_logits(logits, legal), value

    return masked


def masked_categorical_policy(
    apply_fn: Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]],
    deterministic: bool = False,
) -> Callable[[Any, Mapping, jax.Array], PolicyOutput]:
    """A policy for pgx envs that only picks legal actions.

    Args:
      apply_fn: `apply_fn(params, obs_array) -> (logits [B, A], value [B])`,
        called on `obs["observation"]` ([B, ...], pgx's dtype: cast inside
        if your network wants floats).
      deterministic: act with the most probable legal action.

    Returns:
      `policy_fn(params, obs, key) -> PolicyOutput` over the adapter's dict
      observations, as `jaxrl_rollout.categorical_policy` on the masked logits.
    """
    return categorical_policy(masked_apply_fn(apply_fn), deterministic=deterministic)


def opponent_from_policy(policy_fn: Callable[[Any, Any, jax.Array], PolicyOutput]) -> Opponent:
    """An opponent that acts with a jaxrl_rollout policy (for self-play).

    `policy_fn(params, obs, key) -> PolicyOutput` takes batches [B, ...] of the
    adapter's dict observations (e.g. from `masked_categorical_policy`); the
    opponent calls it on a batch of one and returns its action. Its params are
    the env params: pass the policy params there.
    """
    if not callable(policy_fn):
        raise ValueError(f"policy_fn must be a callable (params, obs, key) -> PolicyOutput, got {policy_fn!r}.")

    def opponent(params, obs, legal_action_mask, key):
        batch = {"observation": obs[None], "legal_action_mask": legal_action_mask[None]}
        return policy_fn(params, batch, key).action[0]

    return opponent


class PgxState(NamedTuple):
    """The adapter's state for one game.

    Attributes:
      game: the pgx `State`.
      agent_player: int32, the agent's pgx player id in this game.
      num_moves: int32, the agent's moves so far in this game.
    """

    game: Any
    agent_player: jax.Array
    num_moves: jax.Array


def _check_seat(agent_seat: Any, num_players: int) -> int | str:
    if isinstance(agent_seat, str) and agent_seat == "random":
        return agent_seat
    if not _checks.is_int(agent_seat) or not (
        0 <= agent_seat < num_players
    ):
        seats = "0 (moves first) or 1 (moves second)" if num_players == 2 else "0"
        raise ValueError(f"agent_seat must be {seats}, or 'random'; got {agent_seat!r}.")
    return int(agent_seat)


def _space_for(struct: jax.ShapeDtypeStruct) -> spaces.Box:
    dtype = struct.dtype
    if dtype == jnp.bool_:
        low, high = 0, 1
    elif jnp.issubdtype(dtype, jnp.integer):
        low, high = jnp.iinfo(dtype).min, jnp.iinfo(dtype).max
    else:
        # pgx documents no bounds for its float planes.
        low, high = -jnp.inf, jnp.inf
    return spaces.Box(low, high, tuple(struct.shape), dtype)


class PgxEnv(_base.SameStepEnv):
    """A pgx game seen by one player, in the gymnax>=1.0.1 protocol (see the module docstring).

    Args:
      pgx_env: a `pgx.Env` with one or two players (e.g. `pgx.make("go_9x9")`).
      opponent: `opponent(opponent_params, obs, legal_action_mask, key) ->
        action` for the other seat; None for `random_opponent`. Not allowed
        for one-player games.
      opponent_params: the default env params (what the opponent gets when
        `env_params` is None). Must be None with the random opponent.
      agent_seat: 0 (the agent moves first), 1 (second) or "random" (drawn
        per episode).
      max_steps: truncate after this many agent moves; None for no limit
        beyond pgx's own.
    """

    def __init__(
        self,
        pgx_env: Any,
        *,
        opponent: Opponent | None = None,
        opponent_params: Any = None,
        agent_seat: int | str = 0,
        max_steps: int | None = None,
    ):
        for attr in ("init", "step", "num_players", "id"):
            if not hasattr(pgx_env, attr):
                raise ValueError(
                    f"pgx_env must be a pgx.Env (e.g. pgx.make('tic_tac_toe')); {pgx_env!r} has no {attr!r}."
                )
        self._pgx = pgx_env
        self._num_players = int(pgx_env.num_players)
        if self._num_players > 2:
            raise ValueError(
                f"PgxEnv plays one seat against one opponent; pgx {pgx_env.id!r} has {self._num_players} players."
            )
        if opponent is not None and not callable(opponent):
            raise ValueError(
                "opponent must be a callable (opponent_params, obs, legal_action_mask, key) -> action, "
                f"or None for the uniform random opponent; got {opponent!r}."
            )
        if opponent is not None and self._num_players == 1:
            raise ValueError(f"pgx {pgx_env.id!r} is a one-player game; it takes no opponent (got {opponent!r}).")
        if opponent is None and opponent_params is not None:
            raise ValueError(
                "opponent_params is given but opponent is None: the default random opponent takes no params. "
                "Pass the opponent function they belong to."
            )
        self._opponent = random_opponent if opponent is None else opponent
        self._opponent_params = opponent_params
        self._agent_seat = _check_seat(agent_seat, self._num_players)
        if max_steps is not None:
            if not _checks.is_int(max_steps) or max_steps <= 0:
                raise ValueError(f"max_steps must be a positive int (agent moves) or None, got {max_steps!r}.")
            max_steps = int(max_steps)
        self._max_steps = max_steps
        shapes = jax.eval_shape(pgx_env.init, jax.random.key(0))
        self._num_actions = int(shapes.legal_action_mask.shape[-1])
        self._observation_struct = shapes.observation

    def __repr__(self) -> str:
        return (
            f"PgxEnv({self._pgx.id!r}, agent_seat={self._agent_seat!r}, max_steps={self._max_steps}, "
            f"opponent={getattr(self._opponent, '__name__', self._opponent)!r})"
        )

    def max_steps_in_episode(self, params: Any = None) -> int | None:
        """`max_steps` if given (None: games end by themselves, pass `evaluate` a bound)."""
        return self._max_steps

    @property
    def name(self) -> str:
        return f"pgx/{self._pgx.id}"

    @property
    def pgx_env(self) -> Any:
        """The wrapped `pgx.Env`."""
        return self._pgx

    @property
    def default_params(self) -> Any:
        """The opponent's params given to the constructor (None for the random opponent)."""
        return self._opponent_params

    @property
    def num_actions(self) -> int:
        return self._num_actions

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(self._num_actions)

    def observation_space(self, params: Any = None) -> spaces.Dict:
        return spaces.Dict(
            {
                "observation": _space_for(self._observation_struct),
                "legal_action_mask": spaces.Box(0, 1, (self._num_actions,), jnp.bool_),
            }
        )

    def _observe(self, game: Any, agent: jax.Array) -> dict:
        # `state.observation` is the current player's view, which is the
        # opponent's when the game ended on its move. `Env.observe(state,
        # player_id)` is deprecated in pgx 2.x, so call the per-game
        # `_observe(state, player_id)` it wraps (stop_gradient as pgx does).
        view = jax.lax.stop_gradient(self._pgx._observe(game, agent))
        return {"observation": view, "legal_action_mask": game.legal_action_mask}

    def _agent_player(self, game: Any, key: jax.Array) -> jax.Array:
        """The agent's player id in a fresh game, from its seat (turn order)."""
        if self._agent_seat == "random":
            seat = jax.random.randint(key, (), 0, self._num_players, dtype=jnp.int32)
        else:
            seat = jnp.int32(self._agent_seat)
        order = getattr(game, "_player_order", None)
        if order is not None:
            return jnp.asarray(order, jnp.int32)[seat]
        # Without colours, the player to move in a fresh game holds seat 0.
        return (jnp.asarray(game.current_player, jnp.int32) + seat) % self._num_players

    def _opponent_moves(self, key: jax.Array, game: Any, agent: jax.Array, params: Any) -> tuple[Any, jax.Array]:
        """Lets the opponent move until it is the agent's turn or the game is over; (game, agent's reward)."""

        def opponent_to_move(carry):
            game, _, _ = carry
            return ~(game.terminated | game.truncated) & (game.current_player != agent)

        def opponent_move(carry):
            game, reward, key = carry
            key, act_key, step_key = jax.random.split(key, 3)
            action = self._opponent(params, game.observation, game.legal_action_mask, act_key)
            if jnp.shape(action) != () or not jnp.issubdtype(jnp.result_type(action), jnp.integer):
                raise ValueError(
                    "the opponent must return one integer action (shape ()), got "
                    f"{jnp.result_type(action)}{jnp.shape(action)}."
                )
            game = self._pgx.step(game, jnp.asarray(action, jnp.int32), step_key)
            return game, reward + game.rewards[agent], key

        game, reward, _ = jax.lax.while_loop(opponent_to_move, opponent_move, (game, jnp.float32(0.0), key))
        return game, reward

    def reset_env(self, key: jax.Array, params: Any) -> tuple[dict, PgxState]:
        init_key, seat_key, opponent_key = jax.random.split(key, 3)
        game = self._pgx.init(init_key)
        agent = self._agent_player(game, seat_key)
        # pgx games pay nothing before the end, so opening moves carry no reward.
        game, _ = self._opponent_moves(opponent_key, game, agent, params)
        return self._observe(game, agent), PgxState(game=game, agent_player=agent, num_moves=jnp.int32(0))

    def step_env(self, key: jax.Array, state: PgxState, action: Any, params: Any) -> tuple:
        action = jnp.asarray(action)
        if action.shape != () or not jnp.issubdtype(action.dtype, jnp.integer):
            raise ValueError(
                f"action must be one integer in [0, {self._num_actions}) per env, got {action.dtype}{action.shape}."
            )
        action = action.astype(jnp.int32)
        agent_key, opponent_key = jax.random.split(key)
        game, agent = state.game, state.agent_player
        illegal = ~game.legal_action_mask[action]
        game = self._pgx.step(game, action, agent_key)
        reward = game.rewards[agent]
        game, reply_reward = self._opponent_moves(opponent_key, game, agent, params)
        num_moves = state.num_moves + 1
        terminated = game.terminated
        truncated = game.truncated
        if self._max_steps is not None:
            truncated = truncated | (num_moves >= self._max_steps)
        truncated = truncated & ~terminated
        next_state = PgxState(game=game, agent_player=agent, num_moves=num_moves)
        info = {"illegal_action": illegal}
        return self._observe(game, agent), next_state, reward + reply_reward, terminated, truncated, info


def two_player(env: Any) -> bool:
    """Whether `env` is a `PgxEnv` of a two-player game (the algorithms train those by self-play)."""
    return isinstance(env, PgxEnv) and env._num_players == 2


def outcome_rates(returns: Any) -> np.ndarray:
    """Win, draw and loss rates [..., 3] of game returns [..., N] seen from the agent's side.

    A game is won where its return is > 0, drawn where it is 0 (also a game
    cut short by `max_steps`) and lost where it is < 0, as pgx pays +1, 0
    and -1 (backgammon's gammons pay more, still signed).
    """
    returns = np.asarray(returns)
    return np.stack([np.mean(returns > 0, -1), np.mean(returns == 0, -1), np.mean(returns < 0, -1)], -1)


def _build(pgx: Any, name: str, env_kwargs: dict) -> Any:
    """`pgx.make(name)`, or its class rebuilt with `env_kwargs` on top of the name's options."""
    env = pgx.make(name)
    if not env_kwargs:
        return env
    cls = type(env)
    accepted = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    unknown = sorted(set(env_kwargs) - set(accepted))
    if unknown:
        takes = f"takes the options {', '.join(accepted)}" if accepted else "takes no options"
        raise ValueError(f"pgx {name!r} ({cls.__name__}) {takes}; got unknown {', '.join(unknown)}.")
    env = cls(**{**_MAKE_OPTIONS.get(name, {}), **env_kwargs})
    if env.id != name:
        raise ValueError(f"options {env_kwargs} turn pgx {name!r} into {env.id!r}; use envs.make('pgx/{env.id}').")
    return env


def make(
    name: str,
    *,
    opponent: Opponent | None = None,
    opponent_params: Any = None,
    agent_seat: int | str = 0,
    max_steps: int | None = None,
    **env_kwargs: Any,
) -> tuple[PgxEnv, Any]:
    """A `PgxEnv` for a pgx game; returns `(env, env_params)` with env_params = `opponent_params`.

    Args:
      name: a pgx id from `pgx.available_envs()` ("tic_tac_toe",
        "connect_four", "go_9x9", "chess", ...).
      opponent: `opponent(opponent_params, obs, legal_action_mask, key) ->
        action`; None plays uniformly among the legal actions.
      opponent_params: the opponent's params, returned as the env params.
      agent_seat: 0 (the agent moves first), 1 (second) or "random".
      max_steps: truncate an episode after this many agent moves.
      **env_kwargs: options of the game's pgx class (e.g. `komi` for go,
        `sticky_action_prob` for MinAtar).

    Raises:
      ValueError: an unknown name (with close matches) or a bad option.
      ImportError: pgx is not installed (the `pgx` extra).
    """
    pgx = _base.require("pgx", "pgx", f"envs.make('pgx/{name}')")
    known = list(pgx.available_envs())
    if name not in known:
        raise _base.unknown_name("pgx env name", name, known)
    env = PgxEnv(
        _build(pgx, name, env_kwargs),
        opponent=opponent,
        opponent_params=opponent_params,
        agent_seat=agent_seat,
        max_steps=max_steps,
    )
    return env, env.default_params
