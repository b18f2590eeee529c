"""The seams inside the fetcher: what crosses between NIOFetcher, the engine and the connections.

* ``fetcher.py`` reaches the engine only through its face (read from the source
  with ``ast``), so the loop's internals can change without the caller knowing;
* nothing below the engine imports it (``Task`` lives in ``request.py``), so the
  connection <-> engine <-> pool circle cannot come back, not even for types;
* an exchange ends in an immutable ``Response``, and the engine's phase only moves
  forward, so a late ``finish_up`` cannot undo a ``stop``.
"""

from __future__ import annotations

import ast

import pytest
from test_http11 import Pair
from test_layers import PACKAGE, imports_of

from niofetcher import FetcherConfig
from niofetcher.engine import Engine, Phase
from niofetcher.http11 import Response

# What NIOFetcher may touch on its engine: the face, and the loop-thread calls it posts.
FACE = {
    "run", "close_unstarted", "failure", "submit", "pending", "wake", "post", "stats", "host_stats",
    "finish_up", "stop", "cancel_pending", "set_host_delay", "set_host_gates",
    "cookie_jar",  # made once, never rebound, and a jar locks itself: any thread may read it
}


def engine_attributes(tree: ast.AST) -> set[str]:
    """Every ``X.attr`` where X is ``self._engine`` or a local name bound to it."""
    aliases = {
        target.id
        for node in ast.walk(tree) if isinstance(node, ast.Assign) and ast.unparse(node.value) == "self._engine"
        for target in node.targets if isinstance(target, ast.Name)
    }
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and (ast.unparse(node.value) == "self._engine" or (isinstance(node.value, ast.Name) and node.value.id in aliases))
    }


def test_the_fetcher_uses_only_the_engine_face() -> None:
    used = engine_attributes(ast.parse((PACKAGE / "fetcher.py").read_text()))
    assert "submit" in used and "stats" in used, used  # the walk finds what it should
    assert used <= FACE, f"fetcher.py reaches past the engine's face: {sorted(used - FACE)}"
    missing = {name for name in FACE if not hasattr(Engine, name) and name not in ("failure", "wake", "cookie_jar")}
    assert not missing, missing


def test_nothing_below_the_engine_imports_it() -> None:
    offenders = [
        f"{path.name}:{line}: imports {name}"
        for path in sorted(PACKAGE.glob("*.py")) if path.name not in ("engine.py", "fetcher.py", "__init__.py")
        for line, name in imports_of(path) if name == "niofetcher.engine"
    ]
    assert not offenders, offenders


def test__an_exchange_ends_in_an_immutable_response() -> None:
    pair = Pair()
    pair.request()
    assert pair.client.head() is None and pair.client.response is None
    assert pair.client.receive(pair.respond(200, [("Content-Length", "2"), ("X-A", "1")], b"ok", b"Fine")) is True
    response = pair.client.response
    assert isinstance(response, Response)
    assert (response.status, response.reason, response.body) == (200, "Fine", b"ok")
    assert ("X-A", "1") in response.headers
    assert pair.client.head() == Response(200, "Fine", response.headers, b"")
    with pytest.raises(AttributeError):
        response.status = 500  # type: ignore[misc]


def phase_of(engine: Engine) -> Phase:
    """The phase, read afresh (an assert on ``engine.phase`` narrows its type for the lines after)."""
    return engine.phase


def test_the_phase_only_moves_forward() -> None:
    engine = Engine(FetcherConfig(), lambda results: None, lambda: 0, lambda: None)
    try:
        assert engine.phase is Phase.RUNNING and engine.failure is None
        engine.wake()
        engine.finish_up()
        assert phase_of(engine) is Phase.DRAINING
        engine.stop()
        engine.finish_up()  # a shutdown(wait=True) posted after another thread's stop
        assert phase_of(engine) is Phase.CANCELLING
    finally:
        engine.close_unstarted()
    assert phase_of(engine) is Phase.STOPPED
    assert repr(engine) == "<Engine STOPPED [in flight: 0 | pending: 0 | connections: 0]>"
