"""The PostgreSQL frontier: :class:`PostgresFrontier`, the service over one worker's store of a
crawl that workers share (``frontier.PostgresStore``), and :func:`crawl_status`, which reads a
crawl as no worker.

The store is built in layers, one job a module: ``session.py`` (the connection, and when its
changes commit), ``leases.py`` (the hosts a worker holds: leases, renewal, takeover, fencing),
``status.py`` (what a worker reads of the whole crawl, and :func:`crawl_status`), ``frontier.py``
(opening, adding, claiming, outcomes), ``hostdata.py`` (robots.txt answers and page
fingerprints).  ``tables.py`` makes and checks its tables; the statements on them are
``postgres_schema.py``'s.
"""

from ..base import CrawlStatus, WorkerStatus
from .frontier import PostgresFrontier
from .leases import NO_ADDRESS_GROUPS, NO_HOST_LEASES
from .status import crawl_failures, crawl_status, prepare_crawl

__all__ = ["NO_ADDRESS_GROUPS", "NO_HOST_LEASES", "CrawlStatus", "PostgresFrontier", "WorkerStatus", "crawl_failures", "crawl_status", "prepare_crawl"]
