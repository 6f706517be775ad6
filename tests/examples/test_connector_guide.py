"""docs/writing-a-db-connector.md cannot drift from the example it walks through.

* every ``<!-- excerpt PATH NAME -->`` is followed by a code block equal to the region
  ``# --8<-- [start:NAME]`` .. ``# --8<-- [end:NAME]`` of PATH (run with
  ``UPDATE_GUIDE_EXCERPTS=1`` to rewrite the blocks from the sources), and every region of
  the example is excerpted;
* every repository path the guide names exists, every ``python`` block compiles, and what
  the guide's blocks import from the kit exists;
* the guide says what ``__post_init__`` must call and that SQLite refuses aligned mode.

The guide's ``<!-- run -->`` blocks run through Spark in
integration_tests/examples/test_sqlite_sink_spark.py.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "writing-a-db-connector.md"
EXAMPLE_SOURCES = [
    *sorted((ROOT / "connectors" / "examples" / "sqlite").glob("*.py")),
    ROOT / "tests" / "examples" / "test_sqlite_crash_matrix.py",
]
_EXCERPT = re.compile(r"<!-- excerpt (\S+) (\S+) -->\n```python\n(.*?)```\n", re.S)
_REGION = "# --8<-- [{}:{}]\n"


def region(path: Path, name: str) -> str:
    text = path.read_text()
    start, end = _REGION.format("start", name), _REGION.format("end", name)
    assert text.count(start) == 1 and text.count(end) == 1, f"{path}: region {name!r}"
    return text.split(start, 1)[1].split(end, 1)[0]


def regions(path: Path) -> set[str]:
    return set(re.findall(r"^# --8<-- \[start:(\S+)\]$", path.read_text(), re.M))


def test_excerpts_equal_the_shipped_code() -> None:
    text = GUIDE.read_text()
    found = _EXCERPT.findall(text)
    assert found, "the guide has no excerpt of the example"
    if os.environ.get("UPDATE_GUIDE_EXCERPTS"):

        def fill(m: re.Match[str]) -> str:
            body = region(ROOT / m.group(1), m.group(2))
            return f"<!-- excerpt {m.group(1)} {m.group(2)} -->\n```python\n{body}```\n"

        GUIDE.write_text(_EXCERPT.sub(fill, text))
        found = _EXCERPT.findall(GUIDE.read_text())
    for path, name, body in found:
        assert body == region(ROOT / path, name), (
            f"the guide's excerpt {path} [{name}] differs from the code; rerun this test with "
            "UPDATE_GUIDE_EXCERPTS=1 to copy the code into the guide"
        )
    excerpted = {(path, name) for path, name, _ in found}
    for source in EXAMPLE_SOURCES:
        rel = str(source.relative_to(ROOT))
        for name in regions(source):
            assert (rel, name) in excerpted, f"region {name!r} of {rel} is in no excerpt"


def test_named_paths_exist() -> None:
    paths = set(
        re.findall(
            r"`((?:connectors|txn|tests|integration_tests|docs)/[\w/.-]+)`", GUIDE.read_text()
        )
    )
    assert paths
    missing = sorted(p for p in paths if not (ROOT / p.split("::")[0]).exists())
    assert not missing, f"the guide names paths that do not exist: {missing}"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_python_blocks_compile_and_import_what_exists(index: int) -> None:
    code = python_blocks()[index]
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] not in ("txn", "connectors"):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"


def test_the_guide_states_the_traps_of_issue_17() -> None:
    text = GUIDE.read_text()
    assert "super().__post_init__()" in text
    assert "SqliteCode.ALIGNED_MODE" in text and "database is locked" in text
    assert "from txn.testing import" in text and "run_crash_case" in text
    assert "tests/txn/harness.py" not in text  # not in the installed package
