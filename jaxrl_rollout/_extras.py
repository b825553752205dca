"""The error for an optional extra that is not installed.

Every optional suite, `video` and `wandb` is imported only when used. When
one is missing, the import raises `MissingExtra`, an ImportError whose message
says what needed it and the `pip install 'jaxrl-rollout[<extra>]'` that adds
it. The command line reports it in one line (exit status 2) instead of a
traceback; in Python it is caught like any ImportError.
"""

from __future__ import annotations


class MissingExtra(ImportError):
    """An optional extra of jaxrl-rollout is not installed (the message names the install command)."""


def missing(what: str, extra: str, reason: object) -> MissingExtra:
    """The `MissingExtra` for `what` (e.g. "W&B logging") needing `extra`, with `reason` (the ImportError)."""
    return MissingExtra(f"{what} needs the optional `{extra}` extra ({reason}). "
                        f"Install it with: pip install 'jaxrl-rollout[{extra}]' (from a clone: pip install -e "
                        f"'.[{extra}]')")
