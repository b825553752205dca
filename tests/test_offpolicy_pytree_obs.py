"""The off-policy learners on an env whose observation is a pytree (a dict, as jumanji's and pgx's are).

Their built-in networks flatten one array, so with the default network each
one refuses such an env at `make_train` time, in one line naming `network`
and the observation's leaves (before, DQN's `jnp.asarray` of a dict raised a
TypeError deep in flax). With a network of the user's that takes the dict,
the replay buffer stores it as it is and training runs.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces
from gymnax.environments.classic_control.cartpole import CartPole
from gymnax.environments.classic_control.pendulum import Pendulum

from jaxrl_rollout.algorithms import dqn, pqn, sac, td3


def _as_dict(obs):
    return {"pos": obs[:2], "vel": obs[2:]}


def _dict_space(n):
    return spaces.Dict({"pos": spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32),
                        "vel": spaces.Box(-jnp.inf, jnp.inf, (n - 2,), jnp.float32)})


class DictCartPole(CartPole):
    def get_obs(self, state, params=None, key=None):
        return _as_dict(super().get_obs(state))

    def observation_space(self, params=None):
        return _dict_space(4)


class DictPendulum(Pendulum):
    def get_obs(self, state):
        return _as_dict(super().get_obs(state))

    def observation_space(self, params=None):
        return _dict_space(3)


def _flat(obs):
    return jnp.concatenate([obs["pos"], obs["vel"]], axis=-1)


class DictQ(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return nn.Dense(2)(nn.relu(nn.Dense(16)(_flat(obs))))


class DictSACActor(nn.Module):
    @nn.compact
    def __call__(self, obs):
        h = nn.relu(nn.Dense(16)(_flat(obs)))
        return nn.Dense(1)(h), jnp.clip(nn.Dense(1)(h), -5.0, 2.0)


class DictTD3Actor(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return 2.0 * jnp.tanh(nn.Dense(1)(nn.relu(nn.Dense(16)(_flat(obs)))))


class DictCritic(nn.Module):
    @nn.compact
    def __call__(self, obs, action):
        return nn.Dense(1)(nn.relu(nn.Dense(16)(jnp.concatenate([_flat(obs), action], axis=-1))))[:, 0]


SMALL = {
    "dqn": (dqn, dqn.DQNConfig(total_timesteps=400, buffer_size=200, batch_size=16, learning_starts=50,
                               train_frequency=1, target_network_frequency=100, log_interval=50), DictCartPole, DictQ()),
    "pqn": (pqn, pqn.PQNConfig(num_envs=4, num_steps=8, total_timesteps=64, update_epochs=1, num_minibatches=2),
            DictCartPole, DictQ()),
    "sac": (sac, sac.SACConfig(total_timesteps=200, buffer_size=200, batch_size=16, learning_starts=50,
                               log_interval=50), DictPendulum, (DictSACActor(), DictCritic())),
    "td3": (td3, td3.TD3Config(total_timesteps=200, buffer_size=200, batch_size=16, learning_starts=50,
                               log_interval=50), DictPendulum, (DictTD3Actor(), DictCritic())),
}
DEFAULT_NAMES = {"dqn": "DQN's QNetwork", "pqn": "PQN's QNetwork", "sac": "SAC's SACActor and SACCritic",
                 "td3": "TD3's TD3Actor and TD3Critic"}


@pytest.mark.parametrize("algo", sorted(SMALL))
def test_default_network_refuses_a_pytree_observation_in_one_line(algo):
    module, config, env_cls, _ = SMALL[algo]
    with pytest.raises(ValueError) as raised:
        module.make_train(config, env=env_cls())
    message = str(raised.value)
    assert message.startswith(f"env {env_cls.__name__}: {DEFAULT_NAMES[algo]} takes a single array observation"), message
    assert "pos float32[2], vel float32[" in message and "\n" not in message
    assert message.endswith("train it with ppo or a2c, whose network='auto' encodes each leaf and applies an action "
                            "mask, or, from Python, pass make_train a network of your own (network=...) that takes it.")


@pytest.mark.parametrize("algo", sorted(SMALL))
def test_own_network_trains_on_a_pytree_observation(algo):
    module, config, env_cls, network = SMALL[algo]
    train = module.make_train(config, env=env_cls(), network=network)
    if algo in ("dqn", "sac"):  # one replay learner of each action kind runs; the others are traced
        state, metrics = jax.jit(train)(jax.random.key(0))
        assert int(np.max(metrics.nonfinite)) == 0 and bool(np.any(metrics.trained))
        stored = state.buffer.experience  # flashbax's buffer keeps each observation as the env gave it
        assert set(stored.obs) == set(stored.next_obs) == {"pos", "vel"}
        assert float(jnp.abs(stored.next_obs["vel"]).sum()) > 0.0
    else:
        jax.eval_shape(train, jax.random.key(0))
