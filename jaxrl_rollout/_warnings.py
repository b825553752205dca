"""The package's own warning classes, and the stacklevel that points its warnings at the user's line.

The module imports only the standard library, so the command line filters
these classes before it imports JAX. Users filter them by
class instead of by the words of a message: `warnings.simplefilter("ignore",
jaxrl_rollout.algorithms.PartialRunWarning)`.
"""

from __future__ import annotations

import dataclasses
import os
import sys

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_DATACLASSES = os.path.abspath(dataclasses.__file__)


class PartialRunWarning(UserWarning):
    """A config's `total_timesteps` is not a whole number of updates: the run trains fewer env steps.

    The off-policy configs (DQN, SAC, TD3) warn with it when they are built;
    the message says the steps the run takes and the multiple that trains them
    all. The command line says the same in its header, so it hides this
    warning while it runs, and a saved run read back (`RunSpec.from_json`)
    does not warn again.
    """


def user_stacklevel() -> int:
    """The `stacklevel` for a `warnings.warn` made by the caller of this function that names the user's line.

    It counts the frames above that caller that belong to jaxrl_rollout, to
    the standard library's dataclasses (a config built by
    `dataclasses.replace`) or are a dataclass's generated `__init__`, so the
    warning points at the first frame outside them, not at `replace` or at a
    config's `__post_init__`.
    """
    frame, level = sys._getframe(1), 1
    while frame is not None:
        code = frame.f_code
        if not (code.co_filename.startswith(_PACKAGE) or os.path.abspath(code.co_filename) == _DATACLASSES
                or (code.co_name == "__init__" and code.co_filename.startswith("<"))):
            return level
        frame, level = frame.f_back, level + 1
    return level - 1
