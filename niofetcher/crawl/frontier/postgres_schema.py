"""The SQL of the PostgreSQL frontier: the statements on its tables, which are in a schema of their
own per crawl (``postgres/tables.py`` makes them).

The ``urls`` table has the columns of the SQLite frontier's, in the same order and with the same
meaning, so that the queries people run there run here too, once ``search_path`` names the crawl::

    $ psql "$DSN" -c "SET search_path TO mycrawl" -c "SELECT state, COUNT(*) FROM urls GROUP BY state"

(A name with a "-" or a digit first goes in double quotes there: ``SET search_path TO "my-crawl"``.)

Every statement that takes many URLs takes them as arrays (``unnest``), so that a batch of a
thousand URLs is one statement and one round trip to the server, as on SQLite it is one call.
"""

from __future__ import annotations

from .base import check_crawl_name  # its home is base; named here as it always was
from .service import MODIFIED_SINCE_FETCH

__all__ = [
    "ADDRESSES_HELD_ELSEWHERE",
    "ADMITTED_OF",
    "BUSIEST_HOSTS",
    "CLAIMS_OF_MINE",
    "CLAIM_ROWS",
    "COMPLETE_MANY",
    "COUNTS",
    "FAIL",
    "FAILURES",
    "FINGERPRINTS_OF",
    "GIVE_BACK",
    "HEARTBEAT",
    "HELD",
    "HOSTS_AFTER_CLAIM",
    "INSERT",
    "KNOWN_URLS",
    "LEAVE",
    "LIVE_WORKERS",
    "LOCK_ADDRESSES",
    "LOCK_MINE",
    "MARK_CLAIMED",
    "MINE_LOCKED",
    "MIN_DUE_DEPTH",
    "NEXT_DUE",
    "QUEUED_HOSTS",
    "RECOVER",
    "REGISTER",
    "RELEASE",
    "RENEW",
    "REVISITS",
    "ROBOTS_OF",
    "SAVE_CHECKPOINT",
    "SET_ADDRESSES",
    "SET_DUPLICATES",
    "SET_LASTMODS",
    "SHARE",
    "STATE_OF",
    "STORE_COUNTS",
    "STORE_FINGERPRINTS",
    "STORE_REFUSALS",
    "STORE_ROBOTS",
    "TAKE",
    "VISITED",
    "WAKE",
    "WAKE_MODIFIED",
    "check_crawl_name",
]

# The server's clock in unix seconds: every lease is measured by it, never by a worker's.
_NOW = "extract(epoch FROM clock_timestamp())::float8"

# A URL known already keeps its row, except that one found nearer a seed gets the smaller depth
# and the parent that gave it.  Hosts not seen before get their row in the same statement (rows
# inserted by a statement are invisible to its other parts, hence the union).  The counts are of
# the rows inserted, not of those whose depth went down, and of the new hosts (free: the worker
# takes them).  seq comes from the sequence in the order of the arrays (numbered over the sorted
# subquery), but the rows go in by URL: workers inserting the same new URLs wait for each other
# in one order, never in a cycle.  DO NOTHING locks no row that is there already (DO UPDATE
# would lock every known link, other workers' rows in flight among them); the few rows whose
# depth goes down are updated apart.  The third count is of the hosts found: a host another
# worker inserted and had not committed when this statement began is neither inserted here (the
# conflict waits for that worker, then does nothing) nor seen (the statement's snapshot is older),
# so its URLs go nowhere; fewer hosts found than asked for means: run the statement again.
INSERT = """
WITH fresh AS (
    INSERT INTO hosts (origin) SELECT f.origin FROM unnest(%(fresh)s::text[]) AS f(origin)
    WHERE NOT EXISTS (SELECT 1 FROM hosts WHERE hosts.origin = f.origin)  -- a conflict would use up an id
    ORDER BY f.origin  -- workers adding the same new hosts (the seeds) take their keys in one order: no deadlock
    ON CONFLICT (origin) DO NOTHING RETURNING id, origin
), ids AS (
    SELECT id, origin FROM fresh UNION ALL SELECT id, origin FROM hosts WHERE origin = ANY(%(hosts)s::text[])
), v AS MATERIALIZED (
    SELECT s.*, nextval('urls_seq') AS seq FROM (
        SELECT v.url, v.depth, v.priority, v.parent, ids.id AS host_id
        FROM unnest(%(urls)s::text[], %(depths)s::int[], %(priorities)s::int[], %(parents)s::text[],
                    %(host_of)s::text[]) WITH ORDINALITY AS v(url, depth, priority, parent, host, ord)
        JOIN ids ON ids.origin = v.host
        ORDER BY v.ord
    ) AS s
), added AS (
    INSERT INTO urls (url, depth, priority, parent, discovered_at, next_attempt_at, host_id, seq)
    SELECT url, depth, priority, parent, %(now)s, %(now)s, host_id, seq FROM v ORDER BY url
    ON CONFLICT (url) DO NOTHING
    RETURNING host_id
), lowered AS (
    UPDATE urls SET depth = v.depth, parent = v.parent FROM v WHERE urls.url = v.url AND v.depth < urls.depth
), counted AS (
    INSERT INTO admitted AS a (host_id, worker, n)
    SELECT host_id, %(me)s, count(*) FROM added GROUP BY host_id ORDER BY host_id
    ON CONFLICT (host_id, worker) DO UPDATE SET n = a.n + excluded.n
)
SELECT (SELECT count(*) FROM added), (SELECT count(*) FROM fresh), (SELECT count(*) FROM ids)
"""

# The URLs admitted so far of the hosts of %(hosts)s, every worker's: (host, count) rows.
ADMITTED_OF = """
SELECT hosts.origin, sum(a.n) FROM hosts JOIN admitted AS a ON a.host_id = hosts.id
WHERE hosts.origin = ANY(%(hosts)s::text[]) GROUP BY hosts.origin
"""

# Those of %(urls)s that are stored.
KNOWN_URLS = "SELECT url FROM urls WHERE url = ANY(%(urls)s::text[])"

# This worker's refusals by cause, added to its rows.
STORE_REFUSALS = """
INSERT INTO refusals AS r (worker, cause, n) SELECT %(me)s, * FROM unnest(%(causes)s::text[], %(counts)s::bigint[])
ON CONFLICT (worker, cause) DO UPDATE SET n = r.n + excluded.n
"""

# A sitemap's <lastmod> of URLs stored already (INSERT first), new or known: a statement of its
# own, so that adding the links of a page (no lastmod) costs nothing more.  Only the rows it
# changes are locked: a sitemap listed again, unchanged, waits for no worker.
SET_LASTMODS = """
UPDATE urls SET lastmod = v.lastmod FROM unnest(%(urls)s::text[], %(lastmods)s::text[]) AS v(url, lastmod)
WHERE urls.url = v.url AND urls.lastmod IS DISTINCT FROM v.lastmod
"""

# -- host leases (see "Host leases" in postgres/leases.py) ----------------------------------
#
# %(me)s is the worker's id, %(lease)s the lease in seconds; %(fenced)s is false only with host
# ownership switched off for a test (postgres/leases.py reads the switch), when every check of an owner
# passes.

REGISTER = f"""
INSERT INTO workers (id, host_name, pid, backend_pid, started_at, heartbeat_at)
VALUES (%(me)s, %(host_name)s, %(pid)s, pg_backend_pid(), {_NOW}, {_NOW})
"""

LEAVE = "DELETE FROM workers WHERE id = %(me)s"

# The hosts with a URL waiting, in id order, found one probe of urls_host_queue each (a loose index
# scan: PostgreSQL has no skip scan), so that the hosts whose URLs are all done cost nothing however
# many there are -- a broad crawl's most hosts, late in it.  Walking the hosts table with a probe
# of urls for each took 0.6-0.9 s a TAKE with 100,000 such hosts.  Read lazily: a query that
# needs a few stops the walk there.
_WAITING_HOSTS = """waiting_hosts (host_id) AS (
    (SELECT host_id FROM urls WHERE state = 'waiting' ORDER BY host_id LIMIT 1)
    UNION ALL
    SELECT (SELECT u.host_id FROM urls AS u WHERE u.state = 'waiting' AND u.host_id > w.host_id
            ORDER BY u.host_id LIMIT 1)
    FROM waiting_hosts AS w WHERE w.host_id IS NOT NULL
)"""

# The hosts with work, as host ids: a URL in flight (to recover, when its worker gave the host back
# with claims out: a missed renewal, a close() with claims unreleased), or else a URL waiting.  Each
# is then looked up in hosts by its id, in a subquery the planner cannot flatten (OFFSET 0, FOR
# UPDATE): joined, it scanned every host at 20,000 finished ones, guessing the walk at 100 hosts.
_WITH_WORK = """
    SELECT DISTINCT host_id FROM urls WHERE state = 'processing'
    UNION ALL
    SELECT w.host_id FROM waiting_hosts AS w WHERE w.host_id IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM urls WHERE urls.host_id = w.host_id AND urls.state = 'processing')
"""

# A fair share of the hosts with work for each live worker: the hosts held and (up to a bound) the
# free ones with a URL waiting or in flight, over the live workers, at least 1.  Live: its connection
# is there and it renewed within a lease (%(lease)s).  A worker frozen (SIGSTOP, a swapped-out VM)
# keeps its connection but renews nothing; counted live, it would halve the share of the one taking
# its expired hosts over, which then got only half of them until it had finished with those.
_FAIR_SHARE = f"""GREATEST(1, ceil((
    (SELECT count(*) FROM hosts WHERE owner IS NOT NULL)
    + (SELECT count(*) FROM (SELECT 1 FROM ({_WITH_WORK}) AS c CROSS JOIN LATERAL (
           SELECT 1 FROM hosts AS f WHERE f.id = c.host_id AND f.owner IS NULL OFFSET 0) AS free_host
       LIMIT 10000) AS free)
)::float8 / GREATEST(1, (SELECT count(*) FROM workers AS w
                         WHERE w.heartbeat_at > {_NOW} - %(lease)s
                           AND EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = w.backend_pid)))))::int"""

SHARE = f"WITH RECURSIVE {_WAITING_HOSTS} SELECT {_FAIR_SHARE}"

# -- address groups (see "Address groups" in postgres/leases.py) -----------------------------
#
# %(by_address)s is true only in a crawl with per-IP limits: otherwise the branch below is constant
# false, and a take costs what it did.

# A host row {h} held by a live worker other than %(me)s: its lease runs, and its connection is there.
_LIVE_OTHER = f"""{{h}}.owner <> %(me)s AND {{h}}.lease_until >= {_NOW}
    AND EXISTS (SELECT 1 FROM workers AS lw JOIN pg_stat_activity AS la ON la.pid = lw.backend_pid
                WHERE lw.id = {{h}}.owner)"""

# Host {h} may be taken: per-IP limits are off, its address is not known yet, or no live other
# worker holds a host of its address (one probe of hosts_address).
_GROUP_FREE = f"""(NOT %(by_address)s OR {{h}}.address IS NULL OR NOT EXISTS (
    SELECT 1 FROM hosts AS o WHERE o.address = {{h}}.address AND {_LIVE_OTHER.format(h="o")}))"""

# Of the addresses %(addresses)s (in order), those another transaction is settling now: their
# advisory locks (class 'nioa', the address's hash) are held elsewhere.  Not waited for: the
# settling worker gives those hosts up instead (no lock waits on a lock, no deadlock).
LOCK_ADDRESSES = """
SELECT a FROM unnest(%(addresses)s::text[]) WITH ORDINALITY AS v(a, ord)
WHERE NOT pg_try_advisory_xact_lock(1852403553, hashtext(a)) ORDER BY ord
"""

# The addresses of the hosts of %(ids)s that the worker holds, as learnt from the crawl.
SET_ADDRESSES = """
UPDATE hosts SET address = v.address FROM unnest(%(ids)s::int[], %(addresses)s::text[]) AS v(id, address)
WHERE hosts.id = v.id AND hosts.owner = %(me)s AND hosts.address IS DISTINCT FROM v.address
"""

# Of %(addresses)s, those of a host a live other worker holds.
ADDRESSES_HELD_ELSEWHERE = f"""
SELECT DISTINCT o.address FROM hosts AS o
WHERE o.address = ANY(%(addresses)s::text[]) AND {_LIVE_OTHER.format(h="o")}
"""

# Up to %(most)s hosts with work (a URL waiting, or one in flight to recover) -- and no more than
# a fair share with the %(held)s the worker has -- whose lease ran out, or whose owner's connection
# is gone (it can never write again), or that are free: those of other owners first, so that a dead
# worker's hosts go before new ones, in the order they came.  With per-IP limits, no host of an
# address that a live other worker holds (_GROUP_FREE).  The first are found among the hosts
# held (hosts_owner), the free ones through their URLs (_WITH_WORK).
# SKIP LOCKED: a host another worker is taking, or claiming from, is not waited for.
_TAKE_LIMIT = f"CASE WHEN %(fenced)s THEN GREATEST(0, LEAST(%(most)s, {_FAIR_SHARE} - %(held)s)) ELSE %(most)s END"
TAKE = f"""
WITH RECURSIVE dead AS (
    SELECT w.id FROM workers AS w WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = w.backend_pid)
), {_WAITING_HOSTS}, room AS MATERIALIZED (
    SELECT {_TAKE_LIMIT} AS n
), owned AS (
    SELECT h.id FROM hosts AS h
    WHERE h.owner IS NOT NULL AND h.owner <> %(me)s
      AND (h.lease_until < {_NOW} OR h.owner IN (SELECT id FROM dead) OR NOT %(fenced)s)
      AND (EXISTS (SELECT 1 FROM urls WHERE urls.host_id = h.id AND urls.state = 'waiting')
           OR EXISTS (SELECT 1 FROM urls WHERE urls.host_id = h.id AND urls.state = 'processing'))
      AND {_GROUP_FREE.format(h="h")}
    ORDER BY h.id
    LIMIT (SELECT n FROM room)
    FOR UPDATE OF h SKIP LOCKED
), free AS (
    SELECT f.id FROM ({_WITH_WORK}) AS c CROSS JOIN LATERAL (
        SELECT h.id FROM hosts AS h WHERE h.id = c.host_id AND h.owner IS NULL AND {_GROUP_FREE.format(h="h")}
        FOR UPDATE SKIP LOCKED) AS f
    LIMIT GREATEST(0, (SELECT n FROM room) - (SELECT count(*) FROM owned))
)
UPDATE hosts SET owner = %(me)s, lease_until = {_NOW} + %(lease)s, epoch = hosts.epoch + 1
FROM (SELECT id FROM owned UNION ALL SELECT id FROM free) AS picked WHERE hosts.id = picked.id
RETURNING hosts.id, hosts.origin, hosts.epoch, hosts.address
"""

# The URLs in flight of hosts just taken were their last owner's: they wait again, their attempt
# counted (the request may have reached the server).  The epoch went up, so that owner's late
# outcomes are refused.
RECOVER = "UPDATE urls SET state = 'waiting' WHERE host_id = ANY(%(ids)s::int[]) AND state = 'processing'"

# One statement renews every lease of the worker; the hosts it no longer owns are those missing.
RENEW = f"""
UPDATE hosts SET lease_until = {_NOW} + %(lease)s
WHERE owner = %(me)s AND id = ANY(%(ids)s::int[]) RETURNING id
"""

HEARTBEAT = f"""
UPDATE workers SET heartbeat_at = {_NOW}, hosts_held = %(held)s, pages_minute = %(pages)s WHERE id = %(me)s
"""

# Hosts given back (nothing to do there, or the worker stops): free at once for any worker.
GIVE_BACK = """
UPDATE hosts SET owner = NULL, lease_until = NULL, epoch = epoch + 1 WHERE owner = %(me)s AND id = ANY(%(ids)s::int[])
"""

# What the worker holds and has in flight, as committed (after a rollback).
HELD = "SELECT id, origin, epoch, address FROM hosts WHERE owner = %(me)s"
CLAIMS_OF_MINE = """
SELECT urls.url, hosts.origin, hosts.epoch FROM hosts JOIN urls ON urls.host_id = hosts.id AND urls.state = 'processing'
WHERE hosts.owner = %(me)s
"""

# robots.txt as the host's owner last fetched it, when that was less than %(seconds)s ago: (status,
# body, age in seconds), by the server's clock, which stamped robots_at.
ROBOTS_OF = f"""
SELECT robots_status, robots, {_NOW} - robots_at FROM hosts
WHERE origin = %(host)s AND robots_at > {_NOW} - %(seconds)s
"""

# Without host leases (the test-only switch) a free host's too, never another's: a row of another
# worker's, locked here and given back there in the other order, deadlocked the two transactions.
STORE_ROBOTS = f"""
UPDATE hosts SET robots_status = %(status)s, robots = %(body)s, robots_at = {_NOW}
WHERE origin = %(host)s AND (owner = %(me)s OR (NOT %(fenced)s AND owner IS NULL))
"""

# -- claims and outcomes -------------------------------------------------------------------

# The first %(share)s due rows after the first %(skip)s of each host's queue, for the hosts of
# %(hosts)s, no deeper than %(deepest)s: [host, url, depth, priority, attempts + 1, parent, seq, lastmod,
# etag, last_modified, digest, visits, interval, captured_at, changes, changed_time, unchanged_time,
# since_fetch].
CLAIM_ROWS = """
SELECT a.origin, q.url, q.depth, q.priority, q.attempts + 1, q.parent, q.seq, q.lastmod,
       q.etag, q.last_modified, q.digest, q.visits, q.next_due - q.fetched_at, q.captured_at,
       q.changes, q.changed_time, q.unchanged_time, %(now)s - q.fetched_at
FROM unnest(%(hosts)s::text[]) AS a(origin) JOIN hosts ON hosts.origin = a.origin
CROSS JOIN LATERAL (
    SELECT url, depth, priority, attempts, parent, seq, lastmod, etag, last_modified, digest, visits, next_due,
           fetched_at, captured_at, changes, changed_time, unchanged_time FROM urls
    WHERE urls.host_id = hosts.id AND state = 'waiting' AND next_attempt_at <= %(now)s AND depth <= %(deepest)s
    ORDER BY priority DESC, depth, seq LIMIT %(share)s OFFSET %(skip)s
) AS q
"""

# Before a claim is marked or an outcome recorded, in its transaction, the hosts of %(ids)s still
# the worker's are locked FOR SHARE: a worker taking one of them over skips it until this
# transaction ends, so that no row is marked for a host that changed hands meanwhile (which would
# leave it 'processing' after the new owner recovered the host's rows, or record an outcome for a
# row the new owner claimed again).
# ... and which of them are, with their epochs (the same lock): whose outcomes will be accepted.
MINE_LOCKED = "SELECT id, epoch FROM hosts WHERE id = ANY(%(ids)s::int[]) AND owner = %(me)s FOR SHARE"

LOCK_MINE = """
SELECT count(*) FROM (SELECT 1 FROM hosts WHERE id = ANY(%(ids)s::int[]) AND owner = %(me)s FOR SHARE) AS mine
"""

# The claimed rows (%(taken)s) of hosts the worker owns to 'processing'.  The rows are found by
# URL, the owner looked up per row by the host's key (a join from the hosts walked each host's
# whole queue).
MARK_CLAIMED = """
UPDATE urls SET state = 'processing', attempts = attempts + 1
WHERE urls.url = ANY(%(taken)s::text[]) AND urls.state = 'waiting'
  AND (NOT %(fenced)s OR (SELECT owner FROM hosts WHERE hosts.id = urls.host_id) = %(me)s)
RETURNING urls.url
"""

# ... and, in the same pipeline (so seeing them marked), where each host asked (%(asked)s) stands
# after it: the highest priority it has waiting (NULL: nothing waits), and, for the hosts flagged
# in %(idle)s, whether anything waits as shallow as %(deepest)s.
HOSTS_AFTER_CLAIM = """
SELECT a.origin,
       (SELECT priority FROM urls WHERE host_id = hosts.id AND state = 'waiting' ORDER BY priority DESC LIMIT 1),
       a.idle AND EXISTS (SELECT 1 FROM urls WHERE host_id = hosts.id AND state = 'waiting' AND depth <= %(deepest)s)
FROM unnest(%(asked)s::text[], %(idle)s::bool[]) WITH ORDINALITY AS a(origin, idle, ord)
LEFT JOIN hosts ON hosts.origin = a.origin
ORDER BY a.ord
"""

# The outcomes are accepted only while the host is the worker's under the epoch each URL was
# claimed under (the fencing token): a late one from a worker that lost the host changes nothing.
# A scalar subquery, looked up by the host's key for each row found by URL; IS NOT DISTINCT FROM,
# which no hash join can take for its key, so that it runs for those rows only (as "=", the
# planner made it part of a hash key over every row in flight: a lookup each).
_FENCE = ("(NOT %(fenced)s OR {epoch} IS NOT DISTINCT FROM"
          " (SELECT h.epoch FROM hosts AS h WHERE h.id = urls.host_id AND h.owner = %(me)s))")

# The fingerprints of host %(host)s (its origin).
FINGERPRINTS_OF = """
SELECT f.url, f.digest, f.simhash FROM hosts JOIN fingerprints AS f ON f.host_id = hosts.id WHERE hosts.origin = %(host)s
"""

_MINE = ("(NOT %(fenced)s OR EXISTS (SELECT 1 FROM hosts AS h WHERE h.id = urls.host_id AND h.owner = %(me)s))")

# Claimed URLs of this worker's hosts: a duplicate's duplicate_of on its row ...
SET_DUPLICATES = f"""
UPDATE urls SET duplicate_of = v.original FROM unnest(%(urls)s::text[], %(originals)s::text[]) AS v(url, original)
WHERE urls.url = v.url AND urls.state = 'processing' AND {_MINE}
"""

# ... and the others' fingerprints.
STORE_FINGERPRINTS = f"""
INSERT INTO fingerprints AS f (host_id, url, digest, simhash)
SELECT urls.host_id, urls.url, v.digest, v.simhash
FROM unnest(%(urls)s::text[], %(digests)s::bytea[], %(simhashes)s::bigint[]) AS v(url, digest, simhash)
JOIN urls ON urls.url = v.url
WHERE urls.state = 'processing' AND urls.host_id IS NOT NULL AND {_MINE}
ON CONFLICT (host_id, url) DO UPDATE SET digest = excluded.digest, simhash = excluded.simhash
"""

# Each element of the arrays is a (url, status, epoch) triple.
COMPLETE_MANY = f"""
UPDATE urls SET state = 'done', status = v.status, error = NULL, fetched_at = %(now)s, next_attempt_at = NULL
FROM unnest(%(urls)s::text[], %(statuses)s::int[], %(epochs)s::bigint[]) AS v(url, status, epoch)
WHERE urls.url = v.url AND urls.state = 'processing' AND {_FENCE.format(epoch="v.epoch")}
"""

# After COMPLETE_MANY, what each visit leaves (a revisit policy), for the rows it made done; a null
# captured_at (an unchanged page), changed_time or unchanged_time keeps the stored one.
VISITED = """
UPDATE urls SET etag = v.etag, last_modified = v.last_modified, digest = v.digest, visits = urls.visits + 1,
    changes = urls.changes + CASE WHEN urls.visits > 0 AND v.changed THEN 1 ELSE 0 END,
    next_due = %(now)s + v.revisit_in, captured_at = coalesce(v.captured_at, urls.captured_at),
    changed_time = coalesce(v.changed_time, urls.changed_time),
    unchanged_time = coalesce(v.unchanged_time, urls.unchanged_time)
FROM unnest(%(urls)s::text[], %(etags)s::text[], %(last_modifieds)s::text[], %(digests)s::text[],
            %(changed)s::bool[], %(revisit_in)s::float8[], %(captured_at)s::float8[], %(changed_time)s::float8[],
            %(unchanged_time)s::float8[])
     AS v(url, etag, last_modified, digest, changed, revisit_in, captured_at, changed_time, unchanged_time)
WHERE urls.url = v.url AND urls.state = 'done' AND urls.fetched_at = %(now)s
"""

# wake(): the done and error rows due again at %(now)s (urls_revisit) back to waiting, due since
# next_due, their attempts from 0: what they were, and their hosts and priorities.
WAKE = """
UPDATE urls SET state = 'waiting', attempts = 0, next_attempt_at = urls.next_due
FROM (SELECT url, state FROM urls WHERE state IN ('done', 'error') AND next_due <= %(now)s FOR UPDATE SKIP LOCKED) AS d
WHERE urls.url = d.url
RETURNING d.state, (SELECT origin FROM hosts WHERE hosts.id = urls.host_id), urls.priority
"""

# add_many(..., wake_modified=True): the done and error rows that a sitemap dates after their last fetch
# (%(urls)s with %(modified)s, the times service.modified_times gave; the rule is service.py's) back to
# waiting, due at %(now)s, their attempts from 0, as WAKE moves them; rows another worker is moving
# are skipped.
WAKE_MODIFIED = f"""
UPDATE urls SET state = 'waiting', attempts = 0, next_attempt_at = %(now)s
FROM (SELECT u.url, u.state FROM unnest(%(urls)s::text[], %(modified)s::float8[]) AS v(url, modified)
      JOIN urls AS u ON u.url = v.url
      WHERE {MODIFIED_SINCE_FETCH.format(modified="v.modified")} FOR UPDATE OF u SKIP LOCKED) AS d
WHERE urls.url = d.url
RETURNING d.state, (SELECT origin FROM hosts WHERE hosts.id = urls.host_id), urls.priority
"""

# revisits(): how many done and error rows are due at %(now)s, and the earliest due after it.
REVISITS = """
SELECT (SELECT count(*) FROM urls WHERE state IN ('done', 'error') AND next_due <= %(now)s),
       (SELECT min(next_due) FROM urls WHERE state IN ('done', 'error') AND next_due > %(now)s)
"""

# A failed attempt, in one statement: waiting again, due %(wait)s seconds from %(now)s, or an error
# when %(wait)s is NULL (the crawl's schedule decides which: crawl/schedule.py).
FAIL = f"""
UPDATE urls SET
    state = CASE WHEN %(wait)s::float8 IS NULL THEN 'error' ELSE 'waiting' END,
    status = %(status)s, error = %(error)s, fetched_at = %(now)s,
    next_attempt_at = %(now)s + %(wait)s::float8,
    next_due = CASE WHEN %(wait)s::float8 IS NULL THEN %(now)s + %(revisit)s::float8 ELSE next_due END
WHERE urls.url = %(url)s AND urls.state = 'processing' AND {_FENCE.format(epoch="%(epoch)s")}
RETURNING urls.state, (SELECT origin FROM hosts WHERE hosts.id = urls.host_id), urls.priority
"""

# Not fetched, so the attempt does not count; next_attempt_at is still the (past) time it was
# due, so it is due again at once and keeps its place.  The hosts come back to be put in line.
RELEASE = f"""
UPDATE urls SET state = 'waiting', attempts = GREATEST(attempts - 1, 0)
FROM unnest(%(urls)s::text[], %(epochs)s::bigint[]) AS v(url, epoch)
WHERE urls.url = v.url AND urls.state = 'processing' AND {_FENCE.format(epoch="v.epoch")}
RETURNING (SELECT origin FROM hosts WHERE hosts.id = urls.host_id), urls.priority
"""

SAVE_CHECKPOINT = """
INSERT INTO checkpoints (name, value) SELECT * FROM unnest(%(names)s::text[], %(values)s::bigint[])
ON CONFLICT (name) DO UPDATE SET value = excluded.value
"""

STATE_OF = "SELECT state FROM urls WHERE url = %s"

# -- the whole crawl, for every worker ---------------------------------------------------------

COUNTS = "SELECT state, sum(n)::bigint FROM state_counts GROUP BY state"

# What this worker's commit changed, added to its own rows.
STORE_COUNTS = """
INSERT INTO state_counts AS c (worker, state, n) SELECT %(me)s, * FROM unnest(%(states)s::text[], %(counts)s::bigint[])
ON CONFLICT (worker, state) DO UPDATE SET n = c.n + excluded.n
"""

# The hosts of %(ids)s with a waiting row, and the highest priority waiting there, in the order hosts came.
QUEUED_HOSTS = """
SELECT hosts.origin, top.priority FROM hosts CROSS JOIN LATERAL (
    SELECT priority FROM urls WHERE host_id = hosts.id AND state = 'waiting' ORDER BY priority DESC LIMIT 1) AS top
WHERE hosts.id = ANY(%(ids)s::int[])
ORDER BY hosts.id
"""

# When the worker's next URL is due (its hosts'), and whether anything waits or is in flight
# anywhere in the crawl (another worker's hosts, hosts nobody holds yet): the crawl goes on.
NEXT_DUE = """
SELECT (SELECT MIN(next_attempt_at) FROM urls WHERE state = 'waiting' AND (host_id = ANY(%(ids)s::int[]) OR NOT %(fenced)s)),
       EXISTS (SELECT 1 FROM urls WHERE state = 'waiting') OR EXISTS (SELECT 1 FROM urls WHERE state = 'processing')
"""

# -- status (``niofetcher status``): read only, by no worker ---------------------------------

# The live workers (their connection is there), longest running first.
LIVE_WORKERS = f"""
SELECT w.id, w.host_name, w.pid, w.hosts_held, w.pages_minute, {_NOW} - w.heartbeat_at FROM workers AS w
WHERE EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = w.backend_pid)
ORDER BY w.started_at
"""

# The hosts with the most waiting URLs, with their owners.
BUSIEST_HOSTS = """
SELECT hosts.origin, q.n, hosts.owner FROM (
    SELECT host_id, count(*) AS n FROM urls WHERE state = 'waiting' GROUP BY host_id ORDER BY n DESC LIMIT %(top)s
) AS q JOIN hosts ON hosts.id = q.host_id
ORDER BY q.n DESC, hosts.origin
"""

# The first %(limit)s URLs that ended in 'error' at or after %(since)s, with why (as on SQLite).
FAILURES = """
SELECT url, coalesce(error, '') FROM urls WHERE state = 'error' AND fetched_at >= %(since)s
ORDER BY fetched_at, seq LIMIT %(limit)s
"""

MIN_DUE_DEPTH = "SELECT depth FROM urls WHERE state = 'waiting' AND next_attempt_at <= %s ORDER BY depth LIMIT 1"
