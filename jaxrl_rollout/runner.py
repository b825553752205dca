"""Chunked, jitted training of a sweep (grid points x seeds): progress, checkpoints, sharding.

A run of a `RunSpec` trains R = G x S runs (G hyperparameter grid points, S
seeds) as one flat vmapped axis, run r = g * S + s: grid point g's
hyperparameters and seed s's key, `jax.random.split(jax.random.key(seed), S)[s]`
(every grid point sees the same S seeds). Training is a jitted chunk, a
`lax.scan` of `chunk_updates` updates vmapped over the runs, called from a
short Python loop that prints progress and saves checkpoints; the last chunk is
shorter when `chunk_updates` does not divide the number of updates (a second
compiled program). When R runs do not fit in one program, `max_parallel` splits
them into groups of at most that many runs, each group a call of the same
compiled chunk, one after another.

Each group's runs are sharded over a 1-D `jax.sharding.Mesh` ("runs") of the
devices with `NamedSharding(mesh, P("runs"))` on the leading axis of the state,
the hyperparameters and the metrics; `jax.jit` partitions the vmapped program,
so nothing in the algorithms knows about devices. A group's size must be a
multiple of the device count: by default the runner uses the largest device
count that divides every group, and a `devices` count that does not divide is
an error.

Host envs (gymnasium, envpool): the R runs' envs form one host pool, stepped in
one ordered callback per step (`jaxrl_rollout.envs._host`), so a host env's runs
train as one group on one device (`check_host_run`), evaluate their runs in
lockstep (`collect.evaluate`; the periodic evaluations in another object of
the env, a pool of their own, built once per `train` call), and on resume start
new episodes (`reopen_host_envs`). The progress lines add the host env's
steps/s and its share of the time, and the periodic evaluations' own.

    spec = RunSpec("ppo", ppo.PPOConfig(total_timesteps=20_480), grid=(ppo.PPOHParams(),), num_seeds=4)
    result = train(spec, folder="runs/demo")         # checkpoints in runs/demo
    result = train(spec, folder="runs/demo", resume=True)   # continues, bit-identically
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import math
import os
import pathlib
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_rollout import _checks, _signals, algorithms, checkpoint, envs, prng
from jaxrl_rollout._signals import Interrupted, StopSignals, stopped_at_once
from jaxrl_rollout._warnings import PartialRunWarning
from jaxrl_rollout.algorithms import stack_hparams
from jaxrl_rollout.algorithms._common import (
    NONFINITE_GRADIENTS,
    NONFINITE_LOSS,
    NONFINITE_PARAMS,
    check_hparams,
    plain_numbers,
    plain_record,
)
from jaxrl_rollout.devices import largest_dividing
from jaxrl_rollout.envs._host import HostStats, host_env, raise_kept_failure, run_interruptibly, take_failure
from jaxrl_rollout.normalization import RewardScaleState
from jaxrl_rollout.run_metrics import chunk_return, grid_label, returns_text, steps_at, total_steps
from jaxrl_rollout.stepping import is_vectorized
from jaxrl_rollout.types import RolloutState

__all__ = ["BEST_POLICY", "DEFAULT_CHUNKS", "Diverged", "RunResult", "RunSpec", "SaveFailed", "TrainedPolicy",
           "check_finite", "check_host_run", "default_chunk_updates", "host_env", "load_best_policies", "load_policy",
           "load_run", "make_algorithm", "map_runs", "read_spec", "read_spec_file", "reopen_host_envs", "returns_text",
           "train", "write_spec"]

FORMAT = "jaxrl_rollout.run/1"


class Diverged(ValueError):
    """A run's loss, gradients or params stopped being finite (the `nonfinite` metric of an update was set).

    `train` raises it at the end of the first chunk with such an update,
    without saving that chunk: the run folder keeps the checkpoint of the
    last chunk whose updates were all finite (saved before raising, if it
    was not yet). The message names the update, the run and what was not finite.

    Attributes:
      update: the first bad update, counted from 1 over the whole run.
      run: the first run (g * S + s) with a bad update there.
      what: what was not finite, e.g. ["loss", "gradients"].
      finding: the message without its advice (`Diverged.ADVICE`).
    """

    ADVICE = "Lower the learning rate, check the env's rewards and observations for NaN or inf, or clip them."

    def __init__(self, finding: str, update: int, run: int, what: list):
        super().__init__(f"{finding}. {self.ADVICE}")
        self.finding, self.update, self.run, self.what = finding, update, run, what


_NONFINITE_NAMES = ((NONFINITE_LOSS, "loss"), (NONFINITE_GRADIENTS, "gradients"), (NONFINITE_PARAMS, "params"))


def check_finite(spec: RunSpec, chunk: dict, first_update: int) -> None:
    """Raises `Diverged` if any update of a chunk's metrics (name -> [R, U]) has its `nonfinite` flag set.

    The message names the first such update and run, what was not finite
    (loss, gradients, params), and which reported metrics were NaN or inf there.
    """
    flags = chunk.get("nonfinite")
    if flags is None or not flags.any():
        return
    u = int(np.argmax(flags.any(axis=0)))
    r = int(np.argmax(flags[:, u] != 0))
    what = [name for bit, name in _NONFINITE_NAMES if int(flags[r, u]) & bit]
    bad = [k for k, v in sorted(chunk.items())
           if k not in ("nonfinite", "episode_return", "episode_length", "explained_variance") and not k.startswith("eval_")
           and np.issubdtype(v.dtype, np.floating) and not np.isfinite(v[r, u])]
    runs = int(np.count_nonzero(flags[:, u]))
    g, s = divmod(r, spec.num_seeds)
    update = first_update + u + 1
    raise Diverged(
        f"training diverged at update {update} (step {steps_at(spec.config, update):,}) of run {r} (grid point "
        f"{g}, seed {s}){f' and {runs - 1} other run(s)' if runs > 1 else ''}: non-finite {', '.join(what)}"
        + (f" (metrics {', '.join(bad)})" if bad else ""), update, r, what)


DEFAULT_CHUNKS = 20
# Root seeds: jax.random.key keeps a seed's low 32 bits (without jax_enable_x64), so a seed outside these would
# silently repeat one inside (2**32 gave seed 0's runs, -1 those of 2**32 - 1); they are refused instead.
MAX_SEED = 2**32 - 1
"""The chunk count `default_chunk_updates` aims for unless a config's `default_chunks` says otherwise."""


def default_chunk_updates(num_updates: int, target: int = DEFAULT_CHUNKS) -> int:
    """Updates per chunk: a divisor of num_updates giving 10 to 100 chunks if one exists, else ~`target` chunks.

    Of the chunk counts 10 to 100 that divide num_updates, the one nearest
    `target` (the larger on a tie); 91 candidates whatever the run's length.
    `RunSpec` passes its config's `default_chunks` where it has one (SAC's and
    TD3's 100: an update of theirs is a thousand gradient steps), else `DEFAULT_CHUNKS`.
    """
    counts = [k for k in range(100, 9, -1) if num_updates % k == 0]
    if counts:
        return num_updates // min(counts, key=lambda k: abs(k - target))
    return max(1, math.ceil(num_updates / target))


def split_updates(num_updates: int, chunk_updates: int) -> list[int]:
    """Chunk lengths for `num_updates` updates: full chunks of `chunk_updates`, then the remainder."""
    n, c = num_updates, chunk_updates
    return [c] * (n // c) + ([n % c] if n % c else [])


def continued_lengths(spec: RunSpec, chunks_done: int, updates_done: int) -> list[int]:
    """Chunk lengths of `spec`'s run that has done `chunks_done` chunks, `updates_done` updates in all.

    The done chunks, then the rest of `spec.config.num_updates` in chunks of
    `spec.chunk_updates` (the last one shorter). For a run resumed with the spec
    it was started with this is `spec.chunk_lengths`; a run extended to more
    total steps (`train --resume F --total-steps N`) continues in whole chunks
    after the ones it has done, even when its last chunk was a short one. The
    checkpoint keeps how many chunks and updates were done, not each chunk's
    size: an extended run's done chunks are placeholders (full chunks, then
    chunks of one update, then the rest), each of at least one update and
    summing to `updates_done`, but not their history when the run was extended
    more than once (their sizes are not to be reported).
    """
    if updates_done > spec.config.num_updates:
        raise ValueError(f"the run has done {updates_done} updates, more than the {spec.config.num_updates} of "
                         f"total_timesteps={spec.config.total_timesteps}.")
    planned = spec.chunk_lengths
    if chunks_done <= len(planned) and sum(planned[:chunks_done]) == updates_done:
        return planned  # (an extended run can have done more chunks than the spec's plan has, all its updates)
    c = spec.chunk_updates
    full = max(0, min(chunks_done - 1, (updates_done - 1) // c))  # every chunk has an update at least
    done = [c] * full + [1] * (chunks_done - 1 - full) + [updates_done - c * full - (chunks_done - 1 - full)] if (
        chunks_done) else []
    return done + split_updates(spec.config.num_updates - updates_done, c)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything that determines a sweep's results (saved as the run's config.json).

    Attributes:
      algo: a registered algorithm (`algorithms.NAMES`: ppo, a2c, dqn, pqn, sac, td3).
      config: the algorithm's static config (`PPOConfig`, `DQNConfig`, ...).
      grid: G hyperparameter records of its HParams class (`PPOHParams`, ...), one per grid point.
      num_seeds: S seeds per grid point.
      seed: the root PRNG seed.
      chunk_updates: updates per jitted chunk (0: `default_chunk_updates`).
      max_parallel: the most runs in one program (None: all G x S); more are
        run in groups one after another.
      eval_every: evaluate every run's policy deterministically after every
        this many updates, counted over the whole run, inside the jitted chunk
        (`periodic_eval.make_update`), adding eval_return, eval_length (and
        win/draw/loss rates for a two-player game) to the metrics, NaN in the
        other updates; None: no evaluation, and the chunk is the plain scan of
        `update`. Saved in config.json only when set, so a config.json of a
        run without it reads as before.
      eval_episodes: whole episodes per evaluation (with eval_every).
    """

    algo: str
    config: Any
    grid: tuple
    num_seeds: int
    seed: int = 0
    chunk_updates: int = 0
    max_parallel: int | None = None
    eval_every: int | None = None
    eval_episodes: int = 10

    def __post_init__(self):
        config_cls, hparams_cls, _ = algorithms.get(self.algo)  # a ValueError names an unknown algo
        if not isinstance(self.config, config_cls):
            raise TypeError(f"config must be a {config_cls.__name__} for {self.algo}, got {type(self.config).__name__}.")
        plain_numbers(self)  # NumPy scalars (seed=np.int64(3) from a loop over np.arange) as the numbers they hold
        object.__setattr__(self, "grid", tuple(plain_record(h) if isinstance(h, hparams_cls) else h for h in self.grid))
        if not self.grid or any(not isinstance(h, hparams_cls) for h in self.grid):
            raise TypeError(f"grid must be a non-empty sequence of {hparams_cls.__name__}.")
        for h in self.grid:
            for name, value in h._asdict().items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise TypeError(f"grid: {name} must be a number, got {value!r}.")
            check_hparams(h, algorithms.hparam_ranges(self.algo))
        read = getattr(sys.modules[type(self.config).__module__], "check_hparams_read", None)
        for h in self.grid if read is not None else ():
            read(self.config, h)  # SAC's alpha with autotune: a grid point would train the default's run
        if not _checks.is_int(self.seed, numpy=False):
            raise TypeError(f"seed must be an int, got {self.seed!r}.")
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be from 0 to 2**32 - 1 (jax.random.key keeps a seed's low 32 bits, so "
                             f"another would repeat one of these), got {self.seed}.")
        optional = tuple(n for n in ("max_parallel", "eval_every") if getattr(self, n) is not None)
        for name in ("num_seeds", "chunk_updates", "eval_episodes") + optional:
            value = getattr(self, name)
            if not _checks.is_int(value, numpy=False) or value < (0 if name == "chunk_updates" else 1):
                raise ValueError(f"{name} must be a {'non-negative' if name == 'chunk_updates' else 'positive'} int, "
                                 f"got {value!r}.")
        if self.chunk_updates == 0:
            object.__setattr__(self, "chunk_updates", default_chunk_updates(
                self.config.num_updates, getattr(self.config, "default_chunks", DEFAULT_CHUNKS)))
        if self.chunk_updates > self.config.num_updates:
            raise ValueError(f"chunk_updates={self.chunk_updates} is more than the run's "
                             f"{self.config.num_updates} updates.")
        if self.eval_every is not None and self.eval_every > self.config.num_updates:
            raise ValueError(f"eval_every={self.eval_every} is more than the run's {self.config.num_updates} updates: "
                             "no evaluation would run (every eval metric NaN).")

    @property
    def num_runs(self) -> int:
        return len(self.grid) * self.num_seeds

    @property
    def chunk_lengths(self) -> list[int]:
        """Updates in each chunk: full chunks, then the remainder."""
        return split_updates(self.config.num_updates, self.chunk_updates)

    @property
    def groups(self) -> list[tuple[int, int]]:
        """[start, stop) run ranges trained in one program each."""
        size = self.max_parallel or self.num_runs
        return [(a, min(a + size, self.num_runs)) for a in range(0, self.num_runs, size)]

    def run_keys(self) -> jax.Array:
        """[R] PRNG keys: seed s's key for every grid point."""
        keys = jax.random.split(jax.random.key(self.seed), self.num_seeds)
        return keys[np.tile(np.arange(self.num_seeds), len(self.grid))]

    def eval_keys(self) -> jax.Array:
        """[R] root eval keys, `periodic_eval.eval_key` of each run's key: apart from training's keys."""
        from jaxrl_rollout.periodic_eval import eval_key

        return jax.vmap(eval_key)(self.run_keys())

    def run_hparams(self) -> Any:
        """The hyperparameter record with [R] float32 leaves."""
        return stack_hparams([h for h in self.grid for _ in range(self.num_seeds)])

    def swept(self) -> list[str]:
        """Hyperparameter names that take more than one value in the grid."""
        return [k for k in self.grid[0]._fields if len({getattr(h, k) for h in self.grid}) > 1]

    def to_json(self) -> dict:
        config = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self.config).items()}
        # env_options as the object of the env's make options, and only when set: a run without them (every run
        # saved before the field) has the same config.json as before
        config.pop("env_options")
        if self.config.env_options:
            config["env_options"] = dict(self.config.env_options)
        return {"format": FORMAT, "algo": self.algo, "config": config, "grid": [h._asdict() for h in self.grid],
                "num_seeds": self.num_seeds, "seed": self.seed, "chunk_updates": self.chunk_updates,
                "max_parallel": self.max_parallel,
                **({"eval_every": self.eval_every, "eval_episodes": self.eval_episodes}
                   if self.eval_every is not None else {})}

    @classmethod
    def from_json(cls, data: dict) -> RunSpec:
        """Inverse of `to_json`; a ValueError names what is missing or unknown."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} config.")
        algo = data.get("algo")
        if algo not in algorithms.NAMES:
            raise ValueError(f"unknown algo {algo!r} in the saved config.")
        config_cls, hparams_cls, _ = algorithms.get(algo)
        if not isinstance(data.get("config"), dict):
            raise ValueError(f"config must be an object of {config_cls.__name__}'s fields, got {data.get('config')!r}.")
        defaults = {f.name: f.default for f in dataclasses.fields(config_cls)}
        unknown = set(data["config"]) - set(defaults)
        if unknown:
            raise ValueError(f"saved config has fields {sorted(unknown)} that {config_cls.__name__} does not know.")
        annotations = {f.name: str(f.type) for f in dataclasses.fields(config_cls)}
        for name, value in data["config"].items():
            if name == "env_options":  # an object of the make options; its values are checked by the config
                if not isinstance(value, dict):
                    raise ValueError(f"config.env_options must be an object of the env's make options, got "
                                     f"{json.dumps(value)}.")
                continue
            optional = "Optional" in annotations[name] or "None" in annotations[name]
            _check_json_type(f"config.{name}", value, defaults[name], optional)
        for name in ("num_seeds", "seed", "chunk_updates"):
            _check_json_type(name, data[name], 0, False)
        _check_json_type("max_parallel", data["max_parallel"], 0, True)
        # eval_every and eval_episodes are absent from the configs of runs without periodic evaluation
        _check_json_type("eval_every", data.get("eval_every"), 0, True)
        _check_json_type("eval_episodes", data.get("eval_episodes", 10), 0, False)
        if not isinstance(data["grid"], list) or not all(isinstance(p, dict) for p in data["grid"]):
            raise ValueError("grid must be a list of hyperparameter objects.")
        fields = {k: tuple(v) if isinstance(defaults[k], tuple) and k != "env_options" else v
                  for k, v in data["config"].items()}
        if algo in ("dqn", "sac", "td3") and "network" not in fields:
            # saved before the algorithm had `network` (DQN 2026-12-02, SAC and TD3 2026-12-04): its networks
            # flattened every observation, where "auto" now reads an Atari-sized image with a CNN (other params:
            # the run would not resume)
            fields["network"] = "mlp"
        grid = []
        for point in data["grid"]:
            for name, value in point.items():
                _check_json_type(f"grid {name}", value, 0.0, False)
            unknown = set(point) - set(hparams_cls._fields)
            if unknown:
                raise ValueError(f"saved grid has hyperparameters {sorted(unknown)} that {hparams_cls.__name__} "
                                 "does not know.")
            grid.append(hparams_cls(**point))
        with warnings.catch_warnings():  # a saved run's whole updates (warn_partial_run) are not the reader's to change
            warnings.simplefilter("ignore", PartialRunWarning)
            config = config_cls(**fields)
        return cls(algo, config, tuple(grid), data["num_seeds"], data["seed"], data["chunk_updates"],
                   data["max_parallel"], data.get("eval_every"), data.get("eval_episodes", 10))


def _check_json_type(name: str, value: Any, default: Any, optional: bool) -> None:
    """A saved value of the kind its field takes (the kind of `default`), or a ValueError naming the field."""
    if value is None and optional:
        return
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,), tuple: (list,)}
    kind = type(default) if default is not None else float
    ok = isinstance(value, kinds.get(kind, (object,))) and (kind is bool or not isinstance(value, bool))
    if ok and kind is tuple:
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if not ok:
        words = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
                 tuple: "a list of integers"}[kind]
        raise ValueError(f"{name} must be {words}{' or null' if optional else ''}, got {json.dumps(value)}.")


def spec_differences(a: dict, b: dict, names: tuple = ("config.json", "the checkpoint")) -> list[str]:
    """"field: x in A, y in B" for every field where two `RunSpec.to_json` dicts differ (config.lr, grid[1].gamma).

    NaN differs from everything, itself included, so a NaN saved on either side is always listed.
    """
    def flat(data: dict) -> dict:
        out = {}
        for key, value in data.items():
            if key == "config" and isinstance(value, dict):
                out.update({f"config.{k}": v for k, v in value.items()})
            elif key == "grid" and isinstance(value, list):
                out.update({f"grid[{i}].{k}": v for i, p in enumerate(value) if isinstance(p, dict)
                            for k, v in p.items()})
                out["grid points"] = len(value)
            else:
                out[key] = value
        return out

    fa, fb = flat(a), flat(b)
    norm = lambda v: json.loads(json.dumps(v))  # noqa: E731  tuples and lists compare equal
    return [f"{k}: {json.dumps(fa.get(k))} in {names[0]}, {json.dumps(fb.get(k))} in {names[1]}"
            for k in dict.fromkeys([*fa, *fb]) if norm(fa.get(k)) != norm(fb.get(k))]


def _as_read(saved: Any, manifest: dict) -> Any:
    """A checkpoint's saved spec (a `to_json` dict) as this version reads it: `RunSpec.from_json`, then
    `as_trained`, then `to_json`.

    A field added since the run was saved is missing from both its config.json and its checkpoint's spec;
    config.json is compared as read (the field at its default, or at the value `from_json` gives runs saved
    before it), so the checkpoint's spec is too, or every such run would read as edited. One that this version
    cannot read is compared as saved (its differences are then listed).
    """
    try:
        return as_trained(RunSpec.from_json(saved), manifest).to_json()
    except (ValueError, TypeError, KeyError):
        return saved


def as_trained(spec: RunSpec, manifest: dict) -> RunSpec:
    """`spec` with the network its checkpoint was trained with, where a name's meaning has changed since.

    PQN's network "auto" meant its MLP on every observation until 2026-12-02; since then it reads an image of
    36 x 36 or more (envpool's Atari frames, rendered pixels) with its CNN. A PQN run saved before, on such an
    image, says "auto" in config.json and in its checkpoint alike, and its params are an MLP's: it is read as
    network "mlp", what it trained with (the structure check refused it). Nothing else changes.

    Args:
      spec: a run's spec (its config.json's, or its checkpoint's).
      manifest: the checkpoint's manifest (`checkpoint.read_manifest`), whose state structure tells the two
        networks apart.
    """
    treedef = manifest.get("treedef")
    if (spec.algo != "pqn" or spec.config.network != "auto" or not isinstance(treedef, str)
            or "'Dense_0'" not in treedef or "'conv_0'" in treedef):
        return spec
    if not _auto_reads_an_image(spec.config.env_id, tuple(spec.config.env_options)):
        return spec
    return dataclasses.replace(spec, config=dataclasses.replace(spec.config, network="mlp"))


@functools.lru_cache(maxsize=16)
def _auto_reads_an_image(env_id: str, options: tuple) -> bool:
    """Whether network "auto" gives the env's observations a CNN torso (`_common.choose_torso`); False where the
    env cannot be made here (the run's own build then says why)."""
    from jaxrl_rollout import envs
    from jaxrl_rollout.algorithms import _common

    try:
        env, params = envs.make(env_id, **dict(options))
        try:
            return _common.choose_torso("auto", env.observation_space(params)) is not None
        finally:
            close = getattr(env, "close", None)
            if callable(close):
                close()
    except Exception:  # noqa: BLE001 -- a missing extra, a changed env: left to the build, which names it
        return False


def check_checkpoint_spec(folder, spec: RunSpec, manifest: dict, *, ignore: tuple = (), given: bool = False) -> None:
    """Refuses a config.json `spec` that differs from the spec saved in the checkpoint's manifest.

    Both are written by `train`, so a difference means config.json was edited
    (a `--total-steps` extension stopped between its two writes is told apart
    by `run_spec`, which reads the run from its checkpoint then). A
    pre-Orbax checkpoint has no saved spec and is not compared.

    Args:
      folder: the run folder (for the message).
      spec: the spec read from config.json, or (`given`) the spec passed to `train(..., resume=True)`.
      manifest: `checkpoint.read_manifest(folder)`.
      ignore: fields allowed to differ, e.g. ("config.total_timesteps",) when extending.
      given: `spec` is a caller's, not config.json's: the message names the spec, not an edit.
    """
    saved = manifest.get("meta", {}).get("spec")
    if saved is None:
        return
    names = ("the spec given", "the run") if given else ("config.json", "the checkpoint")
    # config.json reads as the run trained (`as_trained`), as the checkpoint's spec does; a caller's spec is taken
    # as given (with network "auto" for a PQN run that trained the MLP, it is told that the run's is "mlp")
    mine = spec if given else as_trained(spec, manifest)
    diff = [d for d in spec_differences(mine.to_json(), _as_read(saved, manifest), names)
            if d.split(":")[0] not in ignore]
    if diff:
        why = (f"the spec given differs from the run in {folder} (only config.total_timesteps may grow, to train "
               "longer)") if given else (f"{pathlib.Path(folder) / 'config.json'} differs from the spec saved with "
                                         "its checkpoint (was it edited?)")
        raise ValueError(f"{why}: " + "; ".join(diff) + ".")


def run_spec(folder, spec: RunSpec, manifest: dict) -> RunSpec:
    """The run's spec: config.json's `spec`, checked against its checkpoint's (`check_checkpoint_spec`), with the
    network it trained with (`as_trained`).

    An extension (`--total-steps` more) saves its checkpoint, then rewrites config.json; one stopped between the
    two (killed, or config.json not writable) leaves config.json one total behind. Where that is the only
    difference, the checkpoint's spec is the run's, and it is returned (the folder was refused for good, as if
    config.json had been edited).

    Args:
      folder: the run folder (for messages).
      spec: the spec read from its config.json.
      manifest: `checkpoint.read_manifest(folder)`.
    """
    spec = as_trained(spec, manifest)
    saved = manifest.get("meta", {}).get("spec")
    if isinstance(saved, dict) and isinstance(saved.get("config"), dict):
        total = saved["config"].get("total_timesteps")
        behind = _checks.is_int(total) and total > spec.config.total_timesteps
        if behind and not [d for d in spec_differences(spec.to_json(), _as_read(saved, manifest))
                           if d.split(":")[0] != "config.total_timesteps"]:
            return as_trained(RunSpec.from_json(saved), manifest)
    check_checkpoint_spec(folder, spec, manifest)
    return spec


def make_algorithm(spec: RunSpec):
    """The spec's `Algorithm` (init, update, policies, env), from the registry (`algorithms.get`)."""
    return algorithms.get(spec.algo).make(spec.config)


class RunResult(NamedTuple):
    """What `train` returns.

    Attributes:
      state: the training state of every run, leaves [R, ...] (device arrays).
      metrics: name -> float/int array [R, updates_done] (env_steps left out:
        the cumulative step after update u (from 1) is `run_metrics.steps_at(config, u)`).
      updates_done, chunks_done: progress (all updates when complete).
      updates_run: updates run by this call (fewer than updates_done after a resume).
      complete: every chunk has run.
      compile_s: seconds spent compiling in this call; run_s: seconds in the chunk loop.
      chunks_s: the seconds of run_s that the chunks themselves took, from dispatch to their
        results (the rest is the host's work outside them: checkpoints, logs, videos).
      num_devices: devices each group was sharded over.
      num_chunks: chunks in the whole run (`continued_lengths`).
      best_policy: with `spec.eval_every`, every run's best evaluated policy so far
        (`periodic_eval.BestPolicy`, leaves [R, ...]; saved with the checkpoint); None without.
    """

    state: Any
    metrics: dict
    updates_done: int
    updates_run: int
    chunks_done: int
    complete: bool
    compile_s: float
    run_s: float
    num_devices: int
    num_chunks: int = 0
    best_policy: Any = None
    chunks_s: float = 0.0


def choose_devices(group_sizes: Sequence[int], requested: int | None = None) -> list:
    """The devices to shard over: `requested` of them, or the most that divide every group size.

    In a multi-process run (`jax.distributed`) every process holds a share of each group: the devices are as
    many of every process's own, so the count is a multiple of the processes. (The first d of the global list
    were process 0's alone, and a process without a shard failed while the others waited.)
    """
    available = jax.devices()
    processes = jax.process_count()
    if requested is not None:
        bad = [g for g in group_sizes if g % requested]
        if bad:
            raise ValueError(
                f"a group of {bad[0]} runs (grid points x seeds, or max_parallel) does not divide over {requested} "
                f"devices: make the runs per group a multiple of {requested} or pass another devices count."
            )
        if requested > len(available):
            raise ValueError(f"devices={requested} but only {len(available)} are available ({available[0].platform}).")
        if processes > 1 and requested % processes:
            raise ValueError(f"devices={requested} does not spread over the run's {processes} processes, which each "
                             f"train an equal share of every group: pass a multiple of {processes}.")
        return available[:requested] if processes == 1 else _per_process(available, requested // processes)
    if processes == 1:
        return largest_dividing(math.gcd(*group_sizes), available)
    bad = [g for g in group_sizes if g % processes]
    if bad:
        raise ValueError(f"a group of {bad[0]} runs (grid points x seeds, or max_parallel) does not divide over the "
                         f"run's {processes} processes, which each train an equal share of every group: make the "
                         f"runs per group a multiple of {processes}.")
    local = min(collections.Counter(d.process_index for d in available).values())
    each = max(k for k in range(1, local + 1) if math.gcd(*group_sizes) % (k * processes) == 0)
    return _per_process(available, each)


def _per_process(available: Sequence[Any], each: int) -> list:
    """The first `each` devices of every process, in the global order (all of them: `available` as it is)."""
    taken: dict = collections.defaultdict(int)
    chosen = []
    for device in available:
        if taken[device.process_index] < each:
            taken[device.process_index] += 1
            chosen.append(device)
    return chosen


_COMPILED: dict = {}


@contextlib.contextmanager
def _closing(*hosts: Any) -> Iterator[None]:
    """Closes the given host envs (None: none) on the way out, however it is left: a host env's pool (the
    worker processes of gymnasium's `AsyncVectorEnv`) ends with the `train` call that opened it, not at the
    garbage collector's next pass (whose closing workers printed a traceback each). (A chunk that an
    interruption left running has abandoned them already, `envs._host.run_interruptibly`.)"""
    try:
        yield
    finally:
        with _signals.shielded():
            for host in hosts:
                if host is not None:
                    host.close()


def check_host_run(spec: RunSpec, *, devices: int | None = None, env: Any = None) -> None:
    """Refuses what a host env's sweep cannot do, in one line naming the argument; nothing for a JAX env.

    A host env's R runs share one host pool stepped by one ordered callback per
    step, so they run as one group (no `max_parallel` split: a second group's
    reset would reopen the pool under the first) on one device of one process.
    (Its periodic evaluations play in a pool of their own, `_program`.)

    Args:
      spec: the sweep.
      devices: `train`'s devices argument.
      env: the spec's env if already built (else built here from its env_id).
    """
    if (len(spec.groups) == 1 and devices in (None, 1) and jax.process_count() == 1) or host_env(
            env if env is not None else envs.make(spec.config.env_id, **dict(spec.config.env_options))[0]) is None:
        return  # the env is built only when there is something to refuse
    if jax.process_count() > 1:
        raise ValueError(
            f"{spec.config.env_id} is a host env, whose envs live in one Python process: it cannot train across "
            f"{jax.process_count()} processes (--distributed); run it in one process."
        )
    if len(spec.groups) > 1:
        raise ValueError(
            f"max_parallel={spec.max_parallel} (--max-parallel) splits the {spec.num_runs} runs into groups "
            f"trained one after another, but {spec.config.env_id} is a host env whose runs share one host pool: "
            f"drop max_parallel (or make it at least {spec.num_runs})."
        )
    if devices not in (None, 1):
        raise ValueError(
            f"devices={devices} (--devices), but {spec.config.env_id} is a host env, stepped by one ordered host "
            "callback that runs on one device: drop devices (or pass 1)."
        )


def reopen_host_envs(algorithm: Any, state: Any) -> Any:
    """One run's resumed state with its host envs reset, since a host env's state is not in a checkpoint.

    Every `RolloutState` in `state`, or the state itself for an off-policy
    learner (DQN, SAC, TD3, whose state holds its envs), gets fresh episodes: the host envs reset
    with keys split from the rollout key (so resuming the same checkpoint twice
    gives the same run), `first` set (a recurrent carry restarts), the running
    episode statistics and the reward scaler's running returns zeroed. The
    episodes in progress at the checkpoint are dropped and never counted. The
    network, optimiser, observation statistics and minibatch key carry over.
    Vmap it over runs.
    """

    def fresh(node):
        if isinstance(node, RolloutState):
            key, reset_key = jax.random.split(node.key)
            num_envs = node.first.shape[0]
            obs, env_state = algorithm.env.reset(jax.random.split(reset_key, num_envs), algorithm.env_params)
            return node._replace(env_state=env_state, obs=obs, first=jnp.ones_like(node.first),
                                 episode_return=jnp.zeros_like(node.episode_return),
                                 episode_length=jnp.zeros_like(node.episode_length), key=key)
        if isinstance(node, RewardScaleState):
            return node._replace(returns=jnp.zeros_like(node.returns))
        if _holds_envs(node):  # an off-policy learner's state (DQN, SAC, TD3): the envs sit in it directly
            key, reset_key = jax.random.split(node.key)
            num_envs = node.episode_return.shape[0]
            obs, env_state = algorithm.env.reset(jax.random.split(reset_key, num_envs), algorithm.env_params)
            return node._replace(env_state=env_state, obs=obs, episode_return=jnp.zeros_like(node.episode_return),
                                 episode_length=jnp.zeros_like(node.episode_length), key=key)
        return node

    return jax.tree.map(fresh, state, is_leaf=lambda node: isinstance(node, (RolloutState, RewardScaleState))
                        or _holds_envs(node))


_ENV_FIELDS = frozenset(("env_state", "obs", "episode_return", "episode_length", "key"))


def _holds_envs(node: Any) -> bool:
    """A NamedTuple state (not a `RolloutState`) that holds its envs' state, observations and episode counters."""
    return not isinstance(node, RolloutState) and _ENV_FIELDS <= set(getattr(node, "_fields", ()))


def map_runs(fn: Callable, env: Any) -> Callable:
    """`jax.jit(jax.vmap(fn))` over the leading runs axis of every argument; one run at a time for a host env.

    For code whose runs may stop stepping at different times (a
    `lax.while_loop` under vmap keeps a finished run's env state while the host
    pool advances, which the host env's tick check refuses): a host env's runs
    are run one after another, each a call of `jax.jit(fn)` on its own slice,
    and the results stacked [R, ...]. (`collect.evaluate` itself needs none of
    this: it runs a vmap's runs of a host env in lockstep.)
    """
    if host_env(env) is None:
        return jax.jit(jax.vmap(fn))
    one = jax.jit(fn)

    def each(*args):
        runs = jax.tree.leaves(args)[0].shape[0]
        outs = [one(*jax.tree.map(lambda x: x[r], args)) for r in range(runs)]
        return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)

    return each


def _strong_types(state: Any) -> Any:
    """`state` with no weakly typed leaf (e.g. an env's step counter made from a Python 0).

    A state read back from a checkpoint has none, so with this a fresh run's chunks and a resumed run's are
    one program: the compilation cache (`compile_cache`) then serves a `--resume` the program the run
    compiled first. The values are unchanged.
    """
    return jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype) if getattr(x, "weak_type", False) else x,
                        state)


def _in_lockstep(chunk: Callable, in_axes: tuple) -> Callable:
    """`jax.vmap(chunk, in_axes)` over the runs, with the state's lockstep fields passed to every run unbatched.

    A state type may name fields that are equal in every run of a group, because the runs start together
    and take the same updates (`LOCKSTEP`: the off-policy learners' iteration counter). Under a plain vmap
    those would be batched, and a `lax.cond` on them (`learning_starts`, TD3's delayed actor step) would
    become a select that computes both branches in every iteration. Here the first run's values are taken
    inside the program and handed to all runs as one unbatched value, so those conds stay branches; the
    results are the same values. The state keeps its [runs] leading axis on the way in and out.
    """
    vmapped = jax.vmap(chunk, in_axes=in_axes)

    def fn(state, *rest):
        fields = getattr(type(state), "LOCKSTEP", ())
        if not fields:
            return vmapped(state, *rest)
        shared = {name: getattr(state, name)[0] for name in fields}

        def one(state, shared, *rest):
            return chunk(state._replace(**shared), *rest)

        return jax.vmap(one, in_axes=(in_axes[0], None, *in_axes[1:]))(state, shared, *rest)

    return fn


def _compile(spec: RunSpec, algorithm, kind: str, size: int, length: int, sharding: NamedSharding, args,
             eval_algorithm: Any = None):
    """A compiled init (kind "init") or chunk of `length` updates for `size` runs; cached per process.

    Without `spec.eval_every` a chunk is `chunk(state, hparams) -> (state, metrics)`,
    the scan of `algorithm.update`. With it, `chunk(state, hparams, eval_keys,
    first_update, best) -> (state, metrics, best)` scans `periodic_eval.make_update`'s
    update over the update indices first_update, first_update + 1, ...: an
    unbatched scalar, replicated, so the evaluation's `lax.cond` stays a branch
    under the vmap over runs; `best` (a `periodic_eval.BestPolicy` per run)
    follows `periodic_eval.keep_best` through every update. `eval_algorithm`:
    the algorithm whose env the evaluations play (`_program`).

    A chunk's program takes its state donated: the new state is written over
    the old one's memory, so a chunk holds one train state, not two (an
    off-policy state is mostly its replay buffers). A caller that needs the
    state from before a chunk passes a copy (`train` does when that state is not
    yet saved).
    """
    evaluating = kind == "chunk" and spec.eval_every is not None
    cache_key = (spec.algo, spec.config, kind, size, length, tuple(sharding.mesh.devices.flat)) + (
        (spec.eval_every, spec.eval_episodes) if evaluating else ())
    # A host env's programs call back into that env object: they are built for it, not cached.
    cache = {} if is_vectorized(algorithm.env) else _COMPILED
    if cache_key not in cache:
        in_shardings = (sharding, sharding)
        if evaluating:  # the first update's index is one scalar for every run
            in_shardings = (sharding, sharding, sharding, NamedSharding(sharding.mesh, PartitionSpec()), sharding)
        jitted = jax.jit(_program(spec, algorithm, kind, length, eval_algorithm), in_shardings=in_shardings,
                         out_shardings=sharding, donate_argnums=(0,) if kind == "chunk" else ())
        cache[cache_key] = _signals.compiled(jitted, *args)  # a signal's handler runs during XLA's compile
    return cache[cache_key]


def _program(spec: RunSpec, algorithm, kind: str, length: int, eval_algorithm: Any = None) -> Callable:
    """The function `_compile` jits, vmapped over the runs: the init (kind "init") or a chunk of `length` updates.

    The periodic evaluations play `eval_algorithm`'s env (a host env's other
    object, whose pool `train` builds once: training steps the one pool of
    `algorithm`'s env); None: `algorithm`'s own.
    """
    if kind == "init":
        return jax.vmap(lambda keys, hparams: _strong_types(algorithm.init(keys, hparams)))
    if spec.eval_every is not None:
        from jaxrl_rollout.periodic_eval import keep_best, make_update

        other = algorithm if eval_algorithm is None else eval_algorithm
        update = make_update(algorithm, spec.eval_every, spec.eval_episodes, eval_env=other.env,
                             eval_env_params=other.env_params)

        def chunk(state, hparams, eval_key, first_update, best):
            def step(carry, u):
                state, metrics = update(carry[0], hparams, u, eval_key)
                return (state, keep_best(carry[1], algorithm, state, metrics, u)), metrics

            indices = first_update + jnp.arange(length, dtype=jnp.int32)
            (state, best), metrics = jax.lax.scan(step, (state, best), indices)
            return state, metrics, best

        return _in_lockstep(chunk, in_axes=(0, 0, 0, None, 0))

    def chunk(state, hparams):
        return jax.lax.scan(lambda s, _: algorithm.update(s, hparams), state, None, length=length)

    return _in_lockstep(chunk, in_axes=(0, 0))


def _put(tree: Any, sharding: NamedSharding) -> Any:
    """`tree` (the same values on every process) laid out over `sharding`, which may span processes."""
    if sharding.is_fully_addressable:
        return jax.device_put(tree, sharding)

    def put(x):
        if prng.is_key(x):
            return jax.random.wrap_key_data(put(jax.random.key_data(x)), impl=jax.random.key_impl(x))
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree)


def _to_host(x) -> np.ndarray:
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def gather_state(states: Sequence[Any]) -> Any:
    """Concatenates per-group states into one host state (numpy leaves, PRNG keys rewrapped)."""
    flat = [checkpoint.flatten(s) for s in states]
    _, impls, treedef = flat[0]
    leaves = [np.concatenate([_to_host(f[0][i]) for f in flat]) for i in range(len(impls))]
    return checkpoint.unflatten(treedef, leaves, impls)


def _metric_arrays(metrics: Any) -> dict:
    return {k: _to_host(v) for k, v in metrics._asdict().items() if k != "env_steps"}


def _progress_line(spec: RunSpec, updates: int, rate: float, returns: np.ndarray, ended: np.ndarray,
                   pace: float | None = None, between: float = 0.0) -> str:
    """One chunk's line: steps, the chunk's env steps per second over all runs, time left, returns.

    The rate is the chunk's own (its compiled program, from dispatch to its
    metrics on the host; not the host work between chunks), not the average
    since the start, which in an off-policy run would fall for many chunks
    after the fast ones before `learning_starts`. `pace` is the seconds per
    update of the chunk just run, and `between` the seconds of host work
    (loggers, videos, checkpoints) expected before the run ends; the time left
    is the remaining updates at that pace plus `between` (the last chunk's
    pace, not the average: an off-policy run's chunks before
    `learning_starts` are much faster than the ones after, so `train` gives
    no pace for a chunk that ended before learning started). Without a pace,
    no time left is shown.
    """
    total = total_steps(spec.config)
    ret = returns_text(returns, ended)
    remaining = spec.config.num_updates - updates
    left = f"  ~{_duration(pace * remaining + between)} left" if remaining > 0 and pace is not None else ""
    return (f"  step {steps_at(spec.config, updates):>{len(f'{total:,}')},}/{total:,} "
            f"({100 * updates / spec.config.num_updates:5.1f}%)"
            f"  {rate:,.0f} steps/s{left}  {ret}")


def _duration(seconds: float) -> str:
    """'45s', '12m03s', '2h05m': a time left, to the second under an hour."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _last_eval(metrics: dict, first_update: int) -> tuple[int, np.ndarray] | None:
    """(update number from 1, [R] eval returns) of the last update in `metrics` ([R, U]) with an evaluation."""
    done = np.flatnonzero(~np.isnan(metrics["eval_return"]).all(axis=0))
    if not done.size:
        return None
    return first_update + int(done[-1]) + 1, metrics["eval_return"][:, done[-1]]


def _eval_text(spec: RunSpec, update: int, returns: np.ndarray) -> str:
    """The progress line's evaluation part, e.g. "  eval 480.2 +- 12.1 (step 40,960)" (the spread over runs; one
    run's evaluation stands alone: "  eval 480.2 (step 40,960)")."""
    finite = returns[np.isfinite(returns)]
    value = f"{finite.mean():z.1f}" + (f" +- {finite.std():z.1f}" if finite.size > 1 else "") if finite.size else "n/a"
    return f"  eval {value} (step {steps_at(spec.config, update):,})"


def _host_share(start: HostStats, now: HostStats, elapsed: float, eval_start: HostStats | None = None,
                eval_now: HostStats | None = None) -> str:
    """The progress line's host env part: training's host env steps/s and its share of the time since `start`;
    with the periodic evaluations' own host env (`eval_start`, `eval_now`), theirs too, e.g.
    "  (host env 18,223 steps/s, 44% of the time; evaluation 9,840 steps/s, 16%)"."""

    def part(start: HostStats, now: HostStats) -> tuple[str, str]:
        seconds = now.seconds - start.seconds
        rate = (now.env_steps - start.env_steps) / seconds if seconds > 0 else float("nan")
        share = 100 * seconds / elapsed if elapsed > 0 else float("nan")
        return f"{rate:,.0f} steps/s", f"{share:.0f}%"

    rate, share = part(start, now)
    evaluation = ""
    if eval_start is not None and eval_now is not None and eval_now.env_steps > eval_start.env_steps:
        evaluation = "; evaluation {}, {}".format(*part(eval_start, eval_now))
    return f"  (host env {rate}, {share} of the time{evaluation})"


class _ProgressBar:
    """A rich progress bar with ETA under the progress lines, for a terminal (no refresh thread)."""

    def __init__(self, stream, spec: RunSpec, updates_done: int):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._config = spec.config
        self._progress = Progress(
            TextColumn("  training"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[ret]}"),
            console=Console(file=stream, force_terminal=True), auto_refresh=False, transient=False,
        )
        self._task = self._progress.add_task("train", total=total_steps(spec.config),
                                             completed=steps_at(spec.config, updates_done), ret="")
        self._progress.start()

    def line(self, text: str) -> None:
        self._progress.console.print(text, highlight=False, markup=False)
        self._progress.refresh()

    def update(self, updates_done: int, returns: np.ndarray) -> None:
        finite = returns[np.isfinite(returns)]
        ret = f"return {finite.mean():z.1f}" if finite.size else ""
        self._progress.update(self._task, completed=steps_at(self._config, updates_done), ret=ret)
        self._progress.refresh()

    def close(self) -> None:
        self._progress.stop()



_NETWORK_NAMES = {"ActorCriticMLP": "mlp", "ActorCriticCNN": "cnn", "ActorCriticNatureCNN": "nature-cnn",
                  "ActorCriticGRU": "gru", "ActorCriticMultiInput": "multi-input",
                  "QNetwork": "mlp"}  # DQN's and PQN's MLPs


def network_name(module: Any) -> str:
    """A short name for an algorithm's network ("mlp", "cnn", "nature-cnn", "gru", "multi-input"), else its class
    name."""
    if type(module).__name__ == "QNetworkCNN":  # DQN's and PQN's, its torso by the image size
        return "nature-cnn" if module.nature else "cnn"
    if type(module).__name__ in ("SACActor", "TD3Actor"):  # their image torso (`networks.CNNTorso`) or the MLP
        return "mlp" if module.torso is None else "nature-cnn" if module.torso.nature else "cnn"
    return _NETWORK_NAMES.get(type(module).__name__, type(module).__name__)


def train(spec: RunSpec, folder=None, *, resume: bool = False, devices: int | None = None,
          checkpoint_every: int = 5, stop_after_chunks: int | None = None,
          progress: Any = True, on_chunk: Callable[[dict, int], None] | None = None,
          on_save: Callable[[int], None] | None = None,
          on_state: Callable[[Any, int], None] | None = None) -> RunResult:
    """Trains every run of `spec` in jitted chunks; saves checkpoints to `folder` if given.

    Args:
      spec: the sweep.
      folder: where checkpoints go (made for a new run); None trains without
        saving. A new run also writes the spec there as config.json when the
        folder has none (the command line writes it first), so `load_run`,
        `jaxrl-rollout evaluate` and `--resume` open a folder trained here; a
        folder that holds a checkpoint, or another run's config.json, is
        refused (pass resume=True to continue a run). An extended run (resume
        with a larger total) rewrites config.json after its first save.
      resume: continue from the checkpoint in `folder`, which must be of the
        same spec (checked against the spec saved with the checkpoint, and its
        structure, shapes and dtypes), except that `spec.config.total_timesteps`
        may be larger, to train longer: the run continues in chunks of
        `chunk_updates` up to the new total (`continued_lengths`). With
        `anneal_lr` the learning rate then follows the new total's schedule,
        lr * (1 - u / new updates) at update u, from the resumed update on: it
        rises again after a finished run's decay, so the extended run is not
        the same as a run started with the new total. A resumed run ends bit-identical
        to an uninterrupted one with the same spec on the same devices, except
        with a host env, whose envs restart their episodes at the resume
        (`reopen_host_envs`).
      devices: how many devices to shard each group over (None: the most that
        divide every group).
      checkpoint_every: save after every this many chunks (and after the last,
        and when stopping early or on KeyboardInterrupt).
      stop_after_chunks: stop (with a checkpoint) after this many chunks in this
        call, as if interrupted; for tests and for splitting a run across jobs.
      progress: True for progress lines on sys.stderr, a stream, or None / False for silence.
        When the stream is a terminal, a progress bar with ETA runs below the lines.
      on_chunk: called on process 0 after every chunk, on the host, as
        `on_chunk(metrics, first_update)` with the chunk's metrics (name ->
        [R, chunk updates] numpy arrays) and the updates done before it (a
        logger's hook, e.g. `loggers.TensorBoardLogger.log_chunk`).
      on_save: called on process 0 after every checkpoint save with the chunks
        done (the command line rewrites config.json after an extended run's first save).
      on_state: called after every chunk (after `on_chunk`) as
        `on_state(get_state, updates_done)`, where `get_state()` returns every
        run's train state, leaves [R, ...] on the devices (a sweep's groups are
        merged only when it is called); `video.TrainingVideos` records episodes
        of the current policies with it. Single-process runs only. Call
        `get_state()` during the hook, not after it: the next chunk writes its
        state over this one's memory (`_compile`), so arrays kept from it are
        deleted then; copy what must outlive the hook (`jnp.copy`, `jax.device_get`).

    Returns:
      A `RunResult`.

    Raises:
      StatesTooLarge: on a CPU (one process), when the runs' train states, the
        copy of them a chunk between checkpoints is given, or a chunk's
        working memory cannot fit in the host's free memory; checked before
        the states are made (or read from the checkpoint) and before the first
        chunk runs.
      SaveFailed: a checkpoint could not be saved (a full disk); the folder
        keeps the one before it.
    """
    from jaxrl_rollout._checks import check_positive_int

    check_positive_int("checkpoint_every", checkpoint_every)
    if stop_after_chunks is not None:
        check_positive_int("stop_after_chunks", stop_after_chunks)
    if devices is not None:
        check_positive_int("devices", devices)
    if not (isinstance(progress, bool) or progress is None or callable(getattr(progress, "write", None))):
        raise TypeError(f"progress must be True, False, None or a stream with write(), got {progress!r}.")
    if resume and folder is None:
        raise ValueError("resume needs the folder of the run to continue.")
    if folder is not None:
        folder = _run_folder(folder, spec, resume)
    if on_state is not None and jax.process_count() > 1:
        raise ValueError("on_state needs a single-process run: a process cannot read the others' runs' states.")
    algorithm = make_algorithm(spec)
    host = host_env(algorithm.env)
    check_host_run(spec, devices=devices, env=algorithm.env)
    groups = spec.groups
    # A host env's runs share one ordered host callback, which runs on one device.
    chosen = jax.devices()[:1] if host is not None else choose_devices([b - a for a, b in groups], devices)
    mesh = Mesh(np.asarray(chosen), ("runs",))
    sharding = NamedSharding(mesh, PartitionSpec("runs"))
    keys, hparams = spec.run_keys(), spec.run_hparams()
    take = lambda tree, a, b: _put(jax.tree.map(lambda x: x[a:b], tree), sharding)  # noqa: E731
    group_hparams = [take(hparams, a, b) for a, b in groups]
    evaluating = spec.eval_every is not None
    # A host env's periodic evaluations play one pool of their own (every chunk length's program calls into it):
    # its steps and seconds are the progress line's evaluation share.
    eval_algorithm = make_algorithm(spec) if evaluating and host is not None else None
    eval_host = host_env(eval_algorithm.env) if eval_algorithm is not None else None
    if evaluating:
        eval_keys = spec.eval_keys()
        group_eval = [(take(eval_keys, a, b),) for a, b in groups]
        at_update = lambda u: (_put(jnp.int32(u), NamedSharding(mesh, PartitionSpec())),)  # noqa: E731
    else:
        group_eval, at_update = [() for _ in groups], lambda u: ()  # noqa: E731
    lengths = spec.chunk_lengths
    stream = sys.stderr if progress is True else progress
    say = (lambda line: print(line, file=stream, flush=True)) if stream and jax.process_index() == 0 else (
        lambda line: None)
    bar = None

    # SIGINT / SIGTERM / SIGHUP stop at a chunk boundary; however `train` ends, its host envs' pools are closed
    with StopSignals(lambda line: say(line)) as signals, _closing(host, eval_host):
        compile_start = time.perf_counter()
        states, loaded_best = None, None
        bests = [None] * len(groups)  # each group's best policies (`periodic_eval.keep_best`), with eval_every
        # One [R, ...] state for checkpoints, laid out over the same mesh as the groups' states.
        concatenate = _state_joiner(sharding)

        def merge(parts):
            """The groups' states as one [R, ...] state (a single group's as it is)."""
            return parts[0] if len(parts) == 1 else concatenate(*parts)

        spec_unsaved = False  # config.json holds a smaller total than `spec` (a run extended here)
        if resume:
            saved_manifest = checkpoint.read_manifest(folder)
            check_checkpoint_spec(folder, spec, saved_manifest, ignore=("config.total_timesteps",), given=True)
            spec_unsaved = ((folder / "config.json").exists()
                            and bool(spec_differences(read_spec(folder).to_json(), spec.to_json())))
            template = _state_template(spec, algorithm, saved_manifest)
            _check_states_fit(spec, [template[0] if saved_manifest["meta"].get(BEST_POLICY) else template], mesh,
                              copied=checkpoint_every > 1, resumed=True)
            loaded, loaded_best, extras, manifest = _load_saved(folder, spec, algorithm, saved_manifest, sharding,
                                                                template)
            del template
            chunks_done = manifest["meta"]["chunks_done"]
            lengths = continued_lengths(spec, chunks_done, manifest["meta"]["updates_done"])
            states = _split_runs(loaded, groups, sharding)
            del loaded  # `states` are the only reference: the first chunk takes their memory (`_compile`)
            if loaded_best is not None:
                bests = _split_runs(loaded_best, groups, sharding)
            metrics = {k[len("metrics/"):]: v for k, v in extras.items() if k.startswith("metrics/")}
            if host is not None and chunks_done < len(lengths):
                reopen = jax.jit(jax.vmap(lambda state: reopen_host_envs(algorithm, state)),
                                 in_shardings=sharding, out_shardings=sharding)
                states = [reopen(state) for state in states]
        else:
            chunks_done, metrics = 0, {}
            if folder is not None and jax.process_index() == 0 and not (pathlib.Path(folder) / "config.json").exists():
                write_spec(folder, spec)  # as the command line writes it first: load_run, evaluate, --resume read it
        try:
            take_failure()  # one of an earlier program, already reported
            with _signals.at_once():  # no chunk in flight, nothing new to save: a signal while compiling stops at once
                if states is None:
                    inits = [_compile(spec, algorithm, "init", b - a, 0, sharding, (take(keys, a, b), h))
                             for (a, b), h in zip(groups, group_hparams)]
                    _check_states_fit(spec, _group_shapes(inits, algorithm, spec, groups), mesh,
                                      copied=folder is not None and checkpoint_every > 1)
                    states = [init(take(keys, a, b), h) for init, (a, b), h in zip(inits, groups, group_hparams)]
                    del inits
                if evaluating and loaded_best is None:  # a new run, or one resumed from a checkpoint that kept none
                    from jaxrl_rollout.periodic_eval import no_best

                    if resume:
                        say(f"  {folder}'s checkpoint keeps no best policy (saved by a version that kept none): the best "
                            "policy is kept from this resume on")
                    start = jax.jit(jax.vmap(lambda state: no_best(algorithm, state)), out_shardings=sharding)
                    bests = [start(state) for state in states]
                # (a comprehension: no loop variable is left holding a group's first state for the whole run)
                executables = {(b - a, length): _compile(spec, algorithm, "chunk", b - a, length, sharding,
                                                         (state, h, *e, *at_update(0), *_given(best)), eval_algorithm)
                               for length in sorted(set(lengths[chunks_done:]))
                               for (a, b), state, h, e, best in zip(groups, states, group_hparams, group_eval, bests)}
                _signals.ready_time(states)  # the init's run, waited for where a handler runs
                _check_chunks_fit(spec, states, executables.values(), mesh, copied=folder is not None and
                                  checkpoint_every > 1, resumed=resume)
        except BaseException as error:
            stopped = stopped_at_once()  # a signal raised inside a host env's reset comes out of JAX as an error
            if not isinstance(error, KeyboardInterrupt) and stopped is None:
                if isinstance(error, RuntimeError):  # a host env's own reset raised: its `HostEnvError`, as in a chunk
                    raise_kept_failure()
                raise
            say("  interrupted while compiling" + (f"; its checkpoint is in {folder}" if resume else ""))
            if not isinstance(error, KeyboardInterrupt):
                raise Interrupted(stopped) from error
            raise
        compile_s = time.perf_counter() - compile_start
        updates_done = sum(lengths[:chunks_done])
        if chunks_done and lengths != spec.chunk_lengths:  # an extended run: its done chunks' sizes are not kept
            left = lengths[chunks_done:]
            chunks = (f"{chunks_done} chunk{'s' if chunks_done != 1 else ''} done ({updates_done:,} update"
                      f"{'s' if updates_done != 1 else ''})" + (f", {_chunks_text(left)} to go" if left else ""))
        else:
            chunks = _chunks_text(lengths) + (f", resuming after chunk {chunks_done}" if chunks_done else "")
        say(f"  compile {compile_s:.1f} s; network {network_name(algorithm.module)}"
            + (" (chosen by network=auto)" if getattr(spec.config, "network", None) == "auto" else "")
            + f"; {spec.num_runs} run{'s' if spec.num_runs != 1 else ''} in {len(groups)} group(s) over {mesh.size} "
            f"{mesh.devices.flat[0].platform} device(s); {chunks}" + _replay_text(states, spec.num_runs))
        if chunks_done and chunks_done == len(lengths):
            say(f"  the run is complete ({updates_done:,} update{'s' if updates_done != 1 else ''}): nothing left to "
                f"train; its summary follows (to train it longer: jaxrl-rollout train --resume {shlex.quote(str(folder))} "
                "--total-steps N)")
        if resume and host is not None and chunks_done < len(lengths):
            say(f"  {spec.config.env_id} is a host env, whose state is not in the checkpoint: every env starts a new "
                "episode now (the episodes in progress at the checkpoint are dropped)")

        def save(state_list, stopped_by=None):
            nonlocal spec_unsaved
            if folder is None:
                return
            # Every process saves its shards of the global state (Orbax); metrics are the same on all.
            signals.saving = True  # a signal now only asks to stop: the save is never cut short
            try:
                # with eval_every the best policies are saved with the state, in one commit: (state, best)
                checkpoint.save(folder, chunks_done, (merge(state_list), merge(bests)) if evaluating else merge(state_list),
                                {f"metrics/{k}": v for k, v in metrics.items()},
                                {"chunks_done": chunks_done, "updates_done": updates_done, "spec": spec.to_json(),
                                 **({BEST_POLICY: True} if evaluating else {})})
            except checkpoint.CheckpointError as error:  # a full disk: the message says what the folder keeps
                raise SaveFailed(str(error), chunks_done, last_saved, stopped_by) from error
            finally:
                signals.saving = False
            # an extended run: config.json follows its checkpoint; a folder removed while it trains is written
            # again by Orbax, and config.json with it (`evaluate` and `--resume` read it)
            if (spec_unsaved or not (folder / "config.json").exists()) and jax.process_index() == 0:
                write_spec(folder, spec)
                spec_unsaved = False
            if on_save is not None and jax.process_index() == 0:
                on_save(chunks_done)

        run_start = time.perf_counter()
        host_start = host.stats() if host is not None else None
        eval_start = eval_host.stats() if eval_host is not None else None
        last_saved, ran = chunks_done, 0
        copy_state = _state_copier(sharding)
        # Host work between chunks (TensorBoard and W&B writes, videos, checkpoints): timed apart from the chunks,
        # so a chunk's steps/s is its own and the time left adds that work at its mean so far.
        between_s, between_n, computed = 0.0, 0, None
        chunks_s = 0.0  # the chunks' own seconds, summed (the summary's steps/s; `between_s` is the rest's)
        last_eval = _last_eval(metrics, 0) if "eval_return" in metrics else None  # a resumed run's last one
        if stream and jax.process_index() == 0 and getattr(stream, "isatty", lambda: False)():
            bar = _ProgressBar(stream, spec, updates_done)
            say = bar.line
        try:
            while chunks_done < len(lengths) and (stop_after_chunks is None or ran < stop_after_chunks):
                if signals.requested:
                    raise Interrupted(signals.requested)
                length = lengths[chunks_done]
                dispatched = time.perf_counter()
                if computed is not None:
                    between_s, between_n = between_s + dispatched - computed, between_n + 1
                # A chunk takes its state's memory (donated). When that state is not yet on disk, a second Ctrl-C
                # or a diverged chunk saves it, so the chunk is given a copy and `states` stays whole.
                given = [copy_state(s) for s in states] if folder is not None and chunks_done > last_saved else states
                dispatch = lambda: [executables[b - a, length](s, h, *e, *at_update(updates_done), *_given(best))  # noqa: E731
                                    for (a, b), s, h, e, best in zip(groups, given, group_hparams, group_eval, bests)]
                # signals are handled while the chunk runs, not only after it (a host env's chunk runs inside its
                # dispatch, waited for from a helper thread; its pools abandoned if interrupted)
                outputs = run_interruptibly(dispatch, host, eval_host)
                del given  # a copy's memory is the chunk's output now
                _signals.wait_ready(outputs)
                chunk = [_metric_arrays(out[1]) for out in outputs]
                chunk = {k: np.concatenate([c[k] for c in chunk]) for k in chunk[0]}
                computed = time.perf_counter()
                try:
                    check_finite(spec, chunk, updates_done)
                except Diverged as diverged:
                    if chunks_done > last_saved:  # the chunks before this one were finite: keep them
                        save(states, stopped_by=diverged)
                    kept = f"; the checkpoint after chunk {chunks_done} (update {updates_done}) in {folder} " \
                           "is the last finite state" if folder is not None and chunks_done else ""
                    say(f"  stopped: {diverged}{kept}")
                    raise
                # Only now, with every group's chunk done, does the run advance: an interrupt
                # before this point leaves `states` at the last whole chunk.
                states = [out[0] for out in outputs]
                bests = [out[2] if evaluating else None for out in outputs]
                # zeros for a metric that is new since the checkpoint was written
                metrics = {k: np.concatenate([metrics.get(k, np.zeros((v.shape[0], updates_done), v.dtype)), v],
                                             axis=1) for k, v in chunk.items()}
                chunks_done, updates_done, ran = chunks_done + 1, updates_done + length, ran + 1
                chunk_steps = length * spec.config.steps_per_update * spec.num_runs
                returns = chunk_return(chunk)
                seconds = computed - dispatched
                chunks_s += seconds
                rate = chunk_steps / seconds if seconds > 0 else float("nan")
                elapsed, pace = computed - run_start, seconds / length
                if "eval_return" in chunk:
                    last_eval = _last_eval(chunk, updates_done - length) or last_eval
                # An off-policy chunk with any update before learning started (`trained` False) ran faster than the
                # rest will: no time left from its pace. (CleanRL's SAC in 100 chunks: the first chunk, half of it
                # warm-up, ran at 549 steps/s and the second at 288 on 2 cores, ~2h00m left against ~3h46m.)
                warming = "trained" in chunk and not np.all(chunk["trained"])
                say(_progress_line(spec, updates_done, rate, returns, chunk["num_episodes"].sum(1) > 0,
                                   None if warming else pace,
                                   (between_s / between_n if between_n else 0.0) * (len(lengths) - chunks_done))
                    + (_eval_text(spec, *last_eval) if last_eval else "")
                    + (_host_share(host_start, host.stats(), elapsed, eval_start,
                                   eval_host.stats() if eval_host is not None else None) if host is not None else ""))
                if bar is not None:
                    bar.update(updates_done, returns)
                if on_chunk is not None and jax.process_index() == 0:
                    on_chunk(chunk, updates_done - length)
                if on_state is not None:
                    on_state(lambda parts=tuple(states): merge(parts), updates_done)
                if chunks_done % checkpoint_every == 0 or chunks_done == len(lengths):
                    save(states)
                    last_saved = chunks_done
            if signals.requested and chunks_done < len(lengths):  # arrived during the last chunk of this call
                raise Interrupted(signals.requested)
            # or during the run's last chunk: it is complete, and saved below; the request stays, for a caller
            # with closing work of its own (the command line's evaluation) to act on (`_signals.at_once`)
        except BaseException as error:
            # a second Ctrl-C whose handler ran inside a host env's step (an io_callback) comes out of JAX as a
            # runtime error: an interruption all the same, reported as one below
            stopped = stopped_at_once()
            if not isinstance(error, KeyboardInterrupt) and stopped is None:
                raise
            interruption = error if isinstance(error, KeyboardInterrupt) else Interrupted(stopped)
            saved = ""
            if chunks_done > last_saved:
                save(states, stopped_by=interruption)
                saved = f"; checkpoint saved in {folder}" if folder else ""
            elif folder:  # saved after that chunk already, or the checkpoint resumed from, before any chunk here ran
                saved = f"; its checkpoint is in {folder}"
            say(f"  interrupted after chunk {chunks_done}{saved}" if chunks_done else
                "  interrupted before the first chunk")
            if interruption is not error:
                raise interruption from error
            raise
        finally:
            if bar is not None:
                bar.close()
        if chunks_done > last_saved:
            save(states)
        run_s = time.perf_counter() - run_start
        merged = merge(states)
        updates_run = sum(lengths[chunks_done - ran:chunks_done])
        return RunResult(merged, metrics, updates_done, updates_run, chunks_done, chunks_done == len(lengths),
                         compile_s, run_s, mesh.size, len(lengths), merge(bests) if evaluating else None, chunks_s)


def _split_runs(tree: Any, groups: list, sharding: NamedSharding) -> list:
    """Each group's (a, b) runs a to b of `tree` (leaves [R, ...] laid out over `sharding`), laid out the same
    way; a single group's tree as it is."""
    if len(groups) == 1:
        return [tree]
    return [_state_slicer(a, b, sharding)(tree) for a, b in groups]


def _given(value: Any) -> tuple:
    """(value,), or () for None: a chunk's optional last argument."""
    return () if value is None else (value,)


def _train_state_shapes(spec: RunSpec, algorithm) -> Any:
    """The shapes of every run's train state (leading axis: the runs), traced, not run."""
    return jax.eval_shape(jax.vmap(algorithm.init), spec.run_keys(), spec.run_hparams())


def _state_template(spec: RunSpec, algorithm, manifest: dict) -> Any:
    """The shapes of the state a checkpoint holds: every run's train state, paired with their best policies
    (`periodic_eval.BestPolicy`) where the manifest says the run kept them (`BEST_POLICY`)."""
    template = _train_state_shapes(spec, algorithm)
    if not manifest["meta"].get(BEST_POLICY):
        return template
    from jaxrl_rollout.periodic_eval import no_best

    return template, jax.eval_shape(jax.vmap(lambda state: no_best(algorithm, state)), template)


BEST_POLICY = "best_policy"
"""The checkpoint meta flag of a run that keeps every run's best evaluated policy (runs with `eval_every`):
its checkpoint's tree is (train state, `periodic_eval.BestPolicy`), both with leaves [R, ...]."""


def _runs_near(folder: pathlib.Path, most: int = 5) -> str:
    """For a folder without a run: the run folder above it (its checkpoints/, say) or the run folders in it."""
    above = next((p for p in list(folder.absolute().parents)[:3] if (p / "config.json").is_file()), None)
    if above is not None:  # e.g. FOLDER/checkpoints/5, written as it was given (relative or absolute)
        return f" It is inside the run {above if folder.is_absolute() else os.path.relpath(above)}."
    try:
        inside = sorted(p for p in folder.iterdir() if (p / "config.json").is_file())
    except OSError:  # missing, not a folder, unreadable: the message says what is missing
        return ""
    if not inside:
        return ""
    names = ", ".join(str(p) for p in inside[:most]) + (f" and {len(inside) - most} more" if len(inside) > most else "")
    return f" The runs in it: {names}."


def _bytes_text(n: float) -> str:
    """A size in bytes as "564 MB", "4.5 GB" (decimal units, two or three figures)."""
    for unit in ("B", "kB", "MB"):
        if n < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} GB" if n < 1000 else f"{n:,.0f} GB"


def _group_shapes(inits: list, algorithm, spec: RunSpec, groups: list) -> list:
    """The shapes of what each group's compiled init (runs a to b) makes: its `out_info`, or, where JAX cannot give
    that (a program with host callbacks: its output layouts are not known), every run's state traced once and its
    leading axis cut to the group's runs."""
    shapes, whole = [], None
    for init, (a, b) in zip(inits, groups):
        try:
            shapes.append(init.out_info)
            continue
        except (AssertionError, AttributeError, NotImplementedError):
            pass
        if whole is None:
            whole = _train_state_shapes(spec, algorithm)
        shapes.append(jax.tree.map(lambda s, n=b - a: jax.ShapeDtypeStruct((n, *s.shape[1:]), s.dtype), whole))
    return shapes


class SaveFailed(checkpoint.CheckpointError):
    """`train` could not save a checkpoint (a full disk, a folder made read-only): the run stopped there.

    The folder keeps its last committed checkpoint whole (Orbax commits a new one only once it is written),
    after `last_saved` chunks (0: none yet), and `train(spec, folder, resume=True)` continues from it (or starts
    the run again). `chunks_done`: the chunks trained when the save failed. `stopped_by`: what stopped the run
    and asked for this save, if not the schedule: an interruption (a KeyboardInterrupt, `Interrupted` for a
    signal) or a `Diverged` next chunk; the message says it too.
    """

    def __init__(self, reason: str, chunks_done: int, last_saved: int, stopped_by: BaseException | None = None):
        kept = (f"its checkpoint after chunk {last_saved} is kept" if last_saved else "no checkpoint was saved before")
        if isinstance(stopped_by, Diverged):
            why = (f"{stopped_by.finding}; the run stopped after chunk {chunks_done}, the last finite one, and {kept}. "
                   f"{Diverged.ADVICE}")
        elif isinstance(stopped_by, KeyboardInterrupt):
            name = getattr(stopped_by, "signal_name", None)
            why = f"the run was interrupted{f' ({name})' if name else ''} after chunk {chunks_done}, and {kept}"
        else:
            why = f"the run stopped after chunk {chunks_done}, and {kept}"
        super().__init__(f"{reason}; {why}")
        self.chunks_done, self.last_saved, self.stopped_by = chunks_done, last_saved, stopped_by


class StatesTooLarge(ValueError):
    """A CPU run that cannot fit in the host's free memory, refused before its states are made or its first chunk
    runs (`train`): `need`, the bytes it asked (its states, twice them with the copy between checkpoints, or a
    chunk's working memory and that copy), and `free`, the host's."""

    def __init__(self, message: str, need: int, free: int):
        super().__init__(message)
        self.need, self.free = need, free


# `train`'s jitted moves of whole states, one per layout (and slice), so that a later `train` call of the same
# shapes (a notebook's) compiles none of them again: jitted anew in each call, each was compiled again.
@functools.lru_cache(maxsize=8)
def _state_copier(sharding) -> Callable:
    """The copy of the runs' states that a chunk between checkpoints is given, laid out over `sharding`."""
    return jax.jit(lambda state: jax.tree.map(jax.numpy.copy, state), out_shardings=sharding)


@functools.lru_cache(maxsize=8)
def _state_joiner(sharding) -> Callable:
    """The groups' states joined into one [R, ...] state along the runs axis, laid out over `sharding`."""
    return jax.jit(lambda *parts: jax.tree.map(lambda *xs: jax.numpy.concatenate(xs), *parts), out_shardings=sharding)


@functools.lru_cache(maxsize=32)
def _state_slicer(a: int, b: int, sharding) -> Callable:
    """Runs a to b of an [R, ...] state, laid out over `sharding` (`_split_runs`)."""
    return jax.jit(lambda tree: jax.tree.map(lambda x: x[a:b], tree), out_shardings=sharding)


def _free_to_check(platform: str) -> int | None:
    """The host's free memory in bytes that a CPU run in one process is checked against (`_memory.free_host_bytes`),
    or None where nothing is checked: an accelerator's allocator refuses what it cannot hold (RESOURCE_EXHAUSTED, one
    line at the CLI), a multi-process run's hosts are not read, and a host whose free memory is not known."""
    from jaxrl_rollout import _memory

    if platform != "cpu" or jax.process_count() > 1:
        return None
    return _memory.free_host_bytes()


def _temp_bytes(programs) -> int | None:
    """The largest working memory (XLA's temp buffers) of compiled `programs` on this host, or None where the
    backend or a program gives no analysis (nothing known: nothing is refused).

    XLA's analysis is of one device's share of a program; the host's CPU devices (`devices.use_host_cores`) all
    take theirs from its one memory, so a program sharded over N of them works in N times that (a vmapped program
    over 4 runs: 64 MB on one device, 32 MB reported for each of 2; jaxlib 0.10.2, 2026-12-07)."""
    try:
        return max(program.memory_analysis().temp_size_in_bytes * _local_devices(program) for program in programs)
    except Exception:
        return None


def _local_devices(program) -> int:
    """How many of this process's devices a compiled program runs on (those its inputs are laid out over)."""
    shardings = jax.tree.leaves(program.input_shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding))
    return max((len(s.addressable_devices) for s in shardings), default=1)


def _cannot_fit(free: int, what: str = "run") -> str:
    """The opening of a StatesTooLarge message: the free memory and where it was read."""
    return (f"this {what} cannot fit in the {_bytes_text(free)} of memory free on this machine (/proc/meminfo's "
            f"MemAvailable and SwapFree, or its cgroup's limit)")


def _check_states_fit(spec: RunSpec, states: list, mesh: Mesh, copied: bool, resumed: bool = False) -> None:
    """Refuses, before they are made, the runs' train states that cannot fit in the host's free memory (a CPU
    run in one process): the kernel would end the process when it filled them, with no message. `states`: the
    shapes of each group's state (a compiled init's `out_info`, or a checkpoint's template); `copied`: a chunk
    between checkpoints is given a copy of the states (`train`); `resumed`: loaded from a checkpoint, whose config
    a resume keeps."""
    from jaxrl_rollout import _memory

    free = _free_to_check(mesh.devices.flat[0].platform)
    need = sum(_memory.tree_bytes(s) for s in states)
    if free is None or need * (2 if copied else 1) <= free:
        return
    buffers = sum(_memory.tree_bytes(s.buffer) for s in states if hasattr(s, "buffer"))
    runs = f"{spec.num_runs} run{'s' if spec.num_runs != 1 else ''}"
    held = (f"the train states of its {runs} take {_bytes_text(need)}"
            + (f" ({_bytes_text(buffers / spec.num_runs)} of replay buffers per run)" if buffers else ""))
    if resumed:  # (its config is the checkpoint's)
        lower = "free memory on this machine, or resume the run on one with more"
    elif buffers:
        lower = "lower buffer_size (--buffer-size) or train fewer runs (--seeds, the grid)" + (
            "" if getattr(spec.config, "optimize_memory_usage", True) else
            ", or store each observation once (optimize_memory_usage, --optimize-memory-usage true)")
    else:
        lower = "lower num_envs (--num-envs) or train fewer runs (--seeds, the grid)"
    where = f"{_cannot_fit(free)}: {held}"
    if copied and need <= free:  # one state fits: the copy between checkpoints does not
        raise StatesTooLarge(f"{where}, and a chunk between checkpoints is given a copy of them (a second Ctrl-C then "
                             f"saves the last whole chunk), {_bytes_text(2 * need)} in all; checkpoint_every=1 "
                             f"(--checkpoint-every 1) keeps one state, or {lower}.", need, free)
    copy = ", and twice that with the copy a chunk between checkpoints is given" if copied else ""
    raise StatesTooLarge(f"{where}{copy}; {lower}.", need, free)


def _check_chunks_fit(spec: RunSpec, states: list, chunks, mesh: Mesh, copied: bool, resumed: bool) -> None:
    """After the states are made (`_check_states_fit`), refuses a CPU run whose chunk programs' working memory
    (XLA's temp buffers: rollouts, minibatches, activations), beside the copy of the states a chunk between
    checkpoints is given, cannot fit in what is free now: one temp allocation past the machine's memory is
    XLA's own out-of-memory error, but one under it is granted and the kernel ended the process as it filled it."""
    from jaxrl_rollout import _memory

    free = _free_to_check(mesh.devices.flat[0].platform)
    work = None if free is None else _temp_bytes(chunks)
    if work is None:
        return
    copy = _memory.tree_bytes(states) if copied else 0
    if work + copy <= free:
        return
    held = f"each chunk works in {_bytes_text(work)} (XLA's temp buffers: its rollouts, minibatches and activations)"
    if copy:
        held += f", beside a copy of the runs' train states ({_bytes_text(copy)}) between checkpoints"
    sizes = "num_envs (--num-envs) or num_steps (--num-steps)"
    if spec.eval_every is not None and spec.eval_episodes > 10:  # (more than the default: it may be what asks)
        sizes = (f"num_envs (--num-envs), num_steps (--num-steps) or eval_episodes (--eval-episodes: each periodic "
                 f"evaluation plays its {spec.eval_episodes:,} episodes of every run at once)")
    lower = ("free memory on this machine, or resume the run on one with more" if resumed else
             f"lower {sizes}, or train fewer runs at once (max_parallel, --max-parallel N)")
    if copy:
        lower = f"checkpoint_every=1 (--checkpoint-every 1) saves each chunk's state instead of copying it, or {lower}"
    raise StatesTooLarge(f"{_cannot_fit(free)}, its train states made: {held}; {lower}.", work + copy, free)


def _check_program_fits(program, what: str, held: str, lower: str) -> None:
    """Refuses, before it runs, a compiled program whose working memory (XLA's temp buffers) cannot fit in the
    host's free memory, on a CPU in one process, as `_check_chunks_fit` a chunk: the kernel would end the process
    as it filled them (one allocation past the machine's memory is XLA's own error). The message: "this `what`
    cannot fit ...: it works in N (XLA's temp buffers: `held`); `lower`."."""
    free = _free_to_check(jax.default_backend())
    work = None if free is None else _temp_bytes([program])
    if work is not None and work > free:
        raise StatesTooLarge(f"{_cannot_fit(free, what)}: it works in {_bytes_text(work)} (XLA's temp buffers: "
                             f"{held}); {lower}.", work, free)


def _check_evaluation_fits(program, num_episodes: int, num_runs: int, option: str) -> None:
    """`_check_program_fits` of a compiled evaluation (every episode of every run at once, as the command line's
    `evaluate`, `train`'s closing evaluation and `rollout` play them); `option`: the command line's option of
    `num_episodes`."""
    runs = f"each of its {num_runs} runs" if num_runs != 1 else "its policy"
    _check_program_fits(program, "evaluation", f"the {num_episodes:,} episodes of {runs}, played at once",
                        f"lower {option}")


def _replay_text(states: list, num_runs: int) -> str:
    """"; replay buffers 564 MB per run (4.51 GB in all)" for an off-policy run, whose state holds a replay buffer
    (DQN, SAC, TD3; their state is mostly it, on the device through training and in every checkpoint); "" else."""
    buffers = [state.buffer for state in states if hasattr(state, "buffer")]
    if not buffers:
        return ""
    total = sum(x.nbytes for x in jax.tree.leaves(buffers))
    return f"; replay buffers {_bytes_text(total / num_runs)} per run" + (
        f" ({_bytes_text(total)} in all)" if num_runs > 1 else "")


def _chunks_text(lengths: list) -> str:
    """The chunks in words: "4 chunks of 2 updates", or "6 chunks of 2 updates (the last of 1)"."""
    def updates(n):
        return f"{n} update{'s' if n != 1 else ''}"

    n = len(lengths)
    if len(set(lengths)) == 1:
        return f"{n} chunk{'s' if n != 1 else ''} of {updates(lengths[0])}"
    if len(set(lengths[:-1])) == 1:
        return f"{n} chunks of {updates(lengths[0])} (the last of {updates(lengths[-1])})"
    counts = {length: lengths.count(length) for length in lengths}  # an extended run's short chunk mid-way
    return f"{n} chunks (" + ", ".join(f"{k} of {updates(length)}" for length, k in counts.items()) + ")"


def _run_folder(folder, spec: RunSpec, resume: bool) -> pathlib.Path:
    """`train`'s folder as a Path, checked: made for a new run; refused when it is a file, when a new run would
    overwrite a trained one (a checkpoint: its steps were replaced, and config.json no longer matched them), or
    when its config.json is another run's."""
    folder = pathlib.Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"folder {folder} is a file, not a folder.")
    if resume:
        if not folder.is_dir():
            raise ValueError(f"folder {folder} does not exist: resume continues the run saved there.")
        return folder
    if checkpoint.exists(folder):
        raise ValueError(f"folder {folder} already holds a trained run (a checkpoint); pass resume=True to continue "
                         "it, or choose another folder.")
    if (folder / "config.json").exists():
        diff = spec_differences(read_spec(folder).to_json(), spec.to_json(), ("config.json", "the spec given"))
        if diff:
            raise ValueError(f"folder {folder} holds another run's config.json: " + "; ".join(diff) + ".")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_spec(folder, spec: RunSpec) -> None:
    """Writes `spec` as `folder`'s config.json (replacing it whole: a reader sees the old file or the new one).

    Raises:
      OSError: from the write.
    """
    text = json.dumps(spec.to_json(), indent=1) + "\n"
    checkpoint.write_atomic(pathlib.Path(folder), "config.json", lambda f: f.write(text.encode()))


def config_removed(folder) -> bool:
    """Whether `folder` holds a checkpoint but no config.json (removed?): its spec is saved with the checkpoint too,
    and `train --resume` writes config.json again from it."""
    folder = pathlib.Path(folder)
    return folder.is_dir() and not (folder / "config.json").exists() and checkpoint.exists(folder)


def read_spec(folder) -> RunSpec:
    """The `RunSpec` saved in `folder`/config.json; a ValueError says what is wrong."""
    path = pathlib.Path(folder) / "config.json"
    if not path.exists():
        given = pathlib.Path(folder)
        if config_removed(given):
            raise ValueError(f"{folder} holds a checkpoint but no config.json (removed?); jaxrl-rollout train "
                             f"--resume {shlex.quote(str(folder))} writes config.json again from the spec saved with "
                             "the checkpoint.")
        what = ("is a file, not a run folder" if given.is_file() else
                "holds no run: config.json is missing" if given.exists() else "does not exist")
        raise ValueError(f"{folder} {what}.{_runs_near(given)}")
    return read_spec_file(path)


def read_spec_file(path) -> RunSpec:
    """The `RunSpec` in the run config file `path` (a run folder's config.json, or a copy of one); a ValueError
    names the file and what is wrong with it."""
    try:
        return RunSpec.from_json(json.loads(pathlib.Path(path).read_text()))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path} is not a valid run config: {error}") from None


def _run_manifest(folder) -> dict:
    """`checkpoint.read_manifest(folder)`, where a run that has trained nothing yet (its train stopped, or is
    still running, before its first checkpoint) says so and how to continue it, not that `checkpoints/` holds no
    committed step."""
    if not checkpoint.exists(folder):
        raise checkpoint.CheckpointError(
            f"{folder} holds a run with nothing trained yet (no checkpoint: its train stopped before its first "
            "chunk ended, or has not ended it yet); continue it with runner.train(runner.read_spec(folder), folder, "
            f"resume=True), or from the command line: jaxrl-rollout train --resume {shlex.quote(str(folder))}")
    return checkpoint.read_manifest(folder)


def load_run(folder) -> tuple[RunSpec, Any, dict, dict]:
    """The latest checkpoint of the run in `folder`, checked against the state its config builds.

    Returns:
      (spec, state with a leading runs axis as numpy arrays and PRNG keys,
      extras such as "metrics/<name>" -> [R, updates so far], manifest whose
      "meta" holds "chunks_done" and "updates_done").

    Raises:
      ValueError: no run in `folder`; `checkpoint.CheckpointError` for a missing,
        corrupt or mismatched checkpoint.
    """
    spec, algorithm = _saved_spec_and_algorithm(folder)
    return (spec, *_load_state(folder, spec, algorithm))


def _saved_spec_and_algorithm(folder) -> tuple[RunSpec, Any]:
    """The spec of the run in `folder` (its config.json, with the updates its checkpoint holds) and its
    `Algorithm`, built once: a caller that acts with it after reading a checkpoint shares its env (building it
    again makes another env, whose traces are not shared; for a host env another pool)."""
    spec = run_spec(folder, read_spec(folder), _run_manifest(folder))
    return spec, make_algorithm(spec)


def _load_run_policies(folder) -> tuple[RunSpec, Any, dict, Any]:
    """`load_run` for what acts with the runs' policies alone (`evaluate`): (spec, train state with only the
    leaves of its policies read (`_load_policy_state`), manifest, the algorithm it was read with)."""
    spec, algorithm = _saved_spec_and_algorithm(folder)
    return (spec, *_load_policy_state(folder, spec, algorithm), algorithm)


def _load_state(folder, spec: RunSpec, algorithm) -> tuple[Any, dict, dict]:
    """`checkpoint.load` of the folder's latest checkpoint against the state `algorithm` builds for `spec`."""
    state, _, extras, manifest = _load_saved(folder, spec, algorithm)
    return state, extras, manifest


def _load_policy_state(folder, spec: RunSpec, algorithm) -> tuple[Any, dict]:
    """(the runs' train states with only the leaves that `algorithm.policy_params` takes their policies from
    read, the others None: a replay buffer, optimiser states and the env states are not read from disk; the
    manifest). For what only acts (`evaluate`, `load_policy`): an off-policy run's checkpoint is mostly its
    replay buffers, which may not fit in the memory of a machine that evaluates it."""
    manifest = checkpoint.read_manifest(folder)
    template = _state_template(spec, algorithm, manifest)
    kept = bool(manifest["meta"].get(BEST_POLICY))
    policies = jax.vmap(algorithm.policy_params)
    reads = _leaves_read(lambda saved: policies(saved[0] if kept else saved), template)
    state, _, _, manifest = _load_saved(folder, spec, algorithm, manifest, template=template, only=reads)
    return state, manifest


def _leaves_read(fn: Callable, template: Any) -> list[int]:
    """The positions of `template`'s leaves (in `jax.tree.flatten`'s order) that `fn(template)` reads: the inputs
    of its traced program that an operation or an output uses. A selection, such as a policy's params out of a
    train state, reads the leaves it selects."""
    jaxpr = jax.make_jaxpr(fn)(template).jaxpr
    used = {id(v) for eqn in jaxpr.eqns for v in eqn.invars} | {id(v) for v in jaxpr.outvars}
    return [i for i, v in enumerate(jaxpr.invars) if id(v) in used]


def _load_saved(folder, spec: RunSpec, algorithm, manifest: dict | None = None,
                sharding: NamedSharding | None = None, template: Any = None,
                only: list[int] | None = None) -> tuple[Any, Any, dict, dict]:
    """`checkpoint.load` of the folder's latest checkpoint (whose `manifest` and `_state_template` the caller may
    have made): (train state, best policies or None where the run kept none, extras, manifest); `only`: the
    leaves to read (`checkpoint.load`'s), the others None."""
    if manifest is None:
        manifest = checkpoint.read_manifest(folder)
    if template is None:
        template = _state_template(spec, algorithm, manifest)
    saved, extras, manifest = checkpoint.load(folder, template, sharding=sharding, only=only)
    return (*(saved if manifest["meta"].get(BEST_POLICY) else (saved, None)), extras, manifest)


def _load_best(folder, spec: RunSpec, algorithm) -> tuple[Any, dict]:
    """(every run's `periodic_eval.BestPolicy`, the manifest) of the folder's latest checkpoint, the train states
    not read; a ValueError where the run keeps none (`load_best_policies`)."""
    manifest = checkpoint.read_manifest(folder)
    template = _state_template(spec, algorithm, manifest)
    best = None
    if manifest["meta"].get(BEST_POLICY):
        first = len(jax.tree.leaves(template[0]))  # (a pair flattens as its first half's leaves, then its second's)
        only = list(range(first, first + len(jax.tree.leaves(template[1]))))
        _, best, _, manifest = _load_saved(folder, spec, algorithm, manifest, template=template, only=only)
    if best is None:
        why = ("it was trained without periodic evaluation (train with --eval-every to keep each run's best "
               "policy)" if spec.eval_every is None else
               "its checkpoint was saved by a version that kept none (--resume it to keep one from then on)")
        raise ValueError(f"{folder} keeps no best policy: {why}.")
    return best, manifest


def load_best_policies(folder) -> tuple[RunSpec, Any]:
    """Every run's best evaluated policy, as kept by a run trained with periodic evaluation (`RunSpec.eval_every`).

        spec, best = runner.load_best_policies("runs/ppo")
        best.eval_return, best.update      # [R] each: the best evaluation's mean return, and after which update
        jaxrl_rollout.evaluate(env, env_params, eval_policy_fn, jax.tree.map(lambda x: x[r], best.params), key, 10)

    The policies are those of the latest checkpoint: the best evaluations up
    to the update it was saved after. `load_policy(folder, r, best_policy=True)`
    gives one run's, ready to act.

    Returns:
      (spec, `periodic_eval.BestPolicy` with leaves [R, ...] as numpy arrays).

    Raises:
      ValueError: no run in `folder`, or a run that keeps no best policy (trained without periodic
        evaluation, or by a version that kept none); `checkpoint.CheckpointError` as `load_run`.
    """
    return _load_best_policies(folder)[:2]


def _load_best_policies(folder) -> tuple[RunSpec, Any, Any]:
    """`load_best_policies`, and the algorithm they were read with (`_saved_spec_and_algorithm`)."""
    spec, algorithm = _saved_spec_and_algorithm(folder)
    return spec, _load_best(folder, spec, algorithm)[0], algorithm


def no_evaluation_yet(spec: RunSpec, best: Any, updates_done: int) -> str | None:
    """Why `best` (`load_best_policies`'s) holds no evaluated policy, or None: its runs' updates are all 0 when
    the checkpoint came before the first evaluation (then each run's "best" is its initial policy)."""
    if np.any(np.asarray(best.update) > 0):
        return None
    return (f"no periodic evaluation has run yet: the first is after update {spec.eval_every}, and the checkpoint "
            f"is after update {updates_done}")


@dataclasses.dataclass(frozen=True, eq=False)
class TrainedPolicy:
    """One run of a saved training run, ready to act (`load_policy`).

    Its fields compose with the rest of the package: `jaxrl_rollout.evaluate(policy.env, policy.env_params,
    policy.policy_fn, policy.params, key, n)` plays n episodes of it, and `rollout` steps it like any policy.

    Attributes:
      spec: the run's spec (`read_spec`): algorithm, config, grid, seeds.
      run: the run r = grid point g x spec.num_seeds + seed s.
      updates_done: the updates trained at the loaded checkpoint (fewer than
        spec.config.num_updates for a run that was stopped).
      env, env_params: the env the run trained on, as the algorithm builds
        it (with its wrappers: a continuous action is clipped to the bounds
        by the env, so `policy_fn`'s raw action is what it takes). A host env
        (gymnasium, envpool) is vectorized: its reset and step take batches.
      params: the run's policy params, with its observation statistics where
        the run normalised observations (`policy_fn` normalises raw ones).
      policy_fn: `policy_fn(params, obs [B, ...], key) -> PolicyOutput`
        (a recurrent one also takes and returns the carry): the
        deterministic policy (the mode, the greedy action) or the stochastic
        one (the rollout's samples), as asked of `load_policy`.
      deterministic: which of the two `policy_fn` is.
      recurrent: the policy steps a carry (`network="gru"`); start it from
        `initial_carry(B)` and from zeros wherever an episode starts.
    """

    spec: RunSpec
    run: int
    updates_done: int
    env: Any
    env_params: Any
    params: Any
    policy_fn: Callable
    deterministic: bool
    recurrent: bool
    _module: Any = dataclasses.field(repr=False)

    def __repr__(self) -> str:  # not the params' arrays (a notebook prints a cell's last value)
        g, s = divmod(self.run, self.spec.num_seeds)
        return (f"TrainedPolicy({self.spec.algo.upper()} on {self.spec.config.env_id}, run {self.run} of "
                f"{self.spec.num_runs} ({grid_label(self.spec, g)}, seed {s}), update {self.updates_done} of "
                f"{self.spec.config.num_updates}, {'deterministic' if self.deterministic else 'stochastic'}"
                f"{', recurrent' if self.recurrent else ''})")

    def initial_carry(self, batch_size: int) -> Any:
        """A recurrent policy's zero carry for `batch_size` observations; a ValueError for a feed-forward one."""
        if not self.recurrent:
            raise ValueError("initial_carry: this policy is feed-forward (it takes no carry).")
        return self._module.initial_carry(batch_size)

    def act(self, obs: Any, key: jax.Array | None = None, carry: Any = None) -> Any:
        """The policy's action for `obs`, jitted (compiled once per observation shape).

        Args:
          obs: a batch of observations [B, ...], or one observation (an array
            of the observation space's shape), whose action comes back unbatched.
          key: a PRNG key; needed by a stochastic policy, and optional for a
            deterministic one (which does not read it).
          carry: a recurrent policy's carry ([B, ...] leaves; `initial_carry`).

        Returns:
          The action ([B, ...], or one); with a recurrent policy, (action, new carry).

        Raises:
          ValueError: naming `obs`, `key` or `carry`.
        """
        if key is None:
            if not self.deterministic:
                raise ValueError("act: key is needed: this is the stochastic policy, which samples its actions "
                                 "(load_policy(..., deterministic=True) gives the deterministic one).")
            key = jax.random.key(0)  # not read by the deterministic policy
        if self.recurrent != (carry is not None):
            raise ValueError("act: this policy is recurrent: pass carry (initial_carry(B) at an episode's start)."
                             if self.recurrent else "act: carry is for a recurrent policy; this one is feed-forward.")
        space = self.env.observation_space(self.env_params)
        if getattr(space, "shape", None) is not None and not hasattr(obs, "shape"):
            obs = np.asarray(obs)  # a list or a number, for an array space (jit read a list as a pytree of scalars)
        one = _single_observation(space, obs)
        if one:
            obs = jax.tree.map(lambda x: jnp.asarray(x)[None], obs)
        if self.recurrent:
            batch = jnp.shape(jax.tree.leaves(obs)[0])[0]
            _checks.check_carry(carry, batch, "act: carry", "1 for one observation (initial_carry(1))" if one else
                                f"{batch}, the observations' batch (initial_carry({batch}))")
        action, new_carry = self._act(obs, key, carry)
        if one:
            action = jax.tree.map(lambda x: x[0], action)
        return (action, new_carry) if self.recurrent else action

    @functools.cached_property
    def _act(self) -> Callable:
        """jit of (obs, key, carry) -> (action, new carry); carry None (an empty pytree) for a feed-forward policy."""
        policy_fn, params = self.policy_fn, self.params

        def act(obs, key, carry):
            if carry is None:
                return policy_fn(params, obs, key).action, None
            out, new_carry = policy_fn(params, obs, key, carry)
            return out.action, new_carry

        return jax.jit(act)


def _single_observation(space: Any, obs: Any) -> bool:
    """Whether `obs` is one observation of `space` rather than a batch [B, ...] of them (an array space's shape
    and rank; a dict or tuple space's observations are taken as batches); a ValueError for any other rank."""
    shape = getattr(space, "shape", None)
    if shape is None or not hasattr(obs, "shape"):
        return False
    shape = tuple(shape)
    if tuple(obs.shape) == shape:
        return True
    if len(obs.shape) == len(shape) + 1 and tuple(obs.shape[1:]) == shape:
        return False
    batch = ", ".join(["B", *map(str, shape)])
    raise ValueError(f"act: obs must be one observation of shape {list(shape)} or a batch [{batch}] of them, got "
                     f"shape {list(obs.shape)}.")


def load_policy(folder, run: int = 0, *, deterministic: bool = True, best_policy: bool = False) -> TrainedPolicy:
    """One run's policy from the latest checkpoint of a saved run, to act with or evaluate in Python.

        policy = runner.load_policy("runs/sweep", run=3)          # grid point 1, seed 1 of 2 seeds
        action = policy.act(obs)                                   # one observation, or a batch [B, ...]
        jaxrl_rollout.evaluate(policy.env, policy.env_params, policy.policy_fn, policy.params, key, 10)

    `jaxrl-rollout evaluate FOLDER` plays the same policies: its deterministic
    column is `evaluate` of `load_policy(FOLDER, r)` with the key
    `jax.random.split(jax.random.fold_in(jax.random.key(SEED), 0), R)[r]` (the
    stochastic column folds in 1), equal to float32 rounding. Only the
    policy's leaves of the checkpoint are read (not an off-policy run's
    replay buffers, its optimiser or env states).

    Args:
      folder: a run folder written by `train` (or the command line), relative
        or absolute.
      run: which run, r = grid point g x seeds + seed s, from 0 to R - 1.
      deterministic: True for the mode of the policy (PPO's and A2C's
        argmax or Gaussian mean, SAC's tanh of the mean, DQN's and PQN's
        greedy action, TD3's actor); False for the policy that samples as in
        training (not for DQN and TD3, whose exploration belongs to training).
      best_policy: the run's best evaluated policy (`load_best_policies`) instead of the latest one; its
        `updates_done` is the update after which it was evaluated. Only for a run trained with periodic
        evaluation (`--eval-every`).

    Returns:
      A `TrainedPolicy`.

    Raises:
      ValueError: naming `run` or `deterministic`; no run in `folder`;
        `checkpoint.CheckpointError` for a missing, corrupt or mismatched checkpoint.
    """
    spec = read_spec(folder)
    if not _checks.is_int(run) or not 0 <= run < spec.num_runs:
        raise ValueError(f"run must be an int from 0 to {spec.num_runs - 1} (grid point x {spec.num_seeds} seeds + "
                         f"seed) for the {spec.num_runs} run{'s' if spec.num_runs != 1 else ''} in {folder}, got {run!r}.")
    algorithm = make_algorithm(spec)
    if not deterministic and algorithm.policy_fn is None:
        raise ValueError(f"deterministic=False: {spec.algo.upper()}'s policy is deterministic (its exploration "
                         "belongs to training); load it with deterministic=True.")
    saved = run_spec(folder, spec, _run_manifest(folder))
    if saved != spec:  # an extension stopped before it rewrote config.json: its checkpoint's spec is the run's
        spec, algorithm = saved, make_algorithm(saved)
    if best_policy:
        best, manifest = _load_best(folder, spec, algorithm)
        if int(best.update[int(run)]) == 0:
            why = no_evaluation_yet(spec, best, manifest["meta"]["updates_done"])
            raise ValueError(f"best_policy=True: run {run} of {folder} has no evaluated policy: "
                             f"{why or 'its evaluations so far returned NaN'}.")
        params, updates_done = jax.tree.map(lambda x: x[int(run)], best.params), int(best.update[int(run)])
    else:
        state, manifest = _load_policy_state(folder, spec, algorithm)
        params = algorithm.policy_params(jax.tree.map(lambda x: x[int(run)], state))
        updates_done = int(manifest["meta"]["updates_done"])
    return TrainedPolicy(spec, int(run), updates_done, algorithm.env, algorithm.env_params, params,
                         algorithm.eval_policy_fn if deterministic else algorithm.policy_fn, bool(deterministic),
                         bool(algorithm.recurrent), algorithm.module)
