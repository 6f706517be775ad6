"""The kit's layering, checked: applications -> checker, testing -> connectors -> txn, never back.

Layers (an importer's layer must be >= the imported module's layer):

0. ``txn`` (the engine-agnostic core);
1. the connectors (``connectors.*`` except the two below) and ``minikafka`` (the broker,
   which imports neither ``txn`` nor ``connectors``);
2. tools over the connectors: the exactly-once checker ``connectors.verify`` and the
   testing helpers ``txn.testing``, ``connectors.testing``;
3. applications: ``txn.demo``, ``connectors.demo`` (with its harness ``connectors.demo.app``),
   ``connectors.ops`` (the CLI).

Connectors never import ``minikafka``: they talk to any Kafka through a bootstrap address.
The Kafka client layer (``connectors.kafka._client``) is imported through its ``__init__``
(the stated interface), never its modules, by everything outside it.
No two modules of the kit import each other, around any loop, at module level or inside a
function (a local import only hides a circle until run time).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("txn", "connectors", "minikafka")


def layer(module: str) -> int:
    parts = module.split(".")
    if parts[0] == "minikafka":
        return 1
    if len(parts) > 1 and parts[1] in ("demo", "ops"):
        return 3
    if len(parts) > 1 and parts[1] in ("testing", "verify"):
        return 2
    return 0 if parts[0] == "txn" else 1


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                found.append(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                found.append(node.module)
    return [name for name in found if name.split(".")[0] in PACKAGES]


def all_modules() -> list[tuple[str, Path]]:
    return sorted((module_name(p), p) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize(("module", "path"), all_modules(), ids=lambda v: str(v))
def test_no_module_imports_upward(module: str, path: Path) -> None:
    for imported in imports_of(path, module):
        assert layer(imported) <= layer(module), (
            f"{module} (layer {layer(module)}) imports {imported} (layer {layer(imported)})"
        )
        if imported.startswith("minikafka"):
            assert module.startswith("minikafka") or layer(module) >= 2, (
                f"{module} imports the embedded broker; connectors reach Kafka by address only"
            )
        if module.startswith("minikafka"):
            assert imported.startswith("minikafka"), f"minikafka imports {imported}"


@pytest.mark.parametrize(
    "package",
    [
        "txn",
        "connectors.stage",
        "connectors.kafka",
        "connectors.async_io",
        "connectors.examples.sqlite",
    ],
)
def test_importing_a_connector_loads_no_testing_module(package: str) -> None:
    code = (
        f"import sys, {package}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('txn', 'connectors', "
        "'minikafka') and ('testing' in m.split('.') or m.split('.')[-1] == 'demo' "
        "or m.startswith('minikafka')))\n"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.stdout.strip() == "", f"import {package} loaded {out.stdout.strip()}"


# -- no import circle ---------------------------------------------------------------------
TYPE_CHECKING_TESTS = {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def import_edges(module: str, source: str, package: str, modules: frozenset[str]) -> set[str]:
    """The kit's modules that ``module`` (in ``package``) imports, module level or in a function.

    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``;
    ``import a.b.c`` to ``a.b.c`` (the nearest module of the name). The ``__init__`` of the
    packages around an imported module is no edge of its own: a package's modules import
    each other through it all the time, and its own imports are its edges. Imports under
    ``if TYPE_CHECKING:`` never run, so they are no edge (annotations only).
    """
    tree = ast.parse(source)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in TYPE_CHECKING_TESTS
        for inner in ast.walk(node)
    }
    named: list[str] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            named += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            named += [f"{base}.{a.name}" for a in node.names]
    edges = set()
    for name in named:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            edges.add(name)
    return edges


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other, directly or around a loop (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle_among_the_kit_s_modules() -> None:
    """A local import that hides a circle counts: it only moves the circle to run time."""
    found = dict(all_modules())
    modules = frozenset(found)
    graph = {
        m: import_edges(
            m, path.read_text(), m if path.name == "__init__.py" else m.rpartition(".")[0], modules
        )
        for m, path in found.items()
    }
    assert sum(len(e) for e in graph.values()) > 500, "the walk found few imports: it broke"
    circles = import_circles(graph)
    assert not circles, "modules that import each other (a circle):\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


def test_the_circle_check_sees_a_circle_hidden_in_a_function() -> None:
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    modules = frozenset({"pkg", "pkg._cli", "pkg._x", "pkg._y"})
    source = (
        "from pkg import _y\nfrom . import _cli as c\n\ndef f():\n    from pkg._cli import main\n"
    )
    assert import_edges("pkg._x", source, "pkg", modules) == {"pkg._cli", "pkg._y"}
    assert import_edges("pkg", "from pkg._x import thing\nimport pkg\n", "pkg", modules) == {
        "pkg._x"
    }


# -- the Kafka client layer: one package, imported through its interface -------------------
CLIENT_LAYER = "connectors.kafka._client"


def test_the_kafka_client_layer_is_imported_through_its_interface_only() -> None:
    """Outside ``connectors.kafka._client`` the kit imports the package, never its modules.

    The package's ``__init__`` lists the interface and states its contract; what is not
    there (a module's helpers and constants) may change without telling ops, verify, the
    demo, the sink or the source.
    """
    found = dict(all_modules())
    modules = frozenset(found)
    assert any(m.startswith(CLIENT_LAYER + "._") for m in modules), "the client layer moved"
    offenders = [
        f"{m} imports {edge}"
        for m, path in found.items()
        if m != CLIENT_LAYER and not m.startswith(CLIENT_LAYER + ".")
        for edge in sorted(
            import_edges(
                m,
                path.read_text(),
                m if path.name == "__init__.py" else m.rpartition(".")[0],
                modules,
            )
        )
        if edge.startswith(CLIENT_LAYER + ".")
    ]
    assert not offenders, (
        f"import {CLIENT_LAYER} (its __init__ is the interface), not its modules:\n"
        + "\n".join(offenders)
    )


def test_the_client_layer_check_sees_a_module_import() -> None:
    modules = frozenset({CLIENT_LAYER, CLIENT_LAYER + "._clients", "connectors.ops._x"})
    through_package = f"from {CLIENT_LAYER} import _clients\n"
    direct = f"from {CLIENT_LAYER}._clients import Cluster\n"
    interface = f"from {CLIENT_LAYER} import Cluster\n"
    for source in (through_package, direct):
        assert import_edges("connectors.ops._x", source, "connectors.ops", modules) == {
            CLIENT_LAYER + "._clients"
        }
    assert import_edges("connectors.ops._x", interface, "connectors.ops", modules) == {CLIENT_LAYER}
