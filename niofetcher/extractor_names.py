"""The names of the crawler's link extractors, in the one place every layer can read them cheaply.

``CrawlConfig(extractor=...)`` checks a name against :data:`EXTRACTORS`, the
command line offers them as ``--extractor`` choices, and
``niofetcher.crawl.parse`` maps each to the module that harvests with it. The
command line must build its parser without loading the crawler (nor bs4, lxml
or selectolax), so the names live here, at the package's top, where nothing
is imported: this module is names and a check, no parser.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRACTORS", "check_extractor", "missing_package"]

#: The link extractors: Beautiful Soup over lxml (the default), lxml alone, selectolax's Lexbor (an HTML5 parser).
EXTRACTORS = ("bs4", "lxml", "selectolax")

# The extractors whose library is an optional dependency: name -> (the module it imports, the extra that installs it).
_OPTIONAL = {"selectolax": ("selectolax", "selectolax")}


def missing_package(extractor: str) -> str:
    """The one-line message for an extractor whose optional library is not installed."""
    module, extra = _OPTIONAL[extractor]
    return (f"extractor {extractor!r} needs the {module} package, which is not installed: "
            f"pip install {module} (or niofetcher[{extra}])")


def check_extractor(extractor: object) -> str:
    """``extractor`` when it names an extractor that can run here.

    Raises:
        ValueError: for a name not in :data:`EXTRACTORS`, or an extractor whose optional library
            is missing (looked up, not imported: checking a config loads no parser).
    """
    if not isinstance(extractor, str) or extractor not in EXTRACTORS:
        raise ValueError(f"extractor must be one of {', '.join(map(repr, EXTRACTORS))}, not {extractor!r}")
    if extractor in _OPTIONAL:
        try:
            found = importlib.util.find_spec(_OPTIONAL[extractor][0]) is not None
        except ValueError:  # sys.modules holds None for it: an import of it would fail
            found = False
        if not found:
            raise ValueError(missing_package(extractor))
    return extractor
