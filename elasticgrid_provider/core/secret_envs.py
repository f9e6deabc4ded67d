"""Which ``envs`` values are secret: what a launch hands Airflow's secrets masker.

Airflow's masker replaces every occurrence of a registered value in every log line, so
registering every ``envs`` value garbles logs (``CHAOS_ITER=resize`` turns a job
``chaos-resize`` into ``chaos-***``). Only secrets are registered (:func:`secret_values`): the
values of the keys named in ``secret_envs``, of keys Airflow deems sensitive (its own rule,
handed in by the caller), and the passwords of URLs that carry one (the URL up to its host when
the password is too short for the masker). :class:`HiddenValues` is the rendered ``envs`` a
LaunchOperator keeps, shown as ``***`` in the rendered-fields view. The rules:
docs/operators.md ("Secrets"). Pure: no Airflow, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import check_text

HIDDEN = "***"
# scheme://user:password@host: the host ends at "/", "?", "#", a blank or the end
_URL_WITH_PASSWORD = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:(?P<password>[^\s/?#@]+)@[^\s/?#]*"
)


def check_secret_envs(secret_envs: Any, envs: Mapping[str, Any]) -> tuple[str, ...]:
    """``secret_envs`` as a tuple of names of ``envs``; else one sentence naming it."""
    if secret_envs is None:
        return ()
    if isinstance(secret_envs, str) or not isinstance(secret_envs, (list, tuple)):
        raise ElasticGridError(f"secret_envs must be a list of envs names, got {secret_envs!r}")
    names = tuple(check_text("secret_envs entry", name) for name in secret_envs)
    unknown = [name for name in names if name not in envs]
    if unknown:
        raise ElasticGridError(
            f"secret_envs names {unknown[0]!r}, which is not a key of envs "
            f"(envs: {', '.join(sorted(envs)) or 'none'})"
        )
    return names


def url_passwords(value: str, min_length: int) -> list[str]:
    """What to mask of the URLs with a password in ``value`` (docs/operators.md, "Secrets")."""
    found: list[str] = []
    for match in _URL_WITH_PASSWORD.finditer(value):
        password = match.group("password")
        if len(password) < min_length:
            found.append(match.group(0))
            continue
        found.append(password)
        decoded = unquote(password)
        if decoded != password and len(decoded) >= min_length:
            found.append(decoded)
    return found


def secret_values(
    envs: Mapping[str, Any],
    secret_envs: Iterable[str],
    sensitive: Callable[[str], bool],
    min_length: int,
) -> list[str]:
    """The strings of ``envs`` to register with the secrets masker (docs/operators.md, "Secrets"):
    ``sensitive`` is Airflow's rule for a key, ``min_length`` its masker's shortest secret."""
    named = set(secret_envs)
    secrets: list[str] = []
    for key, value in envs.items():
        if not isinstance(value, str) or not value:
            continue
        if key in named or sensitive(key):
            secrets.append(value)
        else:
            secrets.extend(url_passwords(value, min_length))
    return secrets


class HiddenValues(Mapping[str, str]):
    """Rendered ``envs``: the values, read-only; :meth:`serialize` (what Airflow stores as the
    rendered field) shows each one as ``***``."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"HiddenValues({self.serialize()!r})"

    def serialize(self) -> dict[str, str]:
        """The keys, every value hidden: the rendered-fields view."""
        return dict.fromkeys(self._values, HIDDEN)
