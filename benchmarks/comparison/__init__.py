"""The parts of ``benchmarks/compare.py``: niofetcher side by side with its peers (issue 5).

``clients``    the clients compared: fetching scripts (A-C) and crawlers (D, E)
``scenarios``  what each scenario asks for (hosts, limits, pages), and ``SCENARIOS``
``targets``    the targets of issue 5 each scenario is judged by
``measure``    what the runner measures besides the clients: body sizes, machine load, listen drops
``runner``     a scenario's rounds: the site, every client in a fresh process, round after round
``extras``     the optional extras of a fetch scenario: a cProfile run, the site's ceiling with wrk
``report``     summaries, tables (text and Markdown), the chart, and the files in benchmarks/results/

The test site runs in its own process through ``benchmarks/_site.py``; the
clients are the scripts of ``benchmarks/clients/``.
"""

from __future__ import annotations

import os

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENTS_DIR = os.path.join(BENCH_DIR, "clients")
RESULTS_DIR = os.path.join(BENCH_DIR, "results")
#: Where scenario E's real pages are: ../shared/corpus/pages beside the repository.
CORPUS_DIR = os.path.normpath(os.path.join(BENCH_DIR, "..", "..", "shared", "corpus", "pages"))
#: The client every other is a ratio of.
BASELINE = "niofetcher"
