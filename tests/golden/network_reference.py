"""PyTorch reference for `jaxrl_rollout.networks.ActorCriticMLP` and `distributions.DiagGaussian`.

The actor-critic is CleanRL's `Agent` (`ppo.py` for discrete actions,
`ppo_continuous_action.py` for continuous ones), generalised to the same
options as the flax module:

* `layer_init`: orthogonal weight with gain sqrt(2) on hidden layers, 0.01 on
  the actor head, 1.0 on the critic head, zero biases (docs/semantics.md §12).
* Separate actor and critic trunks (Linear-act-Linear-act), or one shared
  trunk read by both heads.
* Discrete: `Categorical(logits=actor(x))`. Continuous: a state-independent
  `actor_logstd = nn.Parameter(torch.zeros(1, A))`, expanded to the mean,
  `Normal(mean, exp(logstd))`, with log_prob and entropy summed over the
  action dimension (`.sum(1)`).

Inputs and outputs are NumPy float32 arrays; weights are the torch
`state_dict` (Linear weight (out, in)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Normal

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}

# name -> constructor arguments; obs_dim is the observation width.
CONFIGS = {
    "discrete_tanh": dict(obs_dim=4, action_dim=2, continuous=False, hidden_sizes=(64, 64),
                          activation="tanh", shared_trunk=False),
    "continuous_tanh": dict(obs_dim=5, action_dim=3, continuous=True, hidden_sizes=(64, 64),
                            activation="tanh", shared_trunk=False),
    "discrete_relu_shared": dict(obs_dim=6, action_dim=4, continuous=False, hidden_sizes=(32, 16),
                                 activation="relu", shared_trunk=True),
    "continuous_relu_shared": dict(obs_dim=3, action_dim=2, continuous=True, hidden_sizes=(64,),
                                   activation="relu", shared_trunk=True),
}


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """CleanRL's `layer_init`, verbatim."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """CleanRL `Agent` with the flax module's options.

    State-dict names: `{actor,critic,shared}_trunk.{2i}.{weight,bias}` for
    hidden layer i, `actor_head.*`, `critic_head.*` and `actor_logstd` [1, A].
    """

    def __init__(self, obs_dim: int, action_dim: int, continuous: bool,
                 hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh",
                 shared_trunk: bool = False) -> None:
        super().__init__()
        self.continuous = continuous
        self.shared = shared_trunk

        def trunk() -> nn.Sequential:
            layers: list[nn.Module] = []
            width = obs_dim
            for size in hidden_sizes:
                layers += [layer_init(nn.Linear(width, size)), ACTIVATIONS[activation]()]
                width = size
            return nn.Sequential(*layers)

        width = hidden_sizes[-1] if hidden_sizes else obs_dim
        if shared_trunk:
            self.shared_trunk = trunk()
        else:
            self.actor_trunk = trunk()
            self.critic_trunk = trunk()
        self.actor_head = layer_init(nn.Linear(width, action_dim), std=0.01)
        self.critic_head = layer_init(nn.Linear(width, 1), std=1.0)
        if continuous:
            self.actor_logstd = nn.Parameter(torch.zeros(1, action_dim))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits or action mean [B, A], value [B])."""
        if self.shared:
            h = self.shared_trunk(x)
            return self.actor_head(h), self.critic_head(h).squeeze(-1)
        return self.actor_head(self.actor_trunk(x)), self.critic_head(self.critic_trunk(x)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor):
        """CleanRL's `get_action_and_value` with a given action: (dist, log_prob, entropy, value)."""
        head, value = self(x)
        if self.continuous:
            action_logstd = self.actor_logstd.expand_as(head)
            probs = Normal(head, torch.exp(action_logstd))
            return probs, probs.log_prob(action).sum(1), probs.entropy().sum(1), value
        probs = Categorical(logits=head)
        return probs, probs.log_prob(action), probs.entropy(), value


def weights(agent: Agent) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().astype(np.float32).copy() for k, v in agent.state_dict().items()}


def build_agent(config: dict, state_dict: dict[str, np.ndarray] | None = None) -> Agent:
    agent = Agent(**config)
    if state_dict is not None:
        agent.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in state_dict.items()})
    return agent


def evaluate(agent: Agent, obs: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
    """Network outputs, log-probs of `actions` and entropies, as NumPy float32."""
    with torch.no_grad():
        dist, log_prob, entropy, value = agent.get_action_and_value(
            torch.as_tensor(obs), torch.as_tensor(actions)
        )
    out = {"value": value, "log_prob": log_prob, "entropy": entropy}
    if agent.continuous:
        out.update(mean=dist.loc, std=dist.scale)
    else:
        out.update(logits=dist.logits, probs=dist.probs)
    return {k: v.numpy().astype(np.float32) for k, v in out.items()}


def normal(mean: np.ndarray, log_std: np.ndarray, x: np.ndarray) -> dict[str, np.ndarray]:
    """torch `Normal(mean, exp(log_std))` log_prob(x) and entropy, summed over the last axis."""
    mean_t, log_std_t = torch.as_tensor(mean), torch.as_tensor(log_std)
    dist = Normal(mean_t, torch.exp(log_std_t).expand_as(mean_t))
    return {
        "log_prob": dist.log_prob(torch.as_tensor(x)).sum(-1).numpy(),
        "entropy": dist.entropy().sum(-1).numpy(),
    }


def _perturb(agent: Agent, generator: torch.Generator) -> None:
    """Moves every parameter off its init so logits, means and values are O(1)."""
    with torch.no_grad():
        for name, p in agent.named_parameters():
            if name == "actor_logstd":
                p.copy_(torch.empty_like(p).uniform_(-2.0, 1.0, generator=generator))
            else:
                p.add_(0.5 * torch.randn(p.shape, generator=generator))


def mlp_cases(seed: int = 0, batch_size: int = 32) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """{"<config>/<init|perturbed>": {"in": {...}, "out": {...}}} for every config."""
    result = {}
    for i, (name, config) in enumerate(sorted(CONFIGS.items())):
        for variant in ("init", "perturbed"):
            torch.manual_seed(seed + 100 * i)
            agent = build_agent(config)
            generator = torch.Generator().manual_seed(seed + 100 * i + 1)
            if variant == "perturbed":
                _perturb(agent, generator)
            obs = (2.0 * torch.randn(batch_size, config["obs_dim"], generator=generator)).numpy()
            if config["continuous"]:
                actions = (1.5 * torch.randn(batch_size, config["action_dim"], generator=generator)).numpy()
            else:
                actions = torch.randint(config["action_dim"], (batch_size,), generator=generator).numpy()
            inputs = {
                "obs": obs.astype(np.float32),
                "actions": actions.astype(np.float32 if config["continuous"] else np.int32),
                "action_dim": np.int32(config["action_dim"]),
                "continuous": np.bool_(config["continuous"]),
                "hidden_sizes": np.asarray(config["hidden_sizes"], np.int32),
                "activation": np.array(config["activation"]),
                "shared_trunk": np.bool_(config["shared_trunk"]),
            }
            inputs.update({f"weights/{k}": v for k, v in weights(agent).items()})
            result[f"{name}/{variant}"] = {"in": inputs, "out": evaluate(agent, obs, actions)}
    return result


def normal_cases(seed: int = 0) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Random means, log-stds and points for `Normal`, including float32 edge cases."""
    rng = np.random.default_rng(seed)
    f32 = np.float32

    def case(mean, log_std, x):
        mean, log_std, x = (np.asarray(a, f32) for a in (mean, log_std, x))
        return {"in": {"mean": mean, "log_std": log_std, "x": x}, "out": normal(mean, log_std, x)}

    n = 64
    mean = rng.normal(0, 2, (n, 3))
    log_std = rng.uniform(-3, 1, (n, 3))
    cases = {"moderate": case(mean, log_std, mean + np.exp(log_std) * rng.normal(0, 2, (n, 3)))}
    mean = rng.normal(0, 1, (n, 1))
    cases["pendulum"] = case(mean, rng.uniform(-1, 0.5, (n, 1)), rng.uniform(-2, 2, (n, 1)))
    # A state-independent log_std [A] broadcast over the batch (CleanRL's expand_as).
    mean = rng.normal(0, 1, (n, 4))
    cases["broadcast"] = case(mean, rng.uniform(-1, 1, (4,)), mean + rng.normal(0, 1, (n, 4)))
    # Edge cases: tiny scales with far points (huge quadratic terms), points at
    # the mean, and huge scales (log sigma > 44) where torch's sigma^2
    # overflows to inf and the quadratic term vanishes (a log(2 pi sigma^2)
    # grouping, as in jax.scipy.stats.norm.logpdf, gives -inf there).
    mean = rng.normal(0, 1, (n, 2))
    log_std = np.concatenate(
        [rng.uniform(-15, -8, (n // 4, 2)), rng.uniform(-2, 2, (n // 4, 2)),
         rng.uniform(8, 30, (n // 4, 2)), rng.uniform(45, 60, (n // 4, 2))]
    )
    x = mean + rng.normal(0, 1, (n, 2))
    x[n // 4: n // 2] = mean[n // 4: n // 2]
    cases["extreme"] = case(mean, log_std, x)
    return cases
