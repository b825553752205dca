"""The rollout core, pinned down step by step on CountingEnv (see toy_envs)."""

import functools

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxrl_rollout as jr
from tests.toy_envs import (
    CountingEnv,
    CountingState,
    mlp_policy,
    obs_tag,
    obs_time,
    scripted_policy,
    toy_value,
)
from tests.trees import as_data

T, B = 8, 2
TERM_AT = [2, 99]  # env 0 terminates on its 3rd step; env 1 is truncated at 5.


def run_toy(key=0, num_steps=T, dict_obs=False, bootstrap_truncated=True, state=None):
    env = CountingEnv(dict_obs=dict_obs)
    params = env.default_params
    if state is None:
        state = jr.rollout_init(jax.random.key(key), env, params, B)
    return jr.rollout(
        env, params, scripted_policy(TERM_AT), None, state, num_steps,
        bootstrap_truncated=bootstrap_truncated,
    )


@functools.cache
def toy_result(dict_obs=False, bootstrap_truncated=True):
    return run_toy(dict_obs=dict_obs, bootstrap_truncated=bootstrap_truncated)


# Worked out by hand: columns are env 0 and env 1, rows are t = 0..7.
OBS_TIME = np.array([[0, 0], [1, 1], [2, 2], [0, 3], [1, 4], [2, 0], [0, 1], [1, 2]])
REWARD = OBS_TIME + 1.0
TERMINATED = np.array([[0, 0], [0, 0], [1, 0], [0, 0], [0, 0], [1, 0], [0, 0], [0, 0]], bool)
TRUNCATED = np.array([[0, 0], [0, 0], [0, 0], [0, 0], [0, 1], [0, 0], [0, 0], [0, 0]], bool)
FIRST = np.array([[1, 1], [0, 0], [0, 0], [1, 0], [0, 0], [0, 1], [1, 0], [0, 0]], bool)
COMPLETED_RETURN = np.zeros((T, B), np.float32)
COMPLETED_RETURN[2, 0] = COMPLETED_RETURN[5, 0] = 1 + 2 + 3
COMPLETED_RETURN[4, 1] = 1 + 2 + 3 + 4 + 5
COMPLETED_LENGTH = np.zeros((T, B), np.int32)
COMPLETED_LENGTH[2, 0] = COMPLETED_LENGTH[5, 0] = 3
COMPLETED_LENGTH[4, 1] = 5


def test_flags_rewards_and_auto_reset_step_by_step():
    state, traj = toy_result()
    np.testing.assert_array_equal(obs_time(traj.obs), OBS_TIME)
    np.testing.assert_array_equal(traj.reward, REWARD)
    np.testing.assert_array_equal(traj.terminated, TERMINATED)
    np.testing.assert_array_equal(traj.truncated, TRUNCATED)
    np.testing.assert_array_equal(traj.done, TERMINATED | TRUNCATED)
    np.testing.assert_array_equal(traj.first, FIRST)
    np.testing.assert_array_equal(traj.action, (OBS_TIME >= np.array(TERM_AT)).astype(np.int32))
    np.testing.assert_array_equal(traj.log_prob, -OBS_TIME)
    assert traj.reward.dtype == jnp.float32 and traj.done.dtype == jnp.bool_
    # A new tag is drawn at every reset and only there.
    tags = np.asarray(obs_tag(traj.obs))
    changed = np.concatenate([np.ones((1, B), bool), tags[1:] != tags[:-1]])
    np.testing.assert_array_equal(changed, FIRST)
    # The state continues the running episodes.
    np.testing.assert_array_equal(obs_time(state.obs), [2, 3])
    np.testing.assert_array_equal(state.first, [False, False])
    np.testing.assert_array_equal(state.episode_return, [1 + 2, 1 + 2 + 3])
    np.testing.assert_array_equal(state.episode_length, [2, 3])


def test_next_value_bootstraps_from_final_observation_on_truncation():
    state, traj = toy_result()
    np.testing.assert_allclose(traj.value, toy_value(traj.obs), rtol=1e-6)
    tags = np.asarray(obs_tag(traj.obs))
    # Where not truncated: V(obs[t + 1]), and V(state.obs) after the last step.
    following = np.concatenate([np.asarray(traj.value[1:]), np.asarray(toy_value(state.obs))[None]])
    expected = following.copy()
    # Env 1 is truncated at t = 4: the true next state has time 5, the same tag.
    expected[4, 1] = 5.0 + 100.0 * tags[4, 1]
    np.testing.assert_allclose(traj.next_value, expected, rtol=1e-6)
    assert following[4, 1] != pytest.approx(expected[4, 1])  # the reset obs differs
    # Terminated steps keep V(reset obs); estimators multiply it by zero.
    np.testing.assert_allclose(traj.next_value[2, 0], traj.value[3, 0], rtol=1e-6)


def test_bootstrap_truncated_false_uses_the_reset_observation():
    _, traj = toy_result(bootstrap_truncated=False)
    _, ref = toy_result()
    np.testing.assert_allclose(traj.next_value[4, 1], traj.value[5, 1], rtol=1e-6)
    mask = ~TRUNCATED
    np.testing.assert_array_equal(np.asarray(traj.next_value)[mask], np.asarray(ref.next_value)[mask])


def test_episode_statistics_and_metrics():
    _, traj = toy_result()
    np.testing.assert_array_equal(traj.completed_return, COMPLETED_RETURN)
    np.testing.assert_array_equal(traj.completed_length, COMPLETED_LENGTH)
    m = jr.episode_metrics(traj)
    assert int(m.num_episodes) == 3
    np.testing.assert_allclose(m.mean_return, (6 + 6 + 15) / 3, rtol=1e-6)
    np.testing.assert_allclose(m.mean_length, (3 + 3 + 5) / 3, rtol=1e-6)


def test_episode_metrics_is_nan_not_zero_when_no_episode_completed():
    _, traj = run_toy(num_steps=2)
    m = jax.jit(jr.episode_metrics)(traj)
    assert int(m.num_episodes) == 0
    assert np.isnan(m.mean_return) and np.isnan(m.mean_length)


def test_episode_statistics_carry_across_rollout_calls():
    state, first_half = run_toy(num_steps=4)
    state, second_half = run_toy(state=state, num_steps=4)
    _, whole = toy_result()
    joined = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), first_half, second_half)
    for name, a, b in zip(whole._fields, joined, whole):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_pytree_observations_are_carried_and_stored():
    _, traj = toy_result(dict_obs=True)
    _, ref = toy_result()
    assert set(traj.obs) == {"time", "tag"}
    assert traj.obs["time"].shape == (T, B) and traj.obs["tag"].shape == (T, B, 1)
    assert traj.obs["time"].dtype == jnp.int32
    for name in ("reward", "terminated", "truncated", "first", "next_value"):
        np.testing.assert_array_equal(getattr(traj, name), getattr(ref, name), err_msg=name)


# --- determinism, jit, eager and vmap on CartPole with an MLP policy ---------------------

@functools.cache
def cartpole():
    env, env_params = gymnax.make("CartPole-v1")
    with jax.ensure_compile_time_eval():  # first called under jit: keep params concrete
        policy_fn, params = mlp_policy(jax.random.key(42))
    return env, env_params, policy_fn, params


def cartpole_run(key, num_steps=64, num_envs=4):
    env, env_params, policy_fn, params = cartpole()
    state = jr.rollout_init(key, env, env_params, num_envs)
    return jr.rollout(env, env_params, policy_fn, params, state, num_steps)


def assert_trees_equal(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(as_data(x), as_data(y)), a, b)


def test_same_key_same_trajectory_and_other_key_differs():
    run = jax.jit(cartpole_run)
    a = run(jax.random.key(3))
    assert_trees_equal(a, run(jax.random.key(3)))
    b = run(jax.random.key(4))
    assert not np.array_equal(a[1].obs, b[1].obs)


def test_jit_and_eager_agree_exactly():
    key = jax.random.key(5)
    jitted = jax.jit(cartpole_run, static_argnums=(1, 2))(key, 12, 2)
    # Without an outer jit (JAX's eager mode: the scan body is still compiled).
    assert_trees_equal(jitted, cartpole_run(key, 12, 2))
    # Op-by-op interpretation: exact on the toy env, whose dynamics are integers ...
    with jax.disable_jit():
        assert_trees_equal(run_toy(key=1), jax.jit(run_toy, static_argnums=(1, 2, 3))(1, T, False, True))
        eager = cartpole_run(key, 12, 2)
    # ... and within float32 rounding on CartPole, where XLA fuses the physics
    # differently from op-by-op execution; discrete data agree exactly.
    jax.tree.map(
        lambda x, y: np.testing.assert_allclose(as_data(x), as_data(y), rtol=1e-6, atol=1e-7), jitted, eager
    )
    for name in ("action", "done", "first"):
        np.testing.assert_array_equal(getattr(jitted[1], name), getattr(eager[1], name))


def test_two_rollouts_of_t_steps_sample_what_one_of_2t_steps_samples():
    """The rollout key is a chain advanced once per step (one split gives the next, policy and env keys)."""
    env, env_params, policy_fn, params = cartpole()

    @jax.jit
    def halves_and_whole(key):
        state = jr.rollout_init(key, env, env_params, 4)
        mid, first = jr.rollout(env, env_params, policy_fn, params, state, 40)
        end, second = jr.rollout(env, env_params, policy_fn, params, mid, 40)
        whole_end, whole = jr.rollout(env, env_params, policy_fn, params, state, 80)
        return first, second, end, whole, whole_end

    first, second, end, whole, whole_end = halves_and_whole(jax.random.key(8))
    assert int(whole.done.sum()) > 0  # episodes end (and auto-reset with env keys) inside the window
    for name in ("obs", "action", "reward", "done", "first", "log_prob", "value"):
        joined = np.concatenate([getattr(first, name), getattr(second, name)])
        np.testing.assert_array_equal(joined, getattr(whole, name), err_msg=name)
    np.testing.assert_array_equal(as_data(end.key), as_data(whole_end.key))


def test_vmap_over_keys_equals_a_loop_of_single_runs():
    keys = jax.random.split(jax.random.key(6), 3)
    batched = jax.jit(jax.vmap(cartpole_run))(keys)
    single = jax.jit(cartpole_run)
    for i in range(3):
        one = single(keys[i])
        jax.tree.map(
            lambda x, y: np.testing.assert_allclose(as_data(x)[i], as_data(y), rtol=1e-6, atol=1e-6),
            batched,
            one,
        )
        # Discrete data (actions, flags, episode ends) agree exactly.
        for name in ("action", "done", "terminated", "truncated", "first"):
            np.testing.assert_array_equal(getattr(batched[1], name)[i], getattr(one[1], name))


def test_vmap_over_env_and_policy_params():
    env = CountingEnv()
    limits = jnp.array([3, 4, 6])

    def run(limit, scale, key):
        env_params = env.default_params.replace(max_steps_in_episode=limit)
        policy = scripted_policy([99, 99])

        def scaled(params, obs, key):
            out = policy(params, obs, key)
            return out._replace(value=out.value * params)

        state = jr.rollout_init(key, env, env_params, B)
        return jr.rollout(env, env_params, scaled, scale, state, 10)

    scales = jnp.array([1.0, 2.0, 3.0])
    key = jax.random.key(0)
    batched = jax.jit(jax.vmap(run, in_axes=(0, 0, None)))(limits, scales, key)
    for i in range(3):
        assert_trees_equal(jax.tree.map(lambda x: x[i], batched), run(int(limits[i]), scales[i], key))
    # Each env runs episodes of exactly `limit` steps.
    lengths = batched[1].completed_length
    for i, limit in enumerate([3, 4, 6]):
        assert set(np.unique(lengths[i])) == {0, limit}


def test_rollout_inside_a_users_jitted_function_with_gradients():
    env, env_params, policy_fn, params = cartpole()

    def objective(params, key):
        state = jr.rollout_init(key, env, env_params, 4)
        _, traj = jr.rollout(env, env_params, policy_fn, params, state, 16)
        return jnp.mean(traj.log_prob), traj

    (value, traj), grads = jax.jit(jax.value_and_grad(objective, has_aux=True))(params, jax.random.key(0))
    assert np.isfinite(value)
    assert any(float(jnp.abs(g).sum()) > 0 for g in jax.tree.leaves(grads))


def test_termination_on_the_time_limit_step_counts_as_terminated_only():
    # Env 0 terminates on its 5th step, which is also the time limit.
    env = CountingEnv()
    state = jr.rollout_init(jax.random.key(0), env, env.default_params, 2)
    _, traj = jr.rollout(env, env.default_params, scripted_policy([4, 99]), None, state, 6)
    np.testing.assert_array_equal(traj.terminated[:, 0], [0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(traj.truncated[:, 0], [0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(traj.truncated[:, 1], [0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(traj.done[4], [True, True])
    # No bootstrap from the final observation for the terminated env.
    np.testing.assert_allclose(traj.next_value[4, 0], traj.value[5, 0], rtol=1e-6)
    assert float(traj.next_value[4, 1]) != pytest.approx(float(traj.value[5, 1]))


@pytest.mark.parametrize("recurrent", [False, True])
def test_batched_and_per_step_final_values_agree(monkeypatch, recurrent):
    """Small rollouts value final observations after the scan, large ones per step: the same next_value."""
    import importlib

    from tests.toy_envs import counting_recurrent_policy

    rollout_module = importlib.import_module("jaxrl_rollout.collect")

    env = CountingEnv()
    params = env.default_params

    def run():
        carry = jnp.full((B, 1), 7.0) if recurrent else None
        state = jr.rollout_init(jax.random.key(0), env, params, B, initial_carry=carry)
        policy = counting_recurrent_policy(TERM_AT) if recurrent else scripted_policy(TERM_AT)
        return jax.jit(lambda s: jr.rollout(env, params, policy, None, s, 12))(state)

    assert 12 * B <= rollout_module.BATCHED_FINAL_VALUE_ROWS
    _, batched = run()
    monkeypatch.setattr(rollout_module, "BATCHED_FINAL_VALUE_ROWS", 0)
    _, per_step = run()
    assert int(batched.truncated.sum()) == 2  # env 1 at t = 4 and 9
    truncated = np.asarray(batched.truncated)
    # The final observation's value differs from the reset observation's, so the path matters.
    assert not np.array_equal(np.asarray(batched.next_value)[truncated],
                              np.concatenate([np.asarray(batched.value[1:]), [[0, 0]]])[truncated])
    jax.tree.map(np.testing.assert_array_equal, batched, per_step)


# --- value_fn: the critic valued after the scan ------------------------------------------

def _cartpole_with_critic(max_steps=10):
    from jaxrl_rollout import networks

    env, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=max_steps)  # time limits inside a short rollout
    module = networks.ActorCriticMLP(action_dim=2)
    net_params = module.init(jax.random.key(3), jnp.zeros((1, 4)))
    return env, params, module, net_params


def _critic_rollout(env, params, module, net_params, value_fn, num_steps=24, normalize=False):
    state = jr.rollout_init(jax.random.key(4), env, params, 4, normalize_observations=normalize)
    policy = jr.networks.feedforward_policy(module)
    return jax.jit(lambda p, s: jr.rollout(env, params, policy, p, s, num_steps, value_fn=value_fn))(net_params, state)


@pytest.mark.parametrize("final_values", ["after the scan", "per step"])
@pytest.mark.parametrize("normalize", [False, True])
def test_value_fn_gives_the_policys_values(monkeypatch, final_values, normalize):
    """With value_fn every value (obs, last obs, truncated final obs) is the critic's, the rest unchanged."""
    import importlib

    if final_values == "per step":
        monkeypatch.setattr(importlib.import_module("jaxrl_rollout.collect"), "BATCHED_FINAL_VALUE_ROWS", 0)
    env, params, module, net_params = _cartpole_with_critic()
    critic = lambda p, obs: module.apply(p, obs)[1]  # noqa: E731
    _, plain = _critic_rollout(env, params, module, net_params, None, normalize=normalize)
    state, traj = _critic_rollout(env, params, module, net_params, critic, normalize=normalize)
    assert int(traj.truncated.sum()) >= 4  # every env hits the 10-step limit at least once
    # What the policy saw (normalised when normalising), valued by the critic directly.
    np.testing.assert_allclose(traj.value, jax.vmap(critic, (None, 0))(net_params, traj.obs), rtol=1e-6, atol=1e-7)
    for field in ("value", "next_value"):
        np.testing.assert_allclose(getattr(traj, field), getattr(plain, field), rtol=1e-6, atol=1e-7)
    # Everything else is untouched: the same actions, rewards, flags and state.
    others = traj._replace(value=None, next_value=None), state
    plain_state, _ = _critic_rollout(env, params, module, net_params, None, normalize=normalize)
    for a, b in zip(jax.tree.leaves(others), jax.tree.leaves((plain._replace(value=None, next_value=None), plain_state))):
        np.testing.assert_array_equal(as_data(a), as_data(b))


def _ops_in_loop_bodies(hlo_text):
    """op_name metadata of every instruction inside a while loop's body (fusions' computations included)."""
    import re

    bodies, computations, current = set(), {}, None
    for line in hlo_text.splitlines():
        head = re.match(r"^(?:ENTRY )?%(\S+) .*\{$", line)
        if head:
            current = computations.setdefault(head.group(1), [])
            continue
        if current is not None and line.strip():
            current.append(line)
            bodies.update(re.findall(r"\bbody=%([\w.\-]+)", line))
    seen, names, todo = set(), [], list(bodies)
    while todo:
        name = todo.pop()
        if name in seen or name not in computations:
            continue
        seen.add(name)
        for line in computations[name]:
            names += re.findall(r'op_name="([^"]*)"', line)
            todo += re.findall(r"(?:calls|to_apply|body|condition)=%([\w.\-]+)", line)
    return names


def test_value_fn_takes_the_critic_out_of_the_scan():
    """The compiled rollout step holds no critic layer with value_fn, and holds them without it."""
    env, params, module, net_params = _cartpole_with_critic()
    state = jr.rollout_init(jax.random.key(4), env, params, 4)
    policy = jr.networks.feedforward_policy(module)
    critic = lambda p, obs: module.apply(p, obs)[1]  # noqa: E731

    def loop_ops(value_fn):
        fn = jax.jit(lambda p, s: jr.rollout(env, params, policy, p, s, 24, value_fn=value_fn))
        return _ops_in_loop_bodies(fn.lower(net_params, state).compile().as_text())

    without, with_critic = loop_ops(None), loop_ops(critic)
    assert any("actor_hidden" in n for n in with_critic)  # the parser found the step
    assert any("critic_hidden" in n for n in without)
    assert not any("critic" in n for n in with_critic), [n for n in with_critic if "critic" in n][:3]


def test_value_fn_is_checked():
    env, params, module, net_params = _cartpole_with_critic()
    with pytest.raises(TypeError, match="value_fn must be None or callable"):
        _critic_rollout(env, params, module, net_params, "critic")
    with pytest.raises(ValueError, match=r"the values value_fn\(params, obs\) returned must have shape \[B\]=\(4,\)"):
        _critic_rollout(env, params, module, net_params, lambda p, obs: module.apply(p, obs)[1][:, None])
    with pytest.raises(ValueError, match="value_fn.*floating"):
        _critic_rollout(env, params, module, net_params, lambda p, obs: obs[:, 0] > 0)
    state = jr.rollout_init(jax.random.key(0), CountingEnv(), None, B, initial_carry=jnp.zeros((B, 1)))
    with pytest.raises(ValueError, match="value_fn is for feedforward policies"):
        jr.rollout(CountingEnv(), None, None, None, state, 2, value_fn=lambda p, obs: obs)


# --- fused threefry keys (jaxrl_rollout.prng) ---------------------------------------------

def _no_fusing(monkeypatch):
    from jaxrl_rollout import prng

    monkeypatch.setattr(prng, "can_fuse", lambda key: False)
    monkeypatch.setattr(prng, "fused", lambda key: key)


class KeyRecordingEnv(CountingEnv):
    """CountingEnv that records the dtype of the keys its step is traced with."""

    def __init__(self):
        super().__init__()
        self.key_dtypes = []

    def step(self, key, state, action, params=None):
        self.key_dtypes.append(str(key.dtype))
        return super().step(key, state, action, params)


@struct.dataclass
class KeyedState(CountingState):
    key: jax.Array


class KeyInStateEnv(KeyRecordingEnv):
    """Keeps its key in its state (as jumanji's states do): it cannot take keys of another type."""

    def step_env(self, key, state, action, params):
        obs, new, reward, done, info = super().step_env(key, state, action, params)
        return obs, KeyedState(time=new.time, tag=new.tag, key=key), reward, done, info

    def reset_env(self, key, params):
        obs, state = super().reset_env(key, params)
        return obs, KeyedState(time=state.time, tag=state.tag, key=key)


@pytest.mark.parametrize("make_key", [jax.random.PRNGKey, jax.random.key], ids=["raw", "typed"])
@pytest.mark.parametrize("env_class", [KeyRecordingEnv, KeyInStateEnv])
def test_fused_keys_change_no_number(monkeypatch, make_key, env_class):
    """The env gets fused keys where it can take them, its usual keys where not: same trajectory either way."""
    def run(env):
        state = jr.rollout_init(make_key(3), env, env.default_params, B)
        env.key_dtypes.clear()  # rollout_init traced a step with its usual key
        return jax.jit(lambda s: jr.rollout(env, env.default_params, scripted_policy(TERM_AT), None, s, 12))(state)

    fused_env = env_class()
    fused = run(fused_env)
    with monkeypatch.context() as m:
        _no_fusing(m)
        plain_env = env_class()
        plain = run(plain_env)
    assert_trees_equal(fused, plain)
    usual = str(make_key(0).dtype)
    assert set(plain_env.key_dtypes) == {usual}
    if env_class is KeyRecordingEnv:
        assert set(fused_env.key_dtypes) == {"key<fyf>"}
    elif make_key is jax.random.key:  # a typed key in its state: not tried with fused keys (no failed trace)
        assert set(fused_env.key_dtypes) == {usual}
    else:  # a raw key in its state is not seen: tried with fused keys, which the scan rejects, then the usual ones
        assert fused_env.key_dtypes[0] == "key<fyf>" and fused_env.key_dtypes[-1] == usual


def test_fused_keys_change_no_number_on_cartpole(monkeypatch):
    fused = jax.jit(cartpole_run)(jax.random.PRNGKey(8))
    _no_fusing(monkeypatch)
    assert_trees_equal(fused, jax.jit(cartpole_run)(jax.random.PRNGKey(8)))


# --- the package's names ------------------------------------------------------------------

# Imports the collecting module and every other submodule (in the order given
# by argv[1]), then checks that the package's exported names are still the
# functions and that they run.
_IMPORT_EVERYTHING = """
import importlib, pkgutil, sys, types

import jaxrl_rollout

def import_all():
    importlib.import_module("jaxrl_rollout.collect")
    for info in pkgutil.walk_packages(jaxrl_rollout.__path__, "jaxrl_rollout."):
        if info.name == "jaxrl_rollout.__main__":  # running it starts the command line
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as err:  # an optional suite that is not installed
            if err.name.startswith("jaxrl_rollout"):
                raise

if sys.argv[1] == "submodules first":
    import_all()
    rollout = jaxrl_rollout.rollout
else:
    rollout = jaxrl_rollout.rollout
    import_all()

import gymnax
import jax

from jaxrl_rollout import collect, stepping

assert type(jaxrl_rollout) is types.ModuleType, type(jaxrl_rollout)
assert rollout is jaxrl_rollout.rollout is collect.rollout, jaxrl_rollout.rollout
for name in ("evaluate", "rollout_init"):
    assert getattr(jaxrl_rollout, name) is getattr(collect, name), name
assert jaxrl_rollout.reset_carry is stepping.reset_carry
for name in jaxrl_rollout.__all__:
    assert not isinstance(getattr(jaxrl_rollout, name), types.ModuleType), name

env, params = gymnax.make("CartPole-v1")
policy = jaxrl_rollout.uniform_random_policy(env.action_space(params))
state = jaxrl_rollout.rollout_init(jax.random.key(0), env, params, 2)
_, traj = jaxrl_rollout.rollout(env, params, policy, None, state, 3)
assert traj.reward.shape == (3, 2), traj.reward.shape
result = jaxrl_rollout.evaluate(env, params, policy, None, jax.random.key(1), 2, max_steps=3)
assert result.returns.shape == (2,), result.returns.shape
"""


@pytest.mark.parametrize("order", ["submodules first", "function first"])
def test_the_exported_rollout_is_the_function_whatever_is_imported_first(order):
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", _IMPORT_EVERYTHING, order], check=True, timeout=300)
