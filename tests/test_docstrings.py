"""Every public name has a docstring.

Public means: a module of ``niofetcher/`` whose dotted name has no part
starting with ``_`` (``__init__`` is its package), and in it every class and
function whose name does not start with ``_``, with the public methods and
properties of those classes (a setter or an ``@overload`` shares its
property's or function's docstring).  Read with ``ast``, not by importing:
a dataclass or a NamedTuple without a docstring gets a generated one, which
would pass.  Every name in ``niofetcher.__all__`` is held to the same rule
wherever it is defined, a private module included.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

import niofetcher

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "niofetcher"
MODULES = sorted(PACKAGE.rglob("*.py"))

_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _module_parts(path: Path) -> tuple[str, ...]:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def _is_public_module(path: Path) -> bool:
    return not any(part.startswith("_") for part in _module_parts(path))


def _definitions(body: list[ast.stmt]) -> Iterator[_Definition]:
    """The classes and functions a body defines, those under an ``if`` or a ``try`` included."""
    for node in body:
        if isinstance(node, _Definition):
            yield node
        elif isinstance(node, ast.If):
            yield from _definitions(node.body)
            yield from _definitions(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(handler.body for handler in node.handlers), node.orelse, node.finalbody):
                yield from _definitions(block)


def _shares_a_docstring(node: _Definition) -> bool:
    """A property's setter or deleter, or an ``@overload``: documented where the name is."""
    for decorator in getattr(node, "decorator_list", []):
        if isinstance(decorator, ast.Attribute) and decorator.attr in ("setter", "deleter"):
            return True
        if (isinstance(decorator, ast.Name) and decorator.id == "overload") or (
            isinstance(decorator, ast.Attribute) and decorator.attr == "overload"
        ):
            return True
    return False


def _undocumented(body: list[ast.stmt], prefix: str = "") -> Iterator[str]:
    """The qualified names of the public definitions in ``body`` without a docstring, members included."""
    for node in _definitions(body):
        if node.name.startswith("_") or _shares_a_docstring(node):
            continue
        name = f"{prefix}{node.name}"
        if ast.get_docstring(node) is None:
            yield name
        if isinstance(node, ast.ClassDef):
            yield from _undocumented(node.body, f"{name}.")


def undocumented(path: Path) -> list[str]:
    """What in the module at ``path`` lacks a docstring: ``<module>`` itself, then qualified names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    missing = [] if ast.get_docstring(tree) is not None else ["<module>"]
    return missing + list(_undocumented(tree.body))


def test_the_checker_finds_what_is_missing(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        '"""A module."""\n'
        "class Done:\n"
        '    """Documented."""\n'
        "    def method(self): ...\n"
        "    @property\n"
        "    def value(self): ...\n"
        "    @value.setter\n"
        "    def value(self, v): ...\n"
        "    def _private(self): ...\n"
        "    def __repr__(self): ...\n"
        "def function(): ...\n"
        "def _helper(): ...\n"
        "try:\n"
        "    def fallback(): ...\n"
        "except ImportError:\n"
        "    pass\n"
        "class _Private:\n"
        "    def method(self): ...\n",
        encoding="utf-8",
    )
    assert undocumented(source) == ["Done.method", "Done.value", "function", "fallback"]


@pytest.mark.parametrize(
    "path", [path for path in MODULES if _is_public_module(path)], ids=lambda path: str(path.relative_to(ROOT))
)
def test_public_module_is_documented(path: Path) -> None:
    missing = undocumented(path)
    assert not missing, f"{path.relative_to(ROOT)}: no docstring for " + ", ".join(missing)


def _exported() -> list[str]:
    return [
        name for name in niofetcher.__all__
        if inspect.isclass(getattr(niofetcher, name)) or inspect.isfunction(getattr(niofetcher, name))
    ]


def test_every_exported_class_and_function_is_checked() -> None:
    # __version__ is the only value in __all__ that is no class or function, and has no docstring to have.
    assert set(niofetcher.__all__) - set(_exported()) == {"__version__"}


@pytest.mark.parametrize("name", _exported())
def test_exported_name_is_documented(name: str) -> None:
    obj = getattr(niofetcher, name)
    source = inspect.getsourcefile(obj)
    assert source is not None
    qualname = obj.__qualname__
    missing = [m for m in undocumented(Path(source)) if m == qualname or m.startswith(f"{qualname}.")]
    assert not missing, f"niofetcher.{name} ({Path(source).relative_to(ROOT)}): no docstring for " + ", ".join(missing)
