"""Modules the command line's process imports only when something uses them.

gymnax's package import loads every environment it ships, and two of them load
plotting libraries at import for their `render` alone: Pong imports seaborn
(which imports scipy.stats) and Catch imports matplotlib.pyplot. That is about
1.4 s of the 2.7 s it takes any `jaxrl-rollout` command to start on a 2-core
machine (`python -X importtime`), spent on modules that a command uses only
when it draws a video of one of those envs.

`defer` puts a stand-in for such a module in `sys.modules` while it is not
imported yet. `import seaborn` then binds the stand-in, and the first read of
one of its attributes (`sns.color_palette`) imports the real module, puts it
in `sys.modules` in the stand-in's place and answers from it, so code that uses
the module works unchanged, only later. Reads of dunder attributes other than
`__path__` (`__file__`, `__version__`, ...) do not import it: tools that walk
`sys.modules` asking those of every module (`inspect.getmodule`) see a module
without a file instead of importing it while they walk.

Only the console script installs these (`cli.entry`): a process of its own.
Importing `jaxrl_rollout`, or calling `cli.main` from Python, changes nothing
in the caller's `sys.modules`.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types

# Imported by gymnax's package import for one env's `render` each, used by nothing else a command runs first.
RENDER_ONLY = ("seaborn", "matplotlib.pyplot")


class _Deferred(types.ModuleType):
    """Stands in for the module `name` until an attribute of it is read."""

    def __init__(self, name: str):
        super().__init__(name, f"{name}, imported when first used")
        # The import system reads __spec__._initializing of a module it finds in sys.modules.
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__") and attr != "__path__":
            raise AttributeError(f"module {self.__name__!r} is not imported yet, so it has no {attr!r}")
        return getattr(_load(self), attr)

    def __dir__(self):
        return dir(_load(self))


def _load(stand_in: _Deferred) -> types.ModuleType:
    """The real module of `stand_in`, imported the first time."""
    real = stand_in.__dict__.get("_real")
    if real is None:
        name = stand_in.__name__
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        real = importlib.import_module(name)
        stand_in.__dict__["_real"] = real
    return real


def defer(names=RENDER_ONLY) -> None:
    """Puts a stand-in in `sys.modules` for each of `names` that is not imported yet."""
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = _Deferred(name)
