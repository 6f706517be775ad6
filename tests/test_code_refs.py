"""References beyond the markdown that must not drift: code comments and docstrings,
pyproject.toml and the Makefile, checked with the rules of tests/test_docs.py.

1. In the comments and docstrings of every ``.py`` file under ``txn/``, ``connectors/``,
   ``minikafka/``, ``benchmarks/``, ``tests/`` and ``integration_tests/``: every repository
   path exists (a pattern such as ``benchmarks/results/<name>.json`` matches a file, or is
   generated), every dotted name of the kit resolves (or is a logger name the code uses),
   and every "section N" of a doc named in its sentence (``docs/architecture.md, section 9``)
   and every ``kafka-sink.md, "Options"`` points at a heading.
2. In pyproject.toml (comments and values): every path exists, every name of the kit
   resolves, and so does every entry point (``module:function``) and ``attr`` value.
3. In the Makefile: every path exists, every module run with ``-m`` imports, and every
   target a ``.PHONY`` line declares has a rule.

Each failure names the file, the line and the missing thing.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import pytest

from tests.test_docs import (
    _TITLED,
    ROOT,
    Line,
    _doc_path,
    _exists,
    _has_title,
    dotted_names,
    headings,
    logger_names,
    repo_paths,
    resolve,
    sections_in,
)

SOURCES = ("txn", "connectors", "minikafka", "benchmarks", "tests", "integration_tests")


@dataclass(frozen=True)
class Block:
    """Prose of a source file: a docstring, or a run of comment lines (one line each)."""

    path: str
    lines: tuple[tuple[int, str], ...]  # (line number, text)

    @property
    def text(self) -> str:
        return "\n".join(text for _, text in self.lines)

    def line_at(self, offset: int) -> int:
        return self.lines[self.text[:offset].count("\n")][0]


def _comment_runs(source: str, path: str) -> Iterator[Block]:
    run: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        if run and tok.start[0] != run[-1][0] + 1:
            yield Block(path, tuple(run))
            run = []
        run.append((tok.start[0], tok.string.lstrip("#").strip()))
    if run:
        yield Block(path, tuple(run))


def _docstrings(source: str, path: str) -> Iterator[Block]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(ast.parse(source, path)):
        if not isinstance(node, kinds) or not node.body:
            continue
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            doc = first.value
            if isinstance(doc.value, str):
                lines = doc.value.splitlines()
                yield Block(path, tuple((doc.lineno + i, text) for i, text in enumerate(lines)))


@cache
def blocks() -> tuple[Block, ...]:
    """Every docstring and comment run of the checked source files."""
    out: list[Block] = []
    for top in SOURCES:
        for file in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" in file.parts:
                continue
            source, rel = file.read_text(), file.relative_to(ROOT).as_posix()
            out += [*_comment_runs(source, rel), *_docstrings(source, rel)]
    return tuple(out)


def _lines(block: Block) -> Iterator[Line]:
    for number, text in block.lines:
        yield Line(block.path, number, text, False, "")


def config_lines(name: str) -> list[Line]:
    """The lines of a configuration file of the repository (pyproject.toml, Makefile)."""
    text = (ROOT / name).read_text()
    return [Line(name, n, line, False, "") for n, line in enumerate(text.splitlines(), 1)]


def missing_paths(lines: Iterator[Line] | list[Line]) -> list[str]:
    return [
        f"{line.doc}:{line.number}: {path}"
        for line in lines
        for path in repo_paths(line)
        if not _exists(path)
    ]


def unresolved_names(lines: Iterator[Line] | list[Line]) -> list[str]:
    failures = []
    for line in lines:
        for name in dotted_names(line):
            if name not in logger_names() and (why := resolve(name)) is not None:
                failures.append(f"{line.doc}:{line.number}: {name} ({why})")
    return failures


# -- 1. code comments and docstrings -------------------------------------------------------
def test_every_repository_path_in_code_comments_exists() -> None:
    missing = missing_paths(line for block in blocks() for line in _lines(block))
    assert not missing, "paths named in comments and docstrings that do not exist:\n" + "\n".join(
        missing
    )


def test_every_dotted_name_of_the_kit_in_code_comments_resolves() -> None:
    failures = unresolved_names(line for block in blocks() for line in _lines(block))
    assert not failures, "names of the kit in comments and docstrings that do not exist:\n" + (
        "\n".join(failures)
    )


def test_every_doc_section_and_heading_cited_in_code_exists() -> None:
    failures = []
    for block in blocks():
        text = block.text
        for at, target, number in sections_in(text, None):
            if not (ROOT / target).exists():
                failures.append(f"{block.path}:{block.line_at(at)}: {target}: no such doc")
            elif not any(h.number == number for h in headings(target)):
                failures.append(
                    f"{block.path}:{block.line_at(at)}: no section {number} in {target}"
                )
        for m in _TITLED.finditer(text):
            target = _doc_path(m.group(1), block.path)
            if not (ROOT / target).exists() or not _has_title(target, m.group(2)):
                where = f"{block.path}:{block.line_at(m.start())}"
                failures.append(f'{where}: {target} has no heading "{m.group(2)}"')
    assert not failures, "doc sections cited in code that do not exist:\n" + "\n".join(failures)


# -- 2. pyproject.toml ------------------------------------------------------------------------
def test_every_path_and_name_in_pyproject_exists() -> None:
    lines = config_lines("pyproject.toml")
    failures = missing_paths(lines) + unresolved_names(lines)
    for line in lines:  # entry points ("module:function") and attr = "module.name"
        for module, attr in re.findall(
            r"\"((?:txn|connectors|minikafka)[\w.]*):(\w+)\"", line.text
        ):
            if (why := resolve(f"{module}.{attr}")) is not None:
                failures.append(f"{line.doc}:{line.number}: {module}:{attr} ({why})")
    assert not failures, "pyproject.toml names what does not exist:\n" + "\n".join(failures)


# -- 3. the Makefile --------------------------------------------------------------------------
def makefile_targets() -> tuple[set[str], set[str]]:
    """(targets .PHONY declares, targets that have a rule) of the Makefile."""
    declared: set[str] = set()
    ruled: set[str] = set()
    for line in config_lines("Makefile"):
        if line.text.startswith(".PHONY:"):
            declared.update(line.text.split(":", 1)[1].split())
        elif m := re.match(r"^([\w./$()%-]+(?:\s+[\w./$()%-]+)*)\s*:(?![=:])", line.text):
            ruled.update(m.group(1).split())
    return declared, ruled


def test_every_phony_target_of_the_makefile_has_a_rule() -> None:
    declared, ruled = makefile_targets()
    assert {"demo", "test", "test-fast"} <= declared, "the .PHONY parser broke"
    missing = sorted(declared - ruled)
    assert not missing, f"Makefile: .PHONY declares targets without a rule: {missing}"


def test_every_path_and_module_in_the_makefile_exists() -> None:
    lines = config_lines("Makefile")
    failures = missing_paths(lines) + unresolved_names(lines)
    modules = [
        (line, m)
        for line in lines
        for m in re.findall(r"(?:PY\)|py|python3?)\s+-m\s+([\w.]+)", line.text)
    ]
    assert len(modules) >= 3, "the -m parser broke"
    failures += [
        f"{line.doc}:{line.number}: -m {module} (no such module)"
        for line, module in modules
        if importlib.util.find_spec(module) is None
    ]
    assert not failures, "the Makefile names what does not exist:\n" + "\n".join(failures)


def test_the_code_checks_see_what_they_check() -> None:
    """Guards against a reader that silently finds nothing (then every check would pass)."""
    lines = [line for block in blocks() for line in _lines(block)]
    paths = [p for line in lines for p in repo_paths(line)]
    names = [n for line in lines for n in dotted_names(line)]
    assert len(blocks()) > 2000 and len(paths) > 100 and len(names) > 300
    assert "docs/architecture.md" in paths and "connectors.stage" in names
    sections = [s for block in blocks() for s in sections_in(block.text, None)]
    assert ("docs/architecture.md", "2") in {(t, n) for _, t, n in sections}


@pytest.mark.parametrize(
    ("token", "exists"),
    [
        ("docs/kafka-sink.md", True),
        ("docs/*.md", True),
        ("connectors/<package>/_config.py", True),
        ("connectors/kafka/_config.py", False),
        ("docs/{name}.md", True),
        ("nowhere/*.py", False),
    ],
)
def test_a_path_pattern_must_match_something(token: str, exists: bool) -> None:
    assert _exists(token) is exists


def test_comment_runs_and_docstrings_are_read_with_their_line_numbers() -> None:
    source = (
        '"""Module doc: docs/a.md."""\n\nx = 1  # one\n# two\n\n# three\ndef f():\n    """F."""\n'
    )
    runs = list(_comment_runs(source, "m.py"))
    assert [b.lines for b in runs] == [((3, "one"), (4, "two")), ((6, "three"),)]
    docs = list(_docstrings(source, "m.py"))
    assert [b.lines for b in docs] == [((1, "Module doc: docs/a.md."),), ((8, "F."),)]
    assert runs[0].line_at(runs[0].text.index("two")) == 4


def test_the_makefile_parser_reads_rules_but_not_assignments() -> None:
    declared, ruled = makefile_targets()
    assert "test" in ruled and "PYTHON" not in ruled and "LINT_PATHS" not in ruled
    assert "$(STAMP)" in ruled
