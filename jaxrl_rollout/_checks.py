"""Argument checks that run at trace or call time and cost nothing under jit."""

from __future__ import annotations

import contextlib
import contextvars
import numbers
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces
from jax.experimental import checkify

from jaxrl_rollout import prng
from jaxrl_rollout.types import PolicyOutput


def is_int(value: Any, *, numpy: bool = True) -> bool:
    """Whether `value` is an integer and not a bool: a Python int, or with `numpy` any `numbers.Integral` (NumPy's
    integer scalars). `numpy=False` is for values written to JSON as they are (configs)."""
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, numbers.Integral if numpy else int)


def check_positive_int(name: str, value: Any) -> int:
    """Returns `value` as an int, or raises naming `name` if it is not a positive int."""
    if not is_int(value):
        raise TypeError(
            f"{name} must be a positive Python int (static under jit), got "
            f"{value!r} of type {type(value).__name__}."
        )
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}.")
    return int(value)


def check_key(key: Any, what: str, batch_hint: str) -> None:
    """Checks that `key` is one PRNG key, typed (`jax.random.key`) or raw uint32 (`jax.random.PRNGKey`).

    Raises TypeError for anything else (a seed int, a float array) and ValueError for a batch of keys,
    naming `what` ("train's key") and adding `batch_hint` (how to get several) to the latter.
    """
    if prng.is_key(key):
        if jnp.shape(key) != ():
            raise ValueError(f"{what} must be one PRNG key, got a batch of shape {jnp.shape(key)}; {batch_hint}.")
        return
    dtype = getattr(key, "dtype", None)
    if dtype is None or not isinstance(dtype, np.dtype) or dtype != np.uint32:
        got = f"{dtype} array of shape {jnp.shape(key)}" if dtype is not None else type(key).__name__
        raise TypeError(f"{what} must be a PRNG key, jax.random.key(seed) or jax.random.PRNGKey(seed), got {got}.")
    if jnp.ndim(key) != 1:
        raise ValueError(f"{what} must be one raw PRNG key (1-D: jax.random.PRNGKey's is (2,)), got uint32 of shape "
                         f"{jnp.shape(key)}; {batch_hint}.")


def concrete(x: Any) -> np.ndarray | None:
    """`x` as a numpy array, or None while it is traced (its values are not known until it runs)."""
    try:
        return np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def float_dtype(*arrays) -> jnp.dtype:
    """The dtype the estimators compute and return in: the inputs' float dtype, at least float32.

    Half precision is promoted: gamma rounded to bfloat16 is 0.98828 for 0.99 and 1.0 for 0.999, and a
    T-step recursion carried in 8 bits of mantissa drifts by whole percents (torch computes a Python scalar
    times a half tensor in float32, and rounds only the result).
    """
    dtype = jnp.result_type(*arrays)
    return jnp.promote_types(dtype, jnp.float32) if jnp.issubdtype(dtype, jnp.floating) else jnp.float32


def check_coefficient(x: Any, name: str, low: float = 0.0, high: float | None = 1.0) -> None:
    """A discount, lambda or clip threshold: a number (or numbers) in [low, high]; checked where concrete.

    A TypeError names `name` for a string, None or a bool ("0.99" converted silently); a ValueError for a
    value outside the range or NaN. Traced values are not checked.
    """
    if x is None or isinstance(x, (str, bytes, bool)):
        raise TypeError(f"{name} must be a number or an array of numbers, got {x!r}.")
    values = concrete(x)
    if values is None:
        return
    if not (np.issubdtype(values.dtype, np.number) and not np.issubdtype(values.dtype, np.complexfloating)):
        raise TypeError(f"{name} must be a number or an array of numbers, got {values.dtype} values.")
    values = values.astype(np.float64)
    bad = ~((values >= low) & ((values <= high) if high is not None else True))
    if bad.any():
        where = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise ValueError(f"{name} must be {where}, got {values[bad].ravel()[0]:g}.")


def check_flags(**flags: Any) -> None:
    """Episode flags are bool or {0, 1} and `terminated` implies `done`; checked where concrete.

    `done` given as the truncations alone (the slip `gae(..., terminated, truncated, ...)`) lets the trace
    run through a terminal state; a 2 would flip a mask's sign.
    """
    values = {name: concrete(x) for name, x in flags.items()}
    for name, v in values.items():
        if v is not None and v.dtype != bool and not np.isin(v, (0, 1)).all():
            raise ValueError(f"{name} must be bool or {{0, 1}}, got the value {v[~np.isin(v, (0, 1))].ravel()[0]}.")
    terminated, done = values.get("terminated"), values.get("done")
    if terminated is not None and done is not None and (terminated.astype(bool) & ~done.astype(bool)).any():
        t = tuple(int(i) for i in np.argwhere(terminated.astype(bool) & ~done.astype(bool))[0])
        raise ValueError(f"terminated is set where done is not (at index {t}): done is every episode end, "
                         "terminated | truncated.")


def check_same_shapes(function: str, **arrays: Any) -> None:
    """A ValueError unless every array has the first one's shape: the per-sample inputs of a loss or target.

    Checked at trace time: a critic head left at [N, 1] beside [N] returns would broadcast to [N, N] and give a
    wrong mean, silently.
    """
    shapes = {name: tuple(jnp.shape(x)) for name, x in arrays.items()}
    counts = [list(shapes.values()).count(shape) for shape in shapes.values()]
    common_name, common = list(shapes.items())[counts.index(max(counts))]  # the shape most of them have
    for name, shape in shapes.items():
        if shape != common:
            raise ValueError(f"{function}: {name} has shape {shape}, but {common_name} has shape {common}; these are "
                             "per-sample arrays of one shape (squeeze a critic or log-prob output [N, 1] to [N]).")


def check_batch_shape(name: str, x: Any, of: str, shape: tuple[int, ...]) -> None:
    """A ValueError naming `name` unless `x` is one value per env: `shape`, the batch shape of the rollout array
    `of` ([T, B, ...] -> [B, ...]), as a bootstrap value or a last flag is."""
    if tuple(jnp.shape(x)) != tuple(shape):
        raise ValueError(f"{name} must be one value per env, the batch shape of {of} {tuple(shape)}, got "
                         f"{tuple(jnp.shape(x))}.")


def check_last_step(function: str, rollout_name: str, rollout: Any, **arrays: Any) -> None:
    """`check_batch_shape` for each of `arrays` against `rollout`, the errors naming "<function>: <name>" (a
    compat recipe's bootstrap value and last flag)."""
    for name, x in arrays.items():
        check_batch_shape(f"{function}: {name}", x, rollout_name, tuple(jnp.shape(rollout))[1:])


def check_function_key(key: Any, function: str, several: str) -> None:
    """`check_key` for the one key of the public function `function`: the errors name "<function>'s key"
    ("<function>' key" for a name ending in s) and suggest "for several <several>, vmap <function> over
    jax.random.split(key, n)"."""
    owner = f"{function}'" if function.endswith("s") else f"{function}'s"
    check_key(key, f"{owner} key", f"for several {several}, vmap {function} over jax.random.split(key, n)")


def _shape_dtype(x: Any) -> tuple[tuple[int, ...], np.dtype]:
    return tuple(jnp.shape(x)), jnp.result_type(x)


def check_action(action: Any, space: Any, batch_size: int, where: str = "action") -> None:
    """Checks a batched action pytree against a gymnax action space.

    Args:
      action: [B, ...] pytree of actions.
      space: the env's `action_space(env_params)`.
      batch_size: B.
      where: the name to report in errors (path inside the action pytree).

    Raises:
      ValueError: the structure, shape or dtype does not fit the space.
    """
    if isinstance(space, spaces.Discrete):
        shape, dtype = _shape_dtype(action)
        if shape != (batch_size,):
            raise ValueError(
                f"{where} must have shape [B]=({batch_size},) for the Discrete({space.n}) "
                f"action space, got shape {shape}. Squeeze a trailing axis of size 1 "
                "if your policy returns [B, 1]."
            )
        if not jnp.issubdtype(dtype, jnp.integer):
            raise ValueError(
                f"{where} must have an integer dtype for the Discrete({space.n}) action "
                f"space, got {dtype}."
            )
        _debug_check_discrete_values(action, space, where)
    elif isinstance(space, spaces.Box):
        space_shape = (space.shape,) if isinstance(space.shape, int) else tuple(space.shape)
        expected = (batch_size, *space_shape)
        shape, dtype = _shape_dtype(action)
        if shape != expected:
            raise ValueError(
                f"{where} must have shape [B, *action_space.shape]={expected} for the "
                f"Box action space of shape {space_shape}, got shape {shape}."
            )
        if not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(
                f"{where} must have a floating dtype for the Box action space, got {dtype}."
            )
    elif isinstance(space, spaces.Dict):
        if not isinstance(action, Mapping) or set(action) != set(space.spaces):
            got = sorted(action) if isinstance(action, Mapping) else type(action).__name__
            raise ValueError(
                f"{where} must be a dict with keys {sorted(space.spaces)} for the Dict "
                f"action space, got {got}."
            )
        for k, sub in space.spaces.items():
            check_action(action[k], sub, batch_size, f"{where}[{k!r}]")
    elif isinstance(space, spaces.Tuple):
        if not isinstance(action, Sequence) or len(action) != len(space.spaces):
            raise ValueError(
                f"{where} must be a tuple of {len(space.spaces)} actions for the Tuple "
                f"action space, got {type(action).__name__}."
            )
        for i, sub in enumerate(space.spaces):
            check_action(action[i], sub, batch_size, f"{where}[{i}]")
    else:
        for path, leaf in jax.tree_util.tree_leaves_with_path(action):
            shape = jnp.shape(leaf)
            if not shape or shape[0] != batch_size:
                raise ValueError(
                    f"{where}{jax.tree_util.keystr(path)} must be batched with leading "
                    f"axis B={batch_size}, got shape {tuple(shape)}."
                )


def _debug_check_discrete_values(action: Any, space: Any, where: str) -> None:
    """Under `jax.experimental.checkify.checkify` (with `checkify.user_checks`), a failed check when an action is
    outside [0, n) for the Discrete(n) space; otherwise nothing (a `debug_check` is dropped from the program).

    The values are traced, so only a run-time check can see them, and one in every step would cost every user: this
    one costs nothing unless asked for. gymnax's envs take such an action without a word (CartPole pushes with three
    times the force for action 2)."""
    n = space.n
    message = f"{where} must be in [0, n) for the env's Discrete(n={{n}}) action space; got actions from {{low}} to {{high}}"
    with _check_numbered_by(message):
        checkify.debug_check(jnp.all((action >= 0) & (action < n)), message, n=jnp.asarray(n), low=jnp.min(action),
                             high=jnp.max(action))


@contextlib.contextmanager
def _check_numbered_by(message: str):
    """While open, the checks checkify traces get a number made from `message`, the same in every trace.

    checkify numbers each check it traces from one counter per process (`jax._src.checkify.next_code`), and the
    number is a constant of the lowered module even where the check is dropped (outside checkify). JAX's persistent
    compilation cache keys a program by that module, so every trace of the same rollout was a new program to it:
    the command line's compile cache compiled a resumed run's chunks again whenever the process had traced its
    checks in another order (in one process: every time). Under checkify the number only keys the check's error
    message in its error value, so a number per message (above JAX's own counter, which starts at 1) keeps each
    message apart. Where JAX has no such counter, the check is numbered as JAX numbers it.
    """
    from jax._src import checkify as checkify_internals

    counter = getattr(checkify_internals, "next_code", None)
    if counter is None:  # pragma: no cover - a JAX that numbers its checks some other way
        yield
        return
    code = (1 << 30) + zlib.crc32(message.encode()) % (1 << 29)
    checkify_internals.next_code = lambda: code
    try:
        yield
    finally:
        checkify_internals.next_code = counter


# The env's action space while the rollout calls a policy (`acting_in`), so that a ready-made policy can check at
# trace time what only it sees, the number of logits, against what only the rollout knows, the space.
_ACTION_SPACE: contextvars.ContextVar[Any] = contextvars.ContextVar("jaxrl_rollout_action_space", default=None)


@contextlib.contextmanager
def acting_in(space: Any):
    """While this is open, `check_logits_fit_space` checks logits against `space` (the rollout's action space)."""
    token = _ACTION_SPACE.set(space)
    try:
        yield
    finally:
        _ACTION_SPACE.reset(token)


def check_logits_fit_space(logits: Any, who: str) -> None:
    """A ValueError when logits [B, A] sampled inside a rollout do not have one entry per action of its Discrete(n)
    space: with A > n the policy samples actions the env does not have (gymnax's envs take them without a word, and
    CartPole pushes with three times the force for action 2), with A < n it never takes the last n - A. Outside a
    rollout, or for other spaces (whose actions `check_action` checks), nothing is checked."""
    space = _ACTION_SPACE.get()
    if not isinstance(space, spaces.Discrete):
        return
    n = concrete(space.n)
    num_logits = jnp.shape(logits)[-1]
    if n is None or num_logits == int(n):
        return
    n = int(n)

    def actions(low, high):
        return f"action {low}" if low == high else f"actions {low} to {high}"

    if num_logits > n:
        consequence = f"it would sample {actions(n, num_logits - 1)}, which the env does not have"
    else:
        consequence = f"it could never take {actions(num_logits, n - 1)}"
    error = ValueError(f"{who} returned logits for A={num_logits} actions (shape {tuple(jnp.shape(logits))}), but "
                       f"the env's action space is Discrete({n}): {consequence}. Give the network's last layer {n} "
                       "outputs (env.action_space(env_params).n).")
    error.jaxrl_rollout_says_why = True  # whole as it is: `stepping.act` adds no note on the params
    raise error


def check_policy_output(out: Any, batch_size: int, space: Any) -> PolicyOutput:
    """Checks what a policy returned; returns it unchanged."""
    if not isinstance(out, PolicyOutput):
        raise TypeError(
            "policy_fn must return a jaxrl_rollout.PolicyOutput(action, log_prob, value) "
            f"(recurrent: a tuple (PolicyOutput, new_carry)), got {type(out).__name__}."
        )
    for name in ("log_prob", "value"):
        _check_per_env_floats(getattr(out, name), batch_size, f"policy_fn output {name}")
    check_action(out.action, space, batch_size, "policy_fn output action")
    return out


def check_values(value: Any, batch_size: int, where: str) -> jax.Array:
    """Checks values [B] (floating) that `where` returned; returns them as an array."""
    _check_per_env_floats(value, batch_size, f"the values {where} returned")
    return jnp.asarray(value)


def _check_per_env_floats(value: Any, batch_size: int, subject: str) -> None:
    """Checks that `value` (named `subject` in the errors) is floating with shape [B]: one number per env."""
    shape, dtype = _shape_dtype(value)
    if shape != (batch_size,):
        raise ValueError(f"{subject} must have shape [B]=({batch_size},), got {shape}. A critic head of shape "
                         "[B, 1] needs `.squeeze(-1)`.")
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"{subject} must be floating, got {dtype}.")


def check_recurrent_output(out: Any, batch_size: int, space: Any, carry: Any) -> tuple:
    """Checks a recurrent policy's `(PolicyOutput, new_carry)` result."""
    if not (isinstance(out, tuple) and not isinstance(out, PolicyOutput) and len(out) == 2):
        raise TypeError(
            "a recurrent policy_fn (the rollout state holds a carry) must return "
            f"(PolicyOutput, new_carry), got {type(out).__name__}."
        )
    policy_out, new_carry = out
    check_policy_output(policy_out, batch_size, space)
    old = jax.tree_util.tree_structure(carry)
    new = jax.tree_util.tree_structure(new_carry)
    if old != new:
        raise ValueError(
            f"policy_fn's new_carry must have the structure of the carry it was given: "
            f"expected {old}, got {new}."
        )
    for a, b in zip(jax.tree_util.tree_leaves(carry), jax.tree_util.tree_leaves(new_carry)):
        if jnp.shape(a) != jnp.shape(b) or jnp.result_type(a) != jnp.result_type(b):
            raise ValueError(
                "policy_fn's new_carry leaves must keep their shape and dtype: "
                f"expected {jnp.shape(a)} {jnp.result_type(a)}, got {jnp.shape(b)} "
                f"{jnp.result_type(b)}."
            )
    return policy_out, new_carry


def check_carry(carry: Any, batch_size: int, what: str = "initial_carry", size: str | None = None) -> None:
    """Checks that every leaf of a recurrent carry is batched [B, ...].

    `what` names the carry in the error and `size` says what B is (default "num_envs=B").
    """
    leaves = jax.tree_util.tree_leaves_with_path(carry)
    if not leaves:
        raise ValueError(f"{what} must hold at least one array, got an empty pytree.")
    for path, leaf in leaves:
        shape = jnp.shape(leaf)
        if not shape or shape[0] != batch_size:
            raise ValueError(
                f"{what}{jax.tree_util.keystr(path)} must have leading axis "
                f"{size or f'num_envs={batch_size}'}, got shape {tuple(shape)}."
            )


def unpack_step(result: Any, env: Any, batched: bool = False) -> tuple:
    """Unpacks a gymnax 1.0 step result, rejecting the old 5-value API and a final observation unlike the obs.

    `batched`: the result is every env's (leaves [B, ...]); errors then give shapes per env.
    """
    if not isinstance(result, tuple) or len(result) != 6:
        n = len(result) if isinstance(result, tuple) else type(result).__name__
        hint = ""
        if n == 5:
            hint = (
                " This looks like the pre-1.0 gymnax API (obs, state, reward, done, info); "
                "jaxrl_rollout needs gymnax>=1.0.1, whose step returns terminated and "
                "truncated separately and puts the pre-reset observation in "
                "info['final_observation']."
            )
        raise TypeError(
            f"env.step of {type(env).__name__} must return 6 values (obs, state, reward, "
            f"terminated, truncated, info), got {n}.{hint}"
        )
    obs, state, reward, terminated, truncated, info = result
    if not isinstance(info, Mapping) or "final_observation" not in info:
        raise TypeError(
            f"env.step of {type(env).__name__} must return an info dict holding "
            "'final_observation' (the gymnax>=1.0.1 protocol)."
        )
    final = info["final_observation"]
    if jax.tree.structure(final) != jax.tree.structure(obs) or any(
            _shape_dtype(a)[0] != _shape_dtype(b)[0] for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(obs))):
        per_env = " per env" if batched else ""
        raise ValueError(
            f"env.step of {type(env).__name__}: info['final_observation'] must be an observation like the obs it "
            f"returns (the one before any reset), {tree_text(obs, batched)}{per_env}, got "
            f"{tree_text(final, batched)}.")
    return obs, state, reward, terminated, truncated, info


def check_step_like_reset(env: Any, reset_obs: Any, step_obs: Any, batched: bool = False) -> None:
    """A ValueError naming `env` when the observations its step returns differ from its reset's in pytree,
    shape or dtype.

    A rollout carries one observation from step to step and selects between the step's and the reset's at an
    auto-reset, so they must agree; otherwise the trace fails deep inside `lax.scan` or a select. `batched`:
    leaves [B, ...].
    """
    def leaves(tree):
        return [(tuple(jnp.shape(x)), jnp.result_type(x)) for x in jax.tree.leaves(tree)]

    if jax.tree.structure(reset_obs) != jax.tree.structure(step_obs) or leaves(reset_obs) != leaves(step_obs):
        per_env = " per env" if batched else ""
        note = _x64_note(leaves(reset_obs), leaves(step_obs))
        raise ValueError(
            f"env {type(env).__name__}: step returns observations {tree_text(step_obs, batched)}{per_env}, but "
            f"reset returns {tree_text(reset_obs, batched)}; a rollout carries one observation from step to step, "
            "so make step's observations (and info['final_observation']) the pytree, shapes and dtypes reset's "
            f"are{note}.")


NARROW_64 = {"int64": "int32", "uint64": "uint32", "float64": "float32", "complex128": "complex64"}
"""The dtype a value of each 64-bit dtype takes with jax's 64-bit mode off (jax_enable_x64, JAX_ENABLE_X64)."""


def _x64_note(a: list, b: list) -> str:
    """Where two lists of leaves ((shape, dtype) pairs) differ only in 64 against 32 bits and jax's 64-bit mode
    is on, a note saying so (gymnax's envs make float64 state with it on, and a policy's float32 actions bring
    float32 into their step); else ""."""
    def narrow(leaf):
        return leaf[0], NARROW_64.get(jnp.dtype(leaf[1]).name, jnp.dtype(leaf[1]).name)

    if not jax.config.jax_enable_x64 or len(a) != len(b) or [narrow(x) for x in a] != [narrow(x) for x in b]:
        return ""
    return (" (jax's 64-bit mode is on, JAX_ENABLE_X64 or jax_enable_x64, so the env's own values are 64-bit while "
            "a policy's float32 actions bring 32-bit ones into its step; gymnax's envs are written for the mode off: "
            "unset JAX_ENABLE_X64)")


def check_step_state_like_reset(env: Any, reset_state: Any, step_state: Any) -> None:
    """A ValueError naming `env` and the first state leaf (by its path) where the state its `step_env` returns
    differs from its `reset_env`'s in pytree, shape or dtype: gymnax's auto-reset selects between the two."""
    reset_leaves, reset_tree = jax.tree_util.tree_flatten_with_path(reset_state)
    step_leaves, step_tree = jax.tree_util.tree_flatten_with_path(step_state)
    if reset_tree != step_tree:
        raise ValueError(f"env {type(env).__name__}: step_env returns a state of another pytree than reset_env's "
                         f"({step_tree} against {reset_tree}); gymnax's step selects between the two at an "
                         "auto-reset, so make step_env's state the pytree, shapes and dtypes reset_env's is.")
    for (path, a), (_, b) in zip(reset_leaves, step_leaves):
        if (jnp.shape(a), jnp.result_type(a)) != (jnp.shape(b), jnp.result_type(b)):
            note = _x64_note([(jnp.shape(x), jnp.result_type(x)) for _, x in reset_leaves],
                             [(jnp.shape(x), jnp.result_type(x)) for _, x in step_leaves])
            raise ValueError(f"env {type(env).__name__}: step_env returns a state whose "
                             f"{jax.tree_util.keystr(path) or 'leaf'} is {tree_text(b)}, where reset_env's is "
                             f"{tree_text(a)}; gymnax's step selects between the two at an auto-reset, so make "
                             f"step_env's state the pytree, shapes and dtypes reset_env's is{note}.")


def refuse_train_state(name: str, params: Any) -> None:
    """A TypeError naming `name` when a learner's whole train state (a `*State` NamedTuple of
    `jaxrl_rollout.algorithms`) is passed where a policy's params go."""
    cls = type(params)
    if isinstance(params, tuple) and hasattr(params, "_fields") and cls.__name__.endswith("State") and \
            cls.__module__.startswith("jaxrl_rollout.algorithms."):
        raise TypeError(f"{name} is the whole train state, a {cls.__name__}; a policy takes its params: pass "
                        "policy_params(state), e.g. algo.policy_params(state) of the make_* result that trained "
                        "it.")


def tree_text(tree: Any, batched: bool = False) -> str:
    """A pytree's leaves as "float32[4]" (without their leading axis when `batched`), joined, or "nothing"."""
    return ", ".join(f"{jnp.result_type(x).name}{list(jnp.shape(x)[1 if batched else 0:])}"
                     for x in jax.tree.leaves(tree)) or "nothing"
