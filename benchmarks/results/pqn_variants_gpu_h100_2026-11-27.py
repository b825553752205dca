# As run on the H100 on 2026-11-27 (09:21 UTC), against commit 5cf9599's code: `python .bench/pqn_ab.py 5` (the
# folder .bench is git-ignored; this copy is the record). Its source patches match 5cf9599's pqn.py only.
"""In-process A/B of PQN variants on one device, rejax's PQN alongside: python .bench/pqn_ab.py [ROUNDS] [STEPS]

Variants (patched in; none is the committed code except `base`):
  base     the committed code
  stacked  optim.clip_grad_norm's per-leaf squared norms as one row reduction over the leaves padded and stacked
  carry    per-step loss / q_mean / grad_norm summed in the scan carry instead of stacked as scan outputs
  flat     Adam on the flattened gradient (optax.flatten around the inner optimiser; elementwise, the same numbers)
  unroll2  the minibatch scan unrolled by 2
  a+b      both patches; nometric: no per-step metrics at all (diagnostic: the metrics' whole cost)
Optional 3rd argument: a comma list of variants to run.
Per variant and seed count: compile s, launches (benchmarks.hlo_launches.count of the compiled text), then
ROUNDS alternated timed calls; prints medians and the ratio to rejax's median of the same rounds."""
import os, sys, time, types, statistics, json
sys.path.insert(0, os.getcwd())
import jax, jax.numpy as jnp
from jaxrl_rollout import optim
from jaxrl_rollout.algorithms import pqn as pqn_mod
from benchmarks import hlo_launches

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else None
ONLY = sys.argv[3].split(",") if len(sys.argv) > 3 else None
SEEDS = [int(s) for s in os.environ.get("AB_SEEDS", "1,8").split(",")]

_orig_clip = optim.clip_grad_norm

def stacked_clip(grads, max_norm):
    leaves = jax.tree.leaves(grads)
    flat = [jnp.ravel(jnp.asarray(g, jnp.float32)) for g in leaves]
    width = max(f.shape[0] for f in flat)
    rows = jnp.stack([jnp.pad(f, (0, width - f.shape[0])) for f in flat])
    leaf_norms = jnp.sqrt(jnp.sum(jnp.square(rows), axis=1))
    total = jnp.sqrt(jnp.sum(jnp.square(leaf_norms)))
    coef = jnp.minimum(jnp.reciprocal(total + 1e-6) * jnp.asarray(max_norm, jnp.float32), 1.0)
    return jax.tree.map(lambda g: (jnp.asarray(g, jnp.float32) * coef).astype(jnp.result_type(g)), grads), total

SRC = open(pqn_mod.__file__).read()
OLD_STEP = '''            parts = dict(loss=loss, q_mean=jnp.mean(chosen), grad_norm=_common.grad_norm(opt_state, grads))
            return (optax.apply_updates(params, updates), opt_state), parts'''
OLD_LOOP = '''        (params, opt_state), parts = jax.lax.scan(epoch, (params, opt_state), indices)
        return params, opt_state, parts'''
OLD_MB = "return jax.lax.scan(step, carry, batching.take(data, index))"
OLD_OPT = "return optax.chain(optim.clip_grad_norm_torch(hp.max_grad_norm), inner)"
for old in (OLD_STEP, OLD_LOOP, OLD_MB, OLD_OPT, "            params, opt_state = carry\n"):
    assert SRC.count(old) == 1, old
SOURCE_PATCHES = {
    "carry": [("            params, opt_state = carry\n", "            params, opt_state, sums = carry\n"),
              (OLD_STEP, '''            sums = (sums[0] + loss, sums[1] + jnp.mean(chosen), sums[2] + _common.grad_norm(opt_state, grads))
            return (optax.apply_updates(params, updates), opt_state, sums), None'''),
              (OLD_LOOP, '''        z = jnp.zeros([], jnp.float32)
        (params, opt_state, sums), _ = jax.lax.scan(epoch, (params, opt_state, (z, z, z)), indices)
        n = indices.shape[0] * indices.shape[1]
        parts = dict(loss=sums[0] / n, q_mean=sums[1] / n, grad_norm=sums[2] / n)
        return params, opt_state, parts''')],
    "nometric": [(OLD_STEP, "            return (optax.apply_updates(params, updates), opt_state), None"),
                 (OLD_LOOP, '''        (params, opt_state), _ = jax.lax.scan(epoch, (params, opt_state), indices)
        z = jnp.zeros([], jnp.float32)
        return params, opt_state, dict(loss=z, q_mean=z, grad_norm=z)''')],
    "flat": [(OLD_OPT, "return optax.chain(optim.clip_grad_norm_torch(hp.max_grad_norm), optax.flatten(inner))")],
    "unroll2": [(OLD_MB, OLD_MB[:-1] + ", unroll=2)")],
}

def module_from(src, name):
    m = types.ModuleType(name); m.__file__ = pqn_mod.__file__; sys.modules[name] = m
    exec(compile(src, pqn_mod.__file__, "exec"), m.__dict__)
    return m

def ours(variant):
    import benchmarks.vs_rejax_offpolicy as v
    import jaxrl_rollout.algorithms as algs
    parts = variant.split("+")
    optim.clip_grad_norm = stacked_clip if "stacked" in parts else _orig_clip
    src = SRC
    for part in parts:
        for old, new in SOURCE_PATCHES.get(part, []):
            assert src.count(old) == 1, (variant, old)
            src = src.replace(old, new)
    saved = algs.pqn
    if src != SRC:
        algs.pqn = module_from(src, "pqn_" + variant.replace("+", "_"))
        sys.modules["jaxrl_rollout.algorithms.pqn"] = algs.pqn
    try:
        return v.make_train("pqn", STEPS)
    finally:
        algs.pqn = saved; sys.modules["jaxrl_rollout.algorithms.pqn"] = saved

def rejax_train():
    from benchmarks.rejax_offpolicy import make_algo
    algo = make_algo("pqn", STEPS)
    return lambda key: algo.train(key)[0]

def compiled_for(make, seeds, variant):
    train = make()
    fn = jax.jit(jax.vmap(train)) if seeds > 1 else jax.jit(train)
    arg = jax.random.split(jax.random.PRNGKey(30), seeds) if seeds > 1 else jax.random.PRNGKey(30)
    t0 = time.time(); c = fn.lower(arg).compile(); ct = time.time() - t0
    optim.clip_grad_norm = _orig_clip  # the patch is read at trace time only
    launches = hlo_launches.count(c.as_text())["launches"]
    out = jax.block_until_ready(c(arg))
    return c, arg, ct, launches, out

variants = ["base", "stacked", "carry", "flat", "unroll2", "stacked+carry", "stacked+carry+flat", "nometric"]
if ONLY: variants = [v for v in variants if v in ONLY]
print("device", jax.devices()[0], "rounds", ROUNDS, "steps", STEPS or "spec", flush=True)
results = {}
for seeds in SEEDS:
    progs = {}
    for v in variants:
        progs[v] = compiled_for(lambda: ours(v), seeds, v)
    progs["rejax"] = compiled_for(rejax_train, seeds, "rejax")
    base_params = jax.tree.leaves(progs["base"][4][0].params) if "base" in progs else None
    for v in variants:
        leaves = jax.tree.leaves(progs[v][4][0].params)
        diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(leaves, base_params)) if base_params else float("nan")
        print(f"seeds={seeds} {v:18s} compile={progs[v][2]:.2f}s launches={progs[v][3]} max|params-base|={diff:.2e}", flush=True)
    print(f"seeds={seeds} rejax              compile={progs['rejax'][2]:.2f}s launches={progs['rejax'][3]}", flush=True)
    times = {k: [] for k in progs}
    for r in range(ROUNDS):
        for k, (c, arg, *_rest) in progs.items():
            t0 = time.time(); jax.block_until_ready(c(arg)); times[k].append(time.time() - t0)
    rj = statistics.median(times["rejax"])
    for k, ts in times.items():
        med = statistics.median(ts)
        print(f"seeds={seeds} {k:18s} run median={med:.4f}s range={min(ts):.4f}-{max(ts):.4f} vs_rejax={med / rj:.3f}", flush=True)
        results[f"{k}/{seeds}"] = dict(median=med, times=ts, compile=progs[k][2], launches=progs[k][3], ratio=med / rj)
    del progs
if os.environ.get("OUT"):
    json.dump(results, open(os.path.join(os.environ["OUT"], "pqn_ab.json"), "w"), indent=1)
