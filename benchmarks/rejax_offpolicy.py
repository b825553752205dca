"""Times rejax 0.1.3's DQN, PQN, SAC or TD3 on the config `SPECS` gives it: compile, then two runs, N vmapped seeds.

Runs in an interpreter that has rejax 0.1.3 (e.g. `/tmp/rejax_venv`, made
with `python3.11 -m venv /tmp/rejax_venv && /tmp/rejax_venv/bin/pip install
rejax==0.1.3`), not in this project's: `benchmarks.vs_rejax_offpolicy` starts
it. rejax expects gymnax's five-value `step`; `rejax_ppo.FiveValueStep` folds
`terminated | truncated` into one `done`, the only change to the env.

The training function is rejax's own `ALGO.train`, evaluation off: no initial
evaluation, one evaluation "period" of the whole run (`eval_freq =
total_timesteps`) and an empty callback. How each `SPECS` entry maps onto
rejax's options, and what cannot be matched, is in
`benchmarks/vs_rejax_offpolicy.py`'s docstring.

`SPECS` is plain data (no imports), so our side (`vs_rejax_offpolicy`) builds
its configs from the same numbers.

Usage:
  python rejax_offpolicy.py ALGO SEEDS [TOTAL_STEPS]
      prints: compile=Xs run1=Ys run2=Zs mean_final_return=nan cpu_compile=Cs cpu_run2=Rs
      (the anchor's line, no return measured, then the CPU seconds of the compile and of run 2: `timed`)
  python rejax_offpolicy.py ALGO --memory BUDGET_GIB [START]
      prints one JSON line: the most vmapped seeds whose compiled program fits the budget (`max_seeds`)
"""

import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository, for benchmarks

# Every number below is in env steps unless it says otherwise. `grad_steps_per_iteration`
# gradient steps (of each network) follow every vector step of `num_envs` envs.
SPECS = {
    "dqn": dict(env="CartPole-v1", total_steps=100_000, num_envs=10, buffer_size=10_000, batch_size=128,
                learning_starts=10_000, hidden=(64, 64), lr=2.5e-4, gamma=0.99, target_every=500,
                eps_start=1.0, eps_end=0.05, exploration_fraction=0.5, grad_steps_per_iteration=1),
    "pqn": dict(env="CartPole-v1", total_steps=262_144, num_envs=32, num_steps=64, num_epochs=4,
                num_minibatches=16, hidden=(64, 64), lr=1e-4, gamma=0.99, td_lambda=0.95, max_grad_norm=10.0,
                eps_start=1.0, eps_end=0.05, exploration_fraction=0.2),
    "sac": dict(env="Pendulum-v1", total_steps=5_000, num_envs=1, buffer_size=5_000, batch_size=256,
                learning_starts=1_000, hidden=(64, 64), lr=3e-4, gamma=0.99, tau=0.005, grad_steps_per_iteration=1),
    "td3": dict(env="Pendulum-v1", total_steps=5_000, num_envs=1, buffer_size=5_000, batch_size=256,
                learning_starts=1_000, hidden=(64, 64), lr=3e-4, gamma=0.99, tau=0.005, policy_delay=2,
                exploration_noise=0.2, target_noise=0.4, target_noise_clip=1.0, grad_steps_per_iteration=1),
}
"""The shared config of each comparison (TD3's noises are absolute, in action units: Pendulum's scale is 2)."""


def make_algo(name: str, total_steps: int | None = None):
    """rejax's algorithm object for `SPECS[name]` (with `total_steps` in place of the spec's, if given)."""
    import gymnax
    import rejax

    from benchmarks.rejax_ppo import FiveValueStep

    s = dict(SPECS[name])
    steps = total_steps or s["total_steps"]
    env, env_params = gymnax.make(s["env"])
    common = dict(env=FiveValueStep(env), env_params=env_params, total_timesteps=steps, eval_freq=steps,
                  skip_initial_evaluation=True, learning_rate=s["lr"], gamma=s["gamma"], num_envs=s["num_envs"])
    if name == "dqn":
        algo = rejax.DQN.create(
            **common, buffer_size=s["buffer_size"], batch_size=s["batch_size"], fill_buffer=s["learning_starts"],
            num_epochs=s["grad_steps_per_iteration"], ddqn=False, polyak=0.0, target_update_freq=s["target_every"],
            eps_start=s["eps_start"], eps_end=s["eps_end"], exploration_fraction=s["exploration_fraction"],
            agent_kwargs={"activation": "relu"})
    elif name == "pqn":
        algo = rejax.PQN.create(
            **common, num_steps=s["num_steps"], num_epochs=s["num_epochs"], num_minibatches=s["num_minibatches"],
            td_lambda=s["td_lambda"], max_grad_norm=s["max_grad_norm"], eps_start=s["eps_start"],
            eps_end=s["eps_end"], exploration_fraction=s["exploration_fraction"])
    elif name == "sac":
        algo = rejax.SAC.create(
            **common, buffer_size=s["buffer_size"], batch_size=s["batch_size"], fill_buffer=s["learning_starts"],
            num_epochs=s["grad_steps_per_iteration"], polyak=1.0 - s["tau"], target_update_freq=1,
            hidden_layer_sizes=s["hidden"], agent_kwargs={"activation": "relu"})
    elif name == "td3":
        algo = rejax.TD3.create(
            **common, buffer_size=s["buffer_size"], batch_size=s["batch_size"], fill_buffer=s["learning_starts"],
            num_epochs=s["grad_steps_per_iteration"], polyak=1.0 - s["tau"], target_update_freq=1,
            policy_delay=s["policy_delay"], exploration_noise=s["exploration_noise"],
            target_noise=s["target_noise"], target_noise_clip=s["target_noise_clip"],
            actor_kwargs={"activation": "relu"}, critic_kwargs={"activation": "relu"})
    else:
        raise SystemExit(f"rejax_offpolicy.py: ALGO must be one of {sorted(SPECS)}, got {name!r}")
    check_network(name, algo, s["hidden"])
    return algo.replace(eval_callback=lambda algo, ts, rng: ())


def check_network(name: str, algo, hidden: tuple) -> None:
    """Fails unless rejax's networks have the spec's hidden sizes (rejax fixes some of them at (64, 64))."""
    modules = [algo.agent] if name in ("dqn", "pqn") else [algo.actor, algo.critic]
    for m in modules:
        if tuple(m.hidden_layer_sizes) != tuple(hidden):
            raise SystemExit(f"rejax {name}: {type(m).__name__} has hidden sizes {m.hidden_layer_sizes}, "
                             f"the spec {hidden}")


def max_seeds(train, budget_bytes: float, start: int = 256, precision: float = 0.02) -> dict:
    """The most vmapped seeds of `train` whose compiled program fits `budget_bytes` (`benchmarks.seed_memory`'s method).

    XLA's `memory_analysis()` of `jax.jit(jax.vmap(train))` for S keys gives
    arguments + outputs + temporaries - aliased bytes (compile only, nothing
    runs); on the CPU, where the program shares the host's memory, the
    process's peak resident set after compiling one seed (Python, XLA, the
    libraries) is added. On an accelerator the budget is the device's memory
    and the program's bytes are counted alone (the resident set, host memory,
    is still reported). A probe at 1 seed and one at `start`, then probes
    aimed where the straight line through the last two meets the budget,
    until the largest seeds that fit and the smallest that do not are within
    `precision` (2%) of each other. Each probe is one compile (seconds on a
    GPU); the footprint is close to linear in the seeds, so about four do.
    """
    import jax

    from benchmarks import _common

    def footprint(seeds: int) -> dict:
        keys = jax.random.split(jax.random.PRNGKey(30), seeds)
        m = jax.jit(jax.vmap(train)).lower(keys).compile().memory_analysis()
        total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
        return {"seeds": seeds, "outputs": m.output_size_in_bytes, "temporaries": m.temp_size_in_bytes,
                "total": total}

    one = footprint(1)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    host = rss if jax.default_backend() == "cpu" else 0
    return dict(_common.search_seeds(footprint, budget_bytes - host, start, precision, one), process_rss_bytes=rss)


def timed(train, num_seeds: int, place=None) -> str:
    """`_common.anchor_protocol`'s measurement of `train`, as the anchor's line plus CPU seconds.

    The same steps (`jax.jit(train)`, or `jax.jit(jax.vmap(train))` on S keys
    of `PRNGKey(30)`, laid out by `place` first if given, as
    `jaxrl_rollout.devices.shard_runs`; lower + compile; two blocked calls),
    each also timed in user + system CPU seconds of this process: the suffix
    ` cpu_compile=Xs cpu_run2=Ys`. On a host shared with other work, wall time
    mostly measures the others; CPU time much less so.

    Python's garbage collector is timed too (`gc.callbacks`): the suffix
    ` gc_compile=Xs gc_full_compile=N` is the collector's seconds within the
    lower + compile and how many of its collections there were full ones
    (generation 2). A full collection walks every object the process holds
    (~130 ms here after jax's imports) and fires when the allocation counters
    say so, which depends on everything the process did before: one side of a
    comparison can pay one inside its compile and the other not.
    """
    import gc
    import time

    import jax

    from benchmarks import _common

    def cpu():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    fn = jax.jit(jax.vmap(train)) if num_seeds > 1 else jax.jit(train)
    arg = jax.random.split(jax.random.PRNGKey(30), num_seeds) if num_seeds > 1 else jax.random.PRNGKey(30)
    if place is not None:
        arg = place(arg)
    collector = {"s": 0.0, "full": 0, "start": 0.0}

    def on_gc(phase, info):
        if phase == "start":
            collector["start"] = time.perf_counter()
        else:
            collector["s"] += time.perf_counter() - collector["start"]
            collector["full"] += info["generation"] == 2

    gc.callbacks.append(on_gc)
    c0, t0 = cpu(), time.time()
    compiled = fn.lower(arg).compile()
    c1, t1 = cpu(), time.time()
    gc.callbacks.remove(on_gc)
    jax.block_until_ready(compiled(arg))
    c2, t2 = cpu(), time.time()
    jax.block_until_ready(compiled(arg))
    c3, t3 = cpu(), time.time()
    return (_common.anchor_line(t1 - t0, t2 - t1, t3 - t2, float("nan"))
            + f" cpu_compile={c1 - c0:.2f}s cpu_run2={c3 - c2:.3f}s"
            + f" gc_compile={collector['s']:.3f}s gc_full_compile={collector['full']}")


def main(argv: list[str]) -> None:
    name = argv[0]
    if len(argv) > 1 and argv[1] == "--memory":
        algo = make_algo(name)
        record = max_seeds(lambda key: algo.train(key)[0], float(argv[2]) * 1024**3,
                           int(argv[3]) if len(argv) > 3 else 256, float(argv[4]) if len(argv) > 4 else 0.02)
        print(json.dumps(dict(record, side="rejax", algo=name)))
        return
    seeds = int(argv[1]) if len(argv) > 1 else 1
    algo = make_algo(name, int(argv[2]) if len(argv) > 2 else None)
    print(timed(lambda key: algo.train(key)[0], seeds))


if __name__ == "__main__":
    if not sys.argv[1:] or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if sys.argv[1:] else 2)
    import importlib.util

    if importlib.util.find_spec("rejax") is None:
        sys.exit(f"rejax_offpolicy.py: needs rejax 0.1.3, which is not installed for {sys.executable} (pip install "
                 "rejax==0.1.3 pyyaml there).")
    main(sys.argv[1:])
