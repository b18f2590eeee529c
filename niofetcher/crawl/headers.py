"""What a crawl's requests carry besides the URL: a seed's credentials, and a revisit's validators.

A seed's ``user:pass@`` is taken out of it as the Crawler is made
(:func:`take_credentials`): the frontier, the records and the logs get the bare
seed, and every request to that seed's origin, robots.txt included, carries
the ``Authorization`` it stands for, and no other origin's does -- a redirect
is followed as a link, a request of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ..urls import Origin, parse_target, split_credentials
from .frontier import FrontierURL

__all__ = ["RequestHeaders", "take_credentials"]

log = logging.getLogger("niofetcher")


def take_credentials(seeds: Sequence[str]) -> tuple[list[str], dict[Origin, str]]:
    """The seeds without their ``user:pass@``, and the Authorization value it stands for, by origin:
    the password is sent to that origin, and kept out of the frontier, the records and the logs.
    Seeds of one origin that give different credentials: the first seed's are used."""
    bare_seeds: list[str] = []
    credentials: dict[Origin, str] = {}
    for seed in seeds:
        bare, authorization = split_credentials(seed)
        bare_seeds.append(bare)
        if authorization is not None:
            origin = parse_target(bare).origin
            if credentials.setdefault(origin, authorization) != authorization:
                log.warning("seeds give %s different credentials (user:pass@): the first seed's are used", origin)
    return bare_seeds, credentials


class RequestHeaders:
    """``headers(origin, item)``: the headers of a crawl's request to ``origin``."""

    __slots__ = ("_conditional", "_credentials")

    def __init__(self, credentials: Mapping[Origin, str], conditional: bool) -> None:
        """``credentials`` by origin (:func:`take_credentials`); ``conditional``: a revisit is a
        conditional GET (the crawl has a revisit policy)."""
        self._credentials = credentials
        self._conditional = conditional

    def __call__(self, origin: Origin, item: FrontierURL | None = None) -> dict[str, str]:
        """The Authorization a seed's ``user:pass@`` stands for, to that seed's origin only (a redirect
        elsewhere is a link of another origin: it gets none); for a revisit of ``item``, the
        conditional GET its stored validators make."""
        authorization = self._credentials.get(origin)
        headers = {"Authorization": authorization} if authorization is not None else {}
        if item is not None and self._conditional:
            if item.etag is not None:
                headers["If-None-Match"] = item.etag
            if item.last_modified is not None:
                headers["If-Modified-Since"] = item.last_modified
        return headers
