"""The package's own warning classes, in a module that imports nothing.

The command line filters them before it imports JAX. Users filter them by
class instead of by the words of a message: `warnings.simplefilter("ignore",
jaxrl_rollout.algorithms.PartialRunWarning)`.
"""

from __future__ import annotations


class PartialRunWarning(UserWarning):
    """A config's `total_timesteps` is not a whole number of updates: the run trains fewer env steps.

    The off-policy configs (DQN, SAC, TD3) warn with it when they are built;
    the message says the steps the run takes and the multiple that trains them
    all. The command line says the same in its header, so it hides this
    warning while it runs, and a saved run read back (`RunSpec.from_json`)
    does not warn again.
    """
