"""Logging filters installed for the length of a `with` block."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def filtered(logger: str, log_filter: logging.Filter) -> Iterator[None]:
    """Within it, `log_filter` decides which records of the logger named `logger` are emitted."""
    log = logging.getLogger(logger)
    log.addFilter(log_filter)
    try:
        yield
    finally:
        log.removeFilter(log_filter)
