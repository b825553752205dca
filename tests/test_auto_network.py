"""network="auto", `ActorCriticMultiInput` and action masks.

The choice of network is checked on gymnax spaces alone (nothing compiles);
the multi-input module and the masks run on a toy env with a dict observation
whose `action_mask` forbids one action per step, with a few-unit network.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

import jaxrl_rollout as jr
from jaxrl_rollout import networks
from jaxrl_rollout.algorithms import _common
from jaxrl_rollout.networks import ActorCriticCNN, ActorCriticMLP, ActorCriticMultiInput, ActorCriticNatureCNN

A = 3
TINY = dict(hidden_sizes=(8, 8), activation="tanh")


def choose(space, network="auto", continuous=False):
    return _common.choose_network(network, space, 1 if continuous else A, continuous, TINY["hidden_sizes"], "tanh")


def box(shape, dtype=jnp.float32):
    return spaces.Box(0, 1, shape, dtype)


def test_auto_chooses_by_observation_space():
    mlp = choose(box((4,)))
    assert mlp == ActorCriticMLP(A, hidden_sizes=(8, 8)) == choose(box((4,)), "mlp")
    assert choose(box((10, 10, 4))) == ActorCriticCNN(A, kernel_size=3)
    assert choose(box((2, 5, 1))) == ActorCriticCNN(A, kernel_size=2)  # smaller than the 3x3 kernel
    assert isinstance(choose(box((5, 6))), ActorCriticMultiInput)  # no channels: flattened
    # an index: the MLP on its one-hot vector, with network='mlp' too (it was the MLP of one number)
    assert choose(spaces.Discrete(7)) == networks.OneHotObservation(7, mlp) == choose(spaces.Discrete(7), "mlp")
    assert isinstance(choose(box(())), ActorCriticMultiInput)  # a scalar Box
    image_and_vector = spaces.Dict({"image": box((5, 5, 2)), "vector": box((3,))})
    assert isinstance(choose(image_and_vector), ActorCriticMultiInput)
    masked = spaces.Dict({"x": box((2,)), "action_mask": box((A,), jnp.bool_)})
    assert isinstance(choose(masked), ActorCriticMultiInput)
    assert isinstance(choose(spaces.Tuple([box((2,)), box((3, 3, 1))])), ActorCriticMultiInput)
    for board in [(6, 7, 2), (4, 4, 31), (4, 3, 194), (35, 84, 4)]:  # pgx boards, small images: channels last
        assert isinstance(choose(box(board)), ActorCriticCNN), board
    for image in [(84, 84, 4), (64, 64, 3), (36, 36, 1)]:  # Atari-sized: the Nature CNN (see below)
        assert choose(box(image)) == ActorCriticNatureCNN(A) == choose(box(image), "cnn"), image


def test_atari_sized_images_get_the_nature_cnn_which_reads_pixels_scaled():
    """On envpool's 84 x 84 Atari frames the MinAtar CNN's dense layer had 13.8 million weights and read the
    uint8 frames as 0-255; images of 36 x 36 or more get CleanRL's and SB3's Atari network, and a uint8 space
    bounded by 0 and 255 (SB3's image rule) is read x / 255. uint8 grids of tile ids (xminigrid, navix: other
    bounds) are not pixels, and smaller images keep the MinAtar CNN."""
    atari = spaces.Box(0, 255, (84, 84, 4), jnp.uint8)
    assert choose(atari) == ActorCriticNatureCNN(A, pixels=True) == choose(atari, "cnn")
    assert choose(atari, continuous=True) == ActorCriticNatureCNN(1, continuous=True, pixels=True)
    assert choose(spaces.Box(0, 13, (40, 40, 2), jnp.uint8)) == ActorCriticNatureCNN(A, pixels=False)
    assert choose(spaces.Box(0, 255, (20, 24, 2), jnp.uint8)) == ActorCriticCNN(A, kernel_size=3)
    assert _common.is_pixel_space(atari) and not _common.is_pixel_space(spaces.Box(0, 255, (84, 84, 4), jnp.int32))
    assert not _common.is_pixel_space(spaces.Box(0.0, 1.0, (84, 84, 4), jnp.float32))


def test_nature_cnn_layers_and_pixel_scaling():
    module = ActorCriticNatureCNN(6, pixels=True)
    frames = jax.random.randint(jax.random.key(0), (2, 84, 84, 4), 0, 256).astype(jnp.uint8)
    params = jax.jit(module.init)(jax.random.key(1), frames)
    shapes = jax.tree.map(jnp.shape, params["params"])
    assert shapes == {"conv_0": {"kernel": (8, 8, 4, 32), "bias": (32,)}, "conv_1": {"kernel": (4, 4, 32, 64),
                      "bias": (64,)}, "conv_2": {"kernel": (3, 3, 64, 64), "bias": (64,)},
                      "dense": {"kernel": (7 * 7 * 64, 512), "bias": (512,)},
                      "actor_head": {"kernel": (512, 6), "bias": (6,)}, "critic_head": {"kernel": (512, 1), "bias": (1,)}}
    assert sum(x.size for x in jax.tree.leaves(params)) == 1_687_719  # the MinAtar CNN's dense layer: 13,771,904
    head = np.asarray(params["params"]["actor_head"]["kernel"], np.float64)
    np.testing.assert_allclose(head.T @ head, 0.01**2 * np.eye(6), atol=1e-8)  # orthogonal, gain 0.01
    apply = jax.jit(module.apply)
    dist, value = apply(params, frames)
    scaled, scaled_value = apply(params, frames.astype(jnp.float32) / 255.0)  # floats are used as they are
    np.testing.assert_array_equal(dist.logits, scaled.logits)
    np.testing.assert_array_equal(value, scaled_value)
    assert dist.logits.shape == (2, 6) and value.shape == (2,) and np.abs(value).max() < 1
    _, raw_value = ActorCriticNatureCNN(6).apply(params, frames)  # pixels=False: the frames read as 0-255
    assert np.abs(raw_value).max() > 10 * np.abs(value).max()
    many, _ = module.apply(params, jnp.stack([frames, frames]))  # leading batch axes [..., H, W, C]
    np.testing.assert_allclose(many.logits, jnp.stack([dist.logits, dist.logits]), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"must be at least 36 on each side for the Nature CNN"):
        module.apply(params, frames[:, :35])
    with pytest.raises(TypeError, match="pixels must be a bool"):
        ActorCriticNatureCNN(6, pixels="yes")


def test_multi_input_large_image_leaves_get_the_nature_convolutions_and_pixels_are_scaled():
    """A dict observation with a pixel leaf (a camera beside a state vector): the leaf goes through the Nature
    CNN's convolutions (SB3's MultiInputPolicy gives image leaves its NatureCNN) and is read x / 255; a leaf
    of other bounds, and a small image, as before."""
    space = spaces.Dict({"camera": spaces.Box(0, 255, (36, 40, 3), jnp.uint8), "ids": spaces.Box(0, 9, (36, 36, 1),
                         jnp.uint8), "small": spaces.Box(0, 255, (5, 5, 1), jnp.uint8), "state": box((2,))})
    module = choose(space)
    assert module == ActorCriticMultiInput(A, hidden_sizes=(8, 8), pixels=(True, False, True, False))
    obs = {"camera": jax.random.randint(jax.random.key(0), (2, 36, 40, 3), 0, 256).astype(jnp.uint8),
           "ids": jnp.full((2, 36, 36, 1), 9, jnp.uint8),
           "small": jax.random.randint(jax.random.key(1), (2, 5, 5, 1), 0, 256).astype(jnp.uint8),
           "state": jnp.ones((2, 2))}
    params = jax.jit(module.init)(jax.random.key(2), obs)
    shapes = jax.tree.map(jnp.shape, params["params"])
    assert shapes["conv_camera_0"]["kernel"] == (8, 8, 3, 32) and shapes["conv_camera_2"]["kernel"] == (3, 3, 64, 64)
    assert shapes["encoder_camera"]["kernel"] == (64, 8)  # a 1 x 1 x 64 map after the three convolutions
    assert shapes["conv_ids_0"]["kernel"] == (8, 8, 1, 32) and shapes["conv_small"]["kernel"] == (3, 3, 1, 16)
    apply = jax.jit(module.apply)
    dist, value = apply(params, obs)
    scaled = {**obs, "camera": obs["camera"] / 255.0, "small": obs["small"] / 255.0}
    dist2, value2 = apply(params, scaled)  # floats are used as they are; the ids leaf is never scaled
    np.testing.assert_array_equal(dist.logits, dist2.logits)
    np.testing.assert_array_equal(value, value2)
    unscaled = ActorCriticMultiInput(A, hidden_sizes=(8, 8)).apply(params, obs)[1]
    assert not np.allclose(unscaled, value)
    with pytest.raises(ValueError, match=r"pixels has 2 entries for an observation of 4 leaves"):
        ActorCriticMultiInput(A, hidden_sizes=(8, 8), pixels=(True, False)).apply(params, obs)
    with pytest.raises(ValueError, match=r"pixels must hold a bool per observation leaf"):
        ActorCriticMultiInput(A, pixels=(1, 0))


@struct.dataclass
class SideState(environment.EnvState):
    side: jax.Array


class PixelSideEnv(environment.Environment):
    """A one-step pixel bandit: a 36 x 36 uint8 frame lit (255) on its left or right half; reward 1 for action 0
    on a left frame or action 1 on a right one, else 0."""

    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=1)

    def _frame(self, side):
        column = jnp.arange(36)[None, :, None]
        return jnp.where((column < 18) == (side == 0), 255, 0).astype(jnp.uint8) * jnp.ones((36, 1, 1), jnp.uint8)

    def reset_env(self, key, params):
        side = jax.random.bernoulli(key).astype(jnp.int32)
        return self._frame(side), SideState(time=0, side=side)

    def step_env(self, key, state, action, params):
        obs, new = self.reset_env(key, params)
        return obs, new, (action == state.side).astype(jnp.float32), jnp.bool_(True), {}

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params=None):
        return spaces.Box(0, 255, (36, 36, 1), jnp.uint8)


def test_ppo_learns_a_pixel_task_through_the_chosen_nature_cnn():
    from jaxrl_rollout.algorithms import ppo

    config = ppo.PPOConfig(num_envs=8, num_steps=8, total_timesteps=64 * 24, update_epochs=2, num_minibatches=2)
    algo = ppo.make_ppo(config, env=PixelSideEnv())
    assert algo.module == ActorCriticNatureCNN(2, pixels=True)
    _, metrics = jax.jit(algo.train)(jax.random.key(0))
    returns = np.asarray(metrics.episode_return)
    assert returns[:2].mean() < 0.7 and returns[-4:].mean() > 0.95, returns


@pytest.mark.parametrize(
    "network, space, continuous, message",
    [
        ("auto", box((2, 3, 4, 5)), False, r"network='auto' encodes observation leaves .* obs has shape \[2, 3, 4"),
        ("auto", spaces.Dict({"v": box((2, 2, 2, 2))}), False, r"network='auto' .* v has shape"),
        ("auto", spaces.Dict({"x": box((2,)), "action_mask": box((A,))}), False,
         r"network='auto' reads action_mask as an action mask, which must be bool \[A=3\]"),
        ("auto", spaces.Dict({"x": box((2,)), "action_mask": box((1,), jnp.bool_)}), True, r"continuous actions"),
        ("mlp", box((10, 10, 4)), False, r"network='mlp' needs a flat vector observation \[O\], got obs"),
        ("cnn", box((4,)), False, r"network='cnn' needs an image observation \[H, W, C\]"),
        ("gru", spaces.Dict({"x": box((2,))}), False, r"network='gru' needs a single array observation"),
        # channels first: a stack of Atari frames was read as a 4 x 84 image of 84 channels
        ("auto", box((4, 84, 84)), False, r"^network='auto' reads images channels last \[H, W, C\]; the observation "
                                          r"\[4, 84, 84\] looks channels first \[C, H, W\]; give the env's images as "
                                          r"\[84, 84, 4\]"),
        ("cnn", box((3, 64, 64)), False, r"^network='cnn' reads images channels last"),
        ("auto", spaces.Dict({"pixels": box((1, 8, 8)), "v": box((2,))}), False,
         r"^network='auto' reads images channels last \[H, W, C\]; observation leaf pixels \[1, 8, 8\]"),
    ],
)
def test_spaces_a_network_cannot_take_are_rejected_naming_network(network, space, continuous, message):
    with pytest.raises(ValueError, match=message):
        choose(space, network, continuous)


def test_auto_rejects_unknown_space_types():
    class Odd:
        pass

    with pytest.raises(ValueError, match=r"network='auto' cannot read the observation space .*expected gymnax Box"):
        choose(spaces.Dict({"x": Odd()}))


@struct.dataclass
class MaskState(environment.EnvState):
    time: jax.Array


class MaskedToyEnv(environment.Environment):
    """Dict observations {"x": [2] float, "image": [2, 2, 1], "action_mask": [3] bool}; action t % 3 is illegal at t.

    Reward 1 for a legal action and -10 for the illegal one; episodes last 6 steps.
    """

    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=6)

    def _obs(self, time):
        x = jnp.stack([time.astype(jnp.float32), jnp.float32(1.0)])
        return {"x": x, "image": jnp.full((2, 2, 1), time, jnp.float32), "action_mask": jnp.arange(A) != time % A}

    def reset_env(self, key, params):
        return self._obs(jnp.int32(0)), MaskState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        legal = action != state.time % A
        time = state.time + 1
        return self._obs(time), MaskState(time=time), jnp.where(legal, 1.0, -10.0), time >= 6, {}

    def action_space(self, params=None):
        return spaces.Discrete(A)

    def observation_space(self, params=None):
        return spaces.Dict({"x": box((2,)), "image": box((2, 2, 1)), "action_mask": box((A,), jnp.bool_)})


ENV = MaskedToyEnv()
MODULE = choose(ENV.observation_space())


@pytest.fixture(scope="module")
def toy_params():
    obs, _ = ENV.reset(jax.random.key(0))
    return jax.jit(MODULE.init)(jax.random.key(1), jax.tree.map(lambda x: x[None], obs))


def test_multi_input_parameters_and_shapes(toy_params):
    assert isinstance(MODULE, ActorCriticMultiInput)
    shapes = jax.tree.map(jnp.shape, toy_params["params"])
    assert shapes["conv_image"]["kernel"] == (2, 2, 1, 16)  # kernel shrunk to the 2x2 image
    assert shapes["encoder_image"]["kernel"] == (16, 8)
    assert shapes["encoder_x"]["kernel"] == (2, 8)
    assert shapes["actor_hidden_0"]["kernel"] == (16, 8)  # two encodings of 8, concatenated
    assert shapes["actor_head"]["kernel"] == (8, A) and shapes["critic_head"]["kernel"] == (8, 1)
    assert not any("action_mask" in name for name in shapes)  # the mask is not a feature
    # Orthogonal with the house gains: a square hidden kernel is sqrt(2) times orthogonal.
    w = np.asarray(toy_params["params"]["actor_hidden_0"]["kernel"])
    np.testing.assert_allclose(w[:8].T @ w[:8] + w[8:].T @ w[8:], 2.0 * np.eye(8), atol=1e-5)
    obs = {"x": jnp.ones((5, 2)), "image": jnp.ones((5, 2, 2, 1)), "action_mask": jnp.ones((5, A), bool)}
    dist, value = MODULE.apply(toy_params, obs)
    assert dist.logits.shape == (5, A) and value.shape == (5,)
    with pytest.raises(ValueError, match=r"obs\['action_mask'\] is an action mask and must be bool \[B, A\]"):
        MODULE.apply(toy_params, {**obs, "action_mask": jnp.ones((5, A))})
    with pytest.raises(ValueError, match=r"share one leading batch axis"):
        MODULE.apply(toy_params, {**obs, "x": jnp.ones((4, 2))})


def test_masked_distribution_is_the_renormalised_one(toy_params):
    obs = {"x": jnp.array([[0.5, 1.0], [2.0, -1.0]]), "image": jnp.ones((2, 2, 2, 1)),
           "action_mask": jnp.array([[True, False, True], [False, False, False]])}
    masked, _ = MODULE.apply(toy_params, obs)
    full, _ = MODULE.apply(toy_params, {**obs, "action_mask": jnp.ones((2, A), bool)})
    p = np.asarray(full.probs, np.float64)
    # Row 0: renormalised over actions 0 and 2. Row 1 allows nothing: left unmasked, never NaN.
    keep = np.array([[1, 0, 1], [1, 1, 1]])
    expected = p * keep / np.sum(p * keep, axis=-1, keepdims=True)
    np.testing.assert_allclose(masked.probs, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(masked.log_prob(jnp.array([2, 1])), np.log(expected[[0, 1], [2, 1]]), rtol=1e-5)
    assert np.isneginf(masked.log_prob(jnp.array([1, 1]))[0])
    entropy = -np.sum(np.where(expected > 0, expected * np.log(np.where(expected > 0, expected, 1)), 0), -1)
    np.testing.assert_allclose(masked.entropy(), entropy, rtol=1e-5)

    def loss(params):
        dist, value = MODULE.apply(params, obs)
        return jnp.sum(dist.entropy()) + jnp.sum(dist.log_prob(jnp.array([0, 2]))) + jnp.sum(value)

    grads = jax.jit(jax.grad(loss))(toy_params)
    assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


def test_a_masked_action_is_never_sampled_in_a_rollout(toy_params):
    policy_fn = networks.feedforward_policy(MODULE)

    @jax.jit
    def collect(params, key):
        state = jr.rollout_init(key, ENV, None, 8)
        return jr.rollout(ENV, None, policy_fn, params, state, 60)[1]

    traj = collect(toy_params, jax.random.key(2))
    allowed = np.take_along_axis(np.asarray(traj.obs["action_mask"]), np.asarray(traj.action)[..., None], -1)
    assert allowed.all()
    assert np.isfinite(traj.log_prob).all() and (np.asarray(traj.reward) == 1.0).all()
    assert len(np.unique(traj.action)) == A  # every action is taken where it is allowed


def test_auto_on_cartpole_is_the_mlp_run_exactly():
    from jaxrl_rollout.algorithms import ppo

    tiny = dict(num_envs=2, num_steps=8, total_timesteps=32, update_epochs=1, num_minibatches=2)
    auto, mlp = (ppo.make_ppo(ppo.PPOConfig(network=n, **tiny)) for n in ("auto", "mlp"))
    assert ppo.PPOConfig().network == "auto" and auto.module == mlp.module
    assert isinstance(auto.module, ActorCriticMLP)
    run = lambda algo: jax.jit(algo.train)(jax.random.key(3))  # noqa: E731
    (state_a, metrics_a), (state_m, metrics_m) = run(auto), run(mlp)
    jax.tree.map(np.testing.assert_array_equal, state_a.params, state_m.params)
    jax.tree.map(np.testing.assert_array_equal, metrics_a, metrics_m)


def test_a_discrete_observation_is_read_one_hot():
    """FrozenLake's cell index went into the network as one number; it is the MLP of its one-hot vector, as SB3
    reads it, and PPO learns a bandit whose best action is the cell's parity (16 alternations over the index)."""
    from jaxrl_rollout.algorithms import dqn, ppo, pqn
    from tests.toy_envs import ParityEnv

    module = choose(spaces.Discrete(5))
    cells = jnp.array([0, 3, 4], jnp.int32)
    params = module.init(jax.random.key(0), cells)
    dist, value = module.apply(params, cells)
    plain_dist, plain_value = module.module.apply({"params": params["params"]["module"]},
                                                   jax.nn.one_hot(cells, 5, dtype=jnp.float32))
    np.testing.assert_array_equal(dist.logits, plain_dist.logits)
    np.testing.assert_array_equal(value, plain_value)

    # network='gru' reads it one-hot too (its input layer was [1, H]); 'cnn' cannot take it
    gru = choose(spaces.Discrete(5), "gru")
    assert isinstance(gru, networks.OneHotRecurrentObservation)
    carry = gru.initial_carry(3)
    gru_params = gru.init(jax.random.key(0), carry, cells)
    assert {x.shape[0] for x in jax.tree.leaves(gru_params) if x.ndim == 2} >= {5}
    _, (gru_dist, _) = gru.apply(gru_params, carry, cells)
    assert gru_dist.logits.shape == (3, A)
    with pytest.raises(ValueError, match=r"^network='cnn' needs an image observation"):
        choose(spaces.Discrete(5), "cnn")

    config = ppo.PPOConfig(num_envs=16, num_steps=4, total_timesteps=16 * 4 * 40, update_epochs=4, num_minibatches=2,
                           anneal_lr=False)
    train = ppo.make_train(config, env=ParityEnv())
    _, metrics = jax.jit(train)(jax.random.key(0), ppo.PPOHParams(lr=1e-2))
    assert float(metrics.episode_return[-5:].mean()) > 0.9  # the first updates: 0.5, a coin
    with pytest.raises(ValueError, match=r"^normalize_observations=True: the env's observation is \(or holds\) a "
                                         r"Discrete index"):
        ppo.make_train(ppo.PPOConfig(normalize_observations=True), env=ParityEnv())
    # DQN's and PQN's own Q-networks too
    made = dqn.make_dqn(dqn.DQNConfig(), env=ParityEnv())
    assert isinstance(made.module, networks.OneHotObservation), made.module
    assert isinstance(pqn.make_pqn(pqn.PQNConfig(), env=ParityEnv()).module, networks.OneHotObservation)


def _first_critic(critic_params):
    """Critic 1's params: SAC stacks the twins on a leading axis, TD3 keeps a pair."""
    if isinstance(critic_params, tuple):
        return critic_params[0]
    return jax.tree.map(lambda x: x[0], critic_params)


def test_sac_and_td3_networks_read_a_discrete_observation_one_hot():
    """SAC's and TD3's own actor and critics read a Discrete index as one number (an input layer of width 1)."""
    from jaxrl_rollout.algorithms import sac, td3
    from tests.toy_envs import ParityBoxActionEnv

    cells = jnp.arange(16, dtype=jnp.int32)
    one_hot = jax.nn.one_hot(cells, 16)
    action = jnp.zeros((16, 1))
    small = dict(total_timesteps=40, buffer_size=40, batch_size=8, learning_starts=10, log_interval=10)
    for made in (sac.make_sac(sac.SACConfig(**small), env=ParityBoxActionEnv()),
                 td3.make_td3(td3.TD3Config(**small), env=ParityBoxActionEnv())):
        state = made.init(jax.random.key(0))
        for module, params, args in ((made.actor, state.actor_params, ()),
                                     (made.critic, _first_critic(state.critic_params), (action,))):
            assert params["params"]["Dense_0"]["kernel"].shape[0] == 16 + len(args)  # [one-hot, action]
            # the module on the index equals its layers on the one-hot vector
            reference = type(module)(**{**{f: getattr(module, f) for f in module.__dataclass_fields__
                                           if f not in ("parent", "name")}, "num_obs_values": 0})
            np.testing.assert_array_equal(np.asarray(jax.tree.leaves(module.apply(params, cells, *args))[0]),
                                          np.asarray(jax.tree.leaves(reference.apply(params, one_hot, *args))[0]))
        jax.jit(made.train)(jax.random.key(1))  # and trains


def test_a_discrete_leaf_of_a_dict_observation_is_read_one_hot():
    """Only a top-level Discrete was one-hot: a Discrete leaf beside others went into its encoder as one number."""
    from jaxrl_rollout.algorithms import ppo
    from tests.toy_envs import ParityDictEnv

    space = ParityDictEnv().observation_space()
    module = choose(space)
    assert isinstance(module, ActorCriticMultiInput) and module.one_hot == (0, 16)  # leaves: bias, cell
    obs = {"cell": jnp.array([0, 3, 15], jnp.int32), "bias": jnp.ones((3, 2))}
    params = module.init(jax.random.key(0), obs)
    assert params["params"]["encoder_cell"]["kernel"].shape[0] == 16
    with pytest.raises(ValueError, match=r"obs\['cell'\] is read one-hot \(a Discrete leaf\), so it must be integer "
                                         r"indices \[B\], got float32\[3\]"):
        module.apply(params, {**obs, "cell": obs["cell"].astype(jnp.float32)})
    config = ppo.PPOConfig(num_envs=16, num_steps=4, total_timesteps=16 * 4 * 40, update_epochs=4, num_minibatches=2,
                           anneal_lr=False)
    _, metrics = jax.jit(ppo.make_train(config, env=ParityDictEnv()))(jax.random.key(0), ppo.PPOHParams(lr=1e-2))
    assert float(metrics.episode_return[-5:].mean()) > 0.9  # 0.94 (0.91-0.98 over 3 seeds); as one number 0.47-0.59
    with pytest.raises(ValueError, match=r"^normalize_observations=True: the env's observation is \(or holds\)"):
        ppo.make_train(ppo.PPOConfig(normalize_observations=True), env=ParityDictEnv())


@pytest.mark.parametrize("tuple_space", [False, True], ids=["dict-space", "tuple-space"])
def test_one_hot_sizes_follow_the_observations_own_leaf_order(tuple_space):
    """A NamedTuple observation described by a Dict space (every jumanji env's) flattens in field order, the space
    in sorted-key order: the one-hot size went to the wrong leaf (Snake's step_count was read as one number, its
    4000 given to the action mask; here the cell's 16 went to `bias`, "obs.bias is read one-hot")."""
    from jaxrl_rollout.algorithms import ppo
    from tests.toy_envs import ParityNamedTupleEnv

    env = ParityNamedTupleEnv(tuple_space)
    made = ppo.make_ppo(ppo.PPOConfig(num_envs=2, num_steps=4, total_timesteps=8, num_minibatches=1,
                                      update_epochs=1, **TINY), env=env)
    assert made.module.one_hot == (16, 0)  # leaves in the observation's order: cell, bias
    obs = env.reset(jax.random.key(0), env.default_params)[0]
    params = made.module.init(jax.random.key(0), jax.tree.map(lambda x: x[None], obs))
    assert params["params"]["encoder_cell"]["kernel"].shape[0] == 16
    assert params["params"]["encoder_bias"]["kernel"].shape[0] == 2
    # without an observation to order them by, the space's order (bias, cell for the Dict)
    assert _common.discrete_sizes(env.observation_space()) == ((16, 0) if tuple_space else (0, 16))
