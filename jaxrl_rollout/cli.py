"""The `jaxrl-rollout` command line (also `python -m jaxrl_rollout`).

    jaxrl-rollout                                   # = train: PPO on CartPole-v1, 8 seeds, default config
    jaxrl-rollout train --lr 1e-3,3e-4 --ent-coef 0,0.01 --seeds 4 --out runs/sweep
    jaxrl-rollout train --algo sac --seeds 4         # SAC on its default env, Pendulum-v1
    jaxrl-rollout train --resume runs/sweep         # continue an interrupted run
    jaxrl-rollout evaluate runs/sweep               # deterministic and stochastic returns per seed
    jaxrl-rollout evaluate runs/sweep --video --runs best,worst   # and videos of their episodes
    jaxrl-rollout evaluate runs/sweep --csv eval.csv   # and every episode's return in a CSV
    jaxrl-rollout evaluate runs/sweep --csv - | python plot.py   # the CSV alone on stdout, the report on stderr
    jaxrl-rollout rollout                           # a uniform random policy's episode statistics
    jaxrl-rollout rollout --env brax/ant --video    # and a video of one of its episodes in ./videos

`--algo` is one of the registered algorithms (ppo, a2c, dqn, pqn, sac,
td3; `algorithms.NAMES`), each with its own config's defaults (its env
too: CartPole-v1, or Pendulum-v1 for sac and td3). Every static config
field (`PPOConfig`, `DQNConfig`, ...) is an option taking one value; every
hyperparameter (`PPOHParams`, `SACHParams`, ...) takes a comma list, and the
grid is their cartesian product, trained with every seed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import decimal
import errno
import itertools
import json
import math
import os
import pathlib
import shlex
import shutil
import sys
import time
import warnings
from collections.abc import Sequence

from jaxrl_rollout._signals import (
    Interrupted,
    StopSignals,
    quiet_interrupted_callbacks,
    raise_at_once,
    stopped_at_once,
)
from jaxrl_rollout._warnings import PartialRunWarning

DEFAULT_ENV = "CartPole-v1"
DEFAULT_SEEDS = 8
# A new run's periodic evaluation: "off", "chunk" (once per chunk) or a number of updates.
DEFAULT_EVAL_EVERY = "chunk"


def _integer(text: str) -> int | None:
    """The integer `text` writes: as Python's int reads it ("1000", "1_000"), or a number that is a whole one
    exactly, the form step counts are often written in ("1e6", "2.5e5", "500000.0"); None for anything else
    ("1.5", "1e-3", "inf", "abc")."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        return None
    # (the exponent is bounded first: int() of a Decimal such as 1e999999999 would build a billion-digit integer)
    if not number.is_finite() or number.adjusted() > 100 or number != number.to_integral_value():
        return None
    return int(number)


def _count(n: int, noun: str) -> str:
    """"1 episode", "10 episodes"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _positive_int(text: str) -> int:
    value = _integer(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _folder(text: str) -> str:
    """A folder name, a leading ~ read as the home folder (`_home`); an empty one (`--resume "$RUN"` with RUN
    unset) is refused: it read as "not given", so a fresh default run started (the whole main job) in place of the
    resume the script asked for."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a folder, got {text!r}")
    return _home(text)


def _file(text: str) -> str:
    """A file name, a leading ~ read as the home folder (`_home`): an empty one, or one that ends in a separator,
    is refused (the folder would be written over)."""
    if not text.strip() or text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"expected a file name, got {text!r}")
    return _home(text)


def _home(text: str) -> str:
    """`~/runs/x` as the home folder's runs/x. The shell expands a ~ only at the start of a word, so `--out=~/runs`
    (and a quoted "~/runs") reached the command as typed, which made a folder named ~ in the current one."""
    return os.path.expanduser(text)


def _int(text: str) -> int:
    value = _integer(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    """A PRNG seed, from 0 to 2**32 - 1: `jax.random.key` keeps a seed's low 32 bits, so any other integer
    would silently give the keys of one of these (2**32 those of 0, -1 those of 2**32 - 1)."""
    value = _int(text)
    if not 0 <= value <= 2**32 - 1:  # runner.MAX_SEED (not imported here: it would import jax to parse a flag)
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**32 - 1 = {2**32 - 1:,} (jax.random.key "
                                         f"keeps a seed's low 32 bits), got {text!r}")
    return value


def _total_steps(text: str) -> int:
    from jaxrl_rollout.algorithms._common import MAX_TOTAL_TIMESTEPS

    value = _positive_int(text)
    if value > MAX_TOTAL_TIMESTEPS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_TOTAL_TIMESTEPS:,} (2**31 - 1) steps, the most the "
                                         f"int32 step counters hold, got {value}")
    return value


def _host_devices(text: str):
    if text == "auto":
        return text
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive int or 'auto', got {text!r}") from None


def _eval_every(text: str):
    if text in ("off", "chunk"):
        return text
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer (updates), 'chunk' or 'off', got {text!r}") \
            from None


def _float(text: str, no_limit: bool = False) -> float:
    """A finite number; with `no_limit` also inf (a threshold whose inf means no limit: --max-grad-norm)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if no_limit and value == math.inf:
        return value
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number{' or inf (no limit)' if no_limit else ''}, "
                                         f"got {text!r}")
    return value


def _env_option(text: str) -> tuple:
    """`--env-option NAME=VALUE` as (name, value): VALUE read as true/false, yes/no or on/off (a bool, as the
    command line's own switches read them: `continuous=no` stayed the text 'no', which a gymnasium constructor
    took as true), none (None), an integer, a number, or else the text itself (a string)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME an option of the env's make, e.g. "
                                         f"max_episode_steps=500, got {text!r}")
    lowered = raw.strip().lower()
    if lowered in ("true", "yes", "on", "false", "no", "off"):
        return name, lowered in ("true", "yes", "on")
    if lowered == "none":
        return name, None
    integer = _integer(raw)
    if integer is not None:
        return name, integer
    try:
        return name, float(raw)
    except ValueError:
        return name, raw


def _env_option_texts(options) -> list[str]:
    """Env options (name, value) pairs as typed: ["max_episode_steps=500", "multi_discrete=flat", "x=none"]."""
    return [f"{name}={str(value).lower() if isinstance(value, bool) or value is None else value}"
            for name, value in options]


def _env_options_text(options) -> str:
    """Env options as options: "--env-option max_episode_steps=500 --env-option backend=mjx"."""
    return " ".join(f"--env-option {text}" for text in _env_option_texts(options))


def _env_text(env_id: str, options) -> str:
    """An env as a command's header names it: "jumanji/Game2048-v1 (max_episode_steps=200)"."""
    return f"{env_id} ({', '.join(_env_option_texts(options))})" if options else env_id


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _int_tuple(text: str) -> tuple:
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _float_list(text: str, no_limit: bool = False) -> list:
    """A sweep value: one number or a comma list (duplicates, in float32 too, are an error); `no_limit` as
    `_float`'s."""
    import numpy as np

    values = [_float(t.strip(), no_limit) for t in text.split(",")]
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct values, got {text!r}")
    if len(set(np.float32(values).tolist())) != len(values):  # the hyperparameters train in float32
        raise argparse.ArgumentTypeError(f"expected distinct values, got {text!r}, which are not all distinct in "
                                         "float32, the precision they train in (their runs would be the same)")
    return values


def _float_list_no_limit(text: str) -> list:
    return _float_list(text, no_limit=True)


def _algorithms():
    from jaxrl_rollout.algorithms import REGISTRY

    return REGISTRY


# Config fields with their own option names (--env, --total-steps).
_RENAMED = {"env_id": "env", "total_timesteps": "total_steps", "env_options": "env_option"}
# Options that are not config fields or hyperparameters but still fix the run's results.
_RUN_OPTIONS = ("algo", "env", "env_option", "seeds", "total_steps", "seed", "chunk_updates", "max_parallel",
                "eval_every", "eval_episodes")


def option_table() -> dict:
    """What train's options are made from, read from the algorithms' classes (which imports jax and gymnax).

    "algorithms": the names; "config": field -> {"defaults": {algo: default}, "kind": "bool", "int", "float",
    "tuple" or "str" (the first algorithm's), "none": whether it may be None}; "hparams": name -> {algo: default};
    "no_limit": the hyperparameters for which inf means no limit. `jaxrl_rollout._option_table.TABLE` holds a
    copy, from which `train --help` is printed without importing jax (tests/test_startup.py checks the two agree;
    `python -m jaxrl_rollout._option_table` writes it again).
    """
    import typing

    from jaxrl_rollout.algorithms._common import NO_LIMIT

    config: dict = {}
    hparams: dict = {}
    for algo, (config_cls, hparams_cls, _) in _algorithms().items():
        hints = typing.get_type_hints(config_cls)
        for f in dataclasses.fields(config_cls):
            if f.name in _RENAMED:
                continue
            kind = type(f.default) if f.default is not None else _optional_kind(hints[f.name])
            entry = config.setdefault(f.name, {
                "defaults": {}, "kind": kind.__name__ if kind in (bool, int, float, tuple) else "str",
                "none": type(None) in typing.get_args(hints[f.name])})  # `X | None`: "none" gives None
            entry["defaults"][algo] = f.default
        for name, default in hparams_cls._field_defaults.items():
            hparams.setdefault(name, {})[algo] = default
    return {"algorithms": tuple(_algorithms()), "config": config, "hparams": hparams,
            "no_limit": tuple(sorted(NO_LIMIT))}


def _config_fields(table: dict | None = None) -> dict:
    """Option name -> (default per algo, parser) for the static config fields of every algorithm (of `table`, an
    `option_table()`, where given)."""
    parsers = {"bool": _bool, "int": _int, "float": _float, "tuple": _int_tuple, "str": str}
    fields: dict = {}
    for name, entry in (table or option_table())["config"].items():
        parse = parsers[entry["kind"]]
        fields[name] = (dict(entry["defaults"]), _or_none(parse) if entry["none"] else parse)
    return fields


class _NoneGiven:
    """What an optional config field's option parses "none" to: `_given` turns it into None (a plain None
    would read as the option not given)."""

    def __repr__(self) -> str:
        return "none"


_NONE_GIVEN = _NoneGiven()


def _or_none(parse):
    """`parse`, and "none" (any case) for a config field that may be None (`--obs-clip none`)."""
    def parse_or_none(text: str):
        return _NONE_GIVEN if text.strip().lower() == "none" else parse(text)

    parse_or_none.__name__ = getattr(parse, "__name__", "value")  # argparse names the type in its errors
    parse_or_none.takes_none = True
    return parse_or_none


def _optional_kind(hint) -> type:
    """The type X of a config field annotated `X | None` (a tuple for `tuple[int, ...] | None`); str otherwise."""
    import typing

    kinds = [typing.get_origin(a) or a for a in typing.get_args(hint) if a is not type(None)]
    return kinds[0] if len(kinds) == 1 and isinstance(kinds[0], type) else str


def _hparam_fields(table: dict | None = None) -> dict:
    """Hyperparameter name -> {algo: default} (of `table`, an `option_table()`, where given)."""
    return {name: dict(defaults) for name, defaults in (table or option_table())["hparams"].items()}


def _defaults_text(defaults: dict) -> str:
    return ", ".join(f"{algo}: {','.join(map(str, v)) if isinstance(v, tuple) else v}" for algo, v in defaults.items())


_ENV_OPTION_HELP = ("an option of the env's make (envs.make(ENV, NAME=VALUE)), repeated for more, e.g. "
                    "max_episode_steps=500 (gymnasium, envpool, jumanji), episode_length=500 (brax), max_steps=100 "
                    "(pgx, navix, xminigrid); VALUE is read as true/false (or yes/no, on/off), none, a number or else "
                    "text; gymnax envs take none")


_COMPILE_CACHE_HELP = ("keep compiled XLA programs in a folder, so that a later command building the same program "
                       "(a --resume, a second evaluate, the same config again) loads it instead of compiling: auto "
                       "uses JAX_COMPILATION_CACHE_DIR if set, else ~/.cache/jaxrl_rollout/xla (XDG_CACHE_HOME "
                       "respected; at most 2 GiB, least recently used entries removed first); off; or a folder "
                       "(default: auto)")


def _add_train_arguments(train: argparse.ArgumentParser, table: dict | None = None) -> None:
    # Every default is None so that `--resume` can tell which options were given. `table`: an `option_table()`
    # (the algorithms' own where None).
    table = table or option_table()
    run = train.add_argument_group("run")
    run.add_argument("--algo", type=str.lower, choices=table["algorithms"],
                     help="algorithm, in any case (default: ppo)")
    run.add_argument("--env", help="gymnax env id, or SUITE/NAME for another suite (brax, jumanji, craftax, xminigrid, "
                     "navix, pgx, gymnasium, envpool), e.g. brax/ant (default: the algorithm's, "
                     f"{DEFAULT_ENV}; Pendulum-v1 for sac and td3)")
    run.add_argument("--env-option", dest="env_option", action="append", type=_env_option, metavar="NAME=VALUE",
                     help=_ENV_OPTION_HELP + "; saved with the run")
    run.add_argument("--seeds", type=_positive_int, help=f"seeds per grid point (default: {DEFAULT_SEEDS})")
    run.add_argument("--total-steps", type=_total_steps,
                     help="env steps per run, at most 2**31 - 1, e.g. 500000, 500_000 or 5e5 (default: the algorithm's, "
                          "e.g. 500000 for ppo, "
                          "1000000 for sac and td3); with --resume, "
                          "a larger count trains the run longer")
    run.add_argument("--seed", type=_seed, help="root PRNG seed (default: 0)")
    run.add_argument("--out", type=_folder, metavar="FOLDER", help="output folder for a new run (default: runs/ALGO-ENV-TIME)")
    run.add_argument("--resume", type=_folder, metavar="FOLDER",
                     help="continue the run saved in FOLDER (same config; --total-steps may extend it)")
    run.add_argument("--config", type=_folder, metavar="PATH",
                     help="start a new run with the options of the run saved at PATH (its folder or its "
                          "config.json: algorithm, env, grid, seeds, steps, config); options given here replace "
                          "theirs (another --env, their --env-options too), e.g. --config runs/sweep --seed 1 --out runs/sweep-seed1")
    run.add_argument("--chunk-updates", type=_positive_int,
                     help="updates per jitted chunk (default: a divisor of the updates giving 10-100 chunks, near 20; "
                          "near 100 for sac and td3)")
    run.add_argument("--tensorboard", type=_bool, default=True, metavar="{true,false}",
                     help="write TensorBoard event files to FOLDER/tensorboard, one run per grid point and seed "
                          "(default: true)")
    run.add_argument("--wandb", choices=("off", "online", "offline"), default="off",
                     help="also log to Weights & Biases, one run per grid point and seed (the wandb extra; "
                          "offline runs go to FOLDER/wandb for `wandb sync`) (default: off)")
    run.add_argument("--wandb-project", metavar="PROJECT", help="with --wandb: the W&B project (default: jaxrl_rollout)")
    run.add_argument("--checkpoint-every", type=_positive_int, default=5,
                     help="save a checkpoint every N chunks and at the end; between checkpoints a chunk is given a "
                          "copy of its state (a second Ctrl-C saves the last whole chunk), so 1 keeps a run's memory "
                          "at one state, replay buffers included (default: %(default)s)")
    run.add_argument("--max-parallel", type=_positive_int,
                     help="most runs (grid points x seeds) in one program; more run in groups one after another, "
                          "which caps a program's working memory, not the runs' states (nor dqn's, sac's and td3's "
                          "replay buffers), which all stay on the device (default: all in one)")
    run.add_argument("--devices", type=_positive_int,
                     help="devices to shard runs over (default: the most that divide the runs per group)")
    run.add_argument("--host-devices", type=_host_devices, default="auto", metavar="{N,auto}",
                     help="split this host's CPU into N JAX devices, so that the runs shard over them and use every "
                          "core (XLA runs one program's kernels mostly on one thread); auto: one per usable core, "
                          "except with --distributed or when XLA_FLAGS already sets "
                          "--xla_force_host_platform_device_count. Only the CPU backend changes; runs match the "
                          "one-device runs to float32 rounding, not bit for bit (default: auto)")
    run.add_argument("--compile-cache", default="auto", metavar="{auto,off,FOLDER}", help=_COMPILE_CACHE_HELP)
    run.add_argument("--distributed", action="store_true",
                     help="call jax.distributed.initialize() first (multi-host; run the same command on every host); "
                          "it detects SLURM, Open MPI, Kubernetes and Cloud TPU, else pass the next three")
    run.add_argument("--coordinator", metavar="HOST:PORT", help="with --distributed: process 0's address")
    run.add_argument("--num-processes", type=_positive_int, help="with --distributed: how many processes")
    run.add_argument("--process-id", type=_int, help="with --distributed: this process's id, 0 to N-1")
    run.add_argument("--num-eval", type=_positive_int, default=10,
                     help="deterministic evaluation episodes per run at the end (default: %(default)s); when the "
                          "periodic evaluation ran at the last update with as many episodes, its figures are these")
    run.add_argument("--eval-every", type=_eval_every, metavar="{N,chunk,off}",
                     help="evaluate every run's policy deterministically (whole episodes, its own keys) every N "
                          "updates (chunk: every --chunk-updates) inside the jitted chunk: eval_return and "
                          "eval_length (win/draw/loss for a two-player game) in metrics.csv, TensorBoard, W&B, the "
                          "progress line and learning_curve.png; each run's best policy so far is kept with the "
                          "checkpoint (evaluate --best-policy); training is unchanged bit for bit "
                          f"(default: {DEFAULT_EVAL_EVERY}; a host env, gymnasium or envpool, evaluates in a pool "
                          "of envs of its own)")
    run.add_argument("--eval-episodes", type=_positive_int,
                     help="episodes per periodic evaluation (default: 10)")
    run.add_argument("--video-every", type=_positive_int, metavar="N",
                     help="after every N updates (at the end of the chunk that reaches them), record one "
                          "deterministic evaluation episode of the --video-runs runs into FOLDER/videos/training "
                          "(update<U>_seed<S>_return<R>.mp4, replaced atomically when written again) and send it "
                          "to TensorBoard (Images tab) and W&B as "
                          "eval/video; single-process runs, envs that can be drawn; needs the video extra "
                          "(default: no videos)")
    run.add_argument("--video-runs", metavar="SELECTOR",
                     help="with --video-every: which runs, e.g. 0 or best,worst,3 (run r = grid point x seeds + "
                          "seed; best/worst by that episode's return) (default: 0)")
    run.add_argument("--video-max-steps", type=_positive_int, metavar="N",
                     help="with --video-every: end each video's episode after N steps, its return the steps' "
                          "(an untrained policy's Atari game runs to its limit, 27,000 steps, played and drawn "
                          "from Python on a host env) (default: the env's time limit)")
    run.add_argument("--stop-after-chunks", type=_positive_int, metavar="N",
                     help="stop after N chunks of this call, saved, as if interrupted, and exit 0 with the command "
                          "that continues the run (to split a long run across jobs) (default: run to the end)")
    config = train.add_argument_group("static config (one value each)")
    for name, (defaults, parse) in _config_fields(table).items():
        config.add_argument(f"--{name.replace('_', '-')}", dest=name, type=parse,
                            help=f"default: {_defaults_text(defaults)}"
                            + ("; 'none' sets None" if getattr(parse, "takes_none", False) else ""))
    sweep = train.add_argument_group("hyperparameters (comma lists; the grid is their cartesian product)")
    for name, defaults in _hparam_fields(table).items():
        limit = name in table["no_limit"]  # inf is "no limit", as in Python (PPOHParams(max_grad_norm=inf))
        sweep.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_float_list_no_limit if limit else _float_list,
                           metavar="X[,X...]", help=f"default: {_defaults_text(defaults)}"
                           + ("; inf: no limit" if limit else ""))


def _given(args: argparse.Namespace) -> dict:
    """The run-defining options given on the command line (option name -> value)."""
    names = [*_RUN_OPTIONS, *_config_fields(), *_hparam_fields()]
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if "env_option" in given:  # as a config keeps them (sorted pairs), so that a saved run's compare
        given["env_option"] = _given_env_options(given["env_option"])
    return {name: None if value is _NONE_GIVEN else value for name, value in given.items()}


def _given_env_options(pairs) -> tuple:
    """The `--env-option`s given (a list of (name, value), or None) as a config keeps them: sorted pairs."""
    from jaxrl_rollout.algorithms._common import env_options_tuple

    try:
        return env_options_tuple(pairs or ())
    except ValueError as error:  # a name given twice
        raise ValueError(f"--env-option: {str(error).removeprefix('env_options: ')}") from None


# `train`'s options that belong to the command, not to the run: not saved in the run folder, so a `--resume`
# uses them only when given again.
_SESSION_OPTIONS = ("video_every", "video_runs", "video_max_steps", "num_eval", "tensorboard", "wandb", "wandb_project",
                    "checkpoint_every", "devices", "host_devices", "compile_cache", "distributed", "coordinator",
                    "num_processes")
_FLAGS = ("distributed",)  # session options that take no value


def _resume_command(args: argparse.Namespace, folder, total_steps: int | None = None) -> str:
    """The command that continues the run in `folder` with this command's own options that differ from their
    defaults (videos, loggers, devices, a multi-process run's --distributed, --coordinator, --num-processes, ...),
    e.g. "jaxrl-rollout train --resume runs/x --video-every 10", and
    `--total-steps` when given: a new total that the folder does not hold yet (an extension stopped before its
    first save)."""
    defaults = build_parser().parse_args(["train"])
    parts = ["jaxrl-rollout", "train", "--resume", shlex.quote(str(folder))]
    if total_steps is not None:
        parts += ["--total-steps", str(total_steps)]
    for name in _SESSION_OPTIONS:
        value = getattr(args, name, None)
        if value is not None and value != getattr(defaults, name, None):
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            parts += [f"--{name.replace('_', '-')}"] + ([] if name in _FLAGS else [shlex.quote(shown)])
    command = " ".join(parts)
    # Only process 0 prints it, and each process has its own id: the command itself cannot carry it.
    return command + (" (on each host, with its own --process-id)" if getattr(args, "process_id", None) is not None
                      else "")


def _spec_options(spec) -> dict:
    """A RunSpec as option name -> value, the inverse of `_build_spec`."""
    config = dataclasses.asdict(spec.config)
    config.pop("env_options")
    options = {"algo": spec.algo, "env": config.pop("env_id"), "env_option": spec.config.env_options,
               "seeds": spec.num_seeds,
               "total_steps": config.pop("total_timesteps"), "seed": spec.seed, "chunk_updates": spec.chunk_updates,
               "max_parallel": spec.max_parallel, "eval_every": "off" if spec.eval_every is None else spec.eval_every,
               "eval_episodes": spec.eval_episodes, **config}
    for name in spec.grid[0]._fields:
        options[name] = list(dict.fromkeys(getattr(h, name) for h in spec.grid))
    return options


def _typed(option: str, value) -> str:
    """An option as it was typed: "--hidden-sizes 64,64", "--anneal-lr false", "--obs-clip none",
    "--env-option max_steps=50"."""
    if option == "env_option":
        return _env_options_text(value)
    shown = (",".join(map(str, value)) if isinstance(value, (tuple, list))
             else str(value).lower() if isinstance(value, bool) or value is None else str(value))
    return f"--{option.replace('_', '-')} {shown}"


# An exploration schedule's length, and the two ends it runs between (DQN's, PQN's).
_DECAYS = (("exploration_fraction", "start_e", "end_e"), ("epsilon_decay", "epsilon_start", "epsilon_finish"))


def _check_decay_is_read(given: dict, hparams_cls) -> None:
    """Refuses a decay length given with one start and one end that are equal: epsilon is then constant, so a
    sweep over the length would train the same run under each label (as SAC's --alpha with autotune)."""
    defaults = hparams_cls()
    for length, start, end in _DECAYS:
        if length not in given or start not in hparams_cls._fields:
            continue
        starts = given.get(start, (getattr(defaults, start),))
        ends = given.get(end, (getattr(defaults, end),))
        if len(starts) == len(ends) == 1 and starts[0] == ends[0]:
            raise ValueError(f"{_typed(length, given[length])}: epsilon stays at {starts[0]:g} ({start} = {end}), so "
                             f"the decay's length is not read; drop --{length.replace('_', '-')}, or give "
                             f"--{start.replace('_', '-')} and --{end.replace('_', '-')} that differ.")


def _check_options_are_read(given: dict, config, module=None) -> None:
    """Refuses an option the run would not read, which would otherwise train as if it had not been given.

    SAC's --alpha with its learned temperature (a sweep over it trains the same run under each label) and
    --target-entropy / --temperature-loss with a fixed one; a clip of observations or rewards that are not
    normalised; --hidden-sizes or --activation for the CNN encoder (which has fixed layers: --network cnn, or
    `module`, what network=auto chose for the env, when it is given), and for the GRU (--network gru) its
    --activation or more than one hidden size (it reads hidden_sizes[0], its state's size).

    Raises:
      ValueError: led by the option as typed, saying what would read it.
    """
    def refuse(option: str, why: str) -> None:
        raise ValueError(f"{_typed(option, given[option])}: {why}")

    if isinstance(getattr(config, "autotune", None), bool):  # SAC
        if config.autotune and "alpha" in given:
            refuse("alpha", "SAC learns its temperature (autotune, the default), so alpha is not read; add --autotune "
                            "false to train with a fixed alpha.")
        for option in ("target_entropy", "temperature_loss"):
            if not config.autotune and option in given:
                refuse(option, "read only when SAC learns its temperature, which --autotune false turns off.")
    for option, switch in (("obs_clip", "normalize_observations"), ("reward_clip", "normalize_rewards")):
        if given.get(option) is not None and not getattr(config, switch, False):
            if option == "obs_clip" and module is None:
                continue  # checked again with the network, which says whether the env's observation is an index
            if option == "obs_clip" and type(module).__name__.startswith("OneHot"):  # normalisation is refused there
                refuse(option, "the clip applies to normalised observations, and this env's observation is a "
                               "Discrete index, read one-hot and never normalised; drop --obs-clip.")
            refuse(option, f"the clip applies to normalised values, and --{switch.replace('_', '-')} is false; add "
                           f"--{switch.replace('_', '-')} true (or drop --{option.replace('_', '-')}).")
    network = getattr(config, "network", None)
    # SAC's and TD3's image torso feeds their hidden layers, which read --hidden-sizes
    heads = type(config).__name__ in ("SACConfig", "TD3Config")
    cnn = (network == "cnn" and not heads) or type(module).__name__ in ("ActorCriticCNN", "ActorCriticNatureCNN",
                                                                          "QNetworkCNN")
    for option in ("hidden_sizes", "activation"):
        if cnn and option in given:
            chosen = "--network cnn" if network == "cnn" else "network=auto, for this env's image observation"
            refuse(option, f"the CNN encoder ({chosen}) has fixed layers and reads neither --hidden-sizes nor "
                           "--activation.")
    if network == "gru":
        if "activation" in given:
            refuse("activation", "the GRU network (--network gru) does not read --activation.")
        if len(given.get("hidden_sizes", ())) > 1:
            refuse("hidden_sizes", "the GRU network (--network gru) reads one size, its state's: give one, e.g. "
                                   f"--hidden-sizes {given['hidden_sizes'][0]}.")


def _led_by_options(message: str, given: dict) -> str:
    """A config's error led by the options given that it names, as typed: "--batch-size 0: batch_size must ...".

    The algorithm's other options that it names (left at their defaults) follow
    it, so that a fix in a field's name reads as a flag: "... lower
    learning_starts ... (set with --learning-starts, --num-envs)". A one-word
    field counts only as `field=` ("network='mlp'"), not as a word of the prose.
    """
    import re

    named, settable = [], []
    run_fields = {"num_seeds": "seeds", "chunk_updates": "chunk_updates", "max_parallel": "max_parallel",
                  "eval_episodes": "eval_episodes"}  # RunSpec's fields
    config_cls = _algorithms()[given.get("algo", "ppo")][0]
    own = {f.name for f in dataclasses.fields(config_cls)}
    for field, option in [*_RENAMED.items(), *((name, name) for name in _config_fields()), *run_fields.items()]:
        if option in given:
            if re.search(rf"\b{field}\b", message):
                named.append(_typed(option, given[option]))
        elif field in own or field in run_fields:
            found = re.search(rf"\b{field}\b" + ("" if "_" in field else "="), message)
            if found:  # ordered by where the message first names the field
                settable.append((found.start(), f"--{option.replace('_', '-')}"))
    if settable:
        message = f"{message} (set with {', '.join(flag for _, flag in sorted(settable))})"
    return f"{' '.join(named)}: {message}" if named else message


def _no_gymnax_options(env_id: str, options: tuple, python: str) -> ValueError:
    """The error for `--env-option`s given with a gymnax env (whose settings are env params, which `python`, the
    call to make from Python, takes)."""
    return ValueError(f"{_env_options_text(options)}: {env_id} is a gymnax env, whose make takes no options (its "
                      f"settings are its env params, given from Python: {python}).")


def _build_spec(given: dict):
    """The RunSpec for the given options and the defaults; ValueError names a bad option."""
    from jaxrl_rollout.runner import RunSpec

    algo = given.get("algo", "ppo")
    config_cls, hparams_cls, _ = _algorithms()[algo]
    config_names = {f.name for f in dataclasses.fields(config_cls)}
    fields = {"env_id": given["env"]} if "env" in given else {}  # else the algorithm's own default env
    if given.get("env_option"):
        from jaxrl_rollout.envs import suite_of

        env_id = fields.get("env_id", config_cls.env_id)
        if suite_of(env_id) == "gymnax":
            raise _no_gymnax_options(env_id, given["env_option"], "make_train(config, env=env, env_params=...)")
        fields["env_options"] = given["env_option"]
    if "total_steps" in given:
        fields["total_timesteps"] = given["total_steps"]
    for name in _config_fields():
        if name in given:
            if name not in config_names:
                raise ValueError(f"--{name.replace('_', '-')} is not an option of {algo.upper()} "
                                 f"({config_cls.__name__} has no field {name}).")
            fields[name] = given[name]
    for name in _hparam_fields():
        if name in given and name not in hparams_cls._fields:
            raise ValueError(f"--{name.replace('_', '-')} is not a hyperparameter of {algo.upper()}; it has "
                             f"{', '.join('--' + f.replace('_', '-') for f in hparams_cls._fields)}.")
    from jaxrl_rollout.algorithms import hparam_ranges
    from jaxrl_rollout.algorithms._common import hparam_in_range, hparam_range_text

    ranges = hparam_ranges(algo)
    for name in hparams_cls._fields:
        for value in given.get(name, ()):
            if not hparam_in_range(name, value, ranges):
                raise ValueError(f"--{name.replace('_', '-')} {value:g}: {name} must be "
                                 f"{hparam_range_text(name, ranges)}.")
    try:
        config = config_cls(**fields)
    except ValueError as err:
        if "env" in given:  # an env the algorithm cannot train is the first thing to fix, before other options
            _refuse_unfit_env(algo, config_cls, given)
        raise ValueError(_led_by_options(str(err), given)) from None
    _check_options_are_read(given, config)
    _check_decay_is_read(given, hparams_cls)
    axes = {name: given[name] for name in hparams_cls._fields if name in given}
    grid = tuple(hparams_cls(**dict(zip(axes, point))) for point in itertools.product(*axes.values()))
    try:
        spec = RunSpec(algo, config, grid, given.get("seeds", DEFAULT_SEEDS), given.get("seed", 0),
                       given.get("chunk_updates", 0), given.get("max_parallel"))
    except ValueError as err:
        raise ValueError(_led_by_options(str(err), given)) from None
    eval_every = given.get("eval_every", DEFAULT_EVAL_EVERY)
    if eval_every == "off":
        if "eval_episodes" in given:
            raise ValueError("--eval-episodes sets the episodes of the periodic evaluation, which --eval-every off "
                             "turns off; drop one of them.")
        return spec
    # "chunk": once per chunk, after its last update
    every = spec.chunk_updates if eval_every == "chunk" else eval_every
    if every > config.num_updates:
        raise ValueError(f"--eval-every {every}: the run has only {config.num_updates} updates, so it would never "
                         "evaluate.")
    return dataclasses.replace(spec, eval_every=every, eval_episodes=given.get("eval_episodes", 10))


def _with_saved_options(args: argparse.Namespace, given: dict) -> dict:
    """`--config PATH`: the options of the run saved at PATH (a run folder, or a config.json) that differ from
    its algorithm's defaults, with the options given on the command line in their place (each `--env-option` in
    place of the saved value of that option, the others kept; none of them with another `--env`).

    The run's chunk (--chunk-updates) is kept while the new run has the saved
    run's number of updates, and chosen again otherwise (a given --total-steps,
    --num-envs ...); its evaluation schedule (--eval-every, --eval-episodes) is
    kept unless either is given. The options taken are set on `args.from_config`
    (option -> value) for the command's header and its errors.
    """
    from jaxrl_rollout.runner import read_spec, read_spec_file

    option = f"--config {args.config}"
    if args.resume:
        raise ValueError(f"{option} and --resume {args.resume} both given: --config starts a new run with a saved "
                         "run's options; --resume continues the run in its own folder.")
    path = pathlib.Path(args.config)
    try:
        if path.is_dir():
            saved = read_spec(path)
        elif path.is_file():
            saved = read_spec_file(path)
        else:
            raise ValueError(f"{path} does not exist.")
    except ValueError as error:
        raise ValueError(f"{option}: {error}") from None
    if given.get("algo", saved.algo) != saved.algo:
        raise ValueError(f"--algo {given['algo']}: the run in {args.config} is {saved.algo.upper()}'s, and its options are "
                         f"that algorithm's; drop --algo, or start a {given['algo'].upper()} run without --config.")
    options = _spec_options(saved)
    names = saved.grid[0]._fields
    product = [dict(zip(names, point)) for point in itertools.product(*(options[n] for n in names))]
    if [h._asdict() for h in saved.grid] != product:
        raise ValueError(f"{option}: the run's {len(saved.grid)} grid points are not every combination of its "
                         "hyperparameters' values (a grid made in Python), which no command line can write.")
    defaults = _spec_options(_build_spec({"algo": saved.algo}))
    taken = {"algo": saved.algo}
    for name, value in options.items():
        if name not in ("algo", "chunk_updates", "eval_every", "eval_episodes") and _as_json(value) != _as_json(
                defaults[name]):
            taken[name] = value
    if "eval_every" not in given and "eval_episodes" not in given:
        if saved.eval_every is None:
            taken["eval_every"] = "off"
        else:
            if saved.eval_every != saved.chunk_updates:
                taken["eval_every"] = saved.eval_every
            if saved.eval_episodes != defaults["eval_episodes"]:
                taken["eval_episodes"] = saved.eval_episodes
    if given.get("env", saved.config.env_id) != saved.config.env_id:  # another env: the saved env's options are not its
        taken.pop("env_option", None)
    elif given.get("env_option") and "env_option" in taken:  # option by option: a given value replaces the saved one
        from jaxrl_rollout.algorithms._common import env_options_tuple

        names = dict(given["env_option"])
        given = {**given, "env_option": env_options_tuple({**dict(taken["env_option"]), **names})}
        taken["env_option"] = tuple((name, value) for name, value in taken["env_option"] if name not in names)
        if not taken["env_option"]:
            del taken["env_option"]
    taken = {name: value for name, value in taken.items() if name not in given or name == "env_option"}
    if "chunk_updates" not in given:
        try:
            chosen = _build_spec({**taken, **given})
        except ValueError:
            chosen = None  # the full build below says what is wrong
        if (chosen is not None and chosen.config.num_updates == saved.config.num_updates
                and chosen.chunk_updates != saved.chunk_updates):
            taken["chunk_updates"] = saved.chunk_updates
    args.from_config = {name: taken[name] for name in options if name in taken}  # in the saved options' order
    return {**taken, **given}


def _from_config_note(args: argparse.Namespace) -> str:
    """What an error adds when options came from --config, e.g. " (--config PATH gave --lr 0.001,0.0003)"; else ""."""
    taken = getattr(args, "from_config", None)
    if not taken:
        return ""
    return f" (--config {args.config} gave {' '.join(_typed(n, v) for n, v in taken.items())})"


def _as_json(value):
    """`value` as config.json holds it (tuples as lists), so that a saved option and a given one compare."""
    return json.loads(json.dumps(value))


def _differences(saved: dict, wanted: dict, names) -> list[str]:
    def shown(name, value):
        if name == "env_option":  # "max_steps=50, backend=mjx", or none
            return ", ".join(_env_option_texts(value or ())) or "none"
        return "unset" if value is None else _as_json(value)  # (Python's None is no option value)

    return [f"--{n.replace('_', '-')}: {shown(n, saved.get(n))} there, {shown(n, wanted.get(n))} here"
            for n in names if _as_json(saved.get(n)) != _as_json(wanted.get(n))]


def _prepare_folder(args, given: dict, stack: contextlib.ExitStack):
    """(spec, folder, resume) after every check; nothing is written before they pass.

    Process 0 takes the folder's lock (`_lock.FolderLock`) first and holds it
    until `stack` closes, at the end of the command. With several processes,
    process 0 checks and writes the folder while the others wait for its word
    (`_broadcast_text`: its refusal ends them too, exit 2), then read the same spec (so `--out` or `--resume` must be given: a
    time-stamped default name could differ).
    """
    import jax

    if jax.process_count() == 1:
        return _prepare_folder_here(args, given, stack)
    if not (args.out or args.resume):
        raise ValueError("a multi-process run needs --out FOLDER (or --resume FOLDER), the same on every process.")
    from jaxrl_rollout.runner import read_spec

    # Process 0 checks and writes the folder; the others wait for what it says, the refusal it made included
    # (they waited at a barrier that process 0, refusing, never reached: a Gloo time-out and a traceback).
    prepared, refused, text = None, None, ""
    if jax.process_index() == 0:
        try:
            prepared = _prepare_folder_here(args, given, stack)
        except Exception as error:  # every process ends on it: process 0 with its own error, as in one process
            refused, text = error, " ".join(str(error).split()) or type(error).__name__
    text = _broadcast_text(text)
    if refused is not None:
        raise refused
    if text:
        raise ValueError(f"process 0 refused the run: {text}")
    if prepared is not None:
        return prepared
    folder = pathlib.Path(args.resume or args.out)
    from jaxrl_rollout import checkpoint

    spec = read_spec(folder)
    if args.resume and "total_steps" in given:  # an extension's config.json is rewritten at its first save
        spec = _with_total_steps(spec, given["total_steps"])
    return spec, folder, bool(args.resume) and checkpoint.exists(folder)


def _broadcast_text(text: str, size: int = 4096) -> str:
    """Process 0's `text` on every process of a multi-process run (UTF-8, at most `size` bytes); a barrier too."""
    import numpy as np
    from jax.experimental import multihost_utils

    data = np.zeros(size, np.uint8)
    raw = text.encode()[:size]
    data[:len(raw)] = np.frombuffer(raw, np.uint8)
    received = np.asarray(multihost_utils.broadcast_one_to_all(data))
    return bytes(received).rstrip(b"\0").decode(errors="replace")


def _check_video(args, spec, env=None, updates_done: int = 0) -> None:
    """Refuses `--video-every` / `--video-runs` that cannot work, before anything is written or trained.

    `env` is the run's env where the caller has built it already (else it is built from `spec`);
    `updates_done`, a resumed run's: a multiple of N must be left among the updates still to train.
    """
    if args.video_every is None:
        for option, value in (("--video-runs", args.video_runs), ("--video-max-steps", args.video_max_steps)):
            if value is not None:
                raise ValueError(f"{option} is an option of --video-every's videos; add --video-every N.")
        return
    if args.distributed:
        raise ValueError("--video-every needs a single-process run (one process cannot read the others' runs); "
                         "record videos after training with: jaxrl-rollout evaluate FOLDER --video")
    if args.video_every > spec.config.num_updates:
        raise ValueError(f"--video-every {args.video_every}: the run has only {spec.config.num_updates} updates, so "
                         "it would never record.")
    if updates_done // args.video_every == spec.config.num_updates // args.video_every:
        raise ValueError(f"--video-every {args.video_every}: the run has trained {updates_done} of its "
                         f"{spec.config.num_updates} updates, and no multiple of {args.video_every} is left, so it "
                         "would never record; record its policy with: jaxrl-rollout evaluate "
                         f"{shlex.quote(str(args.resume))} --video")
    import numpy as np

    from jaxrl_rollout import video
    from jaxrl_rollout.runner import make_algorithm

    try:
        video.select_runs(_video_runs(args), spec.num_runs, np.zeros(spec.num_runs))
    except ValueError as error:
        raise ValueError(f"--video-runs: {error}") from None
    try:
        video.check_recordable(env if env is not None else make_algorithm(spec).env)
    except (ImportError, ValueError) as error:
        raise ValueError(f"--video-every: {error}") from None


def _video_runs(args) -> str:
    """--video-runs as given (an empty one is refused by `video.select_runs`, naming the option), or "0"."""
    return "0" if args.video_runs is None else args.video_runs


def _with_total_steps(spec, total_steps: int):
    """`spec` with config.total_timesteps = total_steps; `spec` itself when that trains the same run (the same
    updates, and for DQN the same iterations: `_total_moves_schedules`). Every process of a multi-process
    resume calls it, so they agree on the spec."""
    if total_steps == spec.config.total_timesteps:
        return spec
    new = dataclasses.replace(spec, config=dataclasses.replace(spec.config, total_timesteps=total_steps))
    return new if _total_moves_schedules(new, spec) else spec


def _check_eval_every_fits(saved, total: int, folder, has_checkpoint: bool) -> None:
    """Refuses a resumed run's --total-steps that leaves it fewer updates than its --eval-every (it would never
    evaluate), unless its chunk, and the evaluation after each, is chosen again (`_rechunked`)."""
    if saved.eval_every is None:
        return
    try:
        updates = dataclasses.replace(saved.config, total_timesteps=total).num_updates
    except ValueError:
        return  # the new total's own error, reported with the new spec
    rechunked = not has_checkpoint and saved.chunk_updates > updates and saved.eval_every == saved.chunk_updates
    if saved.eval_every > updates and not rechunked:
        raise ValueError(f"--total-steps {total}: the run in {folder} evaluates every {saved.eval_every} updates "
                         f"(--eval-every), and {total:,} steps give it only {updates}, so it would never evaluate.")


def _rechunked(spec, total_steps: int):
    """`spec` at `total_steps` with its chunk chosen again (`chunk_updates=0`), or None if that does not help.

    Only for a run with no checkpoint: nothing has been trained in chunks of the
    saved size, so a new total with fewer updates than one chunk is a fresh
    start with the same options.
    """
    try:
        config = dataclasses.replace(spec.config, total_timesteps=total_steps)
        if spec.chunk_updates <= config.num_updates:
            return None  # the chunk fits: the error was another one
        per_chunk = spec.eval_every == spec.chunk_updates  # evaluated after every chunk (`--eval-every chunk`)
        rechunked = dataclasses.replace(spec, config=config, chunk_updates=0,
                                        eval_every=None if per_chunk else spec.eval_every)
    except ValueError:  # the new total's own error (under one batch, ...), which the caller reports
        return None
    if per_chunk:  # after every chunk of the new size
        rechunked = dataclasses.replace(rechunked, eval_every=rechunked.chunk_updates)
    return rechunked


def _check_devices(spec, devices, env=None) -> None:
    """Refuses a `--devices` count the runs cannot shard over, before anything is written.

    Args:
      spec: the run's spec.
      devices: the `--devices` count, or None.
      env: the spec's env if already built (`_build_algorithm`), else built here only if there is something to refuse.
    """
    from jaxrl_rollout import runner

    runner.check_host_run(spec, devices=devices, env=env)
    try:
        runner.choose_devices([b - a for a, b in spec.groups], devices)
    except ValueError as error:  # without --devices: the runs of a multi-process run that its processes cannot share
        raise ValueError(f"--devices {devices}: {error}" if devices is not None else
                         f"--seeds / --max-parallel: {error}") from None


def _make_env(env_id: str, options: tuple = (), defaults: dict | None = None):
    """`envs.make(env_id, **defaults, **dict(options))` (`options`: the `--env-option`s, as sorted pairs, replacing
    the command's own `defaults`), an env it refuses (an unknown name in a suite, an option it does not take,
    `envs._base.UnsupportedEnv`: a multi-agent jumanji env) refused as `--env ID [--env-option ...]: ...`, as every
    other env the command line cannot take."""
    from jaxrl_rollout import envs

    typed = " ".join([f"--env {env_id}", *([_env_options_text(options)] if options else [])])
    try:
        return envs.make(env_id, **{**(defaults or {}), **dict(options)})
    except ValueError as error:  # UnsupportedEnv is one
        raise ValueError(f"{typed}: {error}") from None
    except TypeError as error:  # a suite whose make passes unknown options on to a constructor
        if not options:
            raise
        raise ValueError(f"{typed}: {type(error).__name__}: {error}") from None


def _check_time_limit(env_id: str, env, env_params) -> None:
    """A ValueError naming --env for an env without a time limit (jumanji's Game2048, Knapsack, TSP, ...): every
    command evaluates whole episodes, which then have no bound; the time limit is an option of the env's make,
    `--env-option` (the run failed at its closing evaluation, after training, its folder written)."""
    from jaxrl_rollout.collect import episode_limit

    try:
        episode_limit(env, env_params, None)
    except ValueError:
        option = _TIME_LIMIT_OPTIONS.get(env_id.split("/", 1)[0], "max_episode_steps")
        raise ValueError(
            f"--env {env_id}: the env has no time limit, and the command line evaluates whole episodes (train's "
            f"evaluations, evaluate, rollout), which it then cannot bound; give it one: --env-option {option}=N."
        ) from None


# Each suite's make option for a time limit, where it is not max_episode_steps (jumanji's, gymnasium's, envpool's).
_TIME_LIMIT_OPTIONS = {"pgx": "max_steps", "navix": "max_steps", "xminigrid": "max_steps", "brax": "episode_length",
                       "craftax": "max_timesteps"}


def _refuse_unfit_env(algo: str, config_cls, given: dict) -> None:
    """A ValueError naming --env when the algorithm cannot train that env even with its default config (SAC on
    CartPole's Discrete actions, an unknown or uninstalled env), else nothing: called when the options' config
    was refused, so that the env, which the other options would be tuned for, is the first error the user meets
    (`--algo sac --env CartPole-v1 --total-steps 1000` named learning_starts first, then the actions)."""
    try:
        config = config_cls(env_id=given["env"], env_options=given.get("env_option", ()))
    except ValueError as err:  # the env alone is refused (an unknown gymnax name, options for a gymnax env)
        raise ValueError(_led_by_options(str(err), given)) from None
    try:
        _build_algorithm_of(algo, config)
    except ValueError as error:
        if str(error).startswith(f"--env {config.env_id}"):
            raise
        # anything else is the default config's (another option of the user's may mend it): not the user's error


def _build_algorithm(spec, given: dict | None = None):
    """The spec's algorithm (its `.env` as the algorithm steps it), built once before a new run's folder is written.

    A config never builds its env, so it checks only what needs none (a
    gymnax name); another suite's unknown name, or its missing extra, and an
    env the algorithm cannot train are refused here, before anything is written.
    """
    return _build_algorithm_of(spec.algo, spec.config, given)


def _build_algorithm_of(algo: str, config, given: dict | None = None):
    """`_build_algorithm` for an algorithm's name and config."""
    from jaxrl_rollout.algorithms import _common, get

    env, env_params = _make_env(config.env_id, config.env_options)
    if not _common.is_self_play(env):
        _check_time_limit(config.env_id, env, env_params)
    # The algorithm is built once too, so that an env it cannot train (DQN on continuous actions,
    # SAC on discrete ones, a network that does not fit) is refused before anything is written.
    make = get(algo).make
    try:
        if _common.is_self_play(env):
            return make(config)  # a self-play game is set up from its id
        return make(config, env=env, env_params=env_params)
    except ValueError as error:  # "env CartPole: SAC needs ...": named as the option was typed
        named = f"env {type(env).__name__}: "
        if str(error).startswith(named):
            raise ValueError(f"--env {config.env_id}: {str(error)[len(named):]}") from None
        if given is not None:  # "network='mlp' needs ...": led by the options it names, as typed
            raise ValueError(_led_by_options(str(error), given)) from None
        raise


def _write_config(folder: pathlib.Path, spec, option: str) -> None:
    from jaxrl_rollout.runner import write_spec

    try:
        write_spec(folder, spec)
    except OSError as error:
        raise ValueError(f"{option}: cannot write config.json ({error.strerror or error}).") from None


def _prepare_folder_here(args, given: dict, stack: contextlib.ExitStack):
    from jaxrl_rollout._lock import FolderLock

    if args.resume:
        if args.out:
            raise ValueError("--out and --resume both given: a resumed run writes to its own folder.")
        folder = pathlib.Path(args.resume)
        option = f"--resume {folder}"
        from jaxrl_rollout.runner import config_removed, read_spec

        try:
            read_spec(folder)  # a folder without a run is refused before a lock file is put in it
        except ValueError as error:
            if not config_removed(folder):  # a checkpoint without config.json: _prepare_resume writes it again
                raise ValueError(f"{option}: {error}") from None
        lock = FolderLock(folder).acquire(option)
        try:
            prepared = _prepare_resume(folder, given, args)
        except BaseException:
            lock.release(remove=lock.created)
            raise
        stack.callback(lock.release)
        args.folder_lock = (lock, option)  # taken again should the folder be removed while it trains
        return prepared
    try:
        spec = _build_spec(given)
        algorithm = _build_algorithm(spec, given)
        _check_options_are_read(given, spec.config, getattr(algorithm, "module", None))  # what network=auto chose
    except ValueError as error:
        note = _from_config_note(args)
        if not note:
            raise
        raise ValueError(f"{error}{note}") from None
    env = algorithm.env
    _check_devices(spec, args.devices, env=env)  # before the folder is written
    _check_video(args, spec, env)
    if args.out:
        folder = pathlib.Path(args.out)
        option = f"--out {folder}"
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"--out {folder} is a file, not a folder.")
        created = next((p for p in [*reversed(folder.parents), folder] if not p.exists()), None)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ValueError(f"{option}: cannot create the folder ({error.strerror or error}).") from None
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        folder = pathlib.Path("runs") / f"{spec.algo}-{spec.config.env_id.replace('/', '-')}-{stamp}"
        created = next((p for p in reversed(folder.parents) if not p.exists()), None)  # runs/, the first time
        try:
            folder = _new_folder(folder)
        except OSError as error:
            raise ValueError(f"the default run folder {folder}: cannot create the folder "
                             f"({error.strerror or error}).") from None
        created = created or folder
        option = f"the default run folder {folder}"
    lock = FolderLock(folder)
    try:
        lock.acquire(option)  # before the checks: a second writer waits for none of them
    except BaseException:
        if created is not None and not lock.path.exists():  # ours alone: nobody else locked it
            shutil.rmtree(created, ignore_errors=True)
        raise
    try:
        _check_new_folder(folder, spec)
        _write_config(folder, spec, option)
    except BaseException:
        if created is not None:  # a refused command leaves no folder
            shutil.rmtree(created, ignore_errors=True)
        lock.release(remove=lock.created)
        raise
    stack.callback(lock.release)
    args.folder_lock = (lock, option)
    return spec, folder, False


def _new_folder(folder: pathlib.Path) -> pathlib.Path:
    """`folder`, or `folder`-2, -3, ... where it exists: the first one this call creates (its parents made as
    needed). A directory is created at most once, so two commands started in the same second (`python -m
    jaxrl_rollout --seed 1 & python -m jaxrl_rollout --seed 2`) get default run folders of their own: the second
    was refused with the first's folder, which held another run."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        candidate = folder if n == 1 else folder.with_name(f"{folder.name}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate


def _check_new_folder(folder: pathlib.Path, spec) -> None:
    """Refuses an `--out` folder that holds a run or other files (the lock file aside)."""
    from jaxrl_rollout._lock import LOCK_NAME
    from jaxrl_rollout.runner import read_spec

    if (folder / "config.json").exists():
        saved = read_spec(folder)
        what_next = f"choose another --out, or continue that run with --resume {shlex.quote(str(folder))}"
        if saved.algo != spec.algo:  # every option would differ: the algorithm says it
            article = "an" if saved.algo.startswith("a") else "a"  # an A2C run, a DQN run
            raise ValueError(f"--out {folder} already holds {article} {saved.algo.upper()} run (this command trains "
                             f"{spec.algo.upper()}); {what_next}.")
        diff = _differences(_spec_options(saved), _spec_options(spec), _spec_options(spec))
        if diff:
            raise ValueError(f"--out {folder} already holds a different run ({'; '.join(diff)}); {what_next}.")
        raise ValueError(f"--out {folder} already holds this run; continue it with --resume "
                         f"{shlex.quote(str(folder))} or choose another --out.")
    if any(p.name != LOCK_NAME for p in folder.iterdir()):
        raise ValueError(f"--out {folder} is not empty and holds no jaxrl-rollout run; choose another --out.")


def _total_moves_schedules(spec, saved) -> bool:
    """Whether a new total trains differently: a number of updates of its own (PPO's, A2C's and PQN's learning
    rate and PQN's epsilon follow the updates), or for DQN a number of iterations (its epsilon follows them)."""
    new, old = spec.config, saved.config
    return new.num_updates != old.num_updates or (
        spec.algo == "dqn" and new.num_iterations != old.num_iterations)


def _prepare_resume(folder: pathlib.Path, given: dict, args):
    """(spec, folder, resume) for `--resume FOLDER`, under the folder's lock.

    config.json must match the spec saved with the checkpoint, and the given
    options the saved ones, except `--total-steps`, which may extend the run
    (never below the steps it has done). An extended run's config.json is
    rewritten at its first checkpoint save (`_run_train`), so config.json and
    the checkpoint agree at every moment a process could be stopped; with no
    checkpoint yet it is rewritten here.
    """
    from jaxrl_rollout import checkpoint, runner

    option = f"--resume {folder}"
    if runner.config_removed(folder):
        try:  # config.json removed: the checkpoint's spec is the run's
            saved = runner.RunSpec.from_json(checkpoint.read_manifest(folder)["meta"]["spec"])
        except (KeyError, TypeError, ValueError):
            saved = None  # a pre-Orbax checkpoint (no spec), or an unreadable one: read_spec says what is missing
        if saved is not None:
            print(f"jaxrl_rollout: {folder} holds no config.json: it is written again from its checkpoint's spec")
            _write_config(folder, saved, option)
    saved = runner.read_spec(folder)
    if given.get("eval_every") == "chunk":  # as a new run reads it: after each chunk of the run's (or the given) size
        given = {**given, "eval_every": given.get("chunk_updates", saved.chunk_updates)}
    saved_options = _spec_options(saved)
    foreign = [f"--{n.replace('_', '-')}" for n in given if n not in saved_options]
    if foreign:  # "--lr: None there, [0.001] here" of a SAC run
        raise ValueError(f"{option}: {', '.join(foreign)} {'is not an option' if len(foreign) == 1 else 'are not options'}"
                         f" of the {saved.algo.upper()} run there.")
    diff = _differences(saved_options, given, [n for n in given if n != "total_steps"])
    if diff:
        raise ValueError(f"{option}: the run there has a different config: " + "; ".join(diff) + ".")
    has_checkpoint = checkpoint.exists(folder)
    done = 0
    if has_checkpoint:
        manifest = checkpoint.read_manifest(folder)
        try:
            behind, saved = saved, runner.run_spec(folder, saved, manifest)
        except ValueError as error:
            raise ValueError(f"{option}: {error}") from None
        if saved.config.network != behind.config.network:  # runner.as_trained: "auto" meant another network then
            print(f"jaxrl_rollout: {folder}/config.json says network {behind.config.network!r}, a CNN on this env's "
                  f"images since 2026-12-02; the run was trained before, with the MLP, so config.json is rewritten "
                  f"with network {saved.config.network!r}")
        elif saved != behind:  # an extension stopped between its checkpoint and config.json: config.json catches up
            print(f"jaxrl_rollout: {folder}/config.json says {behind.config.total_timesteps:,} steps per run, its "
                  f"checkpoint {saved.config.total_timesteps:,} (an extension stopped before it rewrote config.json); "
                  "config.json is rewritten from the checkpoint")
        if saved != behind:
            _write_config(folder, saved, option)
        done = manifest["meta"]["updates_done"]
    spec = saved
    if "total_steps" in given:
        from jaxrl_rollout.run_metrics import steps_at, total_steps

        total, trained = given["total_steps"], steps_at(saved.config, done)
        too_few = ValueError(f"--total-steps {total}: the run in {folder} has already trained {trained:,} steps "
                             f"({done} update{'s' if done != 1 else ''} of {saved.config.steps_per_update}); a resumed run can only be "
                             "extended, to at least that many steps.")
        if total < trained:  # before the new spec, whose own checks would speak first
            raise too_few
        _check_eval_every_fits(saved, total, folder, has_checkpoint)  # before the new spec's own, plainer check
        try:
            spec = _with_total_steps(saved, total)
        except ValueError as error:
            spec = _rechunked(saved, total) if not has_checkpoint else None
            if spec is None:
                raise ValueError(f"--total-steps {total}: {error}") from None
            updates = spec.config.num_updates
            print(f"  nothing trained in {folder} yet: --total-steps {total} has {updates} update"
                  f"{'s' if updates != 1 else ''}, fewer than the saved chunk's {saved.chunk_updates}, so the chunk "
                  f"is chosen again: {spec.chunk_updates} update{'s' if spec.chunk_updates != 1 else ''}"
                  + (" (and the evaluation runs after each)" if spec.eval_every != saved.eval_every else ""))
        if spec.config.num_updates < done:
            raise too_few
        if spec is not saved and done == spec.config.num_updates == saved.config.num_updates:
            spec = saved  # a complete run the new total gives no update: the schedule it moves has none to follow
        if spec is saved and total != saved.config.total_timesteps:  # config.json keeps its total
            steps = total_steps(spec.config)
            print(f"jaxrl_rollout: --total-steps {total} gives the run in {folder} the same "
                  f"{spec.config.num_updates} updates ({steps:,} steps per run) as its saved "
                  f"{saved.config.total_timesteps:,}: nothing changes")
    _check_devices(spec, args.devices)
    _check_video(args, spec, updates_done=done)
    if spec != saved and not has_checkpoint:
        _write_config(folder, spec, option)
    return spec, folder, has_checkpoint


def evaluate_runs(spec, state, num_episodes: int, key, deterministic: bool, algorithm=None,
                  option: str = "--num-episodes"):
    """[R, num_episodes] returns of every run's policy (mode actions if deterministic), one vmapped call.

    A host env's runs are evaluated together, in lockstep (`collect.evaluate`).
    None for the stochastic policy of an algorithm that has none (DQN and
    TD3 act deterministically; their exploration belongs to training).
    `algorithm` is the spec's, if the caller has built it (else it is built here).
    `option`: the command line's option of `num_episodes`, which a refusal for
    memory names (`runner._check_evaluation_fits`).
    """
    from jaxrl_rollout.runner import make_algorithm

    if algorithm is None:
        algorithm = make_algorithm(spec)  # a host env gets a fresh host env here, apart from training's
    policy_fn = algorithm.eval_policy_fn if deterministic else algorithm.policy_fn
    if policy_fn is None:
        return None
    return _evaluator(spec, algorithm, num_episodes, policy_fn, option)(_policy_params(algorithm, state), key)


def evaluate_both(spec, state, num_episodes: int, keys, algorithm, *, deterministic_only: bool = False,
                  option: str = "--num-episodes"):
    """`evaluate_runs` of the deterministic and the stochastic policy (keys[0], keys[1]), compiled once.

    The two columns are one program whose policy computes both actions and
    keeps one by a flag passed with the params, so `evaluate` compiles its
    evaluation (a large env's step and reset) once instead of twice; each
    column's actions, and so its returns, are those of its own policy. Where
    the two policies' outputs differ in structure, shape or dtype, each is
    compiled on its own.

    `deterministic_only`: the deterministic column alone (keys[1] unused), by
    the same program: `train`'s closing evaluation, so that an `evaluate` of as
    many episodes afterwards loads that program from the persistent
    compilation cache instead of compiling it again. `option`: the command
    line's option of `num_episodes` (`evaluate_runs`).

    Returns:
      (deterministic [R, N], stochastic [R, N] or None).
    """
    import jax
    import jax.numpy as jnp

    flags = (True,) if deterministic_only else (True, False)
    if algorithm.policy_fn is None:
        return evaluate_runs(spec, state, num_episodes, keys[0], True, algorithm, option), None
    deterministic_fn, stochastic_fn = algorithm.eval_policy_fn, algorithm.policy_fn

    def either(flagged, *args):
        flag, params = flagged
        chosen, other = deterministic_fn(params, *args), stochastic_fn(params, *args)
        shapes = [jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), out) for out in (chosen, other)]
        if jax.tree.structure(shapes[0]) != jax.tree.structure(shapes[1]) or shapes[0] != shapes[1]:
            raise _PoliciesDiffer
        return jax.tree.map(lambda a, b: jnp.where(flag, a, b), chosen, other)

    params = _policy_params(algorithm, state)
    run = _evaluator(spec, algorithm, num_episodes, either, option)
    try:
        returns = tuple(run((jnp.full((spec.num_runs,), flag), params), key) for flag, key in zip(flags, keys))
    except _PoliciesDiffer:
        returns = tuple(evaluate_runs(spec, state, num_episodes, key, flag, algorithm, option)
                        for flag, key in zip(flags, keys))
    return returns if len(returns) == 2 else (returns[0], None)


class _PoliciesDiffer(Exception):
    """The deterministic and stochastic policies return differently shaped outputs (`evaluate_both`)."""


def _policy_params(algorithm, state):
    """Every run's policy params: of their train states, or as kept in their best policies (`--best-policy`)."""
    import jax

    from jaxrl_rollout.periodic_eval import BestPolicy

    if isinstance(state, BestPolicy):
        return state.params
    return jax.vmap(algorithm.policy_params)(state)  # with observation normalisation: (obs_rms, params)


def _best_updates(state) -> list[int] | None:
    """[R] the updates of every run's best policy where `state` holds those (`evaluate --best-policy`), else None."""
    from jaxrl_rollout.periodic_eval import BestPolicy

    return [int(u) for u in state.update] if isinstance(state, BestPolicy) else None


def _evaluator(spec, algorithm, num_episodes: int, policy_fn, option: str = "--num-episodes"):
    """(params [R, ...], key) -> [R, num_episodes] numpy returns of `policy_fn`, every run in one jitted call; on a
    CPU one whose working memory cannot fit in the free memory is refused once compiled, naming `option`."""
    import jax
    import numpy as np

    import jaxrl_rollout as jr
    from jaxrl_rollout._signals import compiled, wait_ready
    from jaxrl_rollout.devices import shard_runs
    from jaxrl_rollout.envs._host import host_env, run_interruptibly
    from jaxrl_rollout.runner import _check_evaluation_fits

    # A recurrent policy starts every evaluation episode from a zero carry, as in training.
    carry = algorithm.module.initial_carry(num_episodes) if algorithm.recurrent else None
    # every run at once (a host env's in lockstep: one pool of R x num_episodes envs, see `collect.evaluate`)
    def evaluation(params, key):  # (its name names the program: `jit_evaluation` in JAX's compilation cache)
        return jr.evaluate(algorithm.env, algorithm.env_params, policy_fn, params, key, num_episodes,
                           initial_carry=carry).returns

    run = jax.jit(jax.vmap(evaluation))
    executable = []  # compiled on the first call, where a signal's handler runs during XLA's compile
    # The runs spread over the devices (the most that divide them: every core of a CPU host, `--host-devices` in
    # train, as `evaluate` splits the host too), laid out alike in `train`'s closing evaluation and in `evaluate`:
    # the same program, which `evaluate` then loads from the persistent compilation cache. A host env's runs
    # share one pool, stepped by one device's callback.
    spread = host_env(algorithm.env) is None and jax.process_count() == 1

    def evaluator(params, key):
        keys = jax.random.split(key, spec.num_runs)
        if spread:
            params, keys = shard_runs((params, keys))
        if not executable:
            program = compiled(run, params, keys)
            _check_evaluation_fits(program, num_episodes, spec.num_runs, option)
            executable.append(program)
        # a host env's program runs inside its dispatch: from a helper thread, so a signal stops it at once
        returns = run_interruptibly(lambda: executable[0](params, keys), algorithm.env)
        wait_ready(returns)  # in Python, where a signal's handler can run (np.asarray waits in C++)
        return np.asarray(returns)

    return evaluator


def _self_play_game(spec) -> bool:
    """Whether the run trained a two-player pgx game by self-play (its evaluation plays a random opponent)."""
    if not spec.config.env_id.startswith("pgx/"):
        return False
    from jaxrl_rollout import envs
    from jaxrl_rollout.algorithms._common import is_self_play

    return is_self_play(envs.make(spec.config.env_id, **dict(spec.config.env_options))[0])


def _curve_label(metrics: dict) -> str:
    """What `_coarse_curve`'s numbers are: tenths of training, or single updates in a run of fewer than ten."""
    updates = metrics["episode_return"].shape[1]
    return "by tenth of training" if updates >= 10 else f"by update ({updates} update{'s' * (updates != 1)})"


# The most runs whose closing figures `train` lists one by one; more (a 512-seed sweep) get their spread, in a line.
LISTED_RUNS = 32


def _spread(values) -> str:
    """"min 54, median 98, max 178 over 512 runs" of per-run figures (NaNs left out, as `_figures` writes them)."""
    import numpy as np

    values = np.asarray(values, np.float64)
    finite = values[np.isfinite(values)]
    if not finite.size:
        return f"none over {_count(values.size, 'run')}"
    low, middle, high = _figures([finite.min(), np.median(finite), finite.max()])
    return f"min {low}, median {middle}, max {high} over {_count(values.size, 'run')}"


def _figures(values) -> list:
    """Returns as short text, with as many decimals as their size needs to be told apart (none from 10 up, 1
    from 1, else 2), so a game's 0.7 or a MinAtar 0.2 is not printed as 1 or 0; never "-0"."""
    import numpy as np

    finite = np.abs(np.asarray(values, np.float64))
    finite = finite[np.isfinite(finite)]
    top = finite.max() if finite.size else 0.0
    decimals = 0 if top >= 9.95 else 1 if top >= 0.995 else 2
    return [f"{v:z.{decimals}f}" for v in np.asarray(values, np.float64)]


def _coarse_curve(metrics: dict) -> str:
    import numpy as np

    from jaxrl_rollout.run_metrics import chunk_return

    updates = metrics["episode_return"].shape[1]
    means = []  # a window's mean, or its word
    for window in np.array_split(np.arange(updates), min(10, updates)):  # ten parts, the first ones a step longer
        per_run = chunk_return({k: metrics[k][:, window] for k in ("episode_return", "num_episodes")})
        finite = per_run[np.isfinite(per_run)]
        if (metrics["num_episodes"][:, window].sum(1) > 0).sum() > finite.size:
            means.append("nan")  # episodes that returned NaN or inf: never shown as a mean of the others
        else:
            means.append(float(finite.mean()) if finite.size else "n/a")
    numbers = iter(_figures([m for m in means if not isinstance(m, str)]))
    parts = [m if isinstance(m, str) else next(numbers) for m in means]
    text = " ".join(parts)
    return text + (" (nan: a run's episodes returned NaN or inf)" if "nan" in parts else "")


def run_train(args: argparse.Namespace) -> int:
    """The `train` command: checks, trains in chunks, writes outputs, prints the summary.

    In a multi-process run only process 0 prints (and writes the run folder).
    """
    import io

    import jax  # main() has already initialised the cluster for --distributed

    quiet = contextlib.redirect_stdout(io.StringIO()) if jax.process_index() != 0 else contextlib.nullcontext()
    with quiet:
        return _run_train(args)


def _run_train(args: argparse.Namespace) -> int:
    import jax

    if jax.config.jax_disable_jit:  # it failed after writing config.json, in jax's "not supported in the AOT path"
        raise ValueError("JAX_DISABLE_JIT is set (jax_disable_jit): train compiles each chunk ahead of time, which "
                         "jax cannot do with jit disabled; unset it.")
    cluster = {"coordinator_address": args.coordinator, "num_processes": args.num_processes,
               "process_id": args.process_id}
    if any(v is not None for v in cluster.values()) and not args.distributed:
        raise ValueError("--coordinator, --num-processes and --process-id need --distributed.")
    if args.wandb_project is not None and args.wandb == "off":
        raise ValueError(f"--wandb-project {args.wandb_project}: names the W&B project of --wandb offline|online, "
                         "which is off; add --wandb offline (or online), or drop --wandb-project.")
    if args.wandb_project is not None:
        from jaxrl_rollout.loggers import check_wandb_project

        check_wandb_project(args.wandb_project, "--wandb-project")
    if args.wandb != "off":  # before the run folder is written (W&B's own import comes with its first run)
        import importlib.util

        from jaxrl_rollout import _extras

        if importlib.util.find_spec("wandb") is None:
            raise _extras.missing(f"--wandb {args.wandb}", "wandb", "No module named 'wandb'")
    given = _given(args)
    if args.config:
        given = _with_saved_options(args, given)
    with contextlib.ExitStack() as stack:  # holds the run folder's lock until the command ends
        return _train_in_folder(args, given, stack)


def _say_new_total(folder, saved_config, spec, updates_done: int) -> None:
    """The lines of `train --resume F --total-steps N` that changes a run's total: the new length, and each
    schedule of the whole run that it moves (PPO's, A2C's and PQN's learning rate, PQN's epsilon over its
    updates, DQN's over its env-step iterations); a schedule the new total leaves as it was gets no line.
    Updates are counted from 1, as in the progress lines: the first that the new schedule moves is
    `updates_done + 1`."""
    from jaxrl_rollout.run_metrics import total_steps

    new_config = spec.config
    longer = new_config.total_timesteps > saved_config.total_timesteps
    updates = new_config.num_updates
    updates_move = updates != saved_config.num_updates
    steps = total_steps(new_config)  # what the run trains: whole updates (it said 5,000 for a run of 4,608)
    if updates_move:
        whole = (f" (--total-steps {new_config.total_timesteps:,} in whole updates of {new_config.steps_per_update:,})"
                 if steps != new_config.total_timesteps else "")
        print(f"jaxrl_rollout: {'extending' if longer else 'shortening'} the run in {folder} from "
              f"{total_steps(saved_config):,} to {steps:,} steps per run{whole}")
    else:  # DQN: its epsilon follows the iterations, which a total can move within the same updates
        print(f"jaxrl_rollout: --total-steps {new_config.total_timesteps:,} keeps the run in {folder} at its {updates} "
              f"update{'s' if updates != 1 else ''} ({steps:,} steps per run) and moves what follows the total "
              f"(saved: {saved_config.total_timesteps:,})")
    if getattr(new_config, "anneal_lr", False) and updates_move:
        print(f"  anneal_lr: from update {updates_done + 1} on, the learning rate follows the new total's linear schedule "
              f"over {updates} update{'s' if updates != 1 else ''} "
              + ("(it rises again after a finished run's decay)" if longer else "(it falls faster from here on)"))
    # epsilon decays over a fraction of the run: PQN's of its updates, DQN's of its iterations (env steps / envs)
    if ((spec.algo == "pqn" and updates_move)
            or (spec.algo == "dqn" and new_config.num_iterations != saved_config.num_iterations)):
        print(f"  epsilon: from update {updates_done + 1} on, the exploration rate follows the new total's schedule "
              "(its decay is a fraction of the whole run, so it "
              + ("can rise again)" if longer else "falls faster from here on)"))


def _start_wandb(args: argparse.Namespace, log, folder, unsaved_total) -> None:
    """Starts `log`'s W&B runs before training rather than at the first chunk, so that W&B's refusal (an online
    run without a login) is one line naming --wandb, and how to continue, before anything trains."""
    try:
        log.start()
    except ValueError as error:
        login = "; or train with --wandb offline and `wandb sync` its runs later" if args.wandb == "online" else ""
        raise ValueError(f"--wandb {args.wandb}: {error}{login}; nothing was trained by this command; "
                         f"continue with: {_resume_command(args, folder, unsaved_total)}") from None


def _train_in_folder(args: argparse.Namespace, given: dict, stack: contextlib.ExitStack) -> int:
    import jax

    from jaxrl_rollout import checkpoint, compile_cache, runner

    hits_before = compile_cache.hits()  # main() may run more than once in a process
    spec, folder, resume = _prepare_folder(args, given, stack)
    on_save = None
    unsaved_total = None  # a new --total-steps that config.json and the checkpoint do not hold yet
    if resume and jax.process_index() == 0:
        before = checkpoint.read_manifest(folder)["meta"]
        saved_total = before.get("spec", {}).get("config", {}).get("total_timesteps", spec.config.total_timesteps)
        if saved_total != spec.config.total_timesteps:
            _say_new_total(folder, dataclasses.replace(spec.config, total_timesteps=saved_total), spec,
                           before["updates_done"])
            unsaved_total = spec.config.total_timesteps

            def on_save(chunks_done):  # runner.train has rewritten config.json after the save: it holds the total
                nonlocal unsaved_total
                unsaved_total = None
    from jaxrl_rollout.run_metrics import total_steps

    cfg = spec.config
    steps = total_steps(cfg)
    grid = f"{len(spec.grid)} grid points x " if len(spec.grid) > 1 else ""
    seeds = f"{spec.num_seeds} seed" + ("s" if spec.num_seeds != 1 else "")
    # A total that is not whole updates says so where it is cut (the Python API's PartialRunWarning, quiet here).
    whole = (f" (--total-steps {cfg.total_timesteps:,} in whole updates of {cfg.steps_per_update:,})"
             if steps != cfg.total_timesteps else "")
    print(f"jaxrl_rollout: {spec.algo.upper()} on {_env_text(cfg.env_id, cfg.env_options)}, {grid}{seeds} x {steps:,} steps"
          f"{whole} in one vmapped call" + (f" per group of {spec.max_parallel}" if len(spec.groups) > 1 else "")
          + f" (backend {jax.default_backend()}), output in {folder}")
    if getattr(args, "from_config", None) is not None:
        taken = " ".join(_typed(n, v) for n, v in args.from_config.items())
        given_here = [_typed(n, v) for n, v in given.items() if n not in args.from_config]
        print(f"  options of {args.config}: {taken}" + (f"; given here: {' '.join(given_here)}" if given_here else ""))
    if spec.eval_every is not None:
        every = "every update" if spec.eval_every == 1 else f"every {spec.eval_every} updates"
        print(f"  deterministic evaluation {every} ({spec.eval_every * cfg.steps_per_update:,} "
              f"steps), {_count(spec.eval_episodes, 'episode')} per run")
    try:
        from jaxrl_rollout import loggers

        logs = []
        done = checkpoint.read_manifest(folder)["meta"]["updates_done"] if resume else 0
        if jax.process_index() == 0:
            if args.tensorboard:
                logs.append(loggers.TensorBoardLogger(folder, spec, first_update=done))
            if args.wandb != "off":
                logs.append(loggers.WandbLogger(folder, spec, mode=args.wandb,
                                                project=args.wandb_project or "jaxrl_rollout"))
        videos = _training_videos(args, spec, folder, logs, done) if args.video_every is not None else None
        try:
            for log in logs:
                if isinstance(log, loggers.WandbLogger):
                    _start_wandb(args, log, folder, unsaved_total)
            result = runner.train(spec, folder, resume=resume, devices=args.devices,
                                  checkpoint_every=args.checkpoint_every, stop_after_chunks=args.stop_after_chunks,
                                  on_chunk=loggers.chain(_folder_guard(args, folder),
                                                         *(log.log_chunk for log in logs)), on_save=on_save,
                                  on_state=videos)
        except BaseException as error:
            for log in logs:  # the error in flight (a signal, a divergence, a full disk) is the one to report
                try:
                    log.close()
                except Exception:  # noqa: BLE001 - e.g. the same full disk again
                    pass
            if isinstance(error, (runner.SaveFailed, OSError)):  # a full disk: what the folder keeps, how to go on
                return _failed_in_training(error, args, folder, unsaved_total)
            raise
        failed = None
        for log in logs:  # (TensorBoard's last events are written here: a full disk fails here too)
            try:
                log.close()
            except OSError as error:
                failed = failed or error
        if failed is not None:
            return _output_failed(failed, args, folder, result, unsaved_total)
    except KeyboardInterrupt as stop:
        print(f"interrupted; continue with: {_resume_command(args, folder, unsaved_total)}", file=sys.stderr)
        return getattr(stop, "exit_code", 130)  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
    try:
        return _after_training(args, spec, folder, result, resume, hits_before, unsaved_total)
    except OSError as error:  # an output file that cannot be written (a folder in its place, a full disk)
        return _output_failed(error, args, folder, result, unsaved_total)


def _folder_guard(args, folder):
    """An `on_chunk` hook, first of all: the run folder removed while it trains (`rm -rf runs/ppo`) is written
    again by the run's next save, so its lock is taken again first; had another command locked a folder of that
    name meanwhile, both would write it: this run stops there instead, writing nothing more. (None without a lock:
    a process other than 0.)"""
    held = getattr(args, "folder_lock", None)
    if held is None:
        return None
    lock, option = held
    from jaxrl_rollout._lock import FolderLocked

    def guard(metrics, first_update):
        try:
            taken = lock.take_again(option)
        except FolderLocked:
            raise FolderLocked(f"{folder} was removed while this run trained, and another command writes a folder "
                               f"of that name now ({lock.holder()}): this run stops, writing nothing there.") from None
        if taken:
            print(f"  {folder} was removed while this run trained: the run writes it again from its next checkpoint",
                  file=sys.stderr)

    return guard


def _output_failed(error: OSError, args, folder, result, unsaved_total) -> int:
    """One line for an OSError after training: what failed, and that the run is saved (it said only
    "error: FOLDER/metrics.csv: Permission denied", as if the run were lost). (A reader that closes stdout early
    is no error: `ReaderMayClose`.)"""
    what = _os_error_text(error)
    if result.complete:
        saved = (f"the run is complete and saved in {folder}: `jaxrl-rollout train --resume {shlex.quote(str(folder))}` "
                 "writes its metrics.csv and learning_curve.png and prints its summary again, and `jaxrl-rollout "
                 f"evaluate {shlex.quote(str(folder))}` evaluates it")
    else:
        saved = (f"the run is saved after chunk {result.chunks_done} of {result.num_chunks} in {folder}; continue "
                 f"with: {_resume_command(args, folder, unsaved_total)}")
    print(f"jaxrl-rollout: error: {what}, after training: {saved}.", file=sys.stderr)
    return 2


def _failed_in_training(error: Exception, args, folder, unsaved_total) -> int:
    """One line for a checkpoint that could not be saved (`runner.SaveFailed`: its message says what the folder
    keeps) or a file written during training that could not be (an OSError: a TensorBoard event file on a full
    disk), and the command that continues the run once the cause is gone. A save asked for by an interruption
    or a divergence (`SaveFailed.stopped_by`) exits as they do (130, 143, 129; 3, without a command: resuming would
    diverge again)."""
    from jaxrl_rollout import checkpoint, runner

    stopped_by = getattr(error, "stopped_by", None)
    if isinstance(stopped_by, runner.Diverged):
        print(f"jaxrl-rollout: error: {error}", file=sys.stderr)
        return 3
    if isinstance(error, runner.SaveFailed):
        what = str(error)
    else:
        try:
            saved = checkpoint.read_manifest(folder)["meta"]["chunks_done"] if checkpoint.exists(folder) else 0
        except (OSError, ValueError, KeyError):
            saved = None
        kept = ("" if saved is None else f"; the run is saved after chunk {saved}" if saved
                else "; no checkpoint was saved before")
        what = f"{_os_error_text(error)}, during training{kept}"
    print(f"jaxrl-rollout: error: {what}; continue with: {_resume_command(args, folder, unsaved_total)}",
          file=sys.stderr)
    return getattr(stopped_by, "exit_code", 130) if isinstance(stopped_by, KeyboardInterrupt) else 2


def _os_error_text(error: OSError) -> str:
    """An OSError as one line: the file it names, then what went wrong."""
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}"


_READER_GONE = (errno.EPIPE, errno.EIO)
"""A pipe whose reader closed it (BrokenPipeError), a terminal hung up (EIO, after its SIGHUP)."""


class ReaderMayClose:
    """The command's stdout or stderr, whose reader may stop reading before the end (`| head`, a pager closed,
    `2>&1 | tee log` stopped by the same Ctrl-C as the run, a terminal gone with its ssh connection).

    Each command writes its results to stdout, its progress to stderr and its
    files to disk; a reader that closes the pipe early wants no more of the
    text, not an end to the work. So the first write or flush that meets the
    closed pipe (BrokenPipeError) or the hung-up terminal (EIO) points the stream's file descriptor at
    /dev/null (`_to_devnull`: Python's own flush at exit then finds nothing to
    complain about), and every later write is dropped: `evaluate RUN --video |
    head -3` still writes its videos, `evaluate RUN --csv - | head` ends with
    status 0, `train | head -2` trains and writes metrics.csv and
    learning_curve.png, and `train 2>&1 | tee log` stopped by Ctrl-C saves its
    checkpoint at the chunk's end, as does a run whose terminal hangs up
    (SIGHUP, `_signals`). (Before, the first print after the pipe
    closed raised: the command ended with "error: Broken pipe", its files
    unwritten, and the Ctrl-C's own line killed the run before its checkpoint.)
    Any other error of the stream is raised as before; other attributes are the
    stream's own. A process started with the stream closed (`>&-`, sys.stdout
    None) drops its text as print does.
    """

    def __init__(self, stream):
        self._stream = stream
        self.reader_closed = stream is None  # no stream at all (`>&-`: Python's sys.stdout is None): text dropped

    def write(self, text: str) -> int:
        try:
            self._unless_gone("write", text)
        except UnicodeEncodeError:  # a stream that cannot spell a folder's name (PYTHONIOENCODING=ascii): escaped,
            encoding = self._stream.encoding  # as Python's own stderr does, not "'ascii' codec can't encode ..."
            self._unless_gone("write", text.encode(encoding, "backslashreplace").decode(encoding))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._unless_gone("flush")

    def _unless_gone(self, method: str, *args) -> None:
        """The stream's `method(*args)`, until its reader is gone; then nothing, ever again."""
        if self.reader_closed:
            return
        try:
            getattr(self._stream, method)(*args)
        except OSError as error:
            if error.errno not in _READER_GONE:
                raise
            self.reader_closed = True
            try:
                _to_devnull(self._stream)  # (not sys.stdout's: `evaluate --csv -` points that at stderr)
            except (OSError, ValueError, AttributeError):  # a stream without a file descriptor (io.StringIO)
                pass

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _to_devnull(stream) -> None:
    """Points `stream`'s file descriptor at /dev/null once its reader has closed it (`| head`), so that no later
    write or flush (Python's own at exit) raises BrokenPipeError again."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, stream.fileno())
    finally:
        os.close(null)


def _after_training(args, spec, folder, result, resume: bool, hits_before: int, unsaved_total) -> int:
    """`train`'s outputs after the run is saved: the timing line, metrics.csv and learning_curve.png, the summary,
    the closing evaluation. Returns the exit status."""
    import jax

    from jaxrl_rollout import compile_cache, report, runner

    cfg = spec.config
    # the chunks' own rate: the host's work outside them (checkpoints, logs, videos) is told apart where it took a
    # tenth of the run or more (a 4,000-frame video of jumanji's Snake took 107 of a 1,024-step run's 110 s: its
    # rate had read 10 env steps/s, the chunks' 403; 2 cores, 2026-12-07)
    steps = result.updates_run * cfg.steps_per_update * spec.num_runs
    speed = (f"{steps / max(result.chunks_s or result.run_s, 1e-9):,.0f} env steps/s over all runs"
             + (", this session" if resume else "")) if result.updates_run else "nothing trained"
    between, apart = result.run_s - result.chunks_s, ""
    if result.updates_run and result.chunks_s and between >= max(1.0, 0.1 * result.run_s):
        work = "checkpoints, logs and videos" if args.video_every else "checkpoints and logs"
        apart = f"; {between:.1f} s of the run went to {work} outside the chunks"
    print(f"  compile {result.compile_s:.1f} s, run {result.run_s:.1f} s ({speed}"
          + compile_cache.summary(hits_before) + apart + ")")
    _frames_held_note(spec, result.state)
    if not result.complete:
        print(f"  stopped after chunk {result.chunks_done} of {result.num_chunks}; "
              f"continue with: {_resume_command(args, folder, unsaved_total)}")
        return 0
    # Every process takes part in gathering the runs' states; process 0 alone then evaluates and writes.
    state = runner.gather_state([result.state]) if jax.process_count() > 1 else result.state
    best = result.best_policy
    if best is not None and jax.process_count() > 1:
        best = runner.gather_state([best])
    if jax.process_index() != 0:
        return 0
    paths = report.write_outputs(folder, spec, result.metrics)
    print(f"  mean episode return {_curve_label(result.metrics)}: " + _coarse_curve(result.metrics))
    window = max(1, result.updates_done // 10)
    print(report.format_summary(report.summarize(spec, result.metrics), window))
    # The run is complete, saved and written: a signal now (or one that came during the last chunk or the writes)
    # stops the closing evaluation at once; it was acknowledged with "stopping at the next chunk boundary", then
    # ignored through the whole evaluation.
    from jaxrl_rollout._signals import at_once

    try:
        with at_once():
            returns, rates = _closing_evaluation(args, spec, state, result.metrics)
    except KeyboardInterrupt as stop:
        print(f"  {getattr(stop, 'signal_name', 'SIGINT')}: stopped after training; the run is complete and saved in "
              f"{folder}; evaluate it with: jaxrl-rollout evaluate {shlex.quote(str(folder))}", file=sys.stderr)
        return getattr(stop, "exit_code", 130)
    except runner.StatesTooLarge as error:  # the run is trained and saved: what to do now is evaluate it with fewer
        raise ValueError(f"{error} The run is complete and saved in {folder}: evaluate it with fewer episodes, "
                         f"jaxrl-rollout evaluate {shlex.quote(str(folder))} --num-episodes N.") from None
    listed = returns.size <= LISTED_RUNS  # else each line gives the spread, and evaluate's table each run
    table = f"a row per run: jaxrl-rollout evaluate {shlex.quote(str(folder))}"
    if returns.size == 1:
        print(f"  deterministic evaluation, {_count(args.num_eval, 'episode')}: mean return {returns[0]:z.1f}")
    else:
        print(f"  deterministic evaluation, {_count(args.num_eval, 'episode')} per run: mean {returns.mean():z.1f} "
              f"(std over runs {returns.std():z.1f}); per run: "
              + (" ".join(_figures(returns)) if listed else f"{_spread(returns)} ({table})"))
    if rates is not None:
        print(f"  against a uniform random legal-move opponent (seat drawn per game): win {rates[:, 0].mean():.0%}, "
              f"draw {rates[:, 1].mean():.0%}, loss {rates[:, 2].mean():.0%}; per run (W/D/L): "
              + (" ".join("/".join(f"{x:.2f}" for x in r) for r in rates) if listed else table))
    if best is not None:
        figures = (" ".join(f"{v}@{int(u)}" for v, u in zip(_figures(best.eval_return), best.update)) if listed
                   else _spread(best.eval_return))
        print(f"  best policy per run (its periodic evaluation's return{' @ update' if listed else ''}): {figures}; "
              f"kept with the checkpoint: jaxrl-rollout evaluate {shlex.quote(str(folder))} --best-policy")
    # (a folder removed while the run trained is written again without the event files and videos made before)
    extras = [f"{folder / sub}/" for sub, on in (("tensorboard", args.tensorboard), ("videos/training", args.video_every
                                                                                  is not None)) if on and (folder / sub).is_dir()]
    print(f"  wrote {', '.join(str(p) for p in [folder / 'config.json', *paths, *extras])} and the checkpoint")
    return 0


def _frames_held_note(spec, state) -> None:
    """With `--frame-stack-axis`, one line when the replay buffers hold less than 90% of the transitions they
    could: frames are shared only where consecutive observations share them (`replay.FrameStackState`), so an
    axis that stacks no frames, or episodes much shorter than the ring is sized for, leaves the buffer short."""
    import jax
    import numpy as np

    from jaxrl_rollout.algorithms import replay

    cfg = spec.config
    buffer = getattr(state, "buffer", None)
    if not isinstance(buffer, replay.FrameStackState) or jax.process_count() > 1:  # (only frame_stack_axis makes one)
        return
    held = int(np.asarray(buffer.valid).sum())
    room = int((np.minimum(np.asarray(buffer.count), cfg.buffer_size // cfg.num_envs) * cfg.num_envs).sum())
    if held >= 0.9 * room:
        return
    print(f"  note: the replay buffers hold {held:,} of the {room:,} transitions they could ({held / room:.0%}): "
          f"--frame-stack-axis {cfg.frame_stack_axis} stores a frame once only where an observation's first frames "
          "are the last ones of the observation before, and these observations share few (or their episodes are "
          f"shorter than {replay.EPISODE_STEPS_SIZED_FOR} steps on average); without --frame-stack-axis every "
          "transition the buffer size allows is held.")


def _closing_evaluation(args, spec, state, metrics: dict):
    """([R] mean deterministic returns, [R, 3] win/draw/loss rates for a two-player game, else None) of `train`'s end.

    When the periodic evaluation ran at the last update with --num-eval
    episodes, those are its figures (the same policy, episodes and statistics;
    its own keys), and nothing is compiled again; otherwise --num-eval
    episodes are played now with the key fold_in(key(seed), 1).
    """
    import jax
    import numpy as np

    game = _self_play_game(spec)
    fields = ("eval_return", "eval_win", "eval_draw", "eval_loss") if game else ("eval_return",)
    if spec.eval_every is not None and spec.eval_episodes == args.num_eval and all(f in metrics for f in fields):
        last = [np.asarray(metrics[f][:, -1], np.float64) for f in fields]
        if all(np.isfinite(x).all() for x in last):
            return last[0], (np.stack(last[1:], axis=1) if game else None)
    # the program `evaluate` compiles for as many episodes (both policies, a flag choosing): an `evaluate` after this
    # train loads it from the persistent compilation cache (craftax's took 20 s to compile on 2 cores)
    from jaxrl_rollout.runner import make_algorithm

    games, _ = evaluate_both(spec, state, args.num_eval, [jax.random.fold_in(jax.random.key(spec.seed), 1)],
                             make_algorithm(spec), deterministic_only=True, option="--num-eval")
    if not game:
        return games.mean(axis=1), None
    from jaxrl_rollout.envs.pgx import outcome_rates

    return games.mean(axis=1), outcome_rates(games)


def run_evaluate(args: argparse.Namespace) -> int:
    """The `evaluate` command: per-run returns of a saved run's policies, deterministic and stochastic."""
    import jax

    from jaxrl_rollout.runner import _load_run_policies

    if args.runs != "all" and not args.video:  # before the checkpoint is read and every run evaluated
        raise ValueError("--runs selects the runs of --video; add --video.")
    if args.video_max_steps is not None and not args.video:
        raise ValueError(f"--video-max-steps {args.video_max_steps} bounds the episodes of --video; add --video.")
    from jaxrl_rollout import checkpoint
    from jaxrl_rollout.runner import read_spec

    read_spec(args.folder)  # a folder without a run says so first
    if not checkpoint.exists(args.folder):
        from jaxrl_rollout._lock import FolderLock

        writer = FolderLock(args.folder).held_by()
        if writer is not None:  # a train is compiling or running its first chunks: resuming it would be refused
            raise ValueError(f"{args.folder} is being trained by {writer}, which has not saved its first "
                             "checkpoint yet (one at the end of the first chunk, or of every --checkpoint-every "
                             "chunks); evaluate it once that is written.")
        raise ValueError(f"{args.folder} holds a run with nothing trained yet (no checkpoint: its train stopped "
                         "before the first chunk ended); continue it with: "
                         f"jaxrl-rollout train --resume {shlex.quote(str(args.folder))}")
    if args.best_policy:  # every run's best policy, kept with the checkpoint: evaluated in place of the state
        from jaxrl_rollout.runner import _load_best_policies, no_evaluation_yet

        spec, state, algorithm = _load_best_policies(args.folder)
        manifest = checkpoint.read_manifest(args.folder)
        why = no_evaluation_yet(spec, state, manifest["meta"]["updates_done"])
        if why is not None:
            raise ValueError(f"--best-policy: {why}; evaluate the latest policies without --best-policy.")
    else:
        spec, state, manifest, algorithm = _load_run_policies(args.folder)  # (a replay buffer is not read)
    chunks_done, updates_done = manifest["meta"]["chunks_done"], manifest["meta"]["updates_done"]
    key = jax.random.key(args.seed)
    args.trained_options = spec.config.env_options
    if args.env_option:  # the evaluation's env: the run's with these options in place of its own
        spec, algorithm = _evaluation_spec(spec, _given_env_options(args.env_option))
    # else the algorithm the checkpoint was read with: once, for both columns and the videos (a host env: one
    # pool), its env the one whose reset and step were traced for the checkpoint's shapes
    # (`stepping._fused_trace` is not traced again for it: 1.5 s of brax's inverted_pendulum on 2 cores)
    if args.video:  # before every run is evaluated: a bad selector, an env that cannot be drawn, no `video` extra
        import numpy as np

        from jaxrl_rollout import video

        try:
            video.select_runs(args.runs, spec.num_runs, np.zeros(spec.num_runs))
        except ValueError as error:
            raise ValueError(f"--runs: {error}") from None
        try:
            video.check_recordable(algorithm.env)  # the renderer's own packages too (pygame, cairosvg)
        except (ImportError, ValueError) as error:
            raise ValueError(f"--video: {error}") from None
        _check_writable(pathlib.Path(args.folder) / "videos", "--video")
    if args.csv == "-":  # the CSV alone on stdout, for a pipe; the report goes to stderr
        csv_out = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            return _evaluate(args, spec, state, updates_done, chunks_done, algorithm, key, csv_out)
    if args.csv is not None:  # before every run is evaluated, as --video's folder
        csv_path = pathlib.Path(args.csv)
        if csv_path.is_dir():
            raise ValueError(f"--csv {args.csv}: a folder; give a file name, e.g. {csv_path / 'evaluation.csv'}")
        _check_writable(csv_path.parent, f"--csv {args.csv}")
    return _evaluate(args, spec, state, updates_done, chunks_done, algorithm, key, None)


def _evaluation_spec(spec, options: tuple):
    """`evaluate --env-option`: (the run's spec whose env options are its own updated by `options`, sorted pairs;
    its algorithm), once the env they make is known to have the observation and action spaces of the run's env,
    on which its policies were trained. A ValueError names the options otherwise (and for a gymnax env, which
    takes none, or options its algorithm refuses: a self-play game's seat)."""
    from jaxrl_rollout.algorithms._common import env_options_tuple, space_text
    from jaxrl_rollout.envs import suite_of
    from jaxrl_rollout.runner import make_algorithm

    env_id, typed = spec.config.env_id, _env_options_text(options)
    if suite_of(env_id) == "gymnax":
        raise _no_gymnax_options(env_id, options, "collect.evaluate(env, env_params, ...)")
    merged = env_options_tuple({**dict(spec.config.env_options), **dict(options)})
    trained_env, trained_params = _make_env(env_id, spec.config.env_options)
    _make_env(env_id, merged)  # an option the suite does not take, or a bad value: named with --env
    try:
        spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, env_options=merged))
        algorithm = make_algorithm(spec)
    except ValueError as error:
        raise ValueError(f"{typed}: {error}") from None
    for what, space_of in (("observations", "observation_space"), ("actions", "action_space")):
        trained = getattr(trained_env, space_of)(trained_params)
        given = getattr(algorithm.env, space_of)(algorithm.env_params)
        if _space_key(trained) != _space_key(given):
            shown = [space_text(trained), space_text(given)]
            bounds = " (of other bounds)" if shown[0] == shown[1] else ""
            raise ValueError(f"{typed}: the env these options make has {what} {shown[1]}{bounds}, where the run's "
                             f"has {shown[0]}; a policy acts only on the spaces it was trained on.")
    return spec, algorithm


def _space_key(space):
    """What a gymnax space is, as a value that compares: its kind, shapes, dtypes, counts and bounds."""
    import numpy as np
    from gymnax.environments import spaces

    if isinstance(space, spaces.Dict):
        return ("Dict", tuple((k, _space_key(space.spaces[k])) for k in sorted(space.spaces)))
    if isinstance(space, spaces.Tuple):
        return ("Tuple", tuple(_space_key(s) for s in space.spaces))
    if isinstance(space, spaces.Box):
        dtype = np.dtype(space.dtype)
        return ("Box", tuple(int(d) for d in space.shape), dtype.str,
                *(np.broadcast_to(np.asarray(b, dtype), space.shape).tobytes() for b in (space.low, space.high)))
    if isinstance(space, spaces.Discrete):
        return ("Discrete", int(space.n))
    return (type(space).__name__, repr(getattr(space, "shape", None)), str(getattr(space, "dtype", None)))


def _evaluate(args, spec, state, updates_done: int, chunks_done: int, algorithm, key, csv_out) -> int:
    """`run_evaluate` once its arguments are checked: the evaluation, its report, the CSV (to `csv_out`, a text
    stream, for `--csv -`) and the videos."""
    import jax

    from jaxrl_rollout import report

    det, sto = evaluate_both(spec, state, args.num_episodes, [jax.random.fold_in(key, i) for i in (0, 1)], algorithm)
    status = "final" if updates_done == spec.config.num_updates else (
        f"after chunk {chunks_done}, update {updates_done} of {spec.config.num_updates} (run incomplete)")
    best = _best_updates(state)
    print(f"jaxrl_rollout: evaluate {args.folder} ({spec.algo.upper()} on {_env_text(spec.config.env_id, spec.config.env_options)}, "
          + ("each run's best policy, " if best is not None else "") + f"checkpoint "
          f"{status}), {_count(args.num_episodes, 'episode')} per run; return mean (std)")
    if args.env_option:
        trained = ", ".join(_env_option_texts(args.trained_options)) or "none"
        print(f"  the env made with {_env_options_text(_given_env_options(args.env_option))} (the run trained with "
              f"options: {trained})")
    if best is not None:
        print("  a run's best policy: the one of its highest periodic evaluation in training (that update and "
              "return in the last columns)")
    if sto is None:
        explores = "epsilon-greedy exploration" if spec.algo == "dqn" else "exploration noise"
        print(f"  {spec.algo.upper()}'s policy is deterministic (its {explores} belongs to training): "
              "no stochastic column")
    labels = [report.grid_label(spec, g) for g in range(len(spec.grid))]
    width = max(len("grid point"), *map(len, labels))
    game = _self_play_game(spec)
    if game:
        from jaxrl_rollout.envs.pgx import outcome_rates

        print("  against a uniform random legal-move opponent (seat drawn per game); W/D/L: win, draw, loss rates")
        rates = {"det": outcome_rates(det), "sto": outcome_rates(sto)}
    extra = (f"  {'W/D/L det':>14}  {'W/D/L sto':>14}" if game else "") + (
        f"  {'update':>7}  {'in training':>11}" if best is not None else "")
    print(f"  {'grid point':<{width}}  seed  {'deterministic':>17}" + (f"  {'stochastic':>17}" if sto is not None
                                                                          else "") + extra)
    for r in range(spec.num_runs):
        g, s = divmod(r, spec.num_seeds)
        wdl = "".join(f"  {'/'.join(f'{x:.2f}' for x in rates[m][r]):>14}" for m in ("det", "sto")) if game else ""
        stochastic = f"  {sto[r].mean():z9.2f} ({sto[r].std():z5.1f})" if sto is not None else ""
        kept = f"  {best[r]:>7}  {float(state.eval_return[r]):z11.2f}" if best is not None else ""
        print(f"  {labels[g]:<{width}}  {s:>4}  {det[r].mean():z9.2f} ({det[r].std():z5.1f}){stochastic}{wdl}{kept}")
    if spec.num_seeds > 1:
        print(report.format_evaluation_summary(spec, {"deterministic": det, "stochastic": sto}))
    if args.csv is not None:
        report.write_evaluation_csv(args.csv if csv_out is None else csv_out, spec,
                                    updates_done if best is None else best, args.seed,
                                    {"deterministic": det, "stochastic": sto},
                                    env_options=(" ".join(_env_option_texts(spec.config.env_options))
                                                 if args.env_option else None))
        print(f"  wrote every episode's return to {args.csv if csv_out is None else 'stdout'}")
    if args.video:
        _write_videos(args, spec, state, jax.random.fold_in(key, 2), algorithm, updates_done)
    return 0


def _training_videos(args, spec, folder: pathlib.Path, sinks: list, first_update: int):
    """`train --video-every`: the runner's `on_state` hook recording episodes into FOLDER/videos/training.

    A video that fails to draw or encode (a lost OpenGL context, a full disk)
    is reported in one line and ends the videos; training goes on.
    """
    import jax

    from jaxrl_rollout import video
    from jaxrl_rollout.runner import make_algorithm

    algorithm = make_algorithm(spec)
    keys = jax.vmap(lambda k: jax.random.fold_in(k, video.VIDEO_KEY_TAG))(spec.run_keys())
    record = video.TrainingVideos(
        folder / "videos" / "training", algorithm.env, algorithm.env_params, algorithm.eval_policy_fn,
        algorithm.policy_params, keys, args.video_every, _video_runs(args), names=_video_names(spec),
        first_update=first_update, sinks=[log for log in sinks if hasattr(log, "log_video")],
        num_updates=spec.config.num_updates, max_steps=args.video_max_steps,
        initial_carry=algorithm.module.initial_carry(1) if algorithm.recurrent else None, progress=_video_progress)
    failed = []

    def on_state(state, updates_done: int) -> None:
        if failed:
            return
        try:
            record(state, updates_done)
        except (ImportError, OSError, RuntimeError, ValueError) as error:
            failed.append(error)
            print(f"  --video-every: no more videos ({type(error).__name__}: {error}); training goes on",
                  file=sys.stderr)

    return on_state


def _video_progress(line: str) -> None:
    """`train --video-every`'s and `evaluate --video`'s word on a video that takes long to draw (`video._reported`),
    on stderr with the progress lines, and the option that shortens it."""
    print(f"{line} (--video-max-steps N ends it sooner)", file=sys.stderr, flush=True)


def _video_names(spec) -> list[str]:
    """Each run's name in video files: "seed<S>", with its grid point first in a sweep ("lr=0.001_seed1")."""
    import re

    from jaxrl_rollout import report

    names = []
    for r in range(spec.num_runs):
        g, s = divmod(r, spec.num_seeds)
        point = "" if len(spec.grid) == 1 else re.sub(r"[^A-Za-z0-9.=-]+", "_", report.grid_label(spec, g)) + "_"
        names.append(f"{point}seed{s}")
    return names


def _check_writable(folder: pathlib.Path, option: str) -> None:
    """A ValueError naming `option` when files cannot be made in `folder` (made if missing), checked before the
    work whose output goes there (a read-only run's `evaluate --video` said so after every run was evaluated)."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise ValueError(f"{option}: cannot write in {folder} ({error.strerror or error}).") from None


def _video_prefix(args, update: str | None) -> str:
    """The start of `evaluate --video`'s file names: "update<U>_evalseed<E>_" (U the checkpoint's update, zero-padded),
    "best_evalseed<E>_" for best policies (`update` None), then each --env-option given as typed
    ("max_episode_steps=200_"; characters a file name should not hold as "-"), so that an evaluation under other
    options writes files of its own."""
    import re

    options = "".join(f"{re.sub(r'[^A-Za-z0-9_=.+-]', '-', text)}_"
                      for text in _env_option_texts(_given_env_options(args.env_option)))
    return f"{'best' if update is None else f'update{update}'}_evalseed{args.seed}_{options}"


def _write_videos(args, spec, state, key, algorithm, updates_done: int) -> None:
    """`evaluate --video`: one deterministic episode per selected run, drawn and encoded into FOLDER/videos.

    The files are "update<U>_evalseed<E>_<run name>_return<R>.mp4": the
    checkpoint's update U (zero-padded as `train --video-every`'s) and the
    --seed E tell apart the videos of different checkpoints and seeds; the
    same checkpoint and seed give the same episode, whose file is replaced.
    Of best policies (`--best-policy`, `state` a `periodic_eval.BestPolicy`)
    they are "best_evalseed<E>_<run name>_update<U>_return<R>.mp4", U each run's own.
    With --env-option, the options given follow E (`_video_prefix`).
    """
    import jax

    from jaxrl_rollout import video

    folder = pathlib.Path(args.folder) / "videos"
    names = _video_names(spec)
    carry = algorithm.module.initial_carry(1) if algorithm.recurrent else None
    width = len(str(spec.config.num_updates))
    update = f"{updates_done:0{width}d}"
    best = _best_updates(state)
    if best is not None:  # each run's own update, in its name
        names = [f"{name}_update{u:0{width}d}" for name, u in zip(names, best)]
    try:
        videos = video.write_episode_videos(
            folder, algorithm.env, algorithm.env_params, algorithm.eval_policy_fn,
            _policy_params(algorithm, state), jax.random.split(key, spec.num_runs), args.runs,
            names=names, prefix=_video_prefix(args, None if best is not None else update),
            caption="  best policy" if best is not None else f"  update {updates_done}", initial_carry=carry,
            max_steps=args.video_max_steps, progress=_video_progress)
    except (ImportError, OSError, RuntimeError) as error:
        # a missing extra, a video that cannot be written (a folder of its name, a full disk), no OpenGL for
        # MuJoCo's renderer: one line
        raise ValueError(f"--video: {error}") from None
    print(f"  videos of one deterministic episode per run in {folder}:")
    for v in videos:
        print(f"    run {v.run}: return {v.episode_return:z.1f}, {v.length} steps: {v.path.name}")
    if {t.strip().lower() for t in args.runs.split(",")} == {"best", "worst"} and len(videos) == 1 < spec.num_runs:
        # the highest and the lowest return are one run's (the first on a tie) only when all runs returned the same
        print(f"    (best and worst are that one run: every run's episode returned {videos[0].episode_return:z.1f})")


def _random_policy(env, env_params):
    """`rollout`'s policy: uniform over the action space, or over the allowed actions where the observation holds
    an action mask (jumanji's `action_mask`, pgx's `legal_action_mask`), which a uniform draw would ignore (a pgx
    game ends at an illegal move, with a loss)."""
    import jax
    import jax.numpy as jnp

    import jaxrl_rollout as jr
    from jaxrl_rollout import networks
    from jaxrl_rollout.distributions import masked_logits

    space = env.action_space(env_params)

    def mask_of(obs):  # by leaf name, as the networks read it (a space's dict can be the env's NamedTuple)
        return next((x for path, x in jax.tree_util.tree_flatten_with_path(obs)[0]
                     if networks.leaf_name(path) in networks.ACTION_MASK_KEYS), None)

    if mask_of(jax.eval_shape(env.observation_space(env_params).sample, jax.random.key(0))) is None:
        return jr.uniform_random_policy(space)

    def uniform_over_allowed(params, obs):
        mask = jnp.asarray(mask_of(obs), bool)
        return masked_logits(jnp.zeros(mask.shape, jnp.float32), mask), jnp.zeros(mask.shape[:1], jnp.float32)

    return jr.categorical_policy(uniform_over_allowed)


ROLLOUT_CHUNK_STEPS = 1024  # `rollout`'s steps per inner rollout (its memory: one chunk's trajectory)


def run_rollout(env_id: str, num_envs: int, num_steps: int, seed: int, num_eval: int, *,
                video: str | None = None, env_options: tuple = ()) -> dict:
    """Rolls out a uniform random policy (over the legal moves where the env masks them), then evaluates it; prints
    and returns the figures. With `video` (a folder), also writes one episode of that policy there (`--video`):
    everything it needs is checked before the rollout. `env_options`: the env's make options (`--env-option`), as
    (name, value) pairs."""
    import jax
    import jax.numpy as jnp
    from gymnax.environments import spaces

    import jaxrl_rollout as jr
    from jaxrl_rollout import episodes
    from jaxrl_rollout._signals import compiled, ready_time, wait_ready
    from jaxrl_rollout.algorithms import _common
    from jaxrl_rollout.envs._host import run_interruptibly

    env, env_params = _make_env(env_id, env_options)
    if _common.is_self_play(env):  # a two-player pgx game: against its random opponent, as train evaluates it
        # (unless --env-option gives a seat or a move limit)
        env, env_params = _make_env(env_id, env_options, defaults=_common.SELF_PLAY_EVAL_OPTIONS)
    _check_time_limit(env_id, env, env_params)
    space = env.action_space(env_params)
    if not isinstance(space, (spaces.Discrete, spaces.Box)):
        raise ValueError(f"--env {env_id}: rollout draws Discrete or Box actions, got {space!r}."
                         f"{_common.tuple_actions_hint(space)}")
    policy_fn = _random_policy(env, env_params)
    if video is not None:  # before anything runs: an env that cannot be drawn, no `video` extra, no writable folder
        from jaxrl_rollout import video as videos

        try:
            videos.check_recordable(env)
        except (ImportError, ValueError) as error:
            raise ValueError(f"--video: {error}") from None
        _check_writable(pathlib.Path(video), f"--video {video}")

    # In rollouts of ROLLOUT_CHUNK_STEPS steps, the finished episodes summed between them, so memory stays one
    # chunk's worth however many steps are asked for (one trajectory kept ~17 bytes a step and env: 7 GB for
    # 4,096 envs x 100,000 steps). Each step splits the state's key, so the steps are those of one rollout.
    chunk = min(num_steps, ROLLOUT_CHUNK_STEPS)
    full, rest = divmod(num_steps, chunk)

    def add(totals, traj):
        return jax.tree.map(jnp.add, totals, episodes.episode_sums(traj))

    @jax.jit
    def collect(key):
        state = jr.rollout_init(key, env, env_params, num_envs)

        def one_chunk(carry, _):
            state, totals = carry
            state, traj = jr.rollout(env, env_params, policy_fn, None, state, chunk)
            return (state, add(totals, traj)), None

        zeros = (jnp.int32(0), jnp.float32(0), jnp.float32(0))
        (state, totals), _ = jax.lax.scan(one_chunk, (state, zeros), None, length=full)
        if rest:
            _, traj = jr.rollout(env, env_params, policy_fn, None, state, rest)
            totals = add(totals, traj)
        return episodes.episode_means(*totals)

    key = jax.random.key(seed)
    start = time.perf_counter()
    executable = compiled(collect, key)  # XLA's compile waited for where a signal's handler runs
    compile_s = time.perf_counter() - start
    from jaxrl_rollout.runner import _check_evaluation_fits, _check_program_fits

    _check_program_fits(executable, "rollout", f"{num_envs:,} envs stepped at once, up to {chunk:,} steps of each "
                        "kept", "lower --num-envs")  # (on a CPU: past the free memory the kernel would end it)
    start = time.perf_counter()
    # waited for in Python (a host env's program from a helper thread): a Ctrl-C (or SIGTERM) stops it at once
    metrics = run_interruptibly(lambda: executable(key), env)
    run_s = ready_time(metrics) - start
    eval_key = jax.random.fold_in(key, 1)
    evaluation = compiled(jax.jit(lambda k: jr.evaluate(env, env_params, policy_fn, None, k, num_eval)), eval_key)
    _check_evaluation_fits(evaluation, num_eval, 1, "--num-eval")
    result = run_interruptibly(lambda: evaluation(eval_key), env)
    wait_ready(result)

    steps = num_envs * num_steps
    print(f"jaxrl_rollout: uniform random policy on {_env_text(env_id, env_options)}, "
          f"{num_envs} env{'s' * (num_envs != 1)} x {num_steps} steps")
    print(f"  backend {jax.default_backend()}, compile {compile_s:.2f} s, run {run_s:.3f} s "
          f"({steps / run_s:,.0f} env steps/s)")
    n = int(metrics.num_episodes)
    if n:
        print(f"  rollout: {n} completed episode{'s' * (n != 1)}, mean return {float(metrics.mean_return):z.2f}, "
              f"mean length {float(metrics.mean_length):.1f}")
    else:
        print("  rollout: no episode completed (try more --num-steps)")
    returns = result.returns
    print(f"  evaluate: {num_eval} episode{'s' * (num_eval != 1)}, return mean {float(returns.mean()):z.2f} "
          f"min {float(returns.min()):z.1f} max {float(returns.max()):z.1f}, "
          f"{int(result.completed.sum())} completed")
    clip = None
    if video is not None:
        import re

        try:
            (clip,) = videos.write_episode_videos(
                video, env, env_params, policy_fn, None, jax.random.split(jax.random.fold_in(key, 2), 1),
                names=[f"{re.sub(r'[^A-Za-z0-9.=-]+', '-', env_id)}_random_seed{seed}"])
        except (ImportError, OSError, RuntimeError) as error:  # e.g. no OpenGL for MuJoCo's renderer: one line
            raise ValueError(f"--video: {error}") from None
        print(f"  video of one episode: return {clip.episode_return:z.1f}, {clip.length} steps: {clip.path}")
    return {"metrics": metrics, "eval": result, "compile_s": compile_s, "run_s": run_s, "video": clip}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that a bad command line is told in one line, where to find the help included.

    argparse prints the whole usage above its error; `train`'s usage alone is
    some 60 lines, which buried the one line that says what is wrong.
    """

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        """argparse's, except that an option the command does not take is told by the command's parser, so the line
        points at the help that lists its options (the top parser's lists none)."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(namespace, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            self.exit(2, f"{prog}: error: unrecognized arguments: {' '.join(extras)} (see {prog} --help)\n")
        return namespace


def build_parser(train_arguments: bool = True, table: dict | None = None) -> argparse.ArgumentParser:
    """The command line's parser; without `train_arguments`, `train` has no options, for the help of the other
    commands and of the commands themselves: train's options take their defaults from the algorithms' configs,
    whose import (jax, gymnax) takes seconds. `table`: train's options from this `option_table()` (`train --help`
    from `_option_table.TABLE`, without that import)."""
    parser = _Parser(
        prog="jaxrl-rollout",
        description="JAX-native RL rollouts and training on gymnax environments. "
        "With no command, trains PPO on CartPole-v1 with the default config over 8 vmapped seeds.",
        epilog="examples:\n"
               "  jaxrl-rollout train --algo sac --seeds 4 --total-steps 20000 --out runs/sac\n"
               "  jaxrl-rollout train --lr 1e-3,3e-4 --seeds 4 --out runs/sweep   # 2 grid points x 4 seeds\n"
               "  jaxrl-rollout train --resume runs/sweep                          # after a Ctrl-C\n"
               "  jaxrl-rollout train --config runs/sweep --seed 1 --out runs/s1  # the same runs, other seeds\n"
               "  jaxrl-rollout evaluate runs/sac --video --runs best,worst\n"
               "  jaxrl-rollout rollout --env brax/ant                             # check an env id\n"
               "every option of a command: jaxrl-rollout train --help (evaluate --help, rollout --help)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=version_line(),
                        help="print the versions of jaxrl-rollout, Python, jax, jaxlib, flax and gymnax, and exit")
    sub = parser.add_subparsers(dest="command")
    train = sub.add_parser("train", help="train PPO, A2C, DQN, PQN, SAC or TD3 over vmapped seeds and sweep grids "
                                         "(the default command)")
    if train_arguments:
        _add_train_arguments(train, table)
    evaluate = sub.add_parser("evaluate", help="evaluate a saved run's policies per seed")
    evaluate.add_argument("folder", type=_folder, help="a run folder written by train")
    evaluate.add_argument("--num-episodes", type=_positive_int, default=10,
                          help="episodes per run and mode (default: %(default)s)")
    evaluate.add_argument("--seed", type=_seed, default=0, help="PRNG seed of the evaluation (default: %(default)s)")
    evaluate.add_argument("--video", action="store_true",
                          help="also write a video of one deterministic episode per selected run to FOLDER/videos "
                               "as update<U>_evalseed<E>_seed<S>_return<R>.mp4 (U: the checkpoint's update, E: "
                               "--seed, then each --env-option given, e.g. evalseed0_max_episode_steps=200_; with "
                               "--best-policy best_evalseed<E>_seed<S>_update<U>_return<R>.mp4, U the "
                               "best policy's; mp4, or gif without ffmpeg; the return also on the frames; the video "
                               "extra)")
    evaluate.add_argument("--video-max-steps", type=_positive_int, metavar="N",
                          help="with --video: end each video's episode after N steps, its return then those steps' "
                               "(an untrained policy's Atari game runs to its limit, 27,000 steps, played and drawn "
                               "from Python on a host env) (default: the env's time limit)")
    evaluate.add_argument("--csv", type=_file, metavar="FILE",
                          help="also write every episode's return to FILE (made with its folder if missing; "
                               "replaced if there), or to stdout with -, the report then going to stderr: one row "
                               "per grid point, seed, policy and episode, with metrics.csv's grid_point, seed, "
                               "update, step and swept-hyperparameter columns")
    evaluate.add_argument("--env-option", dest="env_option", action="append", type=_env_option, metavar="NAME=VALUE",
                          help="evaluate (and record videos) in the run's env made with this option in place of the "
                               "run's own value of it, e.g. a longer time limit than training's: max_episode_steps="
                               "27000; repeated for more; the env must have the observations and actions the run "
                               "trained on; with --csv, an env_options column holds the options used")
    evaluate.add_argument("--compile-cache", default="auto", metavar="{auto,off,FOLDER}", help=_COMPILE_CACHE_HELP)
    evaluate.add_argument("--host-devices", type=_host_devices, default="auto", metavar="{N,auto}",
                          help="split this host's CPU into N JAX devices, over which the runs' episodes are played, "
                               "as train's --host-devices; auto: one per usable core, except when XLA_FLAGS already "
                               "sets --xla_force_host_platform_device_count. The same count as the run's train lets "
                               "evaluate load the program of its closing evaluation from the compilation cache "
                               "(default: auto)")
    evaluate.add_argument("--best-policy", action="store_true",
                          help="evaluate each run's best policy, the one of its best periodic evaluation (kept by "
                               "train --eval-every), instead of the checkpoint's latest")
    evaluate.add_argument("--runs", default="all", metavar="SELECTOR",
                          help="with --video: which runs, e.g. best,worst,0,3 (run r = grid point x seeds + seed; "
                               "best and worst by the recorded episode's return) (default: %(default)s)")
    roll = sub.add_parser("rollout", help="roll out a random policy and print episode statistics")
    roll.add_argument("--env", default=DEFAULT_ENV,
                      help="gymnax env id, or SUITE/NAME for another suite, e.g. brax/ant (default: %(default)s)")
    roll.add_argument("--env-option", dest="env_option", action="append", type=_env_option, metavar="NAME=VALUE",
                      help=_ENV_OPTION_HELP)
    roll.add_argument("--num-envs", type=_positive_int, default=8, help="parallel envs (default: %(default)s)")
    roll.add_argument("--num-steps", type=_positive_int, default=1000, help="steps per env (default: %(default)s)")
    roll.add_argument("--num-eval", type=_positive_int, default=16, help="evaluation episodes (default: %(default)s)")
    roll.add_argument("--seed", type=_seed, default=0, help="PRNG seed (default: %(default)s)")
    roll.add_argument("--video", nargs="?", const="videos", type=_folder, metavar="FOLDER",
                      help="also write a video of one random-policy episode to FOLDER (default: videos) as "
                           "<env>_random_seed<S>_return<R>.mp4, to see what the env looks like; needs the video "
                           "extra")
    return parser


def version_line() -> str:
    """`jaxrl-rollout --version`: this package's version and those a bug report needs, read without importing them."""
    import platform
    from importlib import metadata

    from jaxrl_rollout import __version__

    def installed(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    found = ", ".join(f"{dist} {installed(dist)}" for dist in ("jax", "jaxlib", "flax", "gymnax"))
    return f"jaxrl-rollout {__version__} (Python {platform.python_version()}, {found})"


def backend_problem() -> str | None:
    """None when JAX starts a backend; else one line saying why not and what to do.

    The usual cause is `JAX_PLATFORMS` naming a platform this jax cannot
    start: `cuda` or `gpu` where only the CPU build is installed (jax then
    fails with a bare AssertionError), a misspelt name, or a GPU that is not
    there. Called after `_configure_jax_early`, which must run first.
    """
    import jax

    try:
        jax.devices()
    except (RuntimeError, AssertionError) as error:
        asked = os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms or ""
        reason = str(error).split(" (set JAX_PLATFORMS=")[0].rstrip(". ") or f"no backend of {asked!r} is installed"
        where = f"JAX_PLATFORMS={asked}" if asked else "this machine"
        gpu = ("; for an NVIDIA GPU install jax's CUDA build (pip install 'jaxrl-rollout[cuda12]', or -e '.[cuda12]' "
               "in a clone)") if any(p in asked for p in ("cuda", "gpu")) else ""
        return f"JAX cannot start a backend for {where}: {reason}{gpu}. To run on the CPU, unset JAX_PLATFORMS or set it to cpu."
    return None


def _use_host_cores_by_default() -> None:
    """`--host-devices auto`: a CPU device per usable core (`devices.use_host_cores`), unless XLA_FLAGS or JAX's
    config already set a count, or JAX already runs in this process (`main` called from Python), whose devices
    are kept."""
    import jax

    from jaxrl_rollout import devices

    if devices.forced_host_device_count() is not None or jax.config.jax_num_cpu_devices != -1:
        return
    try:
        devices.use_host_cores()
    except RuntimeError:
        pass


def _configure_jax_early(argv: Sequence[str]) -> None:
    """`train`'s and `evaluate`'s JAX set-up, before anything imports gymnax: host CPU devices, then (`train`)
    `jax.distributed`.

    Both must precede every use of an XLA backend, and importing gymnax (which
    building the parser does, through the algorithm configs) already uses one.
    Only these options are read here; a value the early parser cannot read is
    left for the full parser to report.
    """
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--host-devices", default="auto")
    early.set_defaults(distributed=False)
    if argv[0] == "train":
        early.add_argument("--distributed", action="store_true")
        early.add_argument("--coordinator")
        early.add_argument("--num-processes")
        early.add_argument("--process-id")
    known, _ = early.parse_known_args(argv)
    import jax

    from jaxrl_rollout import devices

    if known.host_devices == "auto":
        if not known.distributed:
            _use_host_cores_by_default()
    else:
        try:
            count = _host_devices(known.host_devices)
        except argparse.ArgumentTypeError:
            count = None  # build_parser's parser reports it
        if count is not None:
            try:
                devices.use_host_cores(count)
            except RuntimeError as error:
                raise ValueError(f"--host-devices {count}: {error}") from None
    if not known.distributed:
        return
    try:
        num_processes = None if known.num_processes is None else int(known.num_processes)
        process_id = None if known.process_id is None else int(known.process_id)
    except ValueError:
        return  # build_parser's parser reports it
    if known.coordinator is not None:  # without a port, JAX failed on an IndexError
        host, colon, port = known.coordinator.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--coordinator {known.coordinator}: expected HOST:PORT, process 0's address and a free "
                             "port on it, such as 127.0.0.1:12345.")
    try:
        jax.distributed.initialize(coordinator_address=known.coordinator, num_processes=num_processes,
                                   process_id=process_id)
    except ValueError as error:
        if known.coordinator is not None:
            raise
        # JAX reads the coordinator from a cluster it knows (SLURM, Open MPI, ...) and found none
        text = " ".join(str(error).split()).rstrip(".")
        raise ValueError(f"--distributed: JAX found no cluster to read the coordinator from ({text}); off a cluster, "
                         "give --coordinator HOST:PORT --num-processes N --process-id I on every process.") from None


def format_warning(message, category, filename, lineno, line=None) -> str:
    """The command line's `warnings.formatwarning`: one line naming the library that warned.

    Python's own shows the warning's file and line in site-packages and the
    source line that warned (brax's notice that it is not maintained: a path,
    the text, then `warnings.warn(`), which a user of the command cannot act
    on. The text is kept whole, on one line. (The format, not `showwarning`:
    a caller's `catch_warnings(record=True)` still records the warnings.)
    """
    path = pathlib.PurePath(filename)
    parts = path.parts
    origin = next((parts[i + 1] for i in range(len(parts) - 1)
                   if parts[i] in ("site-packages", "dist-packages")), None)
    if origin is None:  # the package's own file, or one outside an environment's packages
        origin = "jaxrl_rollout" if "jaxrl_rollout" in parts else path.stem
    origin = origin.removesuffix(".py")
    text = " ".join(str(message).split())
    return f"jaxrl-rollout: warning from {origin} ({category.__name__}): {text}\n"


@contextlib.contextmanager
def _one_line_warnings():
    """`format_warning` while the command runs (`warnings.catch_warnings` does not restore the format)."""
    before = warnings.formatwarning
    warnings.formatwarning = format_warning
    try:
        yield
    finally:
        warnings.formatwarning = before


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = ("train", "evaluate", "rollout")
    if argv and not argv[0].startswith("-") and argv[0] not in commands:  # no command takes a first positional
        import difflib

        close = difflib.get_close_matches(argv[0], commands, n=1)
        print(f"jaxrl-rollout: error: unknown command {argv[0]!r}: the commands are train, evaluate and rollout "
              f"(with none, train){'; did you mean ' + close[0] + '?' if close else ''}", file=sys.stderr)
        return 2
    if argv and argv[0] in ("-V", "--version"):
        print(version_line())  # without building the parser, which imports gymnax
        return 0
    if not argv or argv[0] not in {*commands, "-h", "--help"}:
        argv = ["train", *argv]  # `train` is the default command
    # During `train`, SIGINT, SIGTERM (SLURM, Kubernetes) and SIGHUP (a terminal gone) ask the run to stop at the
    # next chunk boundary with a checkpoint, from now on: a signal during the imports or the compile waits for it.
    # `evaluate` and `rollout` have no boundary to stop at: there all three raise at once, as Ctrl-C does, so a
    # SIGTERM or SIGHUP unwinds them (a video's temporary file removed, its ffmpeg ended) with 128 + its number.
    stop = StopSignals(lambda line: print(line, file=sys.stderr, flush=True)) if argv[0] == "train" else (
        raise_at_once() if argv[0] in ("evaluate", "rollout") else contextlib.nullcontext())
    # Both streams' readers may go before the command ends (`| head`; `2>&1 | tee log` and a Ctrl-C, which
    # stops tee too): the command goes on with its work and its files, its text dropped.
    with contextlib.redirect_stdout(ReaderMayClose(sys.stdout)), contextlib.redirect_stderr(ReaderMayClose(sys.stderr)):
        try:
            # The header line says the env steps a run trains; the configs' warning for Python users repeats it.
            with stop, quiet_interrupted_callbacks(), warnings.catch_warnings(), _one_line_warnings():
                warnings.simplefilter("ignore", PartialRunWarning)
                return _main(argv)
        except KeyboardInterrupt as interrupt:  # a second Ctrl-C, or Ctrl-C in another command
            print(f"jaxrl-rollout: interrupted ({getattr(interrupt, 'signal_name', 'SIGINT')})", file=sys.stderr)
            return getattr(interrupt, "exit_code", 130)


def _enable_compile_cache(argv: list) -> None:
    """`--compile-cache` (train, evaluate), read ahead of the full parser: JAX's cache must be set before the
    process compiles anything, and importing gymnax (which building the parser does) compiles."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--compile-cache", default="auto")
    known, _ = early.parse_known_args(argv[1:])
    from jaxrl_rollout import compile_cache

    _, note = compile_cache.enable(known.compile_cache)
    if note:
        print(f"jaxrl-rollout: note: {note}", file=sys.stderr)


def _main(argv: list) -> int:
    if {"-h", "--help"} & set(argv):
        # `--help`, `evaluate --help`, `rollout --help`, `train --help` (its options from the copy of the
        # algorithms' fields in `_option_table`): printed (and the process exits) without importing jax, in a
        # tenth of a second instead of seconds, and whether or not a backend starts
        if argv[0] == "train":
            from jaxrl_rollout._option_table import TABLE

            build_parser(table=TABLE).parse_args(argv)
        else:
            build_parser(train_arguments=False).parse_args(argv)
    if argv[0] in ("train", "evaluate"):
        try:
            _configure_jax_early(argv)  # before building the parser imports gymnax
            if not {"-h", "--help"} & set(argv):
                _enable_compile_cache(argv)  # after the devices (it imports jax), before anything compiles
        except ValueError as error:
            print(f"jaxrl-rollout: error: {error}", file=sys.stderr)
            return 2
    unavailable = backend_problem()  # before the parser: building it imports gymnax, which makes arrays
    if unavailable:
        print(f"jaxrl-rollout: error: {unavailable}", file=sys.stderr)
        return 2
    with _jax_defaults():
        return _run_command(argv)


# jax's checks a user may turn on for their own code, at the values a command runs with (the transfer guards'
# general setting first: it is what the other three read where they are unset)
_JAX_DEFAULTS = {"jax_numpy_rank_promotion": "allow", "jax_numpy_dtype_promotion": "standard",
                 "jax_transfer_guard": "allow", "jax_transfer_guard_host_to_device": "allow",
                 "jax_transfer_guard_device_to_host": "allow", "jax_transfer_guard_device_to_device": "allow"}


@contextlib.contextmanager
def _jax_defaults():
    """jax's default numpy promotion rules and transfer guards while a command runs, restored after (`main` may be
    called from Python).

    A user's JAX_NUMPY_RANK_PROMOTION=raise (or warn) or JAX_NUMPY_DTYPE_PROMOTION=strict, set to check their
    own code, ended every train in one of those checks inside the library's code or an env's (DQN's "could not be
    broadcast together ... (128, 1) (1,)", PPO's "no available implicit dtype promotion path"), and
    JAX_TRANSFER_GUARD=disallow in gymnax's import (its module-level arrays): the programs a command builds and
    the transfers it makes (its metrics, its checkpoints) are the library's and the registered envs', written
    for jax's defaults. Set globally, not as a thread's context, as a chunk may be traced in a thread of its own.
    """
    import jax

    defaults = {name: value for name, value in _JAX_DEFAULTS.items() if hasattr(jax.config, name)}
    changed = {name: getattr(jax.config, name) for name, value in defaults.items()
               if getattr(jax.config, name) not in (value, None)}
    for name in changed:
        jax.config.update(name, defaults[name])
    try:
        yield
    finally:
        for name, value in changed.items():
            jax.config.update(name, value)


def _run_command(argv: list) -> int:
    """`_main` once jax runs: parses `argv` and runs its command, each failure one line on stderr."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from jaxrl_rollout._extras import MissingExtra
    from jaxrl_rollout.envs._host import HostEnvError, quiet_failures, take_failure
    from jaxrl_rollout.runner import Diverged  # after _configure_jax_early: it imports the algorithms
    take_failure()  # one left by an earlier call in this process (main() from Python), not this command's
    try:
        with quiet_failures():  # a host env's failing reset or step: the one line below, not JAX's log
            try:
                if args.command == "train":
                    return run_train(args)
                if args.command == "evaluate":
                    return run_evaluate(args)
                options = _given_env_options(args.env_option)
                run_rollout(args.env, args.num_envs, args.num_steps, args.seed, args.num_eval, video=args.video,
                            env_options=options)
            except Exception as error:
                # a signal raised at once inside a host env's step comes out of JAX as a runtime error (and out of
                # evaluate --video as its one-line ValueError): it is the interruption, not an error
                stopped = stopped_at_once()
                if stopped is not None:
                    raise Interrupted(stopped) from error
                raise
    except Diverged as error:  # the run trained to NaN or inf: its last finite checkpoint is kept
        print(f"jaxrl-rollout: error: {error}", file=sys.stderr)
        return 3
    except MissingExtra as error:  # a suite, `video` or `wandb` not installed: the line names the pip install
        print(f"jaxrl-rollout: error: {error}", file=sys.stderr)
        return 2
    except _float_errors() as error:  # JAX_DEBUG_NANS / JAX_DEBUG_INFS: jax stops at the first NaN (or inf)
        text = _debug_nans_text(error)
        if text is None:
            raise
        print(f"jaxrl-rollout: error: {text}", file=sys.stderr)
        return 2
    except ValueError as error:  # bad configs, folders and checkpoints (CheckpointError is a ValueError)
        runner = sys.modules.get("jaxrl_rollout.runner")  # (imported by whatever raised StatesTooLarge)
        kept = _kept_config_text(args) if runner and isinstance(error, runner.StatesTooLarge) else ""
        print(f"jaxrl-rollout: error: {error}{' ' + kept + '.' if kept else ''}", file=sys.stderr)
        return 2
    except OSError as error:  # a file the run reads or writes: one line naming it, not a traceback
        print(f"jaxrl-rollout: error: {_os_error_text(error)}", file=sys.stderr)
        return 2
    except RuntimeError as error:  # jax's JaxRuntimeError (XlaRuntimeError before it): XLA's out of memory
        # a host env's own reset or step raised (a renderer without a display, a bug in the user's env): in a
        # program dispatched outside `run_interruptibly` (the init's reset) it is still JAX's error
        failure = error if isinstance(error, HostEnvError) else take_failure()
        if failure is not None:
            print(f"jaxrl-rollout: error: {failure}", file=sys.stderr)
            return 2
        if "RESOURCE_EXHAUSTED" not in str(error):
            raise
        print(f"jaxrl-rollout: error: {_out_of_memory_text(args, error)}", file=sys.stderr)
        _drop_failed_tokens()
        return 2
    return 0


def _float_errors() -> tuple:
    """What jax's NaN (inf) checks raise: FloatingPointError, and from a program compiled ahead of time (a chunk,
    `jax.jit(...).lower(...).compile()`), jax's own InternalFloatingPointError, which is no FloatingPointError."""
    try:
        from jax._src.api_util import InternalFloatingPointError
    except ImportError:
        return (FloatingPointError,)
    return (FloatingPointError, InternalFloatingPointError)


def _debug_nans_text(error: Exception) -> str | None:
    """One line for the FloatingPointError of jax's NaN (or inf) checks, where one is on; else None.

    The metrics mark what was not measured with NaN (an update's episode_return where no episode ended, a loss
    before the first gradient step), which `jax_debug_nans` (JAX_DEBUG_NANS=1) stops at, wherever a run is: it
    ended SAC's first command in a traceback. A run whose state stops being finite is stopped without it (exit 3,
    its last finite checkpoint kept).
    """
    import jax

    modes = [f"{name.upper()} ({name})" for name in ("jax_debug_nans", "jax_debug_infs")
             if getattr(jax.config, name, False)]
    if not modes:
        return None
    if not isinstance(error, FloatingPointError) and len(error.args) == 2:  # ('jit(fn)', 'nan')
        what = f"invalid value ({error.args[1]}) in the output of {error.args[0]}"
    else:
        what = " ".join(str(error).split("\n", 1)[0].split()) or "a NaN"
    names = " and ".join(mode.split()[0] for mode in modes)
    return (f"{what}, and jax stops there as {' and '.join(modes)} asks: the metrics mark what was not measured "
            "with NaN (an update's episode_return where no episode ended, a loss before the first gradient step); "
            f"unset {names} (a run whose state stops being finite is stopped without it, exit 3, its last finite "
            "checkpoint kept).")


def _drop_failed_tokens() -> None:
    """Forgets the runtime tokens JAX keeps of the programs it ran: after an out-of-memory one, its exit handlers
    (`clean_up`, `wait_for_tokens`) waited on that program's token and printed the error again, as two
    "Exception ignored in atexit callback" tracebacks under the one line that reported it. The tokens are an
    internal of JAX (`jax._src.dispatch.runtime_tokens`); without it the tracebacks come back, nothing else."""
    try:
        from jax._src import dispatch

        dispatch.runtime_tokens.clear()
    except (ImportError, AttributeError):
        pass


def _out_of_memory_text(args: argparse.Namespace, error: BaseException) -> str:
    """One line for XLA's RESOURCE_EXHAUSTED: what ran out, and the command's options that size the memory.

    A `--resume` reads its run's algorithm and options from its folder (they were not typed), and names what it can
    change (`--checkpoint-every`) apart from what needs a new run (`--config FOLDER --out ...`).
    """
    import jax

    what = str(error).strip().splitlines()[0]
    what = what.split("RESOURCE_EXHAUSTED:", 1)[-1].strip().rstrip(".")
    options = {**(getattr(args, "from_config", None) or {}),
               **{n: v for n, v in vars(args).items() if n in ("algo", "optimize_memory_usage", "frame_stack_axis")
                  and v is not None}}
    resume = getattr(args, "resume", None)
    if resume:
        from jaxrl_rollout.runner import read_spec

        try:
            saved = read_spec(pathlib.Path(resume))
            options = {"algo": saved.algo, **dataclasses.asdict(saved.config),
                       "eval_episodes": saved.eval_episodes if saved.eval_every is not None else None}
        except (OSError, ValueError):
            options = {}  # (the run's options unknown: the plainer line below)
    elif getattr(args, "eval_every", None) == "off":
        options.pop("eval_episodes", None)
    elif getattr(args, "eval_episodes", None) is not None:
        options["eval_episodes"] = args.eval_episodes
    off_policy = options.get("algo") in ("dqn", "sac", "td3")
    sizes = "--num-envs or --buffer-size" if off_policy else "--num-envs or --num-steps"
    episodes = options.get("eval_episodes")
    if args.command == "train" and episodes is not None and episodes > 10:  # (more than the default)
        sizes = (f"{sizes.replace(' or ', ', ')} or --eval-episodes (each periodic evaluation plays {episodes:,} "
                 "episodes of every run at once)")
    if off_policy:
        if not options.get("optimize_memory_usage"):
            sizes += " (or store each observation once: --optimize-memory-usage true)"
        elif options.get("frame_stack_axis") is None:
            sizes += " (or, where the observations are stacks of frames, store each frame once: --frame-stack-axis)"
    # --max-parallel N caps one program's working memory (its rollouts, minibatches, activations); every run's
    # state stays on the device through training, and an off-policy run's state is mostly its replay buffer
    fewer = ("or train fewer runs (--seeds, the grid: every run keeps its replay buffer on the device, whatever "
             "--max-parallel)" if off_policy else
             "or train fewer runs at once (--max-parallel N; grid points x --seeds are trained together by default)")
    copy = ""
    if off_policy and getattr(args, "checkpoint_every", 1) != 1:  # (with 1, a saved state is never copied)
        copy = ("--checkpoint-every 1 keeps one state of each run (between checkpoints a chunk is given a copy of the "
                "state, replay buffers included)")
    if args.command == "train" and resume:
        again = (f"a resumed run keeps its config: train it again, with `--config {shlex.quote(str(resume))}` and "
                 f"another --out, and lower {sizes}, {fewer}")
        if copy:  # the one option that lowers a resumed run's memory
            again = f"resume it with {copy.replace(' keeps', ', which keeps', 1)}, or {again}"
        return f"out of memory on the {jax.default_backend()} device ({what}): {again}."
    kept = _kept_config_text(args)
    lower = {"train": f"lower {sizes}, {fewer}{'; ' + copy if copy else ''}{'; ' + kept if kept else ''}",
             "evaluate": "lower --num-episodes (every episode of every run is played at once)",
             "rollout": "lower --num-envs (rollout keeps up to 1,024 steps of every env)"}[args.command]
    return f"out of memory on the {jax.default_backend()} device ({what}): {lower}."


def _kept_config_text(args) -> str:
    """For a new run refused for its size: "FOLDER keeps this run's config, so give the new settings another --out"
    (the refused run's folder was made, with its config, before the refusal), or "" without a folder."""
    out = getattr(args, "out", None)
    return f"{out} keeps this run's config, so give the new settings another --out" if out else ""


GC_THRESHOLDS = (50_000, 20, 100)
"""The command's garbage-collector thresholds (`gc.set_threshold`; Python's defaults are 700, 10, 10)."""


def fewer_collections() -> None:
    """Python's cycle collector runs less often in this process: `gc.set_threshold(*GC_THRESHOLDS)`.

    Tracing and lowering a training program allocates millions of small Python
    objects; at the default thresholds the collector keeps walking them (and
    every module the command imported), which was 6-7% of a command's CPU time
    (`perf`, `train --seeds 2 --total-steps 2048`, 2 cores, 2026-12-02). With
    these thresholds, in alternated pairs on one machine, that command took
    12.8 s against 13.7-14.0 s, an xminigrid train 25.0 s against 26.9-29.0 s,
    and `evaluate` of a craftax run 26.2-32.1 s against 30.1-34.2 s (each pair
    faster), with the same peak memory within 1-2%: objects are freed by
    reference counting as before, and cycles are still collected, less often.
    Nothing computed depends on it. (In the test suite's long-lived worker
    processes the same thresholds did not help, 230-231 against 218 CPU-s on three
    test files, and are not set there.)
    Called by the command's own process (`entry`) only: importing the package
    leaves a user's interpreter alone.
    """
    import gc

    gc.set_threshold(*GC_THRESHOLDS)


def entry() -> None:
    """The console script (and `python -m jaxrl_rollout`): `main()`, then exit with its status.

    After a stop by signal (status 130, 143 or 129) the process ends at once,
    without waiting for a chunk still computing: XLA cannot cancel a program
    that runs, and at interpreter exit it would wait for it (minutes for an
    off-policy learner's default chunk on a CPU). By then the checkpoint is
    saved and closed, the loggers are closed and the folder's lock released.

    The process is the command's own, so it first defers the plotting modules
    that gymnax's package import loads for two envs' `render` alone
    (`_deferred.defer`): every command starts about 1.4 s sooner; and it runs
    Python's cycle collector less often (`fewer_collections`). Its figures are
    drawn on Agg canvases, never in a window, so matplotlib's backend is Agg
    whatever MPLBACKEND says (an unknown one failed matplotlib's import, inside
    gymnax's, in a traceback).
    """
    from jaxrl_rollout import _deferred

    os.environ["MPLBACKEND"] = "agg"
    _deferred.defer()
    fewer_collections()
    code = main()
    for stream in (sys.stdout, sys.stderr):  # what a buffer still holds: `ReaderMayClose` at exit
        ReaderMayClose(stream).flush()  # (Python's own flush would print a traceback for a reader gone)
    if code in (129, 130, 143):
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
