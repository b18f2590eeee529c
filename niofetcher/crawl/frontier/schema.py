"""The SQL of the SQLite frontier: its tables, their upgrade from older files, and the statements on them.

The tables are meant to be read by people too (``sqlite3 crawl.db "SELECT state, COUNT(*) FROM
urls GROUP BY state"``); another backend keeps the same ``urls`` table shape, so that the same
queries work there.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

from .base import FrontierError

__all__ = [
    "COMPLETE", "COMPLETE_MANY", "GIVE_UP", "INSERT", "MARK_CLAIMED", "PICK", "RELEASE", "RETRY",
    "SAVE_CHECKPOINT", "SCHEMA_VERSION", "create_or_upgrade",
]

#: The version of the tables below, kept in ``meta``.  A file of an older
#: version is upgraded when it is opened (version 1 had no checkpoints table
#: and claimed in discovery order); a newer one is refused rather than
#: misread.  An older niofetcher refuses this version in turn, which is the
#: point: it would not keep the checkpoints up to date.
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE meta (
    key    TEXT NOT NULL PRIMARY KEY,  -- 'schema_version', 'created_at'
    value  TEXT NOT NULL
);

CREATE TABLE urls (
    url             TEXT NOT NULL PRIMARY KEY,   -- normalised (normalize_url): a known URL is never added twice
    state           TEXT NOT NULL DEFAULT 'waiting'
                    CHECK (state IN ('waiting', 'processing', 'done', 'error')),
    attempts        INTEGER NOT NULL DEFAULT 0,  -- claims so far; release() gives one back
    depth           INTEGER NOT NULL DEFAULT 0,  -- link hops from a seed; seeds are 0
    priority        INTEGER NOT NULL DEFAULT 0,  -- higher is claimed first
    parent          TEXT,                        -- the page this URL was found on; NULL for a seed
    status          INTEGER,                     -- HTTP status of the last attempt; NULL when no response came
    error           TEXT,                        -- why the last attempt failed; NULL once done
    discovered_at   REAL NOT NULL,               -- unix time it was added
    fetched_at      REAL,                        -- unix time the last attempt ended (complete or fail)
    next_attempt_at REAL,                        -- unix time a waiting URL becomes due; NULL once done or error
    seq             INTEGER NOT NULL             -- discovery order: FIFO among equal priorities
);

-- next_due(): the earliest due time among waiting rows in one probe.
CREATE INDEX urls_due ON urls (next_attempt_at) WHERE state = 'waiting';
"""

# What version 2 added to version 1, which dropped its urls_claim index (priority DESC, seq,
# next_attempt_at): a new file gets _SCHEMA and then this, an old one is upgraded by this.
_SCHEMA_2 = """
-- The committed length of each output file (complete_many's checkpoint).  WITHOUT ROWID: an
-- insert here leaves the connection's last_insert_rowid alone, which add_many() counts by.
CREATE TABLE checkpoints (
    name   TEXT NOT NULL PRIMARY KEY,  -- 'out', 'warc', ...
    value  INTEGER NOT NULL
) WITHOUT ROWID;

-- claim(): the waiting rows in claim order (breadth first within a priority), with the due
-- time in the index so that rows not due yet are skipped without reading the table.
CREATE INDEX urls_claim ON urls (priority DESC, depth, seq, next_attempt_at) WHERE state = 'waiting';
"""

# Statements that take many URLs take them as one JSON array (json_each), so that a whole
# batch is one sqlite3 call: see "The GIL" in sqlite.py.  json_extract() rather than ->>, which
# needs SQLite 3.38.

# A fresh URL is due at once: next_attempt_at = discovered_at.  Each element of ?2 is
# [url, depth, priority, parent, seq].  A known URL found nearer a seed gets the smaller depth
# and the parent that gave it; otherwise it is left alone.  ("WHERE true" tells SQLite that
# ON CONFLICT is the upsert clause, not a join constraint.)
INSERT = """
INSERT INTO urls (url, state, depth, priority, parent, discovered_at, next_attempt_at, seq)
SELECT json_extract(value, '$[0]'), 'waiting', json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), ?1, ?1, json_extract(value, '$[4]')
FROM json_each(?2) WHERE true
ON CONFLICT (url) DO UPDATE SET depth = excluded.depth, parent = excluded.parent
WHERE excluded.depth < urls.depth
"""

# claim() picks the rows in one step (json_group_array: one result row, however many URLs)
# and then moves them in another.  The inner query walks the partial index urls_claim in
# claim order and stops at the limit.
PICK = """
SELECT json_group_array(json_array(rowid, url, depth, priority, attempts + 1, parent, seq)) FROM (
    SELECT rowid, url, depth, priority, attempts, parent, seq FROM urls
    WHERE state = 'waiting' AND next_attempt_at <= ?1 AND depth <= ?2
    ORDER BY priority DESC, depth, seq
    LIMIT ?3)
"""

MARK_CLAIMED = """
UPDATE urls SET state = 'processing', attempts = attempts + 1
WHERE rowid IN (SELECT value FROM json_each(?)) AND state = 'waiting'
"""

COMPLETE = """
UPDATE urls SET state = 'done', status = ?, error = NULL, fetched_at = ?, next_attempt_at = NULL
WHERE url = ? AND state = 'processing'
"""

# Each element of ?2 is [url, status].  A URL given twice matches one row: the count tells.
COMPLETE_MANY = """
UPDATE urls SET state = 'done', status = json_extract(j.value, '$[1]'), error = NULL, fetched_at = ?1,
                next_attempt_at = NULL
FROM json_each(?2) AS j
WHERE urls.url = json_extract(j.value, '$[0]') AND urls.state = 'processing'
"""

RETRY = """
UPDATE urls SET state = 'waiting', status = ?, error = ?, fetched_at = ?, next_attempt_at = ?
WHERE url = ? AND state = 'processing'
"""

GIVE_UP = """
UPDATE urls SET state = 'error', status = ?, error = ?, fetched_at = ?, next_attempt_at = NULL
WHERE url = ? AND state = 'processing'
"""

# ?1 is a JSON object {name: value}.
SAVE_CHECKPOINT = """
INSERT INTO checkpoints (name, value) SELECT key, value FROM json_each(?1) WHERE true
ON CONFLICT (name) DO UPDATE SET value = excluded.value
"""

# Not fetched, so the attempt does not count; next_attempt_at is still the
# (past) time it was due, so it is due again at once and keeps its place.
RELEASE = """
UPDATE urls SET state = 'waiting', attempts = MAX(attempts - 1, 0)
WHERE url IN (SELECT value FROM json_each(?)) AND state = 'processing'
"""


def create_or_upgrade(conn: sqlite3.Connection, path: str, clock: Callable[[], float]) -> None:
    """Inside the caller's transaction: create the tables in a new file, or check an existing one
    and upgrade it from version 1.  ``clock`` gives the unix time a new file was created at.

    Raises:
        FrontierError: for a file that is some other program's database, a damaged frontier, or
            one of a schema version this code does not know.
    """
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        # Not executescript(): it would commit the caller's BEGIN IMMEDIATE first.
        for statement in _statements(_SCHEMA + _SCHEMA_2):
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [("schema_version", str(SCHEMA_VERSION)), ("created_at", repr(clock()))],
        )
    elif _check_schema(conn, path, tables) == 1:
        conn.execute("DROP INDEX IF EXISTS urls_claim")
        for statement in _statements(_SCHEMA_2):
            conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def _check_schema(conn: sqlite3.Connection, path: str, tables: set[str]) -> int:
    """The schema version of a file that is a frontier this code can read (maybe after an upgrade)."""
    if "meta" not in tables:
        raise FrontierError(
            f"{path} is a SQLite database but not a niofetcher frontier (it has no meta table)"
        )
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = int(row[0]) if row is not None else None
    except (TypeError, ValueError):
        version = None
    if version is None:
        raise FrontierError(f"{path} is not a niofetcher frontier (no schema version in its meta table)")
    if version not in (1, SCHEMA_VERSION):
        newer = "a newer niofetcher" if version > SCHEMA_VERSION else "an unknown version"
        raise FrontierError(
            f"{path} has frontier schema version {version} (from {newer}); "
            f"this niofetcher reads version {SCHEMA_VERSION}"
        )
    if "urls" not in tables or (version == SCHEMA_VERSION and "checkpoints" not in tables):
        missing = "urls" if "urls" not in tables else "checkpoints"
        raise FrontierError(f"{path} is a damaged niofetcher frontier: the {missing} table is missing")
    return version


def _statements(script: str) -> Iterator[str]:
    """Split an SQL script into statements (sqlite3.complete_statement knows about comments and quotes)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""
