"""Kept as run (session 17, 2026-11-27): CPU levers tried for PQN's one-seed train, none landed.

  base      the committed code
  grouped   the clip's per-leaf norms taken per group of equal-size leaves (one row reduction per group)
  nonorm    (diagnostic) no norms at all: the clip's whole cost
  onehot    Q(s, a) selected with a where-mask instead of take_along_axis (no gather / scatter)
  both      grouped + onehot
  fastdense the Dense weight gradient as (g^T x)^T with optimization barriers, through a custom_jvp tangent
  fastvjp   the same through a custom_vjp with the transpose of g explicit
  ident     (diagnostic) no minibatch shuffle at all: the shuffle's whole cost
  oneround  the shuffle with one sort round instead of two
  rejax     rejax 0.1.3's PQN on the same spec

In-process CPU A/B of PQN variants (patched module functions) against rejax: python .bench/pqn_ab3.py ROUNDS
AB_NAMES=base,grouped,nonorm,onehot,both,rejax AB_SEEDS=1"""
import os, sys, time, statistics, json
sys.path.insert(0, os.getcwd())
import jax, jax.numpy as jnp
from jaxrl_rollout import optim
from jaxrl_rollout.algorithms import pqn as pqn_mod
from benchmarks import hlo_launches
import benchmarks.vs_rejax_offpolicy as vro

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
SEEDS = [int(s) for s in os.environ.get("AB_SEEDS", "1").split(",")]
BASE_NORMS, BASE_LOSS = optim._leaf_norms, pqn_mod.q_loss

def grouped(leaves):
    groups = {}
    for g in leaves:
        groups.setdefault(g.size, []).append(g)
    parts = []
    for size, gs in groups.items():
        if len(gs) == 1:
            parts.append(jnp.sqrt(jnp.sum(jnp.square(gs[0])))[None])
        else:
            rows = jnp.stack([jnp.ravel(g) for g in gs])
            parts.append(jnp.sqrt(jnp.sum(jnp.square(rows), axis=1)))
    return jnp.concatenate(parts)

def nonorm(leaves):
    return jnp.ones([len(leaves)], jnp.float32)

def onehot_loss(module, params, obs, action, target):
    q = module.apply(params, obs)
    mask = jnp.arange(q.shape[-1]) == action[:, None].astype(jnp.int32)
    chosen = jnp.sum(jnp.where(mask, q, 0.0), axis=-1)
    return 0.5 * jnp.mean(jnp.square(chosen - jax.lax.stop_gradient(target))), chosen

import functools, flax.linen as nn
# --- the weight gradient as (g^T x)^T behind optimization barriers (XLA's CPU dot for x^T g is the slow path) ---
from jax import lax
B = lax.optimization_barrier

@jax.custom_jvp
def mm(x, w):
    return x @ w

@mm.defjvp
def _mm_jvp(primals, tangents):
    x, w = primals
    xd, wd = tangents
    def cpu():
        return x @ B(wd.T).T
    def other():
        return x @ wd
    return x @ w, xd @ w + lax.platform_dependent(cpu=cpu, default=other)

def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    (lc, rc), (lb, rb) = dimension_numbers
    if rhs.ndim == 2 and tuple(lc) == (lhs.ndim - 1,) and tuple(rc) == (0,) and not lb and not rb and precision is None and preferred_element_type is None:
        return mm(lhs, rhs)
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision, preferred_element_type=preferred_element_type)

@jax.custom_vjp
def mm2(x, w):
    return x @ w
def _mm2_fwd(x, w):
    return x @ w, (x, w)
def _mm2_bwd(res, g):
    x, w = res
    return g @ w.T, B(B(jnp.transpose(g)) @ x).T
mm2.defvjp(_mm2_fwd, _mm2_bwd)
def dot_general2(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    (lc, rc), (lb, rb) = dimension_numbers
    if rhs.ndim == 2 and lhs.ndim == 2 and tuple(lc) == (1,) and tuple(rc) == (0,) and precision is None:
        return mm2(lhs, rhs)
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision, preferred_element_type=preferred_element_type)
fast_dg = dot_general
class _NS: pass
fastnn = _NS(); fastnn.__dict__.update({k: getattr(nn, k) for k in dir(nn) if not k.startswith("__")})
fastnn.Dense = functools.partial(nn.Dense, dot_general=fast_dg)
fastnn2 = _NS(); fastnn2.__dict__.update(fastnn.__dict__); fastnn2.Dense = functools.partial(nn.Dense, dot_general=dot_general2)
from jaxrl_rollout import batching
BASE_PERMS = batching.permutations
def ident_perms(key, num, n):
    return jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (num, n)) + (jax.random.bits(key, (), jnp.uint32) % 1).astype(jnp.int32)
def one_round(key, num, n):
    index_bits = (n - 1).bit_length(); mask = jnp.uint32((1 << index_bits) - 1)
    bits = jax.random.bits(key, (num, n), jnp.uint32) & ~mask
    return (jnp.sort(bits | jnp.arange(n, dtype=jnp.uint32), axis=-1) & mask).astype(jnp.int32)
VARIANTS = {"fastvjp": (BASE_NORMS, BASE_LOSS), "ident": (BASE_NORMS, BASE_LOSS), "oneround": (BASE_NORMS, BASE_LOSS), "fastdense": (BASE_NORMS, BASE_LOSS),"base": (BASE_NORMS, BASE_LOSS), "grouped": (grouped, BASE_LOSS), "nonorm": (nonorm, BASE_LOSS),
            "onehot": (BASE_NORMS, onehot_loss), "both": (grouped, onehot_loss)}

def compiled_for(name, seeds):
    if name == "rejax":
        from benchmarks.rejax_offpolicy import make_algo
        algo = make_algo("pqn")
        train = lambda key: algo.train(key)[0]
    else:
        optim._leaf_norms, pqn_mod.q_loss = VARIANTS[name]
        pqn_mod.nn = {"fastdense": fastnn, "fastvjp": fastnn2}.get(name, nn)
        batching.permutations = {"ident": ident_perms, "oneround": one_round}.get(name, BASE_PERMS)
        train = vro.make_train("pqn")
    fn = jax.jit(jax.vmap(train)) if seeds > 1 else jax.jit(train)
    arg = jax.random.split(jax.random.PRNGKey(30), seeds) if seeds > 1 else jax.random.PRNGKey(30)
    t0 = time.time(); c = fn.lower(arg).compile(); ct = time.time() - t0
    optim._leaf_norms, pqn_mod.q_loss = BASE_NORMS, BASE_LOSS
    pqn_mod.nn = nn
    batching.permutations = BASE_PERMS
    counted = hlo_launches.count(c.as_text())
    out = jax.block_until_ready(c(arg))
    return c, arg, ct, counted, out

names = os.environ.get("AB_NAMES", "base,grouped,nonorm,onehot,both,rejax").split(",")
print("device", jax.devices()[0], "rounds", ROUNDS, flush=True)
for seeds in SEEDS:
    progs = {n: compiled_for(n, seeds) for n in names}
    for n, p in progs.items():
        inner = [l["launches_per_trip"] for l in p[3]["loops"]][-1]
        extra = ""
        if n != "rejax":
            extra = f"final loss {float(jnp.mean(p[4][1].loss[..., -1])):.6f} grad_norm {float(jnp.mean(p[4][1].grad_norm[..., -1])):.6f}"
        print(f"seeds={seeds} {n:8s} compile={p[2]:.2f}s launches={p[3]['launches']} inner={inner} {extra}", flush=True)
    times = {k: [] for k in progs}
    for r in range(ROUNDS):
        order = list(progs) if r % 2 == 0 else list(progs)[::-1]
        for k in order:
            c, arg = progs[k][:2]
            t0 = time.time(); jax.block_until_ready(c(arg)); times[k].append(time.time() - t0)
    ref = statistics.median(times["rejax"]) if "rejax" in times else statistics.median(times[names[0]])
    for k, ts in times.items():
        med = statistics.median(ts)
        print(f"seeds={seeds} {k:8s} run median={med:.4f}s range={min(ts):.4f}-{max(ts):.4f} ratio={med / ref:.3f}", flush=True)
