"""The SQLite frontier: :class:`Frontier`, the service over a crawl's URLs in one file that one
process holds (``frontier.SQLiteStore``), and :func:`crawl_status`, which reads such a file from
outside.

One job a module: ``frontier.py`` (the store: opening, adding, claiming, outcomes; and :class:`Frontier`), ``revisits.py`` (URLs
due again), ``hostdata.py`` (robots.txt answers and page fingerprints), ``transactions.py`` (the connection, and when its changes commit), ``claims.py`` (claims host by
host), ``status.py`` (what the frontier reads of its crawl, and :func:`crawl_status`), ``lock.py``
(one owner a file), ``wal.py`` (the log's checkpoints, in a thread).  Host leases it has none of: one process holds
the file, and the service answers as ``capabilities.WholeFile``.  Its SQL is ``schema.py``'s.
"""

from ....urls import normalize_url
from ..base import STATES, FrontierError, FrontierURL
from ..schema import SCHEMA_VERSION
from .frontier import Frontier
from .lock import FrontierLocked
from .status import crawl_status

__all__ = [
    "SCHEMA_VERSION", "STATES", "Frontier", "FrontierError", "FrontierLocked", "FrontierURL", "crawl_status",
    "normalize_url",
]
