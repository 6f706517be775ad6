"""References beyond the markdown that must not drift: code comments and docstrings,
pyproject.toml, the Makefile, .ci/run and docker/, checked with the rules of tests/test_docs.py.

1. In the comments and docstrings of every ``.py`` file under ``txn/``, ``connectors/``,
   ``minikafka/``, ``benchmarks/``, ``tests/`` and ``integration_tests/``: every repository
   path exists (a pattern such as ``benchmarks/results/<name>.json`` matches a file, or is
   generated), every dotted name of the kit resolves (or is a logger name the code uses),
   and every "section N" of a doc named in its sentence (``docs/architecture.md, section 9``)
   and every ``kafka-sink.md, "Options"`` points at a heading.
2. In pyproject.toml (comments and values): every path exists, every name of the kit
   resolves, and so does every entry point (``module:function``) and ``attr`` value; the
   paths and patterns its settings hold (readme, package discovery and data, test paths,
   mypy's files, ruff's per-file globs) match something.
3. In the Makefile: every path exists (after its variables are expanded) or is generated,
   every prerequisite exists or is a target, every module run with ``-m`` imports, every
   target a ``.PHONY`` line declares has a rule and every rule that makes no file is
   declared ``.PHONY``.
4. In the other configuration (``.ci/run``, ``.pre-commit-config.yaml``, ``docker/``): every
   path exists.
5. In the comments and the configuration, a bare file name of the repository's kinds
   (``_prepare.py``, ``kafka-sink.md``) exists somewhere in the tree. There and in the docs:
   a hidden path (``.ci/run``) exists, every ``make <target>`` in backticks or in a shell
   command names a rule of the Makefile, every pytest node id (``tests/<file>.py::test_y``)
   names a test, and every dotted name of the tests and benchmarks
   (``integration_tests.support.kafka_cluster``) resolves, read from the files, not imported.

Generated paths (test_docs.GENERATED: the venvs, caches, benchmark results) are not looked
for; each is named somewhere and git-ignored.

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
from typing import Any

import pytest

from tests.test_docs import (
    _TITLED,
    GENERATED,
    ROOT,
    Line,
    _doc_path,
    _exists,
    _has_title,
    all_lines,
    dotted_names,
    headings,
    is_generated,
    logger_names,
    repo_paths,
    resolve,
    sections_in,
    tree,
)

SOURCES = ("txn", "connectors", "minikafka", "benchmarks", "tests", "integration_tests")
# Configuration read line by line (comments and values), beside pyproject.toml and the Makefile.
CONFIGS = (".ci/run", ".pre-commit-config.yaml", "docker/*.yml", "docker/*.sh", "docker/secure/*")
# Hidden file names the code names that are not the repository's (each with whose it is).
EXTERNAL_HIDDEN = {".pyiceberg.yaml": "pyiceberg's own configuration file, in the user's home"}


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
            out += source_blocks(file.read_text(), file.relative_to(ROOT).as_posix())
    return tuple(out)


def source_blocks(source: str, path: str) -> list[Block]:
    """The comment runs and docstrings of one Python source."""
    return [*_comment_runs(source, path), *_docstrings(source, path)]


def _lines(block: Block) -> Iterator[Line]:
    for number, text in block.lines:
        yield Line(block.path, number, text, False, "")


def comment_lines() -> list[Line]:
    return [line for block in blocks() for line in _lines(block)]


def config_lines(name: str, text: str | None = None) -> list[Line]:
    """The lines of a configuration file of the repository (pyproject.toml, Makefile)."""
    text = (ROOT / name).read_text() if text is None else text
    return [Line(name, n, line, False, "") for n, line in enumerate(text.splitlines(), 1)]


def other_config_lines() -> list[Line]:
    files = sorted({p for pattern in CONFIGS for p in ROOT.glob(pattern) if p.is_file()})
    return [line for file in files for line in config_lines(file.relative_to(ROOT).as_posix())]


_BARE_NAME = re.compile(r"(?<![\w./~<>{$-])([\w-]+(?:\.[\w-]+)*\.(?:py|md))\b(?!/)")
_HIDDEN = re.compile(r"(?<![\w./~<>{$-])(\.[A-Za-z][\w-]*(?:\.[A-Za-z]+)?(?:/[\w./*<>{}-]*)?)")
_CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".cfg", ".ini")


def hidden_paths(line: Line) -> Iterator[str]:
    """Hidden paths of the repository a line names (``.ci/run``, ``.pre-commit-config.yaml``).

    A dot word that is neither a path nor a configuration file's name (``.option``, ``.png``)
    is not one; generated paths (``.venv/bin/ruff``) are not looked for.
    """
    for m in _HIDDEN.finditer(line.text):
        token = m.group(1).rstrip(".,:;")
        if ("/" in token or token.endswith(_CONFIG_SUFFIXES)) and not is_generated(token):
            if token not in EXTERNAL_HIDDEN:
                yield token


def bare_names(line: Line) -> Iterator[str]:
    """File names of the repository's kinds (``_prepare.py``, ``kafka-sink.md``) without a path."""
    for m in _BARE_NAME.finditer(line.text):
        yield m.group(1)


@cache
def _file_names() -> frozenset[str]:
    return frozenset(path.rsplit("/", 1)[-1] for path in tree())


def missing_hidden_paths(lines: Iterator[Line] | list[Line]) -> list[str]:
    return [
        f"{line.doc}:{line.number}: {path}"
        for line in lines
        for path in hidden_paths(line)
        if not (ROOT / path.rstrip("/")).exists()
    ]


def missing_paths(lines: Iterator[Line] | list[Line]) -> list[str]:
    """Repository paths, hidden paths and bare file names the lines name that do not exist."""
    out = []
    for line in lines:
        out += [f"{line.doc}:{line.number}: {p}" for p in repo_paths(line) if not _exists(p)]
        out += missing_hidden_paths([line])
        out += [
            f"{line.doc}:{line.number}: {name} (no such file)"
            for name in bare_names(line)
            if name not in _file_names()
        ]
    return out


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


def pyproject_paths(config: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(setting, path or glob) of every setting of pyproject.toml that names files."""
    project, tool = config["project"], config["tool"]
    yield "project.readme", project["readme"]
    for name in project.get("license-files", []):
        yield "project.license-files", name
    for pattern in tool["setuptools"]["packages"]["find"]["include"]:
        yield "tool.setuptools.packages.find.include", f"{pattern}/__init__.py"
    for files in tool["setuptools"].get("package-data", {}).values():
        for name in files:
            yield "tool.setuptools.package-data", f"*/{name}"
    for name in tool["pytest"]["ini_options"]["testpaths"]:
        yield "tool.pytest.ini_options.testpaths", name
    for name in tool["mypy"]["files"]:
        yield "tool.mypy.files", name
    for pattern in tool["ruff"]["lint"].get("per-file-ignores", {}):
        yield "tool.ruff.lint.per-file-ignores", pattern


def test_every_path_a_pyproject_setting_holds_matches_something() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's; this runs on 3.10")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    settings = list(pyproject_paths(config))
    assert len(settings) > 8, f"only {settings}: the reader broke"
    missing = [f"{key}: {path}" for key, path in settings if not list(ROOT.glob(path))]
    assert not missing, "pyproject.toml settings that match nothing:\n" + "\n".join(missing)


# -- 3. the Makefile --------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """One rule line of a Makefile, its targets and prerequisites with variables expanded."""

    line: Line
    targets: tuple[str, ...]
    prerequisites: tuple[str, ...]


_ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)\s*(?::=|\?=|\+=|=)\s*(.*)$")
_RULE = re.compile(r"^([\w./$()%-]+(?:\s+[\w./$()%-]+)*)\s*:(?![=:])(.*)$")
_REFERENCE = re.compile(r"(?<!\$)\$\(([^()$]*)\)")  # innermost $(...), not the shell's $$(...)


def makefile_variables(lines: list[Line]) -> dict[str, str]:
    return {
        m.group(1): m.group(2).strip()
        for line in lines
        if not line.text.startswith("\t") and (m := _ASSIGNMENT.match(line.text))
    }


def expand(text: str, variables: dict[str, str]) -> str:
    """``text`` with the Makefile's ``$(NAME)``, ``$(abspath X)``, ``$(NAME:%=X/%)`` expanded."""

    def one(m: re.Match[str]) -> str:
        inside = m.group(1)
        if inside.startswith("abspath "):
            return inside.removeprefix("abspath ")
        name, _, substitution = inside.partition(":")
        if name not in variables:
            return f"\0{inside}\1"  # not a variable (make's $@, $*): left as it is
        words = variables[name].split()
        if "%=" in substitution:
            old, new = substitution.split("=", 1)
            words = [new.replace("%", w) for w in words if old == "%"] or words
        return " ".join(words)

    for _ in range(10):
        text, before = _REFERENCE.sub(one, text), text
        if text == before:
            break
    return text.replace("\0", "$(").replace("\1", ")")


def makefile_rules(lines: list[Line]) -> list[Rule]:
    variables = makefile_variables(lines)
    return [
        Rule(
            line,
            tuple(expand(m.group(1), variables).split()),
            tuple(expand(m.group(2), variables).split()),
        )
        for line in lines
        if not line.text.startswith("\t") and (m := _RULE.match(line.text))
    ]


def makefile_targets(lines: list[Line] | None = None) -> tuple[set[str], set[str]]:
    """(targets .PHONY declares, targets that have a rule) of the Makefile."""
    rules = makefile_rules(config_lines("Makefile") if lines is None else lines)
    declared = {t for rule in rules if rule.targets == (".PHONY",) for t in rule.prerequisites}
    ruled = {t for rule in rules if rule.targets != (".PHONY",) for t in rule.targets}
    return declared, ruled


def makefile_failures(lines: list[Line]) -> list[str]:
    """What a Makefile names that does not exist: paths, prerequisites, modules, targets."""
    expanded = [
        Line(x.doc, x.number, expand(x.text, makefile_variables(lines)), False, "") for x in lines
    ]
    failures = missing_paths(expanded) + unresolved_names(expanded)
    declared, ruled = makefile_targets(lines)
    made = [re.escape(t).replace("%", "[^/]+") for t in ruled]
    for rule in makefile_rules(lines):
        where = f"{rule.line.doc}:{rule.line.number}"
        for need in rule.prerequisites if rule.targets != (".PHONY",) else ():
            if not (need in declared or any(re.fullmatch(t, need) for t in made) or _exists(need)):
                failures.append(f"{where}: prerequisite {need} (no file, no rule makes it)")
        for target in rule.targets:
            if not re.search(r"[./%$]", target) and target not in declared:
                failures.append(f"{where}: {target} makes no file and is not .PHONY")
    failures += [f"Makefile: .PHONY {t} (no rule)" for t in sorted(declared - ruled)]
    failures += [
        f"{line.doc}:{line.number}: -m {module} (no such module)"
        for line in expanded
        for module in re.findall(r"python3?\s+(?:-W\s+\S+\s+)?-m\s+([\w.]+)", line.text)
        if importlib.util.find_spec(module) is None
    ]
    return failures


def test_every_path_target_and_module_in_the_makefile_exists() -> None:
    declared, ruled = makefile_targets()
    assert {"demo", "test", "test-fast"} <= declared & ruled, "the rule parser broke"
    failures = makefile_failures(config_lines("Makefile"))
    assert not failures, "the Makefile names what does not exist:\n" + "\n".join(failures)


# -- 4. other configuration -------------------------------------------------------------------
def test_every_path_in_ci_pre_commit_and_docker_files_exists() -> None:
    lines = other_config_lines()
    assert {line.doc for line in lines} >= {".ci/run", "docker/docker-compose.yml"}
    failures = missing_paths(lines) + unresolved_names(lines)
    assert not failures, "configuration names what does not exist:\n" + "\n".join(failures)


# -- 5. make targets and pytest node ids, everywhere ------------------------------------------
_MAKE = re.compile(r"`make ([^`]+)`")
_MAKE_COMMAND = re.compile(r"^\s*make\s+(.+)$")
_NODE_ID = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.py)::(\w+)(?:::(\w+))?")
# Dotted names of the project's own test and benchmark code (``benchmarks.bench_sink``,
# ``integration_tests.support.kafka_cluster.KafkaCluster``), resolved without importing them.
_PROJECT_NAME = re.compile(
    r"(?<![\w./-])((?:benchmarks|integration_tests|tests)(?:\.[A-Za-z_]\w*)+)(?![\w/<{-])"
)


def every_line() -> list[Line]:
    """The docs, the comments and docstrings, and the configuration, line by line."""
    configs = [*config_lines("pyproject.toml"), *config_lines("Makefile"), *other_config_lines()]
    return [*all_lines(), *comment_lines(), *configs]


def make_targets(line: Line) -> Iterator[str]:
    """Targets of a ``make`` command: in backticks, or a shell line (``.ci/run``, a doc's fence)."""
    shell = line.fenced or line.doc == ".ci/run"
    commands = [m.group(1) for m in _MAKE.finditer(line.text)]
    if shell and (m := _MAKE_COMMAND.match(line.text)):
        commands.append(m.group(1))
    for command in commands:
        for word in command.split():
            if not re.fullmatch(r"[a-z][\w-]*", word):
                break  # a redirection, a comment, ``&``: the command's targets ended
            yield word


def node_ids(line: Line) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(test file, names) of every pytest node id (``tests/<file>.py::TestY::test_z``).

    The file may be a bare name or a path within a test directory (``test_fencing.py``).
    """
    for m in _NODE_ID.finditer(line.text):
        if not is_generated(m.group(1)):
            yield m.group(1), tuple(n for n in m.groups()[1:] if n)


def _defined(path: str) -> dict[str, list[ast.stmt]]:
    """The names a module's top level (or a class's body) binds, each with its body."""
    return _bound(tuple(ast.parse((ROOT / path).read_text()).body))


def _bound(body: tuple[ast.stmt, ...] | list[ast.stmt]) -> dict[str, list[ast.stmt]]:
    out: dict[str, list[ast.stmt]] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node.body
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update((t.id, []) for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(((a.asname or a.name).split(".")[0], []) for a in node.names)
    return out


def _defines(path: str, names: tuple[str, ...]) -> bool:
    """Whether the file defines ``names`` (``TestY``, ``test_z``: a class and its method)."""
    bound = _defined(path)
    for name in names:
        if name not in bound:
            return False
        bound = _bound(bound[name])
    return True


def _test_files(path: str) -> list[str]:
    """The files a node id's path names: from the root, else every file ending so (docs name
    ``test_fencing.py`` in their package's table, or ``kafka_python_smoke/...``)."""
    return [p for p in tree() if p == path or p.endswith(f"/{path}")]


def project_name_failure(name: str) -> str | None:
    """Why a dotted name of the project's test or benchmark code does not resolve, or None."""
    parts = name.split(".")
    if parts[-1] in {"py", "md", "json", "png", "toml"}:
        return None  # a file name, not a dotted name
    for cut in range(len(parts), 0, -1):
        base = "/".join(parts[:cut])
        module = f"{base}/__init__.py" if (ROOT / base).is_dir() else f"{base}.py"
        if (ROOT / module).is_file():
            rest = tuple(parts[cut:])
            return None if _defines(module, rest) else f"{module} defines no {'.'.join(rest)}"
    return "no such module"


def test_every_hidden_path_in_the_docs_exists() -> None:
    """The docs' other paths and file names: tests/test_docs.py."""
    missing = missing_hidden_paths(all_lines())
    assert not missing, "hidden paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_every_make_target_named_has_a_rule() -> None:
    _, ruled = makefile_targets()
    named = [(line, t) for line in every_line() for t in make_targets(line)]
    assert len(named) > 30, f"only {len(named)} make targets found: the reader broke"
    missing = [f"{line.doc}:{line.number}: make {t}" for line, t in named if t not in ruled]
    assert not missing, "make targets named that the Makefile has no rule for:\n" + "\n".join(
        missing
    )


def test_every_node_id_names_a_test() -> None:
    ids = [(line, path, names) for line in every_line() for path, names in node_ids(line)]
    assert len(ids) > 20, f"only {len(ids)} node ids found: the reader broke"
    missing = [
        f"{line.doc}:{line.number}: {path}::{'::'.join(names)}"
        for line, path, names in ids
        if not any(_defines(file, names) for file in _test_files(path))
    ]
    assert not missing, "pytest node ids naming no test:\n" + "\n".join(missing)


def test_every_dotted_name_of_the_tests_and_benchmarks_resolves() -> None:
    named = [(line, m.group(1)) for line in every_line() for m in _PROJECT_NAME.finditer(line.text)]
    assert len(named) > 50, f"only {len(named)} names found: the reader broke"
    failures = [
        f"{line.doc}:{line.number}: {name} ({why})"
        for line, name in named
        if (why := project_name_failure(name)) is not None
    ]
    assert not failures, "names of tests and benchmarks that do not exist:\n" + "\n".join(failures)


# -- the generated paths ----------------------------------------------------------------------
@pytest.mark.parametrize("prefix", sorted(GENERATED))
def test_every_generated_path_is_named_and_git_ignored(prefix: str) -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert {prefix, f"/{prefix}"} & set(ignored), f".gitignore does not ignore {prefix}"
    named = any(
        prefix.rstrip("/") in line.text for line in every_line() if line.doc != "tests/test_docs.py"
    )
    assert named, f"nothing names {prefix}: drop it from test_docs.GENERATED"


# -- the checks themselves --------------------------------------------------------------------
def test_the_code_checks_see_what_they_check() -> None:
    """Guards against a reader that silently finds nothing (then every check would pass)."""
    lines = comment_lines()
    paths = [p for line in lines for p in repo_paths(line)]
    names = [n for line in lines for n in dotted_names(line)]
    assert len(blocks()) > 2000 and len(paths) > 100 and len(names) > 300
    assert "docs/architecture.md" in paths and "connectors.stage" in names
    assert len([n for line in lines for n in bare_names(line)]) > 20
    assert ".ci/run" in {p for line in every_line() for p in hidden_paths(line)}
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


# A module whose comments and docstrings name what is gone, and what is there; code (the
# string literal, the attribute) names nothing the check reads.
STALE_SOURCE = '''"""Reads docs/architecture.md; see docs/gone.md, section 2."""

PATH = "connectors/kafka/_gone.py"  # not prose: not checked


def f() -> None:
    """Calls connectors.kafka._gone_module.call and connectors.stage.TransactionalSink."""
    # the old home was connectors/kafka/_config.py (_prepare.py, then _vanished.py); the
    # new one is connectors/kafka/_sink/_config.py, built by `make test-nothing`
'''


def test_the_checks_find_stale_references_in_a_synthetic_module() -> None:
    lines = [line for block in source_blocks(STALE_SOURCE, "m.py") for line in _lines(block)]
    assert sorted(missing_paths(lines)) == [
        "m.py:1: docs/gone.md",
        "m.py:8: _vanished.py (no such file)",
        "m.py:8: connectors/kafka/_config.py",
    ]
    assert unresolved_names(lines) == [
        "m.py:7: connectors.kafka._gone_module.call (connectors.kafka has no _gone_module.call)"
    ]
    assert [t for line in lines for t in make_targets(line)] == ["test-nothing"]


STALE_MAKEFILE = """VENV := .venv
STAMP := $(VENV)/.installed
.PHONY: test layering
# runs tests/test_docs.py and tests/test_gone.py
$(STAMP): pyproject.toml setup.cfg
\tpython -m pip install -e .
test: $(STAMP) $(VENV)/.other
\tpython -m tests.nowhere
"""


def test_the_makefile_checks_find_stale_references_in_a_synthetic_makefile() -> None:
    lines = config_lines("Makefile", STALE_MAKEFILE)
    assert makefile_targets(lines) == ({"test", "layering"}, {".venv/.installed", "test"})
    assert sorted(makefile_failures(lines)) == [
        "Makefile: .PHONY layering (no rule)",
        "Makefile:4: tests/test_gone.py",
        "Makefile:5: prerequisite setup.cfg (no file, no rule makes it)",
        "Makefile:7: prerequisite .venv/.other (no file, no rule makes it)",
        "Makefile:8: -m tests.nowhere (no such module)",
    ]


def test_makefile_variables_expand_as_make_expands_them() -> None:
    variables = {"VENV": ".venv", "PY": "$(VENV)/bin/python", "V": "3.5 4.0", "D": ".c"}
    assert expand("$(abspath $(PY)) -m x", variables) == ".venv/bin/python -m x"
    assert expand("$(V:%=$(D)/%/.i)", variables) == ".c/3.5/.i .c/4.0/.i"
    assert expand("echo $$(date) $@ $(UNKNOWN)", variables) == "echo $$(date) $@ $(UNKNOWN)"
