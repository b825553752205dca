"""PQN's optimiser pieces against each other and rejax's PQN, one seed, in one process (BENCHMARKS.md section 11,
thirteenth pass; session 30, 2026-11-30). A session script kept as run, not a maintained benchmark.

Each variant swaps `pqn.make_optimizer` (monkeypatched while its `train` of `vs_rejax_offpolicy.make_train("pqn")`
is traced) and is compiled once; then ROUNDS rounds call every variant once, in an order rotating every round.
Printed: compile seconds, the median and range of the run times, the ratio to the first variant and to rejax.

  committed             optim.clip_grad_norm_torch (per-leaf norms, torch's clip_grad_norm_) + optim.torch_adam
  torchclip+optaxadam   the same clip + optax.adam
  optaxclip+torchadam   optax.clip_by_global_norm + optim.torch_adam
  noclip+torchadam      no clip (a measurement only: PQN clips the global norm)
  elemclip+optaxadam    rejax's optimiser: optax.clip (element-wise) + optax.adam
  concatclip+torchadam  the global norm as one reduction over the gradient concatenated
  sqclip+torchadam      the global norm as the sum of per-leaf sums of squares (no per-leaf square root)
  flatadam / flatall    optax.flatten around torch_adam / around the clip and torch_adam
  rejax                 rejax 0.1.3's PQN (run with rejax importable)

Run (from the repository root, rejax's venv): python benchmarks/results/pqn_optimizer_ab_jax0112_s30_2026-11-30.py \
    committed,noclip+torchadam,rejax 6     (prefix `taskset -c 0` for one core)
"""
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.rejax_offpolicy import make_algo  # noqa: E402
from benchmarks.vs_rejax_offpolicy import make_train as make_ours  # noqa: E402
from jaxrl_rollout import optim  # noqa: E402
from jaxrl_rollout.algorithms import pqn  # noqa: E402

orig = pqn.make_optimizer


def concat_clip(max_norm, sq=False):
    def init_fn(params):
        del params
        return optim.ClipGradNormState(total_norm=jnp.zeros([], jnp.float32))

    def update_fn(updates, state, params=None):
        leaves = jax.tree.leaves(updates)
        if sq:
            total = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in leaves))
        else:
            flat = jnp.concatenate([jnp.ravel(g) for g in leaves])
            total = jnp.sqrt(jnp.sum(jnp.square(flat)))
        coef = jnp.minimum(jnp.reciprocal(total + 1e-6) * jnp.float32(max_norm), 1.0)
        return jax.tree.map(lambda g: g * coef, updates), optim.ClipGradNormState(total_norm=total)

    return optax.GradientTransformation(init_fn, update_fn)


def opt_variant(kind):
    def make(config, hp):
        lr = hp.lr
        if kind == "committed":
            return orig(config, hp)
        if kind == "torchclip+optaxadam":
            return optax.chain(optim.clip_grad_norm_torch(hp.max_grad_norm), optax.adam(lr))
        if kind == "optaxclip+torchadam":
            return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optim.torch_adam(lr))
        if kind == "noclip+torchadam":
            return optim.torch_adam(lr)
        if kind == "elemclip+optaxadam":
            return optax.chain(optax.clip(hp.max_grad_norm), optax.adam(lr))
        if kind == "concatclip+torchadam":
            return optax.chain(concat_clip(hp.max_grad_norm), optim.torch_adam(lr))
        if kind == "sqclip+torchadam":
            return optax.chain(concat_clip(hp.max_grad_norm, sq=True), optim.torch_adam(lr))
        if kind == "flatadam":
            return optax.chain(optim.clip_grad_norm_torch(hp.max_grad_norm), optax.flatten(optim.torch_adam(lr)))
        if kind == "flatall":
            return optax.flatten(optax.chain(optim.clip_grad_norm_torch(hp.max_grad_norm), optim.torch_adam(lr)))
        raise ValueError(kind)
    return make


variants = sys.argv[1].split(",")
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
fns = {}
key = jax.random.key(0)
for v in variants:
    if v == "rejax":
        learner = make_algo("pqn")
        f = jax.jit(lambda k: learner.train(k)[0])
    else:
        pqn.make_optimizer = opt_variant(v)
        f = jax.jit(make_ours("pqn"))
    t = time.perf_counter()
    c = f.lower(key).compile()
    ct = time.perf_counter() - t
    pqn.make_optimizer = orig
    jax.block_until_ready(c(key))
    fns[v] = c
    print(f"{v}: compile {ct:.2f}s", flush=True)
times = {v: [] for v in variants}
for r in range(rounds):
    order = variants[r % len(variants):] + variants[:r % len(variants)]
    for v in order:
        t = time.perf_counter()
        jax.block_until_ready(fns[v](key))
        times[v].append(time.perf_counter() - t)
ref = statistics.median(times[variants[0]])
for v in variants:
    m = statistics.median(times[v])
    extra = f"  vs rejax {m/statistics.median(times['rejax']):.3f}" if "rejax" in times else ""
    print(f"{v:24s} median {m:.3f}s  range {min(times[v]):.3f}-{max(times[v]):.3f}  ratio {m/ref:.3f}{extra}")
