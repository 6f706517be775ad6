"""The suite's markers and options: every declared marker used, undeclared ones refused.

The long runs are chosen with an option (the root conftest), not by a marker expression:
``--fuzz`` (the fuzz run of minikafka), ``--model-long`` (the model-based test's long run).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
TEST_DIRS = ("tests", "integration_tests")
# Seconds a pytest run in a subprocess may take (collection imports Spark's Python side).
PYTEST_RUN_TIMEOUT_S = 120.0
FUZZ_TEST = "integration_tests/minikafka_broker/test_fuzz.py::test_fuzz_long"
MODEL_LONG_TEST = "integration_tests/model/test_ordinary_use.py::test_ordinary_use_long"


def declared_markers() -> set[str]:
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    lines = ini["tool"]["pytest"]["ini_options"]["markers"]
    return {re.split(r"[:(]", line, maxsplit=1)[0].strip() for line in lines}


def used_markers() -> set[str]:
    used: set[str] = set()
    for directory in TEST_DIRS:
        for path in (ROOT / directory).rglob("*.py"):
            used.update(re.findall(r"pytest\.mark\.(\w+)", path.read_text(encoding="utf-8")))
    return used


def run_pytest(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=PYTEST_RUN_TIMEOUT_S,
        check=False,
    )


def test_every_declared_marker_is_used_by_a_test() -> None:
    declared = declared_markers()
    assert {"spark", "fuzz", "cluster", "connect", "e2e", "model_long"} <= declared
    assert declared - used_markers() == set()


def test_strict_markers_is_on(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getoption("strict_markers") is True


def test_an_undeclared_marker_is_refused(tmp_path: Path) -> None:
    (tmp_path / "test_undeclared.py").write_text(
        "import pytest\n\n@pytest.mark.no_such_marker\ndef test_x():\n    pass\n",
        encoding="utf-8",
    )
    result = run_pytest(
        "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path), cwd=tmp_path
    )
    assert result.returncode != 0, result.stdout
    assert "'no_such_marker' not found in `markers` configuration option" in result.stdout


def test_the_long_fuzz_run_runs_with_the_option() -> None:
    result = run_pytest(FUZZ_TEST, "-q", "--fuzz", MINIKAFKA_FUZZ_SECONDS="3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_long_runs_are_skipped_without_their_options() -> None:
    # One pytest run for both (its collection imports Spark's Python side): the fuzz run is
    # one test, the model run one per kind; each skip names the option that selects it.
    result = run_pytest(FUZZ_TEST, MODEL_LONG_TEST, "-q", "-rs")
    assert result.returncode == 0, result.stdout + result.stderr
    skipped = re.search(r"\b(\d+) skipped", result.stdout)
    assert skipped and int(skipped.group(1)) >= 2, result.stdout  # the fuzz run and a kind
    assert "passed" not in result.stdout
    fuzz = [line for line in result.stdout.splitlines() if "test_fuzz.py" in line]
    model = [line for line in result.stdout.splitlines() if "test_ordinary_use.py" in line]
    assert len(fuzz) == 1 and "select it with --fuzz" in fuzz[0], result.stdout
    assert model and all("select it with --model-long" in line for line in model), result.stdout


def test_make_selects_the_long_runs_by_option_not_by_marker_expression() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "model_long" not in makefile
    assert "-m fuzz" not in makefile
    model_long = subprocess.run(
        ["make", "-n", "model-long"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PYTEST_RUN_TIMEOUT_S,
        check=True,
    )
    assert f"--model-long {MODEL_LONG_TEST}" in model_long.stdout
