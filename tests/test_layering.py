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
