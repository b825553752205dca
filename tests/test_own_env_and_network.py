"""make_train on your own env and network: the id route's bits, a module of your own, clear errors, env-free configs."""

import pathlib
import re
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces
from gymnax.environments.classic_control import CartPole, Pendulum

from jaxrl_rollout import envs
from jaxrl_rollout.algorithms import a2c, ppo
from jaxrl_rollout.distributions import categorical_from_logits


class MyCartPole(CartPole):
    """A user's env: gymnax's CartPole under another class, never registered."""


class MyPendulum(Pendulum):
    """A user's continuous env (its actions are clipped at the env, as for the id)."""


class TinyActorCritic(nn.Module):
    """A user's network, written here: obs [B, O] -> (Categorical, value [B])."""

    action_dim: int

    @nn.compact
    def __call__(self, obs):
        x = nn.tanh(nn.Dense(16)(obs))
        return categorical_from_logits(nn.Dense(self.action_dim)(x)), nn.Dense(1)(x)[:, 0]


class TinyRecurrent(nn.Module):
    """A user's recurrent network: (carry [B, H], obs) -> (new_carry, (Categorical, value [B]))."""

    action_dim: int
    hidden: int = 8

    def initial_carry(self, batch_size):
        return jnp.zeros((batch_size, self.hidden), jnp.float32)

    @nn.compact
    def __call__(self, carry, obs):
        carry, h = nn.GRUCell(self.hidden)(carry, nn.Dense(self.hidden)(obs))
        return carry, (categorical_from_logits(nn.Dense(self.action_dim)(h)), nn.Dense(1)(h)[:, 0])


# The built-in network's fields (hidden_sizes, activation) at their defaults: these configs also go with networks of
# one's own, which refuse them otherwise.
TINY_PPO = dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 2, update_epochs=1, num_minibatches=2)
TINY_A2C = dict(num_envs=4, num_steps=5, total_timesteps=4 * 5 * 3)


@pytest.mark.parametrize("algo, env_id, env", [
    (ppo, "CartPole-v1", MyCartPole()),
    (a2c, "CartPole-v1", MyCartPole()),
    (ppo, "Pendulum-v1", MyPendulum()),
])
def test_an_env_object_gives_the_bits_of_its_id(algo, env_id, env):
    config = (ppo.PPOConfig(env_id=env_id, **TINY_PPO) if algo is ppo
              else a2c.A2CConfig(env_id=env_id, **TINY_A2C))
    key = jax.random.key(7)
    by_id, metrics_id = jax.jit(algo.make_train(config))(key)
    own, metrics_own = jax.jit(algo.make_train(config, env=env))(key)
    jax.tree.map(np.testing.assert_array_equal, by_id.params, own.params)
    jax.tree.map(np.testing.assert_array_equal, metrics_id, metrics_own)
    # None stands for the env's default_params; given params are the ones trained with
    params = env.default_params.replace(max_steps_in_episode=17)
    made = (algo.make_ppo if algo is ppo else algo.make_a2c)(config, env=env, env_params=params)
    assert made.env_params is params


def test_a_network_of_your_own_trains():
    config = ppo.PPOConfig(**{**TINY_PPO, "total_timesteps": 4 * 16 * 6})
    made = ppo.make_ppo(config, network=TinyActorCritic(action_dim=2))
    assert isinstance(made.module, TinyActorCritic) and not made.recurrent
    key = jax.random.key(0)
    start = made.init(key)
    assert set(start.params["params"]) == {"Dense_0", "Dense_1", "Dense_2"}  # the user's layers, the user's names
    state, metrics = jax.jit(made.train)(key)
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state.params))
    assert not np.any(metrics.nonfinite)
    moved = [float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(start.params), jax.tree.leaves(state.params))]
    assert min(moved) > 0, moved  # every tensor of the module was trained
    assert len(set(np.asarray(metrics.value_loss).tolist())) > 1  # the loss changes from update to update


def test_a_recurrent_network_of_your_own_trains_and_its_sequences_divide():
    net = TinyRecurrent(action_dim=2)
    config = ppo.PPOConfig(**{**TINY_PPO, "num_minibatches": 2})
    made = ppo.make_ppo(config, network=net)
    assert made.recurrent
    state, metrics = jax.jit(made.train)(jax.random.key(1))
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state.params)) and not np.any(metrics.nonfinite)
    # 6 envs x 4 steps = 24 transitions divide into 4 minibatches, which the config checks; 6 whole env
    # sequences do not, which only make_ppo can check, once it knows the module is recurrent.
    bad = ppo.PPOConfig(**{**TINY_PPO, "num_envs": 6, "num_steps": 4, "total_timesteps": 48, "num_minibatches": 4})
    with pytest.raises(ValueError, match=r"keeps env sequences whole, so num_envs=6 must divide into "
                                         r"num_minibatches=4"):
        ppo.make_ppo(bad, network=net)
    assert a2c.make_a2c(a2c.A2CConfig(**TINY_A2C), network=net).recurrent


class LSTMPair(nn.Module):
    """A user's LSTM whose carry is flax's (c, h) pair: a pytree carry, not one array."""

    action_dim: int
    hidden: int = 8

    def initial_carry(self, batch_size):
        return (jnp.zeros((batch_size, self.hidden), jnp.float32),) * 2

    @nn.compact
    def __call__(self, carry, obs):
        carry, h = nn.OptimizedLSTMCell(self.hidden, name="cell")(carry, nn.Dense(self.hidden)(obs))
        return carry, (categorical_from_logits(nn.Dense(self.action_dim)(h)), nn.Dense(1)(h)[:, 0])


class LSTMPacked(LSTMPair):
    """The same LSTM and params, its carry packed into one [B, 2H] array."""

    def initial_carry(self, batch_size):
        return jnp.zeros((batch_size, 2 * self.hidden), jnp.float32)

    def __call__(self, carry, obs):
        pair, out = super().__call__(tuple(jnp.split(carry, 2, axis=-1)), obs)
        return jnp.concatenate(pair, axis=-1), out


@pytest.mark.parametrize("algo, config", [(ppo, ppo.PPOConfig(**TINY_PPO)), (a2c, a2c.A2CConfig(**TINY_A2C))])
def test_a_recurrent_network_with_a_pytree_carry_trains_as_its_one_array_form(algo, config):
    """A carry that is a pair (flax's LSTM) passed the network check, then PPO's and A2C's updates took
    `traj.carry[0]`: the pair's first member over all steps, not step 0 of each. It trains as the same network
    with the pair packed into one array."""
    pair = jax.jit(algo.make_train(config, env=MyCartPole(), network=LSTMPair(2)))(jax.random.key(3))
    packed = jax.jit(algo.make_train(config, env=MyCartPole(), network=LSTMPacked(2)))(jax.random.key(3))
    np.testing.assert_allclose(pair[1].value_loss, packed[1].value_loss, rtol=1e-5, atol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), pair[0].params,
                 packed[0].params)


class ReturnsLogits(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return nn.Dense(2)(obs)


class WideValue(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return categorical_from_logits(nn.Dense(2)(obs)), nn.Dense(1)(obs)


class TooManyActions(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return categorical_from_logits(nn.Dense(5)(obs)), nn.Dense(1)(obs)[:, 0]


class NoDistribution(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return nn.Dense(2)(obs), nn.Dense(1)(obs)[:, 0]


class Breaks(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return jnp.dot(obs, jnp.ones((7, 2)))


class IntValue(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return categorical_from_logits(nn.Dense(2)(obs)), jnp.zeros(obs.shape[0], jnp.int32)


class FrozenStats(nn.Module):
    """BatchNorm with its statistics frozen: a 'batch_stats' collection, which the optimiser would have trained."""

    @nn.compact
    def __call__(self, obs):
        x = nn.BatchNorm(use_running_average=True)(nn.Dense(8)(obs))
        return categorical_from_logits(nn.Dense(2)(x)), nn.Dense(1)(x)[:, 0]


class IgnoresBatch(nn.Module):
    """Flattens the whole batch into one row: passed a check on a batch of 1, and failed in flax's init later."""

    @nn.compact
    def __call__(self, obs):
        x = nn.Dense(8)(obs.reshape(-1))[None]
        return categorical_from_logits(nn.Dense(2)(x)), nn.Dense(1)(x)[:, 0]


class CollapsesBatchQ(nn.Module):
    """Averages over the batch: Q [1, A] for any B, which DQN broadcast silently."""

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(2)(nn.relu(nn.Dense(8)(obs.mean(0, keepdims=True))))


class CollapsesBatchCritic(nn.Module):
    @nn.compact
    def __call__(self, obs, action):
        return nn.Dense(1)(jnp.concatenate([obs, action], -1).reshape(-1))


class FrozenStatsQ(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return nn.Dense(2)(nn.BatchNorm(use_running_average=True)(obs))


class ForgetsCarryShape(TinyRecurrent):
    @nn.compact
    def __call__(self, carry, obs):
        return carry[:, :2], (categorical_from_logits(nn.Dense(self.action_dim)(obs)), nn.Dense(1)(obs)[:, 0])


class ForgetsCarry(TinyRecurrent):
    @nn.compact
    def __call__(self, carry, obs):  # (dist, value) alone: the distribution was read as the new carry
        return categorical_from_logits(nn.Dense(self.action_dim)(obs)), nn.Dense(1)(obs)[:, 0]


@pytest.mark.parametrize("module, error, message", [
    (ForgetsCarry(action_dim=2), TypeError, r"network ForgetsCarry: __call__\(carry, obs\) must return \(new_carry, "
                                            r"\(dist, value\)\), got "),
    (ReturnsLogits(), TypeError, r"network ReturnsLogits: __call__\(obs\) must return \(dist, value \[B\]\), got an "
                                 r"array float32\[2, 2\]"),
    (WideValue(), ValueError, r"network WideValue: __call__\(obs\): value must have the batch shape \[B\], \[2\] "
                              r"here, got float32\[2, 1\]; squeeze a critic output \[B, 1\]"),
    (TooManyActions(), ValueError, r"network TooManyActions: __call__\(obs\): the distribution's logits must be "
                                   r"\[B, A\] with A=2, the env's Discrete\(2\) actions, got float32\[2, 5\]"),
    (NoDistribution(), TypeError, r"network NoDistribution: __call__\(obs\) must return a distribution with "
                                  r"sample\(key\), mode\(\), log_prob\(action\) and entropy\(\)"),
    (Breaks(), ValueError, r"network Breaks: __call__\(obs\) failed on a sample observation \(float32\[2, 4\]\)"),
    (ForgetsCarryShape(action_dim=2), ValueError, r"network ForgetsCarryShape: __call__\(carry, obs\) must return a "
                                                  r"new_carry like initial_carry\(2\) \(float32\[2, 8\]\), got "
                                                  r"float32\[2, 2\]"),
    (lambda params, obs: None, TypeError, r"network must be a flax linen Module whose __call__\(obs \[B, \.\.\.\]\) "
                                          r"returns \(dist, value \[B\]\).*got function"),
    ("mlp", TypeError, r"network must be a flax linen Module, got the string 'mlp'; a network name goes in "
                       r"config.network"),
    (IntValue(), ValueError, r"^network IntValue: __call__\(obs\): value must be floating, got int32\[2\]\."),
    (IgnoresBatch(), ValueError, r"network IgnoresBatch: __call__\(obs\)"),
    (FrozenStats(), ValueError, r"network FrozenStats: its init made the variable collections \['batch_stats'\] "
                                r"besides 'params'; the learners optimise every variable"),
])
def test_a_network_that_breaks_the_contract_is_refused_when_built(module, error, message):
    for make, config in ((ppo.make_ppo, ppo.PPOConfig(**TINY_PPO)), (a2c.make_a2c, a2c.A2CConfig(**TINY_A2C))):
        with pytest.raises(error, match=message):
            make(config, network=module)


def test_an_off_policy_network_with_other_collections_is_refused():
    """Adam moved a Q-network's frozen BatchNorm statistics as if they were weights (DQN, PQN)."""
    from jaxrl_rollout.algorithms import dqn, pqn

    message = r"network FrozenStatsQ: its init made the variable collections \['batch_stats'\] besides 'params'"
    with pytest.raises(ValueError, match=message):
        dqn.make_dqn(dqn.DQNConfig(total_timesteps=2000, learning_starts=500, buffer_size=1000), network=FrozenStatsQ())
    with pytest.raises(ValueError, match=message):
        pqn.make_pqn(pqn.PQNConfig(num_envs=4, num_steps=8, total_timesteps=96, num_minibatches=2),
                     network=FrozenStatsQ())


def test_an_off_policy_network_that_ignores_the_batch_axis_is_refused():
    """Checked on a batch of 1, a Q-network averaging over the batch trained DQN silently ([1, A] broadcast)."""
    from jaxrl_rollout.algorithms import dqn, pqn, sac, td3

    with pytest.raises(ValueError, match=r"^network: module.apply\(params, obs \[B, \.\.\.\]\) must return float "
                                         r"Q-values \[B, A\] = \[2, 2\]"):
        dqn.make_dqn(dqn.DQNConfig(total_timesteps=2000, learning_starts=500, buffer_size=1000),
                     network=CollapsesBatchQ())
    with pytest.raises(ValueError, match=r"^network CollapsesBatchQ: __call__\(obs\) must return Q-values float "
                                         r"\[B, A\] = \[2, 2\]"):
        pqn.make_pqn(pqn.PQNConfig(num_envs=4, num_steps=8, total_timesteps=96, num_minibatches=2),
                     network=CollapsesBatchQ())
    actor = sac.SACActor(action_dim=1)  # the default actor, beside a critic that ignores the batch
    with pytest.raises(ValueError, match=r"network: the critic CollapsesBatchCritic's __call__\(obs, action \[B, A\]\) "
                                         r"failed|critic.apply.*must return float Q \[B\]"):
        sac.make_sac(sac.SACConfig(env_id="Pendulum-v1", total_timesteps=2000, learning_starts=500, buffer_size=1000),
                     network=(actor, CollapsesBatchCritic()))
    with pytest.raises(ValueError, match=r"network: the critic CollapsesBatchCritic's __call__\(obs, action \[B, A\]\) "
                                         r"failed|critic_module.apply.*must return float Q"):
        td3.make_td3(td3.TD3Config(total_timesteps=2000, learning_starts=500, buffer_size=1000),
                     network=(td3.TD3Actor(action_dim=1, action_scale=2.0, action_bias=0.0), CollapsesBatchCritic()))


def test_another_envs_params_or_a_module_class_is_named_when_built():
    """CartPole with Pendulum's params was gymnax's AttributeError ('x_threshold'); a Module class was flax's
    InvalidInstanceModuleError from deep inside init."""
    from jaxrl_rollout.algorithms import dqn

    small = dqn.DQNConfig(total_timesteps=2000, learning_starts=500, buffer_size=1000)
    with pytest.raises(TypeError, match=r"^env_params must be CartPole's params, a gymnax\.environments\."
                                        r"classic_control\.cartpole\.EnvParams .* got gymnax\.environments\."
                                        r"classic_control\.pendulum\.EnvParams"):
        dqn.make_train(small, env=CartPole(), env_params=Pendulum().default_params)
    with pytest.raises(TypeError, match=r"^env_params must be CartPole's params.* got builtins\.dict"):
        ppo.make_train(ppo.PPOConfig(**TINY_PPO), env=CartPole(), env_params={"gravity": 9.8})
    ppo.make_train(ppo.PPOConfig(**TINY_PPO), env=CartPole(),  # its own params, replaced, are taken
                   env_params=CartPole().default_params.replace(max_steps_in_episode=100))
    for make, config in ((dqn.make_train, small), (ppo.make_train, ppo.PPOConfig(**TINY_PPO))):
        with pytest.raises(TypeError, match=r"^network must be a flax linen Module instance, got the class "
                                            r"CollapsesBatchQ; pass an instance: CollapsesBatchQ\(\.\.\.\)"):
            make(config, network=CollapsesBatchQ)


class PoleObs(NamedTuple):
    cart: jax.Array  # position and velocity
    pole: jax.Array  # angle and angular velocity


class NamedCartPole(CartPole):
    """CartPole whose observation is a NamedTuple, described by a Tuple space of its fields."""

    def get_obs(self, state, params=None, key=None):
        obs = super().get_obs(state, params, key)
        return PoleObs(obs[:2], obs[2:])

    def observation_space(self, params=None):
        return spaces.Tuple([spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)] * 2)


class ReadsFields(nn.Module):
    """A network that reads the observation's fields by name."""

    q_values: bool = False

    @nn.compact
    def __call__(self, obs):
        x = nn.tanh(nn.Dense(16)(jnp.concatenate([obs.cart, obs.pole], axis=-1)))
        if self.q_values:
            return nn.Dense(2)(x)
        return categorical_from_logits(nn.Dense(2)(x)), nn.Dense(1)(x)[:, 0]


def test_a_namedtuple_observation_reaches_the_network_as_one():
    """The networks' probes ran on zeros of the observation space, a plain tuple for a Tuple space, so a network
    reading obs.cart was refused ('tuple' object has no attribute 'cart') although the rollout gives it the
    NamedTuple. They now run on what the env's reset gives."""
    from jaxrl_rollout.algorithms import dqn

    _, metrics = jax.jit(ppo.make_train(ppo.PPOConfig(**TINY_PPO), env=NamedCartPole(), network=ReadsFields()))(
        jax.random.key(0))
    assert np.all(np.isfinite(metrics.value_loss))
    config = dqn.DQNConfig(total_timesteps=400, learning_starts=200, buffer_size=400, batch_size=16,
                           target_network_frequency=100, log_interval=100)
    _, metrics = jax.jit(dqn.make_train(config, env=NamedCartPole(), network=ReadsFields(q_values=True)))(
        jax.random.key(0))
    assert np.all(np.isfinite(metrics.loss[-2:])) and not np.any(metrics.nonfinite)  # NaN before learning starts


def test_a_network_of_your_own_adds_no_trace_of_your_envs_reset():
    """An env of your own is checked against its space on what its reset gives, and a network of your own is
    probed on the same observation: make traced reset once more for the probe (a second or so for craftax)."""
    from jaxrl_rollout.algorithms import dqn

    class CountsResets(MyCartPole):
        traces = 0

        def reset(self, key, params=None):
            type(self).traces += 1
            return super().reset(key, params)

    def traces(make, config, network=None):
        CountsResets.traces = 0
        make(config, env=CountsResets(), network=network)
        return CountsResets.traces

    assert traces(ppo.make_ppo, ppo.PPOConfig(**TINY_PPO)) == 1  # the check against the space
    assert traces(ppo.make_ppo, ppo.PPOConfig(**TINY_PPO), TinyActorCritic(action_dim=2)) == 1
    assert traces(dqn.make_dqn, dqn.DQNConfig(), dqn.QNetwork(2, (8,))) == traces(dqn.make_dqn, dqn.DQNConfig())


def test_an_observation_space_that_does_not_describe_the_observation_is_refused():
    """An env whose space said (5,) and whose reset gave (8,) trained silently (the networks are sized from the
    space)."""

    class SaysFive(MyCartPole):
        def observation_space(self, params=None):
            return spaces.Box(-1.0, 1.0, (5,), jnp.float32)

    with pytest.raises(ValueError, match=r"^env SaysFive: reset returns observations of shape \[4\], but its "
                                         r"observation_space\(params\) says \[5\]; the networks are sized"):
        ppo.make_train(ppo.PPOConfig(**TINY_PPO), env=SaysFive())


class StepsInHalf(MyCartPole):
    """Resets to float32 observations, steps to bfloat16 ones."""

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = super().step(key, state, action, params)
        final = info["final_observation"].astype(jnp.bfloat16)
        return obs.astype(jnp.bfloat16), state, reward, terminated, truncated, {**info, "final_observation": final}


def test_a_step_observation_unlike_the_resets_is_refused(monkeypatch):
    """It failed inside lax.scan ("carry input and carry output must have equal types") or a flashbax assertion."""
    from jaxrl_rollout import collect
    from jaxrl_rollout.algorithms import dqn

    message = (r"^env StepsInHalf: step returns observations bfloat16\[4\] per env, but reset returns "
               r"float32\[4\]; a rollout carries one observation")
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(ppo.make_train(ppo.PPOConfig(**TINY_PPO), env=StepsInHalf()), jax.random.key(0))
    with pytest.raises(ValueError, match=message):  # the off-policy learners trace a step as they are built
        dqn.make_train(dqn.DQNConfig(total_timesteps=200, learning_starts=10, log_interval=100,
                                     target_network_frequency=50, buffer_size=100, batch_size=8), env=StepsInHalf())
    with pytest.raises(ValueError, match=message):
        collect.rollout_init(jax.random.key(0), StepsInHalf(), None, 2)
    from jaxrl_rollout import prng

    monkeypatch.setattr(prng, "can_fuse", lambda key: False)  # stepping.check_env's own trace
    with pytest.raises(ValueError, match=message.replace(" per env", "")):
        collect.rollout_init(jax.random.key(0), StepsInHalf(), None, 2)


class StepEnvInHalf(MyCartPole):
    """Written as gymnax's envs are, with a `step_env` whose observations are of another dtype than its
    `reset_env`'s: gymnax's own `step` then fails in its auto-reset select."""

    def step_env(self, key, state, action, params):
        obs, state, reward, done, info = super().step_env(key, state, action, params)
        return obs.astype(jnp.bfloat16), state, reward, done, info


class PendulumStepEnvInHalf(Pendulum):
    def step_env(self, key, state, action, params):
        obs, state, reward, done, info = super().step_env(key, state, action, params)
        return obs[:2], state, reward, done, info  # a shape of its own


class StateInHalf(MyCartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, done, info = super().step_env(key, state, action, params)
        return obs, state.replace(x=state.x.astype(jnp.bfloat16)), reward, done, info


class DonePerPole(MyCartPole):
    """A done per something (here twice the same): gymnax's auto-reset select needs one bool."""

    def step_env(self, key, state, action, params):
        obs, state, reward, done, info = super().step_env(key, state, action, params)
        return obs, state, reward, jnp.stack([done, done]), info


class TruncatedPerPole(MyCartPole):
    def is_truncated(self, state, params):
        return jnp.stack([super().is_truncated(state, params)] * 2)


def test_a_gymnax_step_env_unlike_its_reset_env_is_named_by_every_learner():
    """It failed with gymnax's "select cases must have the same dtypes" (or shapes), from inside its auto-reset,
    naming neither the env nor what differs; the off-policy learners built without a word and failed in their
    first trace the same way. A state leaf of another dtype is named by its path."""
    from jaxrl_rollout import collect
    from jaxrl_rollout.algorithms import dqn, sac, td3

    message = (r"^env StepEnvInHalf: step returns observations bfloat16\[4\], but reset returns float32\[4\]; a "
               r"rollout carries one observation")
    with pytest.raises(ValueError, match=message) as raised:
        collect.rollout_init(jax.random.key(0), StepEnvInHalf(), None, 2)
    assert isinstance(raised.value.__cause__, TypeError)  # gymnax's own error, kept as the cause
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(ppo.make_train(ppo.PPOConfig(**TINY_PPO), env=StepEnvInHalf()), jax.random.key(0))
    with pytest.raises(ValueError, match=message):
        dqn.make_train(dqn.DQNConfig(total_timesteps=200, learning_starts=10, log_interval=100,
                                     target_network_frequency=50, buffer_size=100, batch_size=8), env=StepEnvInHalf())
    with pytest.raises(ValueError, match=r"^env StateInHalf: step_env returns a state whose \.x is bfloat16\[\], where "
                                         r"reset_env's is float32\[\]; gymnax's step selects between the two"):
        ppo.make_train(ppo.PPOConfig(**TINY_PPO), env=StateInHalf())(jax.random.key(0))
    with pytest.raises(ValueError, match=r"^env DonePerPole: step_env returns a done \(terminated\) of bool\[2\]; "
                                         r"gymnax's step selects .* so each must be one scalar \(a bool\[\]\) per env"):
        collect.rollout_init(jax.random.key(0), DonePerPole(), None, 2)
    with pytest.raises(ValueError, match=r"^env TruncatedPerPole: is_truncated returns bool\[2\]"):
        dqn.make_train(dqn.DQNConfig(total_timesteps=200, learning_starts=10, log_interval=100,
                                     target_network_frequency=50, buffer_size=100, batch_size=8), env=TruncatedPerPole())
    pendulum = r"^env PendulumStepEnvInHalf: step returns observations float32\[2\], but reset returns float32\[3\]"
    for learner, config in ((sac, sac.SACConfig), (td3, td3.TD3Config)):
        with pytest.raises(ValueError, match=pendulum):
            learner.make_train(config(total_timesteps=200, learning_starts=10, log_interval=100, buffer_size=100,
                                      batch_size=8), env=PendulumStepEnvInHalf())


def test_bad_env_arguments_name_the_argument():
    config = ppo.PPOConfig(**TINY_PPO)
    with pytest.raises(TypeError, match=r"env must be an env object \(the gymnax protocol\), got the string "
                                        r"'CartPole-v1'; an env id goes in config.env_id"):
        ppo.make_train(config, env="CartPole-v1")
    # the class for the env (its methods are callable, unbound): was gymnax's "missing 1 required positional
    # argument: 'params'", or for SAC "'property' object has no attribute 'default_params'"
    from jaxrl_rollout.algorithms import sac

    with pytest.raises(TypeError, match=r"^env must be an env object, got the class CartPole; pass an instance: "
                                        r"env=CartPole\(\)\.$"):
        ppo.make_train(config, env=CartPole)
    with pytest.raises(TypeError, match=r"^env must be an env object, got the class Pendulum"):
        sac.make_train(sac.SACConfig(), env=Pendulum)

    class NoSpaces:
        default_params = None

        def reset(self, key, params):
            pass

        def step(self, key, state, action, params):
            pass

    with pytest.raises(TypeError, match=r"env must follow the gymnax>=1.0.1 protocol.*NoSpaces has no callable "
                                        r"`action_space`, `observation_space`"):
        ppo.make_train(config, env=NoSpaces())
    class GridActions(MyCartPole):
        def action_space(self, params=None):
            return spaces.Box(0.0, 1.0, (2, 2))

    with pytest.raises(ValueError, match=r"env GridActions: unsupported action space .*expected Discrete or a 1-D Box"):
        ppo.make_train(config, env=GridActions())

    class IntShapedObs(MyCartPole):  # gymnax samples Box(.., 4) as (4,); the learners read shapes as tuples
        def observation_space(self, params=None):
            return spaces.Dict({"x": spaces.Box(-1.0, 1.0, 4)})

    with pytest.raises(TypeError, match=r"^env IntShapedObs: observation_space\(params\)\['x'\] is a Box whose shape "
                                        r"is 4; a Box's shape is a tuple of ints, e.g. spaces.Box\(low, high, \(4,\)\)"):
        ppo.make_train(config, env=IntShapedObs())
    with pytest.raises(ValueError, match=r"env_params is given without env"):
        ppo.make_train(config, env_params=MyCartPole().default_params)
    with pytest.raises(ValueError, match=r"network: a module of your own is given, and config.network='mlp' names "
                                         r"another; leave config.network='auto'"):
        ppo.make_train(ppo.PPOConfig(**TINY_PPO, network="mlp"), network=TinyActorCritic(action_dim=2))
    # the built-in network's sizes and activation were dropped silently with a network of one's own
    with pytest.raises(ValueError, match=r"^network: a module of your own is given, and config.hidden_sizes=\(8,\) "
                                         r"shapes only the built-in network, so it would not be read"):
        ppo.make_train(ppo.PPOConfig(**TINY_PPO, hidden_sizes=(8,)), network=TinyActorCritic(action_dim=2))
    with pytest.raises(ValueError, match=r"^network: a module of your own is given, and config.activation='relu'"):
        a2c.make_train(a2c.A2CConfig(**TINY_A2C, activation="relu"), network=TinyActorCritic(action_dim=2))


def _pendulum_with_box(low, high):
    class OddBounds(MyPendulum):
        def action_space(self, params=None):
            return spaces.Box(low, high, (1,), jnp.float32)

    return OddBounds()


@pytest.mark.parametrize("low, high", [(2.0, -2.0), (1.0, 1.0), (-jnp.inf, jnp.inf)])
def test_action_bounds_that_no_actor_can_scale_to_are_refused(low, high):
    """SAC and TD3 squash their actions into the Box, so its bounds must be finite with high > low; a Box with
    high < low is refused for every learner (PPO used to clip its actions to the reversed range)."""
    from jaxrl_rollout.algorithms import sac, td3

    env = _pendulum_with_box(low, high)
    for module, config in ((sac, sac.SACConfig()), (td3, td3.TD3Config())):
        with pytest.raises(ValueError) as refused:
            module.make_train(config, env=env)
        name = module.__name__.rpartition(".")[2].upper()
        if high < low:  # the shared check of every learner, before SAC's and TD3's own
            assert str(refused.value).startswith("env OddBounds: its action Box has high < low"), refused.value
        else:
            assert str(refused.value).startswith(f"env OddBounds: {name} scales actions to the Box bounds, which "
                                                 "must be finite with high > low, got low=["), refused.value
    if high < low:
        with pytest.raises(ValueError, match=r"env OddBounds: its action Box has high < low \(low=2.0, high=-2.0\); "
                                             r"a Box's bounds must have low <= high"):
            ppo.make_train(ppo.PPOConfig(**TINY_PPO), env=env)


def test_an_integer_action_box_is_refused_by_every_continuous_learner():
    """A Box of int32 actions trained silently: the env's step got the policy's float actions, clipped to the Box
    but never rounded."""
    from jaxrl_rollout.algorithms import sac, td3

    class IntActions(MyPendulum):
        def action_space(self, params=None):
            return spaces.Box(0, 10, (1,), jnp.int32)

    words = (r"^env IntActions: its action Box has dtype int32, but a continuous policy draws float actions \(clipped "
             r"to the Box, not rounded\); give the env a Discrete action space, or a float Box that its step rounds")
    for module, config in ((ppo, ppo.PPOConfig(**TINY_PPO)), (a2c, a2c.A2CConfig(**TINY_A2C)), (sac, sac.SACConfig()),
                           (td3, td3.TD3Config())):
        with pytest.raises(ValueError, match=words):
            module.make_train(config, env=IntActions())


@pytest.mark.parametrize("env_id", ["envpool/CartPole-v1", "gymnasium/CartPole-v1", "brax/ant", "pgx/tic_tac_toe"])
def test_a_config_never_builds_its_env(env_id, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a config built an env: envs.make{args}")

    monkeypatch.setattr(envs, "make", refuse)
    ppo.PPOConfig(env_id=env_id, **TINY_PPO)
    a2c.A2CConfig(env_id=env_id, **TINY_A2C)
    # The env is built when the algorithm is.
    with pytest.raises(AssertionError, match="a config built an env"):
        ppo.make_ppo(ppo.PPOConfig(env_id=env_id, **TINY_PPO))
    # A bad gymnax name is still refused at construction, without building anything; another suite's id
    # when the env is built.
    with pytest.raises(ValueError, match=r"unknown env_id 'CartPole-v2'. Did you mean CartPole-v1"):
        a2c.A2CConfig(env_id="gymnax/CartPole-v2")
    with pytest.raises(ValueError, match=r"env_id must be a non-empty string"):
        ppo.PPOConfig(env_id="")
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"unknown env suite 'envpol'.*Did you mean 'envpool'"):
        ppo.make_ppo(ppo.PPOConfig(env_id="envpol/CartPole-v1", **TINY_PPO))


def test_the_readme_example_runs():
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = re.search(r"### Your own env and network\n\n.*?```python\n(.*?)```", readme, flags=re.S).group(1)
    namespace: dict = {}  # the block runs as a user would paste it: it imports what it uses
    exec(compile(code, "README-own-env-and-network", "exec"), namespace)
    assert namespace["own_metrics"].episode_return.shape == (8,)
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(namespace["own_state"].params))


def test_a_recurrent_policys_evaluation_without_a_carry_says_how_to_give_it():
    """README's evaluate recipe with network='gru' was told to call rollout_init, which the user never called."""
    from jaxrl_rollout import evaluate

    algo = ppo.make_ppo(ppo.PPOConfig(**TINY_PPO), network=TinyRecurrent(action_dim=2))
    state = algo.init(jax.random.key(0))
    args = (algo.env, algo.env_params, algo.eval_policy_fn, algo.policy_params(state), jax.random.key(1), 2)
    with pytest.raises(TypeError, match=r"a recurrent policy needs an initial carry: rollout_init\(\.\.\., "
                                        r"initial_carry=\.\.\.\), or evaluate\(\.\.\., initial_carry=\.\.\.\) "
                                        r"\(a learner's: algo\.module\.initial_carry\(num_episodes\)\)"):
        evaluate(*args, max_steps=5)
    result = evaluate(*args, max_steps=5, initial_carry=algo.module.initial_carry(2))  # as README says
    assert result.returns.shape == (2,)
