"""The coordinator follows docs/architecture.md's numbered steps, comment for comment.

docs/architecture.md is the one place of the protocol: each step of
``Coordinator.run_epoch`` and ``Coordinator.recover`` there starts with a bold label
(``1. **Load the history.**``), and the method marks where it does that step with a
``# Step N (label)`` comment (``# Steps 7 (label) and 8 (label)`` for two). The comments of
each method must name every step of its list once, in order, with the same labels; a
helper's docstring that says it is "Step N of :meth:`run_epoch`" must name a step that
exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
CODE = ROOT / "txn" / "_coordinator.py"
# Method of Coordinator -> the heading of its steps in docs/architecture.md.
SECTIONS = {
    "run_epoch": "### Driver side: `Coordinator.run_epoch(",
    "recover": "### Driver side: `Coordinator.recover()`",
}

_DOC_STEP = re.compile(r"^(\d+)\. \*\*(.+?)\*\*")
_COMMENT = re.compile(r"#\s*Steps? (\d.*)$")
_NUMBERED = re.compile(r"(\d+) \(([^)]*)\)")
_HELPER = re.compile(r"Step (\d+) of :meth:`(\w+)`")


def _label(text: str) -> str:
    return text.strip().rstrip(".:").lower()


def doc_steps(heading: str) -> list[tuple[int, str]]:
    """(number, label) of each numbered step under ``heading`` (to the next heading)."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    steps = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        m = _DOC_STEP.match(line)
        if m:
            steps.append((int(m.group(1)), _label(m.group(2))))
    return steps


def _method(name: str) -> ast.FunctionDef:
    tree = ast.parse(CODE.read_text())
    coordinator = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Coordinator"
    )
    return next(n for n in coordinator.body if isinstance(n, ast.FunctionDef) and n.name == name)


def code_steps(name: str) -> list[tuple[int, str]]:
    """(number, label) of each ``# Step N (label)`` comment in method ``name``, in order."""
    node = _method(name)
    lines = CODE.read_text().splitlines()[node.lineno - 1 : node.end_lineno]
    steps = []
    for line in lines:
        m = _COMMENT.search(line)
        if m:
            found = _NUMBERED.findall(m.group(1))
            assert found, f"{name}: a step comment without '(label)': {line.strip()}"
            steps += [(int(n), _label(label)) for n, label in found]
    return steps


@pytest.mark.parametrize("method", sorted(SECTIONS))
def test_the_docs_number_the_steps_from_one(method: str) -> None:
    numbers = [n for n, _ in doc_steps(SECTIONS[method])]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 3, numbers


@pytest.mark.parametrize("method", sorted(SECTIONS))
def test_step_comments_match_the_docs(method: str) -> None:
    assert code_steps(method) == doc_steps(SECTIONS[method])


def test_helpers_cite_steps_that_exist() -> None:
    cited = _HELPER.findall(CODE.read_text())
    assert cited, "no helper cites a step: the check proves nothing"
    for number, method in cited:
        numbers = [n for n, _ in doc_steps(SECTIONS[method])]
        assert int(number) in numbers, f"Step {number} of {method}: the docs have {numbers}"


def test_a_drifted_comment_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check itself: the labels of today's recover() before this test existed (2, 2, 1, 3).
    drifted = CODE.read_text().replace("# Step 1 (commit-in-task)", "# Step 2 (commit-in-task)")
    copy = tmp_path / "_coordinator.py"
    copy.write_text(drifted)
    monkeypatch.setattr(f"{__name__}.CODE", copy)
    assert code_steps("recover") != doc_steps(SECTIONS["recover"])
