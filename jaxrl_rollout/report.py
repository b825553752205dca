"""A run's outputs: long-format metrics CSV, learning-curve PNG and the final-return summary;
`evaluate`'s per-episode CSV.

"Final return" of a run is the episode-weighted mean episode return over the
last 10% of its updates (at least one update): the mean over every episode
that ended in that window. Per grid point the summary gives its mean over
seeds and a 95% Student-t interval across seeds,
mean +- t_{0.975, S-1} * sd / sqrt(S) (sd with ddof=1; none for one seed).
A run with no episode in the window is left out and counted.

Every function takes the sweep as `spec`, a `runner.RunSpec` of which only
`algo`, `config` (env_id and its step counts, `run_metrics.steps_at`), `grid`, `num_seeds`,
`num_runs` and `swept()` are read; this module does not import the runner,
which it stands beside (the command line composes the two).
"""

from __future__ import annotations

import csv
import io
import math
import pathlib
import warnings
from typing import Any, NamedTuple

import numpy as np

from jaxrl_rollout.checkpoint import write_atomic
from jaxrl_rollout.run_metrics import chunk_return, grid_label, steps_at, swept_texts

__all__ = ["GridSummary", "check_metrics", "final_returns", "format_evaluation_summary", "format_summary",
           "grid_label", "mean_interval", "summarize", "write_evaluation_csv", "write_learning_curve",
           "write_metrics_csv", "write_outputs"]


def check_metrics(spec: Any, metrics: Any) -> None:
    """A ValueError naming `metrics` unless it is a run's metrics for `spec`: a dict with `episode_return` and
    `num_episodes`, every array [R, updates] with R = spec.num_runs (an empty dict was an IndexError, another
    spec's metrics "cannot reshape array of size 4 into shape (1,1)")."""
    if not isinstance(metrics, dict) or not {"episode_return", "num_episodes"} <= set(metrics):
        got = sorted(metrics) if isinstance(metrics, dict) else type(metrics).__name__
        raise ValueError(f"metrics must be a run's metrics (name -> [runs, updates] arrays, episode_return and "
                         f"num_episodes among them, as RunResult.metrics or load_run give), got {got}.")
    shapes = {name: np.shape(value) for name, value in metrics.items()}
    bad = {name: shape for name, shape in shapes.items() if len(shape) != 2 or shape[0] != spec.num_runs}
    if bad or len({shape[1] for shape in shapes.values()}) != 1:
        raise ValueError(f"metrics must be [runs, updates] arrays of the spec's {spec.num_runs} runs "
                         f"({len(spec.grid)} grid points x {spec.num_seeds} seeds), all of one length, got "
                         + ", ".join(f"{name} {list(shape)}" for name, shape in (bad or shapes).items()) + ".")


def write_metrics_csv(path, spec: Any, metrics: dict) -> None:
    """Long format, one row per (grid point, seed, update, metric).

    Columns: grid_point, seed, update, step (cumulative env steps of the run
    after that update), one column per swept hyperparameter, metric, value.
    Floats are written with 9 significant digits (float32 round-trips); NaN
    marks an update in which no episode ended, and for the eval_* metrics of a
    periodic evaluation an update without an evaluation. The file is written atomically
    (`checkpoint.write_atomic`): a failed write (a full disk) leaves the
    previous file whole, and a symbolic link there is replaced, not written through.
    """
    check_metrics(spec, metrics)
    header, hp = _run_columns(spec)
    names = sorted(metrics)

    def rows():
        for r in range(spec.num_runs):
            g, s = divmod(r, spec.num_seeds)
            for u in range(metrics[names[0]].shape[1]):
                head = [g, s, u, steps_at(spec.config, u + 1), *hp[g]]
                for name in names:
                    value = metrics[name][r, u]
                    yield [*head, name, f"{value:.9g}" if np.issubdtype(value.dtype, np.floating) else int(value)]

    _write_csv(path, [*header, "metric", "value"], rows())


def _run_columns(spec: Any) -> tuple[list[str], list[list[str]]]:
    """The leading columns of metrics.csv and evaluate's CSV: (["grid_point", "seed", "update", "step", *swept],
    each grid point's swept values as text)."""
    swept = spec.swept()
    texts = {k: swept_texts(spec, k) for k in swept}
    return ["grid_point", "seed", "update", "step", *swept], [[texts[k][g] for k in swept] for g in range(len(spec.grid))]


def _write_csv(path, header: list, rows) -> None:
    """`header` then every row of the iterable `rows`, as CSV at `path`, written atomically (`write_atomic`); or to
    `path` itself when it is a text stream (it has `write`), e.g. sys.stdout."""
    def write_text(f, **dialect):
        writer = csv.writer(f, **dialect)
        writer.writerow(header)
        for row in rows:  # (row by row, as before: a test's failing writer stands in for a full disk mid-file)
            writer.writerow(row)

    if hasattr(path, "write"):
        write_text(path, lineterminator="\n")  # a terminal's or a pipe's lines, not a file's "\r\n"
        return

    def write(binary):
        f = io.TextIOWrapper(binary, encoding="utf-8", newline="")
        write_text(f)
        f.flush()
        f.detach()  # write_atomic fsyncs and closes the binary file

    path = pathlib.Path(path)
    write_atomic(path.parent, path.name, write)


def write_evaluation_csv(path, spec: Any, updates_done: Any, eval_seed: int, returns: dict,
                         env_options: str | None = None) -> None:
    """`jaxrl-rollout evaluate --csv`: long format, one row per (grid point, seed, policy, episode).

    Columns: grid_point, seed, update (the checkpoint's updates done), step
    (the env steps after them), one column per swept hyperparameter,
    eval_seed (`evaluate --seed`), policy, episode, return. The columns before
    `policy` match metrics.csv's, so the two files join on them, and the
    files of several evaluations (checkpoints, seeds) concatenate. With
    `env_options` (`evaluate --env-option`), an env_options column after
    eval_seed holds that text (the evaluation env's options) on every row. Returns are
    written with 9 significant digits; a two-player game's are +1, 0, -1 (a
    win, a draw, a loss). Written atomically, as metrics.csv.

    Args:
      path: the file to write, or a text stream to write to (`evaluate --csv -`: sys.stdout).
      spec: the run's spec (the module docstring says what is read).
      updates_done: the evaluated checkpoint's updates, or [R] ints, each run's
        own (`evaluate --best-policy`: the update of each run's best policy).
      eval_seed: the evaluation's PRNG seed.
      returns: policy name ("deterministic", "stochastic") -> [R, N] episode
        returns of every run, R = spec.num_runs; a policy with None is left out.
      env_options: the evaluation env's make options as text, e.g.
        "max_episode_steps=27000", for the env_options column; None: no such column.

    Raises:
      ValueError: naming `returns` when an array is not [spec.num_runs, N].
    """
    returns = {name: np.asarray(r) for name, r in returns.items() if r is not None}
    for name, r in returns.items():
        if r.ndim != 2 or r.shape[0] != spec.num_runs:
            raise ValueError(f"returns[{name!r}] must be [{spec.num_runs} runs, episodes], got shape {list(r.shape)}.")
    updates = np.broadcast_to(np.asarray(updates_done), (spec.num_runs,))
    header, hp = _run_columns(spec)

    def rows():
        for r in range(spec.num_runs):
            g, s = divmod(r, spec.num_seeds)
            head = [g, s, int(updates[r]), steps_at(spec.config, int(updates[r])), *hp[g], int(eval_seed),
                    *([env_options] if env_options is not None else [])]
            for name, episodes in returns.items():
                for e, value in enumerate(episodes[r]):
                    yield [*head, name, e, f"{float(value):.9g}"]

    options = ["env_options"] if env_options is not None else []
    _write_csv(path, [*header, "eval_seed", *options, "policy", "episode", "return"], rows())


def isolated(values: np.ndarray) -> np.ndarray:
    """[N] bool: the finite values whose neighbours (one each side, where there is one) are both NaN."""
    finite = np.isfinite(values)
    before = np.concatenate([[False], finite[:-1]])
    after = np.concatenate([finite[1:], [False]])
    return finite & ~before & ~after


def write_learning_curve(path, spec: Any, metrics: dict) -> None:
    """Episode return against env steps: mean across seeds and a +-1 sd band (clipped to the seeds' min and max),
    one line per grid point.

    Each update's value per seed is the mean return of the episodes that
    ended in it; updates where no seed finished an episode are gaps, and a
    value with gaps on both sides is drawn as a dot (long episodes, an
    off-policy run's sparse returns). With a
    periodic evaluation (`eval_return` in metrics) each grid point's mean
    deterministic evaluation return over seeds is drawn beside it, in its
    colour, as a dashed line with markers at the evaluated updates. Written atomically, as the CSV.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    check_metrics(spec, metrics)
    steps = np.array([steps_at(spec.config, u + 1) for u in range(metrics["episode_return"].shape[1])])
    returns = metrics["episode_return"].reshape(len(spec.grid), spec.num_seeds, -1).astype(np.float64)
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: no episode ended yet
        for g in range(len(spec.grid)):
            mean, sd = np.nanmean(returns[g], axis=0), np.nanstd(returns[g], axis=0)
            (line,) = ax.plot(steps, mean, lw=1.2, label=grid_label(spec, g))
            alone = isolated(mean)  # a line draws nothing of a value between two gaps
            ax.plot(steps[alone], mean[alone], ls="", marker="o", ms=2.5, color=line.get_color())
            # +-1 sd, kept within the seeds' own range: CartPole's band reached 570 of its 500 maximum
            low = np.maximum(mean - sd, np.nanmin(returns[g], axis=0))
            high = np.minimum(mean + sd, np.nanmax(returns[g], axis=0))
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, lw=0)
            if "eval_return" in metrics:
                evals = metrics["eval_return"].reshape(len(spec.grid), spec.num_seeds, -1).astype(np.float64)[g]
                done = ~np.isnan(evals).all(axis=0)
                ax.plot(steps[done], np.nanmean(evals[:, done], axis=0), ls="--", marker="o", ms=3, lw=1,
                        color=line.get_color(), label=f"{grid_label(spec, g)} (deterministic eval)")
    ax.set_xlabel("env steps per run")
    ax.set_ylabel("episode return")
    ax.set_title(f"{spec.algo.upper()} on {spec.config.env_id}: mean over {spec.num_seeds} seeds, band +-1 sd "
                 "(within the seeds' range)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    path = pathlib.Path(path)
    write_atomic(path.parent, path.name, lambda f: fig.savefig(f, format="png", dpi=120))


def final_returns(spec: Any, metrics: dict) -> np.ndarray:
    """[G, S] final return per run (episode-weighted mean over the last 10% of updates)."""
    updates = metrics["episode_return"].shape[1]
    window = max(1, updates // 10)
    tail = {k: metrics[k][:, updates - window:] for k in ("episode_return", "num_episodes")}
    return chunk_return(tail).reshape(len(spec.grid), spec.num_seeds)


class GridSummary(NamedTuple):
    """Final return of one grid point: mean and 95% t-interval across seeds with a finite final return.

    num_seeds counts those seeds; missing the seeds with no episode in the
    window; nonfinite the seeds whose episodes there returned NaN or inf
    (left out of the mean and named in the summary, never counted as 0).
    """

    grid_point: int
    label: str
    mean: float
    low: float
    high: float
    num_seeds: int
    missing: int
    nonfinite: int = 0


def summarize(spec: Any, metrics: dict) -> list[GridSummary]:
    """One `GridSummary` per grid point."""
    check_metrics(spec, metrics)
    rows = []
    updates = metrics["num_episodes"].shape[1]
    window = max(1, updates // 10)
    ended = (metrics["num_episodes"][:, updates - window:].sum(1) > 0).reshape(len(spec.grid), spec.num_seeds)
    for g, values in enumerate(final_returns(spec, metrics)):
        mean, low, high, n = mean_interval(values)
        bad = int(np.count_nonzero(ended[g] & ~np.isfinite(values)))
        rows.append(GridSummary(g, grid_label(spec, g), mean, low, high, n, values.size - n - bad, bad))
    return rows


def mean_interval(values) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the finite values: their mean and 95% Student-t interval,
    mean +- t_{0.975, n-1} * sd / sqrt(n) (sd with ddof=1); NaN bounds for n < 2, a NaN mean for n = 0."""
    # scipy.stats.t.ppf is this function; scipy.special imports in 0.27 s against scipy.stats' 0.68 s
    from scipy.special import stdtrit

    values = np.asarray(values, np.float64).ravel()
    finite = values[np.isfinite(values)]
    n = finite.size
    mean = float(finite.mean()) if n else math.nan
    half = float(stdtrit(n - 1, 0.975) * finite.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return mean, mean - half, mean + half, n


def format_evaluation_summary(spec: Any, returns: dict) -> str:
    """`evaluate`'s table per grid point: for each policy, the mean over seeds of each run's mean episode
    return, with its 95% t-interval across seeds (`mean_interval`). A run whose mean is NaN or inf (a
    diverged policy's) is left out of its grid point's and named below the table.

    Args:
      spec: the run's spec.
      returns: policy name -> [R, N] episode returns (R = spec.num_runs); None entries are left out.
    """
    returns = {name: np.asarray(r, np.float64) for name, r in returns.items() if r is not None}
    labels = [grid_label(spec, g) for g in range(len(spec.grid))]
    width = max(len("grid point"), *map(len, labels))
    # rows indented past the per-run table's, so that a line starting "  <label>" is still a run's row
    lines = [f"  per grid point: mean over its {spec.num_seeds} seeds of each run's mean return, 95% t-interval "
             "across seeds",
             f"    {'grid point':<{width}}" + "".join(f"  {name:>31}" for name in returns)]
    left_out = []
    for g, label in enumerate(labels):
        cells = []
        for name, r in returns.items():
            run_means = r[g * spec.num_seeds:(g + 1) * spec.num_seeds].mean(axis=1)
            mean, low, high, _ = mean_interval(run_means)
            interval = f"[{low:z9.2f}, {high:z9.2f}]" if math.isfinite(low) else f"{'n/a':>21}"
            mean = f"{mean:z9.2f}" if math.isfinite(mean) else f"{'n/a':>9}"
            cells.append(f"  {mean} {interval}")
            left_out += [f"{label} seed {s} ({name})" for s in np.flatnonzero(~np.isfinite(run_means))]
        lines.append(f"    {label:<{width}}" + "".join(cells))
    if left_out:  # never averaged in as a number, and never silently dropped
        lines.append("    left out of these means, with NaN or inf returns: " + ", ".join(left_out))
    return "\n".join(lines)


def format_summary(rows: list[GridSummary], window_updates: int) -> str:
    """The summary as a text table."""
    width = max(len("grid point"), *(len(r.label) for r in rows))
    updates = "the last update" if window_updates == 1 else f"the last {window_updates} updates"
    lines = [f"  final return (episode-weighted mean over {updates}; 95% t-interval "
             "across seeds)", f"  {'#':>3}  {'grid point':<{width}}  {'mean':>9}  {'95% interval':>21}  seeds"]
    for r in rows:
        interval = f"[{r.low:z9.2f}, {r.high:z9.2f}]" if math.isfinite(r.low) else f"{'n/a':>21}"
        notes = [f"{r.missing} without episodes"] * bool(r.missing) + [f"{r.nonfinite} with NaN or inf returns"] * bool(
            r.nonfinite)
        seeds = f"{r.num_seeds}" + (f" ({'; '.join(notes)})" if notes else "")
        mean = f"{r.mean:z9.2f}" if math.isfinite(r.mean) else f"{'n/a':>9}"
        lines.append(f"  {r.grid_point:>3}  {r.label:<{width}}  {mean}  {interval}  {seeds}")
    if any(r.num_seeds == 2 and r.high > r.low for r in rows):  # (two equal returns: nothing to misread)
        # Correct, and easily misread: two seeds leave one degree of freedom, whose t quantile is 12.71 (against
        # 2.78 at five seeds), so the interval spans about nine standard deviations of the two returns.
        lines.append("  (an interval from 2 seeds is wide: its t factor is 12.71, against 2.78 with 5 seeds)")
    return "\n".join(lines)


def write_outputs(folder, spec: Any, metrics: dict) -> list[pathlib.Path]:
    """Writes metrics.csv and learning_curve.png into `folder`; returns their paths."""
    folder = pathlib.Path(folder)
    csv_path, png_path = folder / "metrics.csv", folder / "learning_curve.png"
    write_metrics_csv(csv_path, spec, metrics)
    write_learning_curve(png_path, spec, metrics)
    return [csv_path, png_path]
