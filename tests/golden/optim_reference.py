"""PyTorch reference runs for `jaxrl_rollout.optim` (docs/semantics.md §10, §11).

The inputs (`initial_params`, `gradient_sequence`, `clip_cases`) and the
optimizer configurations (`OPTIMIZER_CASES`) are NumPy / plain Python, so the
tests build them without torch. The references (`run_optimizer`,
`run_clip`) import torch when called and use it the way the PyTorch
projects do: `nn.Parameter`s on CPU in float32, `.grad` set by hand from the
recorded gradients, `torch.nn.utils.clip_grad_norm_` before `optimizer.step()`
and, for CleanRL's annealing, `param_groups[0]["lr"]` rewritten at the start of
every iteration.

Gradients: "w" [4, 3] gets a log-uniform scale in [1e-7, 3] at every step;
"b" [3] gets tiny gradients (~1e-6, where the placement and size of Adam's and
RMSprop's eps decide the step) for the first half and ~1e-2 for the second.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
NUM_STEPS = 200
SHAPES = {"w": (4, 3), "b": (3,)}

# Hyperparameters in torch's names; absent ones take torch's defaults. `anneal`
# is CleanRL's (num_iterations, updates_per_iteration); `max_norm` clips with
# clip_grad_norm_ before every step.
OPTIMIZER_CASES: dict[str, dict] = {
    "adam_torch_defaults": {"optimizer": "adam", "lr": 1e-3},
    "adam_eps_1e-5": {"optimizer": "adam", "lr": 2.5e-4, "eps": 1e-5},
    "adam_l2": {"optimizer": "adam", "lr": 1e-3, "betas": (0.8, 0.99), "eps": 1e-5, "weight_decay": 0.1},
    "adamw_torch_defaults": {"optimizer": "adamw", "lr": 1e-3},
    # beta1 = 0.3 takes the other branch of torch's lerp (weight 1 - beta1 >= 0.5).
    "adamw_strong": {"optimizer": "adamw", "lr": 3e-3, "betas": (0.3, 0.99), "eps": 1e-5, "weight_decay": 0.1},
    "rmsprop_torch_defaults": {"optimizer": "rmsprop", "lr": 1e-2},
    "rmsprop_sb3": {"optimizer": "rmsprop", "lr": 7e-4, "alpha": 0.99, "eps": 1e-5},
    "cleanrl_ppo": {"optimizer": "adam", "lr": 2.5e-4, "eps": 1e-5, "max_norm": 0.5, "anneal": (10, 20)},
}


def initial_params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {name: rng.normal(size=shape).astype(F32) for name, shape in SHAPES.items()}


def gradient_sequence() -> dict[str, np.ndarray]:
    """{"w": [NUM_STEPS, 4, 3], "b": [NUM_STEPS, 3]} float32 gradients."""
    rng = np.random.default_rng(1)
    w_scale = 10.0 ** rng.uniform(-7.0, 0.5, size=(NUM_STEPS, 1, 1))
    w = rng.normal(size=(NUM_STEPS,) + SHAPES["w"]) * w_scale
    b_scale = np.where(np.arange(NUM_STEPS) < NUM_STEPS // 2, 1e-6, 1e-2)[:, None]
    b = (1.0 + 0.5 * rng.normal(size=(NUM_STEPS,) + SHAPES["b"])) * b_scale
    return {"w": w.astype(F32), "b": b.astype(F32)}


def _scaled_to_norm(seed: int, total: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    g = {name: rng.normal(size=shape) for name, shape in SHAPES.items()}
    norm = np.sqrt(sum(np.sum(x**2) for x in g.values()))
    return {name: (x * (total / norm)).astype(F32) for name, x in g.items()}


def clip_cases() -> dict[str, dict]:
    """{case: {"w", "b", "max_norm"}}: gradients above, at, near and below the threshold."""
    specs = {
        # name: (seed, total norm, max_norm)
        "far_above": (10, 5.0, 0.5),
        "large": (11, 1e3, 10.0),
        "just_above": (12, 0.5 * (1 + 1e-6), 0.5),
        "at_threshold": (13, 0.5, 0.5),
        "just_below": (14, 0.5 * (1 - 5e-7), 0.5),
        "just_below_max_1": (15, 1.0 - 4e-7, 1.0),
        "far_below": (16, 0.3, 0.5),
        "tiny": (17, 1e-7, 1.0),
    }
    cases = {}
    for name, (seed, total, max_norm) in specs.items():
        cases[name] = dict(_scaled_to_norm(seed, total), max_norm=max_norm)
    cases["zero"] = {"w": np.zeros(SHAPES["w"], F32), "b": np.zeros(SHAPES["b"], F32), "max_norm": 0.5}
    return cases


def _make_optimizer(params, config):
    import torch

    kwargs = {k: config[k] for k in ("lr", "betas", "eps", "weight_decay", "alpha") if k in config}
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "rmsprop": torch.optim.RMSprop}[config["optimizer"]]
    return cls(params, **kwargs)


def run_optimizer(config: dict) -> dict[str, np.ndarray]:
    """200 torch steps from `initial_params` on `gradient_sequence`.

    Returns:
      "params/<name>": [NUM_STEPS, ...] parameters after every step;
      "state/<moment>/<name>": the final optimizer state (Adam: exp_avg,
      exp_avg_sq; RMSprop: square_avg); "grad_norm": [NUM_STEPS] the
      pre-clip norms when `max_norm` is set.
    """
    import torch

    names = list(SHAPES)
    params = {n: torch.nn.Parameter(torch.from_numpy(v.copy())) for n, v in initial_params().items()}
    grads = gradient_sequence()
    optimizer = _make_optimizer([params[n] for n in names], config)
    history = {n: np.zeros((NUM_STEPS,) + SHAPES[n], F32) for n in names}
    grad_norms = np.zeros(NUM_STEPS, F32)
    for step in range(NUM_STEPS):
        if "anneal" in config:
            num_iterations, updates_per_iteration = config["anneal"]
            if step % updates_per_iteration == 0:
                iteration = step // updates_per_iteration + 1  # CleanRL counts iterations from 1
                frac = 1.0 - (iteration - 1.0) / num_iterations
                optimizer.param_groups[0]["lr"] = frac * config["lr"]
        for n in names:
            params[n].grad = torch.from_numpy(grads[n][step].copy())
        if "max_norm" in config:
            grad_norms[step] = torch.nn.utils.clip_grad_norm_([params[n] for n in names], config["max_norm"]).item()
        optimizer.step()
        for n in names:
            history[n][step] = params[n].detach().numpy()
    out = {f"params/{n}": history[n] for n in names}
    for n in names:
        for moment, value in optimizer.state[params[n]].items():
            if moment != "step":
                out[f"state/{moment}/{n}"] = value.numpy().copy()
    if "max_norm" in config:
        out["grad_norm"] = grad_norms
    return out


def run_clip(w: np.ndarray, b: np.ndarray, max_norm: float) -> dict[str, np.ndarray]:
    """torch.nn.utils.clip_grad_norm_ on the gradients of two parameters."""
    import torch

    params = {"w": torch.nn.Parameter(torch.zeros(SHAPES["w"])), "b": torch.nn.Parameter(torch.zeros(SHAPES["b"]))}
    params["w"].grad = torch.from_numpy(np.array(w, F32))
    params["b"].grad = torch.from_numpy(np.array(b, F32))
    total = torch.nn.utils.clip_grad_norm_(list(params.values()), float(max_norm))
    return {
        "w": params["w"].grad.numpy().copy(),
        "b": params["b"].grad.numpy().copy(),
        "total_norm": np.asarray(total.item(), F32),
    }
