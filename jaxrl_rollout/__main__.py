"""`python -m jaxrl_rollout` runs the command line."""

import sys

from jaxrl_rollout.cli import main

sys.exit(main())
