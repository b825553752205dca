"""Times rejax 0.1.3's PPO on the reference CartPole-v1 config: compile, then two runs, N vmapped seeds.

Runs in an interpreter that has rejax 0.1.3 (e.g. PureJaxRL's venv, see
BENCHMARKS.md section 9), not in this project's: `benchmarks.vs_purejaxrl
--rejax` starts it. rejax expects gymnax's five-value `step`; gymnax 1.0 returns
six values, so `FiveValueStep` below folds `terminated | truncated` into one
`done`, the only change.

Config: 4 envs x 128 steps, 976 updates (499,712 steps, PureJaxRL's count),
4 epochs x 4 minibatches, lr 2.5e-4, gamma 0.99, lambda 0.95, clip 0.2, entropy
0.01, value 0.5, max grad 0.5, tanh (64, 64). rejax differs from CleanRL /
PureJaxRL where it has no option: a constant learning rate (no annealing),
element-wise gradient clipping (`optax.clip`), no value clipping. The training
function is rejax's own `PPO.train`, with evaluation turned off (no initial
evaluation, one evaluation "period" of the whole run, an empty callback); the
final return is measured after the timing, with rejax's `evaluate`.

With `pendulum` as the second argument it trains Pendulum-v1 instead, with the
config of `vs_purejaxrl.PENDULUM`: 16 envs x 128 steps, 244 updates (499,712
steps), 10 epochs x 32 minibatches, lr 3e-4 (constant: rejax has no annealing),
no entropy bonus, observation and reward normalisation, tanh (64, 64).

Usage: python rejax_ppo.py SEEDS [cartpole|pendulum]
Prints: compile=Xs run1=Ys run2=Zs mean_final_return=R (the anchor's line).
"""

import os
import sys

import jax
import jax.numpy as jnp
from gymnax.environments import environment

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository, for _common

from benchmarks import _common  # noqa: E402  (standard library only: runs in the anchor's venv)

CONFIGS = {
    "cartpole": dict(env="CartPole-v1", updates=976, num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4,
                     learning_rate=2.5e-4, ent_coef=0.01),
    "pendulum": dict(env="Pendulum-v1", updates=244, num_envs=16, num_steps=128, num_epochs=10,
                     num_minibatches=32, learning_rate=3e-4, ent_coef=0.0, normalize_observations=True,
                     normalize_rewards=True),
}


class FiveValueStep(environment.Environment):
    """A gymnax 1.0 env with the pre-1.0 `step`: (obs, state, reward, terminated | truncated, info)."""

    def __init__(self, env):
        self._env = env
        super().__init__()

    def __getattr__(self, name):
        if name == "_env":
            raise AttributeError(name)
        return getattr(self._env, name)

    @property
    def default_params(self):
        return self._env.default_params

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info

    def observation_space(self, params):
        return self._env.observation_space(params)

    def action_space(self, params):
        return self._env.action_space(params)


def make_train(config_name: str = "cartpole", updates: int | None = None):
    """(train, algo): rejax's `PPO.train` on `config_name` as `train(key) -> train state`, and the PPO object;
    `updates` replaces the config's number of updates (kernel_trace runs a few)."""
    import gymnax
    from rejax import PPO

    if config_name not in CONFIGS:
        raise SystemExit(f"rejax_ppo.py: config must be one of {sorted(CONFIGS)}, got {config_name!r}")
    config = dict(CONFIGS[config_name])
    env, env_params = gymnax.make(config.pop("env"))
    default_updates = config.pop("updates")
    steps = (default_updates if updates is None else updates) * config["num_envs"] * config["num_steps"]
    algo = PPO.create(
        env=FiveValueStep(env), env_params=env_params, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, vf_coef=0.5,
        max_grad_norm=0.5, total_timesteps=steps, eval_freq=steps, skip_initial_evaluation=True,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)}, **config,
    )
    algo = algo.replace(eval_callback=lambda algo, ts, rng: ())
    return (lambda key: algo.train(key)[0]), algo


def main(num_seeds: int, config_name: str = "cartpole") -> None:
    from rejax.evaluate import evaluate

    train, algo = make_train(config_name)
    compile_s, run1_s, run2_s, ts = _common.anchor_protocol(train, num_seeds)
    ts_list = [ts] if num_seeds == 1 else [jax.tree.map(lambda x, i=i: x[i], ts) for i in range(min(num_seeds, 8))]
    returns = [evaluate(algo.make_act(t), jax.random.PRNGKey(1), algo.env, algo.env_params, 16,
                        algo.env_params.max_steps_in_episode)[1].mean() for t in ts_list]
    final = float(jnp.mean(jnp.asarray(returns)))
    print(_common.anchor_line(compile_s, run1_s, run2_s, final))


if __name__ == "__main__":
    if sys.argv[1:2] in (["-h"], ["--help"]):
        sys.exit(print(__doc__))
    import importlib.util

    if importlib.util.find_spec("rejax") is None:
        sys.exit(f"rejax_ppo.py: needs rejax 0.1.3, which is not installed for {sys.executable} (pip install "
                 "rejax==0.1.3 pyyaml there; see BENCHMARKS.md section 9).")
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1, sys.argv[2] if len(sys.argv) > 2 else "cartpole")
