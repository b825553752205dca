"""PyTorch recipes as pure JAX: one module per reference, same arguments, same numbers.

- `compat.cleanrl`: CleanRL ppo.py's GAE (start flags, truncation as termination).
- `compat.sb3`: Stable-Baselines3's `compute_returns_and_advantage` and its
  time-limit bootstrap.
- `compat.arena`: ARENA's PPO `compute_advantages`, minibatch indices,
  `play_step` storage and `get_minibatches`.
- `compat.a2c`: baselines' `discount_with_dones`, the A2C runner's n-step
  returns and its loss terms.
- `compat.torch_ac`: torch-ac's `collect_experiences` and episode logs.
- `compat.ilpyt`: ilpyt's `Runner.generate_batch`, `generate_episodes` and
  `get_episode_rewards`.
- `compat.rlplay`: rlplay's (1 + T) x B fragments, sticky and non-sticky, and
  `evaluate`.

docs/semantics.md states each convention (§3 to §6 and §15); tests/golden/
proves the numbers.
Import the module you need: `from jaxrl_rollout.compat import cleanrl`.
"""
