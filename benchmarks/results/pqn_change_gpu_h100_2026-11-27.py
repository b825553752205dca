# As run on the H100 on 2026-11-27 (09:30 UTC), against the working tree of that moment (eec4e64 plus the minibatch
# loop unrolled by 2 on accelerators, dropped before eec4e64); .bench/pqn_old.py was 5cf9599's pqn.py. The record.
"""In-process A/B on one device after the PQN change: python .bench/pqn_ab2.py [ROUNDS]

  new      the working tree (stacked clip off the CPU, metrics summed in the carry, minibatch loop unrolled by 2)
  unroll4  new with the minibatch loop unrolled by 4
  old      the previous commit's pqn.py (.bench/pqn_old.py) with one reduction per leaf in the clip
  rejax    rejax 0.1.3's PQN on the same spec
Compile s, launches (benchmarks.hlo_launches), ROUNDS alternated timed calls, medians and ratio to rejax."""
import os, sys, time, types, statistics, json
sys.path.insert(0, os.getcwd())
import jax, jax.numpy as jnp
from jaxrl_rollout import optim
import jaxrl_rollout.algorithms as algs
from jaxrl_rollout.algorithms import pqn as pqn_mod
from benchmarks import hlo_launches
import benchmarks.vs_rejax_offpolicy as vro

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
SEEDS = [int(s) for s in os.environ.get("AB_SEEDS", "1,8").split(",")]
_new_norms = optim._leaf_norms
def per_leaf(leaves):
    return jnp.stack([jnp.sqrt(jnp.sum(jnp.square(g))) for g in leaves])
SRC = open(pqn_mod.__file__).read()
assert SRC.count("_MINIBATCH_UNROLL = 2\n") == 1
VARIANTS = {"new": (None, _new_norms), "unroll4": (SRC.replace("_MINIBATCH_UNROLL = 2\n", "_MINIBATCH_UNROLL = 4\n"), _new_norms),
            "old": (open(".bench/pqn_old.py").read(), per_leaf)}

def module_from(src, name):
    m = types.ModuleType(name); m.__file__ = pqn_mod.__file__; sys.modules[name] = m
    exec(compile(src, pqn_mod.__file__, "exec"), m.__dict__)
    return m

def make(name):
    if name == "rejax":
        from benchmarks.rejax_offpolicy import make_algo
        algo = make_algo("pqn")
        return lambda key: algo.train(key)[0]
    src, norms = VARIANTS[name]
    optim._leaf_norms = norms
    if src is not None:
        algs.pqn = module_from(src, "pqn_" + name); sys.modules["jaxrl_rollout.algorithms.pqn"] = algs.pqn
    try:
        return vro.make_train("pqn")
    finally:
        algs.pqn = pqn_mod; sys.modules["jaxrl_rollout.algorithms.pqn"] = pqn_mod

def compiled_for(name, seeds):
    train = make(name)
    fn = jax.jit(jax.vmap(train)) if seeds > 1 else jax.jit(train)
    arg = jax.random.split(jax.random.PRNGKey(30), seeds) if seeds > 1 else jax.random.PRNGKey(30)
    t0 = time.time(); c = fn.lower(arg).compile(); ct = time.time() - t0
    optim._leaf_norms = _new_norms
    counted = hlo_launches.count(c.as_text())
    out = jax.block_until_ready(c(arg))
    return c, arg, ct, counted, out

names = ["new", "unroll4", "old", "rejax"]
print("device", jax.devices()[0], "rounds", ROUNDS, flush=True)
results = {}
for seeds in SEEDS:
    progs = {n: compiled_for(n, seeds) for n in names}
    for n, p in progs.items():
        loops = [(l["depth"], l["trips"], l["launches_per_trip"]) for l in p[3]["loops"]]
        print(f"seeds={seeds} {n:8s} compile={p[2]:.2f}s launches={p[3]['launches']} loops(depth,trips,per_trip)={loops}", flush=True)
        if n != "rejax":
            print(f"seeds={seeds} {n:8s} final q_mean/loss metric {float(jnp.mean(p[4][1].q_mean[..., -1])):.4f} {float(jnp.mean(p[4][1].loss[..., -1])):.4f}", flush=True)
    times = {k: [] for k in progs}
    for r in range(ROUNDS):
        for k, (c, arg, *_rest) in progs.items():
            t0 = time.time(); jax.block_until_ready(c(arg)); times[k].append(time.time() - t0)
    rj = statistics.median(times["rejax"])
    for k, ts in times.items():
        med = statistics.median(ts)
        print(f"seeds={seeds} {k:8s} run median={med:.4f}s range={min(ts):.4f}-{max(ts):.4f} vs_rejax={med / rj:.3f}", flush=True)
        results[f"{k}/{seeds}"] = dict(median=med, times=ts, compile=progs[k][2], launches=progs[k][3]["launches"], ratio=med / rj)
    del progs
if os.environ.get("OUT"):
    json.dump(results, open(os.path.join(os.environ["OUT"], "pqn_ab2.json"), "w"), indent=1)
