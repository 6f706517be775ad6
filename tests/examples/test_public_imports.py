"""Every example a user copies imports only public modules (issue 35).

An example is a module of ``connectors/examples`` (a connector to copy) or a Python block
of the docs. A private module (a ``_name`` part, e.g. ``connectors.stage._retry``) is free
to change in any release, so an example may import one only from its own package (the
SQLite example's ``connectors.examples.sqlite._config``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "connectors" / "examples"
DOCS = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md"])
KIT = ("txn", "connectors", "minikafka")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def private(module: str, own: str = "") -> bool:
    """Whether ``module`` is a private module of the kit outside the package ``own``."""
    parts = module.split(".")
    if parts[0] not in KIT or (own and (module == own or module.startswith(own + "."))):
        return False
    return any(p.startswith("_") for p in parts)


def imported(source: str, package: str = "") -> list[str]:
    """Every module ``source`` imports (relative imports resolved against ``package``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            found.append(base)
    return found


@pytest.mark.parametrize(
    "path", sorted(EXAMPLES.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_an_example_connector_imports_only_public_modules(path: Path) -> None:
    rel = path.relative_to(ROOT).with_suffix("").parts
    own = ".".join(rel[:3]) if len(rel) > 3 else ".".join(rel[:-1])  # its example package
    package = ".".join(rel[:-1])
    bad = [m for m in imported(path.read_text(), package) if private(m, own)]
    assert not bad, f"{path.relative_to(ROOT)} imports private modules {bad}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_a_doc_example_imports_only_public_modules(doc: Path) -> None:
    bad = []
    for block in _BLOCK.findall(doc.read_text()):
        try:
            modules = imported(block)
        except SyntaxError:  # an excerpt with "..." holes: read its import lines alone
            lines = [ln for ln in block.splitlines() if ln.startswith(("import ", "from "))]
            modules = imported("\n".join(lines))
        bad += [m for m in modules if private(m)]
    assert not bad, f"{doc.name}: an example imports private modules {bad}"


def test_the_check_finds_a_private_import() -> None:
    assert private("connectors.stage._retry")
    assert not private("connectors.examples.sqlite._config", "connectors.examples.sqlite")
    assert imported("from ._config import X", "connectors.examples.sqlite") == [
        "connectors.examples.sqlite._config"
    ]
    assert not private("connectors.stage") and not private("json._x")
