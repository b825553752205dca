"""Host-side reading of a sweep's metrics, shared by the runner, the report and the loggers.

Everything here is plain numpy and text on metrics that are already on the
host (name -> [R, U] arrays, R = G x S runs, run r = g * S + s). It imports
nothing of the package, so `runner`, `report` and `loggers` stand beside one
another on it, and the command line composes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["chunk_return", "grid_label", "returns_text", "steps_at", "swept_texts", "total_steps"]


def chunk_return(metrics: dict) -> np.ndarray:
    """[R] episode-weighted mean return over a metrics window [R, U]; NaN where no episode ended.

    An update with episodes but a non-finite return makes its run's mean NaN
    (or inf): never counted as 0. `returns_text` tells the two NaNs apart.

    Args:
      metrics: at least `episode_return` and `num_episodes`, each [R, U].

    Returns:
      float64 [R].
    """
    counts = metrics["num_episodes"].astype(np.float64)
    total = np.where(counts > 0, metrics["episode_return"].astype(np.float64) * counts, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts.sum(1) > 0, total.sum(1) / counts.sum(1), np.nan)


def returns_text(returns: np.ndarray, ended: np.ndarray) -> str:
    """The progress line's return part from `chunk_return`'s [R] returns and [R] bool "an episode ended".

    Runs with no episode are left out; runs whose episodes returned NaN or
    inf are left out of the mean and counted, never averaged as 0.

    Args:
      returns: [R] mean returns (`chunk_return`).
      ended: [R] bool, whether an episode of the run ended in the window.

    Returns:
      e.g. "return 12.3 +- 1.0 (min 11.0, max 14.2, 8/8 runs)"; the spread,
      min and max are over runs, so one run's return stands alone ("return
      12.3"; "return 12.3 (1/8 runs)" where only one of eight has one).
    """
    finite = returns[np.isfinite(returns)]
    bad = int(np.count_nonzero(ended & ~np.isfinite(returns)))
    note = f", {bad} run(s) with a non-finite return" if bad else ""
    if finite.size == 1:
        alone = returns.size == 1
        return f"return {finite[0]:z.1f}" + ("" if alone else f" (1/{returns.size} runs{note})")
    if finite.size:
        return (f"return {finite.mean():z.1f} +- {finite.std():z.1f} (min {finite.min():z.1f}, max {finite.max():z.1f}, "
                f"{finite.size}/{returns.size} runs{note})")
    if bad:
        return f"return n/a ({bad}/{returns.size} runs with a non-finite return)"
    return "return n/a (no episode ended)"


def grid_label(spec: Any, g: int) -> str:
    """Grid point g's swept hyperparameters, e.g. 'lr=0.001, ent_coef=0'.

    Without a sweep (one grid point), the hyperparameters it sets apart from their defaults, or 'default'
    where it sets none (`--lr 3e-4 --ent-coef 0.01` was labelled 'default').

    Args:
      spec: a sweep (`runner.RunSpec`, or anything with its `grid` and `swept()`).
      g: the grid point's index.

    Returns:
      The label text.
    """
    swept = spec.swept()
    if swept:
        return ", ".join(f"{k}={swept_texts(spec, k)[g]}" for k in swept)
    point = spec.grid[g]
    defaults = getattr(type(point), "_field_defaults", {})
    changed = [k for k in point._fields if k in defaults and getattr(point, k) != defaults[k]]
    return ", ".join(f"{k}={getattr(point, k):g}" for k in changed) or "default"


def swept_texts(spec: Any, name: str) -> list[str]:
    """Each grid point's value of hyperparameter `name` as text: `%g` (6 significant digits), or as many more as
    tell the grid's distinct values apart (lr 1e-3 and 1.000001e-3 were both labelled 0.001)."""
    values = [getattr(point, name) for point in spec.grid]
    distinct = len(set(values))
    for digits in range(6, 18):
        texts = [f"{v:.{digits}g}" for v in values]
        if len(set(texts)) == distinct:
            return texts
    return [repr(v) for v in values]


def steps_at(config: Any, updates: int) -> int:
    """Env steps of one run after `updates` updates: updates * `config.steps_per_update`.

    PPO, A2C and PQN take `batch_size` steps per update, DQN, SAC and TD3
    `log_interval`-sized updates; no algorithm steps its envs in `init`.
    """
    return int(updates) * int(config.steps_per_update)


def total_steps(config: Any) -> int:
    """Env steps of one whole run: `steps_at(config, config.num_updates)`."""
    return steps_at(config, config.num_updates)
