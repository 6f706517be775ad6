"""The kit's public surface stays small: few exception classes, few exported names, and
wide records built by keyword.

The two counts use the method of the issue that set the limits: import every module of
``txn``, ``connectors`` and ``minikafka``; count the exception classes each defines, and the
names of every ``__all__`` list (a private module needs none; a small one is counted). The
import circles are checked by tests/test_layering.py.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("txn", "connectors", "minikafka")
MAX_EXCEPTION_CLASSES = 50
MAX_EXPORTED_NAMES = 250
# A record of more fields than this is built by keyword only (``kw_only=True``).
MAX_POSITIONAL_FIELDS = 3


def module_paths() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts).removesuffix(".__init__"), path


def modules() -> Iterator[ModuleType]:
    for name, _ in module_paths():
        yield importlib.import_module(name)


def exception_classes() -> list[str]:
    found = []
    for module in modules():
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found.append(f"{module.__name__}.{name}")
    return found


def exported_names() -> dict[str, int]:
    return {m.__name__: len(m.__all__) for m in modules() if getattr(m, "__all__", None)}


def test_at_most_fifty_exception_classes() -> None:
    found = exception_classes()
    assert len(found) <= MAX_EXCEPTION_CLASSES, "\n".join(found)


def test_at_most_250_exported_names() -> None:
    counts = exported_names()
    listing = "\n".join(f"{n:4} {m}" for m, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    assert sum(counts.values()) <= MAX_EXPORTED_NAMES, listing


def test_every_exported_name_exists() -> None:
    missing = [
        f"{m.__name__}.{n}"
        for m in modules()
        for n in getattr(m, "__all__", ())
        if not hasattr(m, n)
    ]
    assert not missing


def test_no_error_class_has_two_concrete_parents_or_a_reduce() -> None:
    """One error shape: each class has one parent and pickles by the default protocol."""
    bad = []
    for module in modules():
        for obj in vars(module).values():
            if not (
                isinstance(obj, type)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                continue
            if len(obj.__bases__) > 1 or "__reduce__" in vars(obj):
                bad.append(f"{module.__name__}.{obj.__name__}{obj.__bases__}")
    assert not bad


def _is_dataclass_decorator(node: ast.expr) -> bool:
    func = node.func if isinstance(node, ast.Call) else node
    return getattr(func, "id", getattr(func, "attr", None)) == "dataclass"


def _keyword_only(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and any(
        k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in node.keywords
    )


def positional_records(source: str) -> list[tuple[str, int]]:
    """Return (name, field count) of each dataclass with more than three fields not kw_only."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        decorators = [d for d in node.decorator_list if _is_dataclass_decorator(d)]
        if not decorators or any(_keyword_only(d) for d in decorators):
            continue
        fields = [
            s
            for s in node.body
            if isinstance(s, ast.AnnAssign)
            and isinstance(s.target, ast.Name)
            and "ClassVar" not in ast.unparse(s.annotation)
        ]
        if len(fields) > MAX_POSITIONAL_FIELDS:
            found.append((node.name, len(fields)))
    return found


def test_records_of_more_than_three_fields_are_keyword_only() -> None:
    wide = [
        f"{name}.{record} ({count} fields)"
        for name, path in module_paths()
        for record, count in positional_records(path.read_text())
    ]
    assert not wide, "add kw_only=True to:\n" + "\n".join(wide)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "@dataclass(frozen=True)\nclass A:\n    a: int\n    b: int\n    c: int\n    d: int\n",
            [("A", 4)],
        ),
        (
            "@dataclass(frozen=True, kw_only=True)\nclass A:\n    a: int\n    b: int\n    c: int\n    d: int\n",
            [],
        ),
        ("@dataclass\nclass A:\n    a: int\n    b: int\n    c: int\n", []),
        (
            "@dataclasses.dataclass\nclass A:\n    a: int\n    b: int\n    c: int\n    x: ClassVar[int]\n",
            [],
        ),
    ],
)
def test_the_record_check_sees_a_positional_record(
    source: str, expected: list[tuple[str, int]]
) -> None:
    assert positional_records(source) == expected
