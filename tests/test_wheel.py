"""What ships is the product: the wheel, built for real, holds the kit and no test infrastructure.

The wheel is built (``pip wheel --no-deps --no-build-isolation``) from a copy of the
sources, so a stale ``build/`` directory of the checkout cannot add or hide a module. Its
modules must be exactly the ``.py`` files of ``txn``, ``connectors`` and ``minikafka``; the
testing modules in it exactly the documented ones users may import (docs/testing.md); none
of the suite's own infrastructure (``integration_tests/support``: Spark clusters, Connect
servers, the soak run); and no shipped module may import the tests, the suite's support
or the benchmarks.
"""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("txn", "connectors", "minikafka")
# Seconds for the wheel build (about 3 s on an idle machine; the test machine is shared).
BUILD_TIMEOUT_S = 300
# The public testing modules users may import for their own tests (docs/testing.md); the
# private modules (``_name``) of these packages ship with them.
USER_TESTING_MODULES = {
    "txn.testing",
    "connectors.testing",
    "connectors.testing.containers",
    "connectors.testing.faults",
    "connectors.testing.postgres",
    "connectors.testing.verify",  # the alias of connectors.verify
}
# The suite's own infrastructure (integration_tests/support), by module name: never shipped.
SUITE_INFRASTRUCTURE = {"spark_cluster", "spark_connect", "_cluster_status", "soak"}
# Top-level packages of the checkout that are not the product.
NOT_SHIPPED = {"tests", "integration_tests", "benchmarks"}


def module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(
            ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert build.returncode == 0, f"the wheel build failed:\n{build.stdout}\n{build.stderr}"
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def shipped(wheel: Path) -> dict[str, str]:
    """Module name -> source of every Python module in the wheel."""
    with zipfile.ZipFile(wheel) as zf:
        return {module_name(n): zf.read(n).decode() for n in zf.namelist() if n.endswith(".py")}


def test_the_wheel_holds_exactly_the_kits_packages(shipped: dict[str, str]) -> None:
    in_tree = {
        module_name(p.relative_to(ROOT).as_posix())
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
    }
    assert set(shipped) == in_tree
    assert {name.split(".")[0] for name in shipped} == set(PACKAGES)


def test_the_wheel_holds_no_suite_infrastructure(shipped: dict[str, str]) -> None:
    infrastructure = sorted(
        name
        for name in shipped
        if name.split(".")[-1] in SUITE_INFRASTRUCTURE or name.split(".")[0] in NOT_SHIPPED
    )
    assert infrastructure == []


def test_the_testing_modules_shipped_are_the_documented_ones(shipped: dict[str, str]) -> None:
    testing = {name for name in shipped if "testing" in name.split(".")}
    public = {name for name in testing if not name.split(".")[-1].startswith("_")}
    assert public == USER_TESTING_MODULES
    for name in testing - public:  # private helpers live inside a documented package
        assert name.rpartition(".")[0] in USER_TESTING_MODULES, name


def test_no_shipped_module_imports_the_tests(shipped: dict[str, str]) -> None:
    offenders = []
    for name, source in shipped.items():
        for node in ast.walk(ast.parse(source, name)):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported = [node.module]
            else:
                continue
            offenders += [f"{name} imports {m}" for m in imported if m.split(".")[0] in NOT_SHIPPED]
    assert offenders == []


def test_the_console_scripts_point_into_the_wheel(wheel: Path, shipped: dict[str, str]) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (entry_file,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
        entry_points = configparser.ConfigParser()
        entry_points.read_string(zf.read(entry_file).decode())
    scripts = dict(entry_points["console_scripts"])
    assert set(scripts) == {"eos", "eos-demo", "minikafka"}
    for target in scripts.values():
        assert target.partition(":")[0] in shipped, target
