"""The one error type users see.

Every rejected input raises :class:`ElasticGridError`, a ``ValueError`` whose
message is one sentence naming the field and the value. The CLI turns it into
exit status 2 and one line; Airflow turns it into a clear task failure.
"""

from __future__ import annotations


class ElasticGridError(ValueError):
    """A user-facing error: one sentence naming the bad field and its value."""


class CorruptStateError(ElasticGridError):
    """A stored scale state cannot be used; it is left exactly as it is for a person to fix."""
