"""SAC's and TD3's built-in networks on image observations (`network="auto"`, `"cnn"`, `"mlp"`).

Their MLPs flattened every observation, so a pixel env with continuous actions (gymnasium's CarRacing) trained an
MLP on tens of thousands of raw inputs. `network="auto"` now reads an image of at least 36 x 36 with the Nature
DQN's torso (`networks.cnn_torso`, DQN's choice `_common.choose_torso`) in the actor and in each twin critic, the
hidden layers on its 512 features: SB3's SAC and TD3 `CnnPolicy`, which the networks equal here for the same weights
(SB3 2.9.2, live: CI installs it).
"""

from __future__ import annotations

import dataclasses
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_rollout import actor_critic_losses as acl
from jaxrl_rollout import runner
from jaxrl_rollout.algorithms import _common, sac, td3
from jaxrl_rollout.networks import CNNTorso
from tests.test_auto_network import PixelSideEnv

NATURE_PIXELS = CNNTorso(nature=True, pixels=True, kernel_size=3)

requires_sb3 = pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None
                                  or importlib.util.find_spec("torch") is None,
                                  reason="stable-baselines3==2.9.2 and torch==2.13.0 not installed (CI installs them)")


class PixelSideBoxEnv(PixelSideEnv):
    """tests/test_auto_network.py's one-step pixel task with a Box action in [-1, 1]: a 36 x 36 uint8 frame lit on
    its left or right half pays -a on a left frame and a on a right one (best 1, a uniform random action 0)."""

    def step_env(self, key, state, action, params):
        obs, new = self.reset_env(key, params)
        sign = jnp.where(state.side == 1, 1.0, -1.0)
        return obs, new, (sign * action[0]).astype(jnp.float32), jnp.bool_(True), {}

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)


class SmallImageBoxEnv(PixelSideBoxEnv):
    """The same task on MinAtar-sized 10 x 10 float frames."""

    def _frame(self, side):
        column = jnp.arange(10)[None, :, None]
        return jnp.where((column < 5) == (side == 0), 1.0, 0.0) * jnp.ones((10, 1, 1), jnp.float32)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (10, 10, 1), jnp.float32)


SAC = sac.SACConfig(num_envs=4, total_timesteps=400, buffer_size=1000, batch_size=32, learning_starts=25,
                    log_interval=10, hidden_sizes=(32,))
TD3 = td3.TD3Config(num_envs=4, total_timesteps=400, buffer_size=1000, batch_size=32, learning_starts=25,
                    log_interval=10, hidden_sizes=(32,))


def _networks(algo):
    return algo.actor, algo.critic


@pytest.mark.parametrize("make, config", [(sac.make_sac, SAC), (td3.make_td3, TD3)], ids=["sac", "td3"])
def test_the_network_name_chooses_the_torso_of_actor_and_critics(make, config):
    """auto: the Nature torso for a 36 x 36 pixel image, x / 255; the flattened MLP for a 10 x 10 one and for
    Pendulum's vector; cnn: MinAtar's one convolution on the small image; mlp: the image flattened."""
    for network, env, torso in (("auto", PixelSideBoxEnv(), NATURE_PIXELS),
                                ("cnn", PixelSideBoxEnv(), NATURE_PIXELS),
                                ("mlp", PixelSideBoxEnv(), None),
                                ("auto", SmallImageBoxEnv(), None),
                                ("cnn", SmallImageBoxEnv(), CNNTorso(nature=False, pixels=False, kernel_size=3))):
        actor, critic = _networks(make(dataclasses.replace(config, network=network), env=env))
        assert actor.torso == critic.torso == torso, (network, type(env).__name__)
        assert runner.network_name(actor) == {None: "mlp", NATURE_PIXELS: "nature-cnn"}.get(torso, "cnn")
    actor, critic = _networks(make(dataclasses.replace(config, env_id="Pendulum-v1")))
    assert actor.torso is critic.torso is None
    with pytest.raises(ValueError, match=r"network='cnn' needs an image observation \[H, W, C\]"):
        make(dataclasses.replace(config, env_id="Pendulum-v1", network="cnn"))
    with pytest.raises(ValueError, match=r"network must be one of 'auto', 'mlp', 'cnn', got 'gru'"):
        dataclasses.replace(config, network="gru")
    with pytest.raises(ValueError, match=r"^network: a module of your own is given, and config.network='mlp'"):
        make(dataclasses.replace(config, network="mlp"), env=PixelSideBoxEnv(), network=_networks(make(config)))


def test_the_command_line_takes_hidden_sizes_with_their_torso():
    """SAC's and TD3's torso feeds their hidden layers, so `--network cnn --hidden-sizes 64` is read (DQN's CNN has
    fixed layers, and refuses it)."""
    from jaxrl_rollout import cli
    from jaxrl_rollout.algorithms import dqn

    for config in (dataclasses.replace(SAC, network="cnn"), dataclasses.replace(TD3, network="cnn")):
        cli._check_options_are_read({"hidden_sizes": (64,)}, config)
    with pytest.raises(ValueError, match=r"^--hidden-sizes 64: the CNN encoder \(--network cnn\) has fixed layers"):
        cli._check_options_are_read({"hidden_sizes": (64,)}, dqn.DQNConfig(network="cnn"))


def test_a_run_saved_before_the_field_keeps_its_flattened_networks():
    """A SAC or TD3 config.json without `network` (every run saved before it) reads as network="mlp", the networks
    it trained (on an image, "auto" would now build other params and the run could not resume); one that names
    its network keeps it."""
    for algo, config, hparams in (("sac", SAC, sac.SACHParams()), ("td3", TD3, td3.TD3HParams())):
        saved = runner.RunSpec(algo, config, (hparams,), 1, 0, 1, None).to_json()
        assert saved["config"].pop("network") == "auto"
        assert runner.RunSpec.from_json(saved).config.network == "mlp"
        saved["config"]["network"] = "auto"
        assert runner.RunSpec.from_json(saved).config.network == "auto"


def _returns(make_train, config, hparams):
    _, metrics = jax.jit(make_train(config, env=PixelSideBoxEnv()))(jax.random.key(0), hparams)
    return np.asarray(metrics.episode_return)


def test_sac_and_td3_learn_a_pixel_task_through_the_chosen_nature_torso():
    """Both near the pixel task's best return, 1, through the torso `auto` chose, from about 0 (100 iterations of 4
    envs; both passed these bounds in each of seeds 0 to 3: TD3's last three rows 0.95 to 0.97, SAC's 0.75 to
    0.86). SAC with a fixed small temperature: its learned one keeps the policy wide this early."""
    returns = _returns(td3.make_train, TD3, td3.TD3HParams(lr=1e-3))
    assert returns[:1].mean() < 0.3 and returns[-3:].mean() > 0.9, returns
    returns = _returns(sac.make_train, dataclasses.replace(SAC, autotune=False),
                       sac.SACHParams(q_lr=1e-3, policy_lr=1e-3, alpha=0.02))
    assert returns[:2].mean() < 0.3 and returns[-3:].mean() > 0.7, returns


def _torch_conv(kernel):
    """A flax HWIO conv kernel as torch's OIHW weight."""
    return np.transpose(np.asarray(kernel), (3, 2, 0, 1))


def _sb3_torso(params: dict, side: int) -> dict:
    """SB3 `NatureCNN` weights from `networks.cnn_torso`'s params: the convolutions transposed, and the dense
    layer's input rows reordered from the channels-last flatten [h, w, c] to torch's [c, h, w]."""
    out = {}
    for i, name in enumerate(("cnn.0", "cnn.2", "cnn.4")):
        out[f"{name}.weight"] = _torch_conv(params[f"conv_{i}"]["kernel"])
        out[f"{name}.bias"] = np.asarray(params[f"conv_{i}"]["bias"])
    kernel = np.asarray(params["dense"]["kernel"])  # [side * side * 64, 512]
    out["linear.0.weight"] = kernel.reshape(side, side, 64, -1).transpose(3, 2, 0, 1).reshape(kernel.shape[1], -1)
    out["linear.0.bias"] = np.asarray(params["dense"]["bias"])
    return out


def _linear(params: dict, name: str) -> dict:
    return {"weight": np.asarray(params[name]["kernel"]).T, "bias": np.asarray(params[name]["bias"])}


def _load(module, prefix: str, weights: dict) -> None:
    import torch

    state = module.state_dict()
    for name, value in weights.items():
        key = f"{prefix}{name}"
        assert key in state and tuple(state[key].shape) == value.shape, (key, value.shape)
        state[key] = torch.tensor(np.array(value))
    module.load_state_dict(state)


@requires_sb3
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_the_image_networks_equal_sb3s_cnn_policy(algo):
    """SB3 2.9.2's SAC and TD3 `CnnPolicy` (NatureCNN, no shared extractor, net_arch 256-256) given this library's
    initial weights compute the same actor outputs and Q-values on 44 x 44 x 3 frames (2 x 2 after the last
    convolution, so the flatten order matters) and random actions: max abs error 1e-5. SAC's log_std is compared
    before its bound (SB3 clamps it to [-20, 2], CleanRL squashes it into [-5, 2]); each twin critic here has its
    own torso, SB3's two Q heads share one, so the critic is compared with SB3's first Q head."""
    import gymnasium
    import torch

    side, A, B = 44, 2, 6
    frames = np.random.default_rng(0).integers(0, 256, (B, side, side, 3), dtype=np.uint8)
    actions = np.random.default_rng(1).uniform(-1, 1, (B, A)).astype(np.float32)
    torso = CNNTorso(nature=True, pixels=True)
    if algo == "sac":
        from stable_baselines3.sac.policies import CnnPolicy
        actor = sac.SACActor(A, (256, 256), 0, torso)
    else:
        from stable_baselines3.td3.policies import CnnPolicy
        actor = td3.TD3Actor(A, (1.0,) * A, (0.0,) * A, (256, 256), 0, torso)
    critic = _common.ObsActionCritic((256, 256), 0, torso)
    obs = jnp.asarray(frames)
    actor_params = actor.init(jax.random.key(0), obs)["params"]
    critic_params = critic.init(jax.random.key(1), obs, jnp.asarray(actions))["params"]

    policy = CnnPolicy(gymnasium.spaces.Box(0, 255, (3, side, side), np.uint8),
                       gymnasium.spaces.Box(-1, 1, (A,), np.float32), lambda _: 3e-4, net_arch=[256, 256])
    final = 2  # 44 -> 10 -> 4 -> 2
    _load(policy.actor, "features_extractor.", _sb3_torso(actor_params, final))
    if algo == "sac":
        heads = {"latent_pi.0": "Dense_0", "latent_pi.2": "Dense_1", "mu": "Dense_2", "log_std": "Dense_3"}
    else:
        heads = {"mu.0": "Dense_0", "mu.2": "Dense_1", "mu.4": "Dense_2"}
    _load(policy.actor, "", {f"{t}.{k}": v for t, f in heads.items() for k, v in _linear(actor_params, f).items()})
    _load(policy.critic, "features_extractor.", _sb3_torso(critic_params, final))
    _load(policy.critic, "", {f"qf0.{t}.{k}": v for t, f in (("0", "Dense_0"), ("2", "Dense_1"), ("4", "Dense_2"))
                              for k, v in _linear(critic_params, f).items()})

    torch_obs = torch.as_tensor(np.transpose(frames, (0, 3, 1, 2)))  # SB3 reads images channels first
    with torch.no_grad():
        features = policy.actor.extract_features(torch_obs, policy.actor.features_extractor)
        if algo == "sac":
            latent = policy.actor.latent_pi(features)
            want = [policy.actor.mu(latent), policy.actor.log_std(latent)]
        else:
            want = [policy.actor(torch_obs)]
        q_features = policy.critic.extract_features(torch_obs, policy.critic.features_extractor)
        want_q = policy.critic.q_networks[0](torch.cat([q_features, torch.as_tensor(actions)], dim=1))[:, 0]

    got = actor.apply({"params": actor_params}, obs)
    if algo == "sac":  # the library's bound of log_std (CleanRL's squash into [-5, 2]) applied to SB3's raw value
        got, want = list(got), [want[0], acl.tanh_squash_log_std(jnp.asarray(want[1].numpy()))]
    else:
        got = [got]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-5)
    q = critic.apply({"params": critic_params}, obs, jnp.asarray(actions))
    np.testing.assert_allclose(np.asarray(q), want_q.numpy(), rtol=0, atol=1e-5)
