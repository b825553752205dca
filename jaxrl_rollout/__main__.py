"""`python -m jaxrl_rollout` runs the command line."""

from jaxrl_rollout.cli import entry

entry()
