"""The `jaxrl-rollout` command line (also `python -m jaxrl_rollout`)."""

from __future__ import annotations

import argparse
import difflib
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


def make_env(env_id: str):
    """`gymnax.make(env_id)`, with a suggestion of close names for an unknown id."""
    import gymnax

    if env_id not in gymnax.registered_envs:
        close = difflib.get_close_matches(env_id, gymnax.registered_envs, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown env id {env_id!r}.{hint} Known ids: {', '.join(gymnax.registered_envs)}."
        )
    return gymnax.make(env_id)


def run_rollout(env_id: str, num_envs: int, num_steps: int, seed: int, num_eval: int) -> dict:
    """Rolls out a uniform random policy, then evaluates it; prints and returns the figures."""
    import jax

    import jaxrl_rollout as jr

    env, env_params = make_env(env_id)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxrl-rollout",
        description="JAX-native RL rollouts on gymnax environments. "
        "With no command, runs `rollout` on CartPole-v1.",
    )
    sub = parser.add_subparsers(dest="command")
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
    if not argv or argv[0] not in {"rollout", "-h", "--help"}:
        argv = ["rollout", *argv]  # `rollout` is the default command
    args = parser.parse_args(argv)
    try:
        run_rollout(args.env, args.num_envs, args.num_steps, args.seed, args.num_eval)
    except ValueError as error:
        print(f"jaxrl-rollout: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
