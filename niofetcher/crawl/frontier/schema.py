"""The SQL of the SQLite frontier: its tables, their upgrade from older files, and the statements on them.

The tables are meant to be read by people too (``sqlite3 crawl.db "SELECT state, COUNT(*) FROM
urls GROUP BY state"``); another backend keeps the same ``urls`` table shape, so that the same
queries work there.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

from ...urls import host_key
from .base import FrontierError, FrontierErrorKind
from .service import MODIFIED_SINCE_FETCH

__all__ = [
    "ADD_ADMITTED",
    "ADMITTED_OF",
    "ADMITTED_THROUGH",
    "BUSIEST_HOSTS",
    "CLAIM_ROWS",
    "COMPLETE",
    "COMPLETE_MANY",
    "COUNTS",
    "COUNT_ROWS",
    "DUE_AGAIN",
    "EMPTY_HOSTS",
    "FAILURES",
    "FINGERPRINTS_OF",
    "GIVE_UP",
    "INSERT",
    "INSERT_HOSTS",
    "KNOWN_URLS",
    "LAST_ROW",
    "MARK_CLAIMED",
    "MIN_DUE_DEPTH",
    "MODIFIED_ROWS",
    "NEXT_DUE",
    "QUEUED_HOSTS",
    "RELEASE",
    "RELEASED_HOSTS",
    "RETRY",
    "REVISITS",
    "ROBOTS_OF",
    "SAVE_CHECKPOINT",
    "SCHEMA_VERSION",
    "SET_ADMITTED_THROUGH",
    "SET_DUPLICATE",
    "SET_LASTMODS",
    "STORE_COUNTS",
    "STORE_FINGERPRINT",
    "STORE_REFUSALS",
    "STORE_ROBOTS",
    "TOO_DEEP_HOSTS",
    "TOP_PRIORITIES",
    "VISITED",
    "WAKE",
    "check_schema",
    "create_or_upgrade",
]

#: The version of the tables below, kept in ``meta``.  A file of an older
#: version is upgraded when it is opened (version 1 had no checkpoints table
#: and claimed in discovery order; version 2 had no per-host queues and
#: counted the states by reading the whole table; version 3 had no lastmod
#: column; version 4 kept an index of the waiting rows by due time; version 5
#: kept no robots.txt answers; version 6 no count of each host's URLs nor of the links the trap
#: rules refused; version 7 no duplicate detection's fingerprints nor duplicate_of; version 8 nothing
#: a revisit needs: validators, digest, visits, changes, next_due; version 9 no captured_at; version 10
#: no sums of the seconds that led to the changed and the unchanged visits); a newer
#: one is refused rather than misread.  An older niofetcher refuses this
#: version in turn, which is the point: it would not keep the hosts, the
#: counts and the lastmods up to date, nor find the next due time.
SCHEMA_VERSION = 11

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

-- next_due(): the earliest due time among waiting rows in one probe (version 5 drops it).
CREATE INDEX urls_due ON urls (next_attempt_at) WHERE state = 'waiting';
"""

# What version 2 added to version 1: a new file gets _SCHEMA and then each version's additions in
# turn, an old one the additions of the versions after its own.
_SCHEMA_2 = """
-- The committed length of each output file (complete_many's checkpoint).
CREATE TABLE checkpoints (
    name   TEXT NOT NULL PRIMARY KEY,  -- 'out', 'warc', ...
    value  INTEGER NOT NULL
) WITHOUT ROWID;

"""

# What version 3 adds to version 2: the hosts, a host column (added last, so that a new file and
# an upgraded one have the same columns in the same order), the per-host queues that claim() walks
# instead of version 2's one queue (urls_claim), and the counts per state.  The upgrade
# fills host_id and the counts from the rows (_FILL_3); a new file starts empty.
_SCHEMA_3 = """
-- One row per host (host_key(): scheme://host[:port] as the stored URLs write it).
CREATE TABLE hosts (
    id      INTEGER PRIMARY KEY,
    origin  TEXT NOT NULL UNIQUE
);

ALTER TABLE urls ADD COLUMN host_id INTEGER REFERENCES hosts (id);

-- claim(): each host's waiting rows in claim order (priority, then breadth first, then FIFO),
-- with the due time in the index so that rows not due yet are skipped without reading the table.
-- It replaces the one queue of versions 1 and 2.
DROP INDEX IF EXISTS urls_claim;
CREATE INDEX urls_host_queue ON urls (host_id, priority DESC, depth, seq, next_attempt_at)
    WHERE state = 'waiting';

-- min_due_depth(): the waiting rows by depth, due time beside it.
CREATE INDEX urls_depth ON urls (depth, next_attempt_at) WHERE state = 'waiting';

-- Opening after a crash: the rows left 'processing', without reading the others.
CREATE INDEX urls_processing ON urls (host_id) WHERE state = 'processing';

-- URLs per state, as the frontier counts them, stored with every commit that changes them, so
-- that opening the file does not count the rows of urls.  (Triggers would keep them exact for
-- any writer, but cost 5 us a row: a third of an insert.)
CREATE TABLE state_counts (
    state  TEXT NOT NULL PRIMARY KEY,
    n      INTEGER NOT NULL
) WITHOUT ROWID;
"""

# What version 4 adds to version 3: the <lastmod> a sitemap gave a URL, as written there (NULL
# for a URL no sitemap dated), so that a resumed run still has it.  Added last, as host_id was.
_SCHEMA_4 = """
ALTER TABLE urls ADD COLUMN lastmod TEXT;
"""

# What version 5 changes in version 4: no index of the waiting rows by due time.  Every claim
# took its rows out of it, far apart (a URL's due time is when it was found), so that it wrote
# about a page of it for every URL claimed, and every URL added or retried went in; next_due()
# finds the earliest due time through urls_depth instead (NEXT_DUE), a probe or two per depth.
_SCHEMA_5 = """
DROP INDEX IF EXISTS urls_due;
"""

# What version 6 adds to version 5: each host's robots.txt answer (a 2xx or a 4xx, what was parsed
# of it) and when it came, the columns the PostgreSQL frontier's hosts have.  The crawler keeps the
# rules of the hosts it met lately in memory, bounded; a broad crawl goes round more hosts than
# that, and without these it fetched an aged-out host's robots.txt again at every turn (5.4 times a
# host, 47% of all requests, in a crawl of 10,000 hosts with 4,096 kept).  A resumed crawl uses
# them too.
_SCHEMA_6 = """
ALTER TABLE hosts ADD COLUMN robots_status INTEGER;
ALTER TABLE hosts ADD COLUMN robots BLOB;
ALTER TABLE hosts ADD COLUMN robots_at REAL;  -- unix time it was fetched
"""

# What version 7 adds to version 6: how many URLs each host was admitted with, for
# CrawlConfig.max_pages_per_host, and the links the trap rules refused, by cause, over every run (for
# status).  A crawl without max_pages_per_host does not keep the counts up to date (a statement
# more per add_many); meta's 'admitted_through' says up to which rowid they are, and a frontier
# opened with the limit counts the rows after it (CATCH_UP_ADMITTED), once.  The upgrade counts
# each host's rows in one pass over urls (_FILL_7).
_SCHEMA_7 = """
-- URLs admitted per host (hosts.id): a table of its own, as on PostgreSQL, where each worker keeps
-- rows of its own.
CREATE TABLE admitted (
    host_id  INTEGER NOT NULL PRIMARY KEY REFERENCES hosts (id),
    n        INTEGER NOT NULL
);

CREATE TABLE refusals (
    cause  TEXT NOT NULL PRIMARY KEY,  -- the option that refused them: 'max_url_length', ...
    n      INTEGER NOT NULL
) WITHOUT ROWID;
"""

_FILL_7 = """
INSERT INTO admitted (host_id, n) SELECT host_id, COUNT(*) FROM urls WHERE host_id IS NOT NULL GROUP BY host_id;
INSERT INTO meta (key, value) SELECT 'admitted_through', COALESCE(MAX(rowid), 0) FROM urls;
"""

# What version 8 adds to version 7: duplicate detection's (CrawlConfig.dedup, crawl/dedup.py) -- the
# URL whose text a done page repeats, on its row, and the fingerprints of the pages it compares
# with, by host, so that a host's are read in one range of the key (a resumed crawl reads them
# back when it claims the host's URLs).  Only a crawl with dedup writes them.
_SCHEMA_8 = """
ALTER TABLE urls ADD COLUMN duplicate_of TEXT;  -- the done URL of its host whose text this page repeats
CREATE TABLE fingerprints (
    host_id  INTEGER NOT NULL REFERENCES hosts (id),
    url      TEXT NOT NULL,     -- a done URL, not a duplicate
    digest   BLOB NOT NULL,     -- 16 bytes: BLAKE2b of its text's words
    simhash  INTEGER NOT NULL,  -- its 64-bit simhash, as a signed integer
    PRIMARY KEY (host_id, url)
) WITHOUT ROWID;
"""

# What version 9 adds to version 8: what a revisit needs (CrawlConfig.revisit, crawl/schedule.py), on
# each URL's row, and the done and error rows that will be due again, by when (a partial index: the
# rows of a crawl without revisits are not in it, and wake() reads only those due, never the other
# done rows).  Only a crawl with a revisit policy writes them; an upgraded file's rows have none.
_SCHEMA_9 = """
ALTER TABLE urls ADD COLUMN etag TEXT;                         -- the ETag of the last visit
ALTER TABLE urls ADD COLUMN last_modified TEXT;                -- its Last-Modified, as sent
ALTER TABLE urls ADD COLUMN digest TEXT;                       -- sha256 of its decoded body, hex
ALTER TABLE urls ADD COLUMN visits INTEGER NOT NULL DEFAULT 0;   -- visits under a revisit policy
ALTER TABLE urls ADD COLUMN changes INTEGER NOT NULL DEFAULT 0;  -- of those after the first, the ones that found it changed
ALTER TABLE urls ADD COLUMN next_due REAL;                     -- unix time a done (or error) URL is due again; NULL: never
CREATE INDEX urls_revisit ON urls (next_due) WHERE state IN ('done', 'error') AND next_due IS NOT NULL;
"""

# What version 10 adds to version 9: when the capture an unchanged visit repeats came in (what a WARC
# revisit record refers to).  An upgraded file's rows have none: their captures' times were never kept.
_SCHEMA_10 = """
ALTER TABLE urls ADD COLUMN captured_at REAL;  -- unix time the response of the last visit that found it changed came in
"""

# What version 11 adds to version 10: what a rate of change is estimated from (RevisitPolicy's
# estimate_rate), beside the changes count.  An upgraded file's visits were not timed: each of its
# rows takes every visit after the first as its last interval long (next_due - fetched_at, exact
# for a fixed interval), so that its changes come with time and its estimate starts from them.
_SCHEMA_11 = """
ALTER TABLE urls ADD COLUMN changed_time REAL NOT NULL DEFAULT 0;    -- seconds that led to the visits that found it changed
ALTER TABLE urls ADD COLUMN unchanged_time REAL NOT NULL DEFAULT 0;  -- ... and to the other visits after the first
UPDATE urls SET changed_time = changes * (next_due - fetched_at), unchanged_time = (visits - 1 - changes) * (next_due - fetched_at)
WHERE visits > 1 AND next_due > fetched_at;
"""

# Statements that take many URLs take them as one JSON array (json_each), so that a whole
# batch is one sqlite3 call: see "The GIL" in sqlite/frontier.py.  json_extract() rather than ->>, which
# needs SQLite 3.38.

# ?1 is a JSON array of host keys; the ones not known yet get a row.
INSERT_HOSTS = """
INSERT INTO hosts (origin) SELECT DISTINCT value FROM json_each(?1) WHERE true
ON CONFLICT (origin) DO NOTHING
"""

# A fresh URL is due at once: next_attempt_at = discovered_at.  Each element of ?2 is
# [url, depth, priority, parent, seq, host key] (its host is in hosts: INSERT_HOSTS first).  A
# known URL found nearer a seed gets the smaller depth and the parent that gave it; otherwise it
# is left alone.  ("WHERE true" tells SQLite that ON CONFLICT is the upsert clause, not a join
# constraint.)
INSERT = """
INSERT INTO urls (url, state, depth, priority, parent, discovered_at, next_attempt_at, seq, host_id)
SELECT json_extract(value, '$[0]'), 'waiting', json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), ?1, ?1, json_extract(value, '$[4]'),
       (SELECT id FROM hosts WHERE origin = json_extract(value, '$[5]'))
FROM json_each(?2) WHERE true
ON CONFLICT (url) DO UPDATE SET depth = excluded.depth, parent = excluded.parent
WHERE excluded.depth < urls.depth
"""

# The URLs admitted so far of the hosts of ?1 (a JSON array of host keys), as a JSON object; a
# host not stored yet is left out (none).
ADMITTED_OF = """
SELECT json_group_object(hosts.origin, admitted.n) FROM hosts JOIN admitted ON admitted.host_id = hosts.id
WHERE hosts.origin IN (SELECT value FROM json_each(?1))
"""

# Those of the URLs of ?1 (a JSON array) that are stored, as a JSON array.
KNOWN_URLS = """
SELECT json_group_array(j.value) FROM json_each(?1) AS j WHERE EXISTS (SELECT 1 FROM urls WHERE url = j.value)
"""

# After an INSERT: the rows after rowid ?1 are the new ones (see add_many), counted to their hosts.
# A range of the table's own key, the pages just written: it reads only the new rows.
ADD_ADMITTED = """
INSERT INTO admitted (host_id, n) SELECT host_id, COUNT(*) FROM urls WHERE rowid > ?1 AND host_id IS NOT NULL GROUP BY host_id
ON CONFLICT (host_id) DO UPDATE SET n = n + excluded.n
"""

# Up to which rowid admitted counts the rows; ?1 the rowid it counts them up to now.
ADMITTED_THROUGH = "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'admitted_through'"
SET_ADMITTED_THROUGH = "UPDATE meta SET value = ?1 WHERE key = 'admitted_through'"

# ?1 is a JSON object {cause: links refused}, added to what is stored.
STORE_REFUSALS = """
INSERT INTO refusals (cause, n) SELECT key, value FROM json_each(?1) WHERE true
ON CONFLICT (cause) DO UPDATE SET n = n + excluded.n
"""

# A sitemap's <lastmod> of its URLs: ?1 is a JSON object {url: lastmod}, the URLs stored already
# (INSERT first), new or known (a sitemap listing a known URL dates it anew).  A statement of its
# own, so that adding the links of a page (no lastmod) costs nothing more.
SET_LASTMODS = """
UPDATE urls SET lastmod = j.value FROM json_each(?1) AS j WHERE urls.url = j.key
"""

COUNTS = "SELECT json_group_object(state, n) FROM state_counts"

# ?1 is a JSON object {state: n}.
STORE_COUNTS = "UPDATE state_counts SET n = json_extract(?1, '$.' || state)"

# The rows are appended in discovery order (rowids after the largest), so the last row holds the
# last seq and the largest rowid: one probe each, however big the table.
LAST_ROW = "SELECT rowid, seq FROM urls ORDER BY rowid DESC LIMIT 1"

# claim() asks the hosts of ?2 (a JSON array of host keys) for the waiting rows due at ?1, no
# deeper than ?3, after the first ?5 of each host's queue: ?4 of each, in one result row
# (json_group_array: one row, however many URLs).  Each host's rows come from its queue in claim
# order (the IN list is sorted by rowid, so claim() puts them back in order).
CLAIM_ROWS = """
SELECT json_group_array(json_array(u.rowid, u.url, u.depth, u.priority, u.attempts + 1, u.parent, u.seq, hosts.origin,
                                   u.lastmod, u.etag, u.last_modified, u.digest, u.visits, u.next_due - u.fetched_at,
                                   u.captured_at, u.changes, u.changed_time, u.unchanged_time, ?1 - u.fetched_at))
FROM json_each(?2) AS h JOIN hosts ON hosts.origin = h.value JOIN urls AS u ON u.rowid IN (
    SELECT rowid FROM urls
    WHERE host_id = hosts.id AND state = 'waiting' AND next_attempt_at <= ?1 AND depth <= ?3
    ORDER BY priority DESC, depth, seq LIMIT ?4 OFFSET ?5)
"""

# The hosts of ?1 (a JSON array of host keys) that have no waiting row at all.
EMPTY_HOSTS = """
SELECT json_group_array(h.value) FROM json_each(?1) AS h LEFT JOIN hosts ON hosts.origin = h.value
WHERE hosts.id IS NULL OR NOT EXISTS (SELECT 1 FROM urls WHERE host_id = hosts.id AND state = 'waiting')
"""

# The hosts of ?1 (a JSON array of host keys) that have no waiting row as shallow as ?2: a walk of
# each host's queue (the index cannot stop at a depth, priority comes first), so that claim() can
# leave them alone until the depth limit goes past ?2 or they get new rows.
TOO_DEEP_HOSTS = """
SELECT json_group_array(h.value) FROM json_each(?1) AS h JOIN hosts ON hosts.origin = h.value
WHERE NOT EXISTS (SELECT 1 FROM urls WHERE host_id = hosts.id AND state = 'waiting' AND depth <= ?2)
"""

# status: the ?1 hosts with the most waiting rows (a walk of urls_host_queue, which holds only those),
# as the PostgreSQL frontier's BUSIEST_HOSTS has them.
BUSIEST_HOSTS = """
SELECT hosts.origin, q.n FROM (
    SELECT host_id, COUNT(*) AS n FROM urls WHERE state = 'waiting' GROUP BY host_id ORDER BY n DESC LIMIT ?1
) AS q JOIN hosts ON hosts.id = q.host_id
ORDER BY q.n DESC, hosts.origin
"""

# The rows per state, counted: only when the stored counts turn out wrong.
COUNT_ROWS = "SELECT json_group_object(state, n) FROM (SELECT state, COUNT(*) AS n FROM urls GROUP BY state)"

# Opening: every host with a waiting row, and the highest priority waiting there.
QUEUED_HOSTS = """
SELECT json_group_array(json_array(origin, top)) FROM (
    SELECT origin, (SELECT priority FROM urls WHERE host_id = hosts.id AND state = 'waiting'
                    ORDER BY priority DESC LIMIT 1) AS top
    FROM hosts) WHERE top IS NOT NULL
"""

# The same for the hosts of ?1 (a JSON array of host keys) only: null for a host with none.
TOP_PRIORITIES = """
SELECT json_group_object(h.value, (SELECT priority FROM urls WHERE host_id = hosts.id AND state = 'waiting'
                                   ORDER BY priority DESC LIMIT 1))
FROM json_each(?1) AS h JOIN hosts ON hosts.origin = h.value
"""

# The hosts and priorities of the URLs of ?1 (a JSON array) that are 'processing': release() and
# fail() put them back in waiting, so their hosts go back in line.
RELEASED_HOSTS = """
SELECT json_group_array(json_array(hosts.origin, urls.priority))
FROM json_each(?1) AS j JOIN urls ON urls.url = j.value JOIN hosts ON hosts.id = urls.host_id
WHERE urls.state = 'processing'
"""

# next_due(): the earliest due time of the waiting rows of each depth (urls_depth puts them first),
# the depths walked one probe each, from the smallest.  INDEXED BY, because with the statistics of
# a small table waiting at one depth the planner builds an automatic index (a scan of the whole
# table) for every call instead.
NEXT_DUE = """
WITH RECURSIVE layers (depth) AS (
    SELECT MIN(depth) FROM urls INDEXED BY urls_depth WHERE state = 'waiting'
    UNION ALL
    SELECT (SELECT MIN(depth) FROM urls INDEXED BY urls_depth WHERE state = 'waiting' AND depth > layers.depth)
    FROM layers WHERE layers.depth IS NOT NULL
)
SELECT MIN((SELECT MIN(next_attempt_at) FROM urls INDEXED BY urls_depth
            WHERE state = 'waiting' AND depth = layers.depth))
FROM layers WHERE layers.depth IS NOT NULL
"""

MIN_DUE_DEPTH = "SELECT depth FROM urls WHERE state = 'waiting' AND next_attempt_at <= ?1 ORDER BY depth LIMIT 1"

# The first ?2 URLs that ended in 'error' at or after ?1, with why (docs/crawler.md shows the same query).
FAILURES = """
SELECT url, coalesce(error, '') FROM urls WHERE state = 'error' AND fetched_at >= ?1 ORDER BY fetched_at, seq LIMIT ?2
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

# ?5 is when it is due again (a revisit policy), NULL: never.
GIVE_UP = """
UPDATE urls SET state = 'error', status = ?1, error = ?2, fetched_at = ?3, next_attempt_at = NULL, next_due = ?5
WHERE url = ?4 AND state = 'processing'
"""

# After COMPLETE_MANY, what each page's visit leaves (a revisit policy): each element of ?2 is
# [url, etag, last_modified, digest, changed, revisit_in, captured_at, changed_time, unchanged_time]; a
# change counts from the second visit on; a null captured_at (an unchanged page), changed_time or
# unchanged_time keeps the stored one.
VISITED = """
UPDATE urls SET etag = json_extract(j.value, '$[1]'), last_modified = json_extract(j.value, '$[2]'),
                digest = json_extract(j.value, '$[3]'), visits = visits + 1,
                captured_at = coalesce(json_extract(j.value, '$[6]'), captured_at),
                changed_time = coalesce(json_extract(j.value, '$[7]'), changed_time),
                unchanged_time = coalesce(json_extract(j.value, '$[8]'), unchanged_time),
                changes = changes + (visits > 0 AND json_extract(j.value, '$[4]')),
                next_due = ?1 + json_extract(j.value, '$[5]')
FROM json_each(?2) AS j
WHERE urls.url = json_extract(j.value, '$[0]') AND urls.state = 'done'
"""

# wake(): the done and error rows due again at ?1 (urls_revisit), with their hosts and priorities ...
DUE_AGAIN = """
SELECT json_group_array(json_array(u.rowid, u.state, hosts.origin, u.priority))
FROM urls AS u INDEXED BY urls_revisit JOIN hosts ON hosts.id = u.host_id
WHERE u.state IN ('done', 'error') AND u.next_due <= ?1
"""

# ... or those that a sitemap of add_many(..., wake_modified=True) dates after their last fetch (?1
# a JSON object {url: the time it dates it}, service.modified_times; the rule is service.py's) ...
MODIFIED_ROWS = f"""
SELECT json_group_array(json_array(u.rowid, u.state, hosts.origin, u.priority))
FROM json_each(?1) AS j JOIN urls AS u ON u.url = j.key JOIN hosts ON hosts.id = u.host_id
WHERE {MODIFIED_SINCE_FETCH.format(modified="j.value")}
"""

# ... back to waiting (?1 a JSON array of their rowids), their attempts from 0, due since next_due
# or, for one dated before that, since ?2 (now).
WAKE = """
UPDATE urls SET state = 'waiting', attempts = 0, next_attempt_at = MIN(COALESCE(next_due, ?2), ?2)
WHERE rowid IN (SELECT value FROM json_each(?1)) AND state IN ('done', 'error')
"""

# revisits(): how many done and error rows are due at ?1, and the earliest due after it.
REVISITS = """
SELECT (SELECT COUNT(*) FROM urls INDEXED BY urls_revisit WHERE state IN ('done', 'error') AND next_due <= ?1),
       (SELECT MIN(next_due) FROM urls INDEXED BY urls_revisit WHERE state IN ('done', 'error') AND next_due > ?1)
"""

# A host's robots.txt answer fetched at ?2 or later: (status, body, when).
ROBOTS_OF = "SELECT robots_status, robots, robots_at FROM hosts WHERE origin = ?1 AND robots_at >= ?2"

# The fingerprints of host ?1 (its origin).
FINGERPRINTS_OF = """
SELECT f.url, f.digest, f.simhash FROM hosts JOIN fingerprints AS f ON f.host_id = hosts.id WHERE hosts.origin = ?1
"""

# Per page (executemany: a digest is bytes, which JSON does not carry and unhex() needs SQLite 3.41):
# ?1 the URL, ?2 the URL it duplicates -- or, for one that duplicates nothing, ?2 its digest and ?3
# its simhash.
SET_DUPLICATE = "UPDATE urls SET duplicate_of = ?2 WHERE url = ?1"
STORE_FINGERPRINT = """
INSERT OR REPLACE INTO fingerprints (host_id, url, digest, simhash)
SELECT host_id, url, ?2, ?3 FROM urls WHERE url = ?1 AND host_id IS NOT NULL
"""

# ?1 the host, ?2 the status, ?3 the body, ?4 the time it came.
STORE_ROBOTS = "UPDATE hosts SET robots_status = ?2, robots = ?3, robots_at = ?4 WHERE origin = ?1"

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

# Filling version 3's additions from the rows of the file, a new one (nothing to fill) or an
# upgraded one; host_key() is the Python function, registered on the connection for this.
_FILL_3 = """
INSERT INTO hosts (origin) SELECT DISTINCT host_key(url) FROM urls;
UPDATE urls SET host_id = (SELECT id FROM hosts WHERE origin = host_key(urls.url));
INSERT INTO state_counts (state, n) SELECT state, COUNT(*) FROM urls GROUP BY state;
INSERT INTO state_counts (state, n) SELECT value, 0 FROM json_each('["waiting", "processing", "done", "error"]')
WHERE true ON CONFLICT (state) DO NOTHING;
"""

# Each version's additions, by the version they make.
_ADDITIONS = {2: _SCHEMA_2, 3: _SCHEMA_3 + _FILL_3, 4: _SCHEMA_4, 5: _SCHEMA_5, 6: _SCHEMA_6, 7: _SCHEMA_7 + _FILL_7,
              8: _SCHEMA_8, 9: _SCHEMA_9, 10: _SCHEMA_10, 11: _SCHEMA_11}


def create_or_upgrade(conn: sqlite3.Connection, path: str, clock: Callable[[], float]) -> None:
    """Inside the caller's transaction: create the tables in a new file, or check an existing one
    and upgrade it from an older version.  ``clock`` gives the unix time a new file was created at.

    An upgrade reads every row once (version 3 fills a host for each); opening an upgraded file
    afterwards reads none.

    Raises:
        FrontierError: for a file that is some other program's database, a damaged frontier, or
            one of a schema version this code does not know.
    """
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        # Not executescript(): it would commit the caller's BEGIN IMMEDIATE first.
        for statement in _statements(_SCHEMA):
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [("schema_version", "1"), ("created_at", repr(clock()))],
        )
        version = 1
    else:
        version = check_schema(conn, path, tables)
    if version == SCHEMA_VERSION:
        return
    conn.create_function("host_key", 1, _stored_host_key, deterministic=True)
    for added in range(version + 1, SCHEMA_VERSION + 1):
        for statement in _statements(_ADDITIONS[added]):
            conn.execute(statement)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def _stored_host_key(url: str) -> str:
    """host_key() of a row being upgraded; a URL it cannot take apart (put there by hand: no
    niofetcher stores one) is a host of its own, claimed and failed like any other, rather than a
    file that cannot be opened ("user-defined function raised exception")."""
    return host_key(url) if "//" in url else url


def check_schema(conn: sqlite3.Connection, path: str, tables: set[str]) -> int:
    """The schema version of a file that is a frontier this code can read (maybe after an upgrade),
    whose tables are ``tables``; FrontierError (naming ``path``) for any other file."""
    if "meta" not in tables:
        raise FrontierError(
            f"{path} is a SQLite database but not a niofetcher frontier (it has no meta table)", FrontierErrorKind.NOT_A_FRONTIER
        )
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = int(row[0]) if row is not None else None
    except (TypeError, ValueError):
        version = None
    if version is None:
        raise FrontierError(f"{path} is not a niofetcher frontier (no schema version in its meta table)", FrontierErrorKind.NOT_A_FRONTIER)
    if version not in range(1, SCHEMA_VERSION + 1):
        newer = "a newer niofetcher" if version > SCHEMA_VERSION else "an unknown version"
        raise FrontierError(
            f"{path} has frontier schema version {version} (from {newer}); "
            f"this niofetcher reads version {SCHEMA_VERSION}", FrontierErrorKind.NOT_A_FRONTIER
        )
    wanted = ["urls", *(["checkpoints"] if version >= 2 else []), *(["hosts", "state_counts"] if version >= 3 else [])]
    missing = [table for table in wanted if table not in tables]
    if missing:
        raise FrontierError(f"{path} is a damaged niofetcher frontier: the {missing[0]} table is missing", FrontierErrorKind.NOT_A_FRONTIER)
    return version


def _statements(script: str) -> Iterator[str]:
    """Split an SQL script into statements (sqlite3.complete_statement knows about comments and quotes)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""
