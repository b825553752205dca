"""The `jaxrl-rollout` command line (also `python -m jaxrl_rollout`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, Sequence

DEFAULT_ENV = "CartPole-v1"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def run_rollout(env_id: str, num_envs: int, num_steps: int, seed: int, num_eval: int) -> dict:
    """Rolls out a uniform random policy, then evaluates it; prints and returns the figures."""
    import jax

    import jaxrl_rollout as jr
    from jaxrl_rollout import envs

    env, env_params = envs.make(env_id)
    policy_fn = jr.uniform_random_policy(env.action_space(env_params))

    @jax.jit
    def collect(key):
        state = jr.rollout_init(key, env, env_params, num_envs)
        _, traj = jr.rollout(env, env_params, policy_fn, None, state, num_steps)
        return jr.episode_metrics(traj)

    key = jax.random.key(seed)
    start = time.perf_counter()
    compiled = collect.lower(key).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    metrics = jax.block_until_ready(compiled(key))
    run_s = time.perf_counter() - start
    result = jax.jit(lambda k: jr.evaluate(env, env_params, policy_fn, None, k, num_eval))(
        jax.random.fold_in(key, 1)
    )

    steps = num_envs * num_steps
    print(f"jaxrl_rollout: uniform random policy on {env_id}, {num_envs} envs x {num_steps} steps")
    print(f"  backend {jax.default_backend()}, compile {compile_s:.2f} s, run {run_s:.3f} s "
          f"({steps / run_s:,.0f} env steps/s)")
    n = int(metrics.num_episodes)
    if n:
        print(f"  rollout: {n} completed episodes, mean return {float(metrics.mean_return):.2f}, "
              f"mean length {float(metrics.mean_length):.1f}")
    else:
        print("  rollout: no episode completed (try more --num-steps)")
    returns = result.returns
    print(f"  evaluate: {num_eval} episodes, return mean {float(returns.mean()):.2f} "
          f"min {float(returns.min()):.1f} max {float(returns.max()):.1f}, "
          f"{int(result.completed.sum())} completed")
    return {"metrics": metrics, "eval": result, "compile_s": compile_s, "run_s": run_s}


def run_train(algo: str, env_id: str, num_seeds: int, total_steps: Optional[int], seed: int, num_eval: int) -> dict:
    """Trains `num_seeds` seeds in one vmapped, jitted call; prints and returns the figures."""
    import jax
    import numpy as np

    import jaxrl_rollout as jr
    from jaxrl_rollout.algorithms import a2c, ppo

    module, config_cls = (ppo, ppo.PPOConfig) if algo == "ppo" else (a2c, a2c.A2CConfig)
    fields = {"env_id": env_id}
    if total_steps is not None:
        fields["total_timesteps"] = total_steps
    config = config_cls(**fields)
    made = module.make_ppo(config) if algo == "ppo" else module.make_a2c(config)
    keys = jax.random.split(jax.random.key(seed), num_seeds)
    train = jax.jit(jax.vmap(made.train))
    start = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - start
    steps = config.num_updates * config.batch_size * num_seeds
    print(f"jaxrl_rollout: {algo.upper()} on {env_id}, {num_seeds} seeds x {config.num_updates * config.batch_size:,} "
          f"steps in one vmapped call (backend {jax.default_backend()})")
    print(f"  compile {compile_s:.1f} s, run {run_s:.1f} s ({steps / run_s:,.0f} env steps/s)")
    returns = np.asarray(metrics.episode_return)
    counts = np.asarray(metrics.num_episodes)
    window = max(1, config.num_updates // 10)
    curve = []
    for lo in range(0, config.num_updates, window):
        n = counts[:, lo:lo + window]
        total = np.nansum(np.nan_to_num(returns[:, lo:lo + window]) * n)
        curve.append(total / n.sum() if n.sum() else float("nan"))
    print("  mean episode return by tenth of training: " + " ".join(f"{c:.0f}" for c in curve))
    evaluate = jax.jit(jax.vmap(lambda p, k: jr.evaluate(made.env, made.env_params, made.eval_policy_fn, p, k, num_eval)))
    result = evaluate(state.params, jax.random.split(jax.random.fold_in(jax.random.key(seed), 1), num_seeds))
    per_seed = np.asarray(result.returns).mean(axis=1)
    print(f"  deterministic evaluation, {num_eval} episodes per seed: mean {per_seed.mean():.1f} "
          f"(std over seeds {per_seed.std():.1f}); per seed: " + " ".join(f"{r:.0f}" for r in per_seed))
    return {"metrics": metrics, "eval_returns": per_seed, "compile_s": compile_s, "run_s": run_s}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxrl-rollout",
        description="JAX-native RL rollouts and training on gymnax environments. "
        "With no command, trains PPO on CartPole-v1 with the default config over 8 vmapped seeds.",
    )
    sub = parser.add_subparsers(dest="command")
    train = sub.add_parser("train", help="train PPO or A2C over vmapped seeds (the default command)")
    train.add_argument("--algo", choices=("ppo", "a2c"), default="ppo", help="algorithm (default: %(default)s)")
    train.add_argument("--env", default=DEFAULT_ENV, help="gymnax env id (default: %(default)s)")
    train.add_argument("--seeds", type=_positive_int, default=8, help="seeds trained in one vmapped call (default: %(default)s)")
    train.add_argument("--total-steps", type=_positive_int, default=None,
                       help="env steps per seed (default: the config's, 500000)")
    train.add_argument("--num-eval", type=_positive_int, default=10, help="evaluation episodes per seed (default: %(default)s)")
    train.add_argument("--seed", type=int, default=0, help="PRNG seed (default: %(default)s)")
    roll = sub.add_parser("rollout", help="roll out a random policy and print episode statistics")
    roll.add_argument("--env", default=DEFAULT_ENV, help="gymnax env id (default: %(default)s)")
    roll.add_argument("--num-envs", type=_positive_int, default=8, help="parallel envs (default: %(default)s)")
    roll.add_argument("--num-steps", type=_positive_int, default=1000, help="steps per env (default: %(default)s)")
    roll.add_argument("--num-eval", type=_positive_int, default=16, help="evaluation episodes (default: %(default)s)")
    roll.add_argument("--seed", type=int, default=0, help="PRNG seed (default: %(default)s)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in {"train", "rollout", "-h", "--help"}:
        argv = ["train", *argv]  # `train` is the default command
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            run_train(args.algo, args.env, args.seeds, args.total_steps, args.seed, args.num_eval)
        else:
            run_rollout(args.env, args.num_envs, args.num_steps, args.seed, args.num_eval)
    except ValueError as error:
        print(f"jaxrl-rollout: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
