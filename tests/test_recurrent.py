"""Recurrent policies: the carry is reset exactly at episode starts."""

import jax
import jax.numpy as jnp
import numpy as np

import jaxrl_rollout as jr
from tests.toy_envs import CountingEnv, counting_recurrent_policy, obs_time

B = 2
TERM_AT = [2, 99]  # env 0 terminates at count 2, env 1 is truncated at 5 steps.


def run(num_steps, state=None, initial=7.0):
    env = CountingEnv()
    params = env.default_params
    if state is None:
        carry = jnp.full((B, 1), initial, jnp.float32)  # garbage: must be reset at t = 0
        state = jr.rollout_init(jax.random.key(0), env, params, B, initial_carry=carry)
    return jr.rollout(env, params, counting_recurrent_policy(TERM_AT), None, state, num_steps)


def test_carry_is_reset_exactly_at_episode_starts():
    state, traj = jax.jit(run, static_argnums=0)(12)
    # The policy reports its count as value: it equals the time since reset only
    # if the carry was zeroed at every first step and never elsewhere.
    np.testing.assert_array_equal(traj.value, obs_time(traj.obs))
    # The dynamics follow the count: env 0 terminates every 3 steps, env 1 is truncated every 5.
    np.testing.assert_array_equal(np.where(traj.done[:, 0])[0], [2, 5, 8, 11])
    np.testing.assert_array_equal(np.where(traj.truncated[:, 1])[0], [4, 9])
    # The stored carry is the raw one, before the reset (torch-ac's memories).
    carry = np.asarray(traj.carry[:, :, 0])
    np.testing.assert_array_equal(carry[0], [7.0, 7.0])
    np.testing.assert_array_equal(carry[3, 0], 3.0)  # left over from the finished episode
    reset = np.asarray(jr.reset_carry(traj.carry, traj.first))[:, :, 0]
    np.testing.assert_array_equal(reset, obs_time(traj.obs))
    # The state's carry is the one after the last step, not yet reset.
    np.testing.assert_array_equal(state.carry[:, 0], np.asarray(traj.value[-1]) + 1)


def test_final_observation_value_uses_the_continuing_carry():
    _, traj = run(6)
    # Env 1 is truncated at t = 4: the final observation is its 5th state, and
    # the carry continuing the episode has counted 5 (a reset carry would say 0).
    assert bool(traj.truncated[4, 1])
    assert float(traj.next_value[4, 1]) == 5.0


def test_carry_continues_across_rollout_calls():
    state, first = run(4)
    assert not bool(state.first[1])
    state, second = run(4, state=state)
    _, whole = run(8)
    joined = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), first, second)
    jax.tree.map(np.testing.assert_array_equal, joined, whole)
    # carry[0] of the second rollout is the carry the learner starts from.
    np.testing.assert_array_equal(second.carry[0], whole.carry[4])


def test_last_value_resets_carry_for_a_new_episode():
    # After 3 steps env 0 has just terminated: its next obs starts an episode,
    # so V(last obs) must come from a zeroed carry (count 0), not from 3.
    state, traj = run(3)
    assert bool(state.first[0])
    assert float(traj.next_value[-1, 0]) == 0.0
    # Env 1 is mid-episode: its count continues.
    assert float(traj.next_value[-1, 1]) == 3.0
