"""The PostgreSQL frontier: :class:`PostgresFrontier`, one worker of a crawl that workers share, and
:func:`crawl_status`, which reads a crawl as no worker.

The class is built in layers, one job a module: ``session.py`` (the connection, and when its
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
