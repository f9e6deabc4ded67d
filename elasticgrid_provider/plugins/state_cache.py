"""The jobs' state Variables as the pages read them: parsed once per change, per API-server process.

Decrypting and parsing a big state takes a good part of a second, so each process keeps
the states it parsed (without what no page reads) and sees a change without reading the
whole value. Nothing here raises on a state's content: a state that does not load is kept
with its error (:func:`~.jobs.parse_state`). The rules: docs/ui-audit.md ("Speed").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from elasticgrid_provider.core.state import state_variable_key
from elasticgrid_provider.plugins.jobs import StoredState, checked_state, parse_state

MAX_CACHED_ENTRIES = 20_000
"""History entries kept parsed over all jobs (about 7 KB of memory each)."""
# An encrypted value (Fernet) begins with the time and a random IV of its encryption, so
# its first HEAD_CHARS and its length, read from the DB, tell a change; a plain value is read
# whole and compared by its hash (reading is cheap, parsing is not).
HEAD_CHARS = 64  # an encrypted value's time and IV (and more): new with every write
DROPPED_KEYS = ("inputs",)
DROPPED_CONTEXT_KEYS = ("readable",)

Token = tuple[Any, ...]

_lock = threading.Lock()
_cache: OrderedDict[str, tuple[Token, StoredState]] = OrderedDict()


def _slim(stored: StoredState) -> StoredState:
    """``stored`` without what no page reads, its error kept: the entries' ``inputs`` (only a
    replay reads them, from the Variable) and ``context.readable`` (the page formats its own)."""
    data = stored.data
    if not data or not isinstance(data.get("history"), list):
        return stored
    history = []
    for entry in data["history"]:
        if isinstance(entry, dict):
            entry = _without_context_keys({k: v for k, v in entry.items() if k not in DROPPED_KEYS})
        history.append(entry)
    return StoredState(
        stored.job_name, stored.variable_key, {**data, "history": history}, stored.error
    )


def _without_context_keys(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` (a copy the caller owns) without :data:`DROPPED_CONTEXT_KEYS`."""
    context = entry.get("context")
    if isinstance(context, dict) and any(key in context for key in DROPPED_CONTEXT_KEYS):
        entry["context"] = {k: v for k, v in context.items() if k not in DROPPED_CONTEXT_KEYS}
    return entry


def _parsed(key: str, text: str) -> StoredState:
    """:func:`~.jobs.parse_state` of what the pages keep: each history entry's values decoded
    but ``inputs``; a document that is not an object of objects there is parsed whole by
    ``parse_state``, which says what is wrong with it. Two passes (msgspec scans the JSON
    without building it, then decodes the values kept) are two to three times faster than a
    whole ``json.loads``: the page's cold path."""
    import msgspec

    decode = msgspec.json.Decoder().decode
    try:
        top = msgspec.json.decode(text, type=dict[str, msgspec.Raw])
        data = {name: decode(raw) for name, raw in top.items() if name != "history"}
        if "history" in top:
            entries = msgspec.json.decode(top["history"], type=list[dict[str, msgspec.Raw]])
            data["history"] = [
                _without_context_keys(
                    {name: decode(raw) for name, raw in entry.items() if name not in DROPPED_KEYS}
                )
                for entry in entries
            ]
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _slim(parse_state(key, text))
    return checked_state(key, data)


def _size(stored: StoredState) -> int:
    return max(1, len(stored.history))


def _remember(key: str, token: Token, stored: StoredState) -> None:
    # least recently read out first, to MAX_CACHED_ENTRIES; a bigger state is still kept, alone
    with _lock:
        _cache[key] = (token, stored)
        _cache.move_to_end(key)
        total = sum(_size(kept) for _, kept in _cache.values())
        while total > MAX_CACHED_ENTRIES and len(_cache) > 1:
            _, (_, dropped) = _cache.popitem(last=False)
            total -= _size(dropped)


def _cached(key: str, token: Token) -> StoredState | None:
    with _lock:
        found = _cache.get(key)
        if found is None or found[0] != token:
            return None
        _cache.move_to_end(key)
        return found[1]


def forget() -> None:
    """Empty the cache (tests, and the benchmark's cold reads)."""
    with _lock:
        _cache.clear()


def _decrypted(key: str, raw: str) -> str | None:
    """An encrypted value's text, as ``Variable.get_val`` decrypts it (the columns are read
    without loading Variable rows, whose loading decrypts and registers each value with
    the secrets masker: a third of a cold read); None when it cannot be decrypted."""
    from elasticgrid_provider.airflow_internals import decrypt_variable_value

    try:
        return decrypt_variable_value(raw)
    except Exception:  # a bad token or no key: the page says the state is unreadable
        return None


def read_scale_states(job_name: str | None = None) -> list[StoredState]:
    """Every job's state (or ``job_name``'s), parsed or from the cache, sorted by job name."""
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    from elasticgrid_provider.airflow_internals import variable_value_column

    stored = variable_value_column()

    if job_name is None:
        where = Variable.key.startswith(state_variable_key(""), autoescape=True)
    else:
        where = Variable.key == state_variable_key(job_name)
    found: dict[str, StoredState] = {}
    with create_session() as session:
        heads = session.execute(
            select(
                Variable.key,
                Variable.is_encrypted,
                func.length(stored),
                func.substr(stored, 1, HEAD_CHARS),
            ).where(where)
        ).all()
        unread = []
        for key, encrypted, length, head in heads:
            hit = _cached(key, ("fernet", length, head)) if encrypted else None
            if hit is not None:
                found[key] = hit
            else:
                unread.append(key)
        if unread:
            rows = session.execute(
                select(Variable.key, Variable.is_encrypted, stored).where(Variable.key.in_(unread))
            ).all()
            for key, encrypted, raw in rows:
                raw = raw or ""
                if encrypted:
                    token: Token = ("fernet", len(raw), raw[:HEAD_CHARS])
                else:
                    token = ("plain", len(raw), hash(raw))
                hit = _cached(key, token)
                if hit is None:
                    hit = _parsed(key, (_decrypted(key, raw) if encrypted else raw) or "")
                    _remember(key, token, hit)
                found[key] = hit
    return sorted(found.values(), key=lambda state: state.job_name)
