"""Docs that must not drift from the code, checked on docs/*.md, README.md and docker/README.md
(not CHANGELOG.md and benchmarks/HISTORY.md: history, which may name what is gone).

1. every repository path (``connectors/stage/_sink.py``, ``docs/kafka-sink.md``) exists (a
   pattern, ``docs/*.md``, matches something); a bare module file in backticks
   (``_state.py``) exists in the package its section is about (the heading names it:
   ``(`txn/`)``, ``(`connectors.stage`)``), or anywhere in the tree;
2. every dotted name of the kit (``txn.EpochPlan``, ``connectors.stage.StageOptions.mode``,
   ``minikafka.EmbeddedKafka``) imports, or is a logger name the code uses; ``from
   connectors.kafka import KafkaSink, SinkConfig`` imports both names;
3. every "section N" points at a numbered heading of the doc it names (the last doc named
   earlier in the same sentence, else the doc itself), every ``kafka-sink.md, "Options"``
   at a heading of that doc (or a paragraph's bold lead, ``**Empty epochs.**``), every
   relative link at a file and anchor;
4. every option of every sink and operator config appears in its doc's options table;
5. every exported error class has its troubleshooting entry, and every error class the
   troubleshooting page names exists in the package its section (or row) names;
6. every option of the demo's and the ``eos`` command line is in its doc's section.

Generated paths (:data:`GENERATED`: ``benchmarks/results/``, the venvs) need not exist. Each
failure names the doc, the line and the missing thing.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from txn import ErrorCode

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docker" / "README.md"]
KIT = ("txn", "connectors", "minikafka")
# Paths that builds and runs create, never in a clean clone (each with what makes it): a
# path under one is not looked for. tests/test_code_refs.py checks each is named and ignored.
GENERATED = {
    "benchmarks/results/": "the benchmarks write their JSON and plots there (make bench)",
    ".venv/": "make venv's virtualenv (the Makefile's VENV), its stamps and class archive",
    ".venv-compat/": "make test-compat's virtualenv per Spark line (the Makefile's COMPAT_DIR)",
    ".pytest_cache/": "pytest's cache (make clean removes it)",
    ".mypy_cache/": "mypy's cache (make clean removes it)",
    ".ruff_cache/": "ruff's cache (make clean removes it)",
    "docker/secrets/": "the secured broker's throwaway keys, made by docker/README.md's steps",
}
_SKIP_DIRS = {"__pycache__", "build", "dist"}


# -- reading the docs ------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    """One line of a doc: where it is, its text, whether it is inside a code fence."""

    doc: str
    number: int
    text: str
    fenced: bool
    heading: str  # the heading line this line belongs to ("" before the first)


@cache
def doc_lines(path: Path) -> tuple[Line, ...]:
    rel = path.relative_to(ROOT).as_posix()
    out, fenced, heading = [], False, ""
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.lstrip().startswith("```"):
            fenced = not fenced
            out.append(Line(rel, number, text, True, heading))
            continue
        if not fenced and text.startswith("#"):
            heading = text
        out.append(Line(rel, number, text, fenced, heading))
    return tuple(out)


def all_lines() -> Iterator[Line]:
    for path in DOCS:
        yield from doc_lines(path)


@dataclass(frozen=True)
class Heading:
    level: int
    text: str  # without the hashes
    line: int

    @property
    def number(self) -> str | None:
        m = re.match(r"(\d+(?:\.\d+)*)\.?\s", self.text)
        return m.group(1) if m else None

    @property
    def title(self) -> str:
        return re.sub(r"^\d+(?:\.\d+)*\.?\s+", "", self.text)


@cache
def headings(doc: str) -> tuple[Heading, ...]:
    out = []
    for line in doc_lines(ROOT / doc):
        m = re.match(r"(#+)\s+(.*)", line.text)
        if m and not line.fenced:
            out.append(Heading(len(m.group(1)), m.group(2).strip(), line.number))
    return tuple(out)


def paragraphs(doc: str) -> Iterator[tuple[int, str]]:
    """Blocks of prose (first line number, text with newlines); each table row is one."""
    block: list[Line] = []
    for line in (*doc_lines(ROOT / doc), None):
        ends = line is None or line.fenced or not line.text.strip() or line.text.startswith("|")
        if ends and block:
            yield block[0].number, "\n".join(x.text for x in block)
            block = []
        if line is not None and not line.fenced and line.text.startswith("|"):
            yield line.number, line.text
        elif line is not None and not ends:
            block.append(line)


# -- 1. repository paths -----------------------------------------------------------------
@cache
def _top_dirs() -> list[str]:
    return sorted(
        p.name
        for p in ROOT.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and p.name not in _SKIP_DIRS
        and not p.name.endswith(".egg-info")
    )


@cache
def tree() -> frozenset[str]:
    """Every file and directory of the repository's top directories, relative, POSIX."""
    out: set[str] = set()
    for top in _top_dirs():
        for path in (ROOT / top).rglob("*"):
            if not _SKIP_DIRS.intersection(path.parts):
                out.add(path.relative_to(ROOT).as_posix())
        out.add(top)
    out.update(p.name for p in ROOT.iterdir() if p.is_file())
    return frozenset(out)


def _expand(token: str) -> list[str]:
    """``a.{json,png}`` -> ``a.json``, ``a.png``."""
    m = re.search(r"\{([^{}]*,[^{}]*)\}", token)
    if not m:
        return [token]
    return [
        x
        for part in m.group(1).split(",")
        for x in _expand(token[: m.start()] + part + token[m.end() :])
    ]


def repo_paths(line: Line) -> Iterator[str]:
    tops = "|".join(re.escape(t) for t in _top_dirs())
    pattern = rf"(?<![\w./~<>{{-])((?:{tops})/[\w./{{}},*<>-]*)"
    text = re.sub(r"\]\([^)]*\)", "]", line.text)  # links: relative to the doc
    for m in re.finditer(pattern, text):
        token = m.group(1).rstrip(".,:;")
        if is_generated(token):
            continue
        yield from _expand(token)


def is_generated(path: str) -> bool:
    """Whether ``path`` is a build or run output (:data:`GENERATED`), not the repository's."""
    return any(f"{path.rstrip('/')}/".startswith(prefix) for prefix in GENERATED)


def _exists(path: str) -> bool:
    """Whether ``path`` is in the tree; a pattern (``*``, ``<name>``, ``{name}``) must match."""
    path = path.rstrip("/")
    if not re.search(r"[*<{]", path):
        return path in tree()
    parts = re.split(r"(\*|<[^<>/]*>|\{[^{}/]*\})", path)
    pattern = "".join(re.escape(p) if i % 2 == 0 else "[^/]*" for i, p in enumerate(parts))
    return any(re.fullmatch(pattern, p) for p in tree())


def test_every_repository_path_in_the_docs_exists() -> None:
    missing = [
        f"{line.doc}:{line.number}: {path}"
        for line in all_lines()
        for path in repo_paths(line)
        if not _exists(path)
    ]
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


_BARE = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|md|png)|_[\w]+/)`")


def _section_package(heading: str) -> str | None:
    """The package a heading is about, if it names one in backticks: ``(`txn/`)``."""
    for token in re.findall(r"`([\w./]+)`", heading):
        path = str(token).strip("/").replace(".", "/")
        if (ROOT / path / "__init__.py").exists():
            return path
    return None


def test_every_bare_file_name_exists_where_its_section_says() -> None:
    missing = []
    for path in DOCS:
        title = next((line.text for line in doc_lines(path) if line.text.startswith("# ")), "")
        for line in doc_lines(path):
            if line.fenced:
                continue
            for m in _BARE.finditer(line.text):
                token = m.group(1)
                if token.split("/")[0] in _top_dirs() or token in tree():
                    continue  # a repository path: checked above
                package = _section_package(line.heading) or _section_package(title)
                if package is not None:
                    if not _exists(f"{package}/{token}"):
                        missing.append(f"{line.doc}:{line.number}: {token} (not in {package}/)")
                elif not any(p.endswith("/" + token.rstrip("/")) for p in tree()):
                    missing.append(f"{line.doc}:{line.number}: {token} (no such file)")
    assert not missing, "file names in the docs that do not exist:\n" + "\n".join(missing)


# -- 2. dotted names of the kit ------------------------------------------------------------
@cache
def logger_names() -> frozenset[str]:
    names = set()
    for top in KIT:
        for path in (ROOT / top).rglob("*.py"):
            text = path.read_text()  # getLogger("a.b"), or LOGGER_NAME = "a.b" passed to it
            names.update(re.findall(r"(?:getLogger\(\s*|LOGGER\w*\s*=\s*)\"([\w.]+)\"", text))
    return frozenset(names)


def resolve(name: str) -> str | None:
    """Return why ``name`` (``pkg.mod.Attr.attr``) does not resolve, or None if it does."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj: object = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module_name.startswith(exc.name):
                return f"importing {module_name} fails: {exc}"
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:cut])} has no {'.'.join(parts[cut:])}"
            obj = getattr(obj, attr)
        return None
    return "no such module"


_DOTTED = re.compile(r"(?<![\w./-])((?:txn|connectors|minikafka)(?:\.[A-Za-z_]\w*)+)(?![\w/-])")
_FROM_IMPORT = re.compile(r"^\s*from\s+((?:txn|connectors|minikafka)[\w.]*)\s+import\s+([\w, ]+)$")
_EXTENSIONS = {"py", "md", "png", "json", "toml"}


def dotted_names(line: Line) -> Iterator[str]:
    text = line.text
    for m in _DOTTED.finditer(text):
        name = m.group(1)
        if name.rsplit(".", 1)[1] not in _EXTENSIONS:
            yield name
    imports = _FROM_IMPORT.match(text)
    if imports:
        for attr in imports.group(2).split(","):
            if attr.strip():
                yield f"{imports.group(1)}.{attr.strip()}"


def test_every_dotted_name_of_the_kit_in_the_docs_resolves() -> None:
    failures = []
    for line in all_lines():
        for name in dotted_names(line):
            if name in logger_names():
                continue
            why = resolve(name)
            if why is not None:
                failures.append(f"{line.doc}:{line.number}: {name} ({why})")
    assert not failures, "names of the kit in the docs that do not exist:\n" + "\n".join(failures)


# -- 3. references to sections and headings ------------------------------------------------
_SECTION = re.compile(r"\bsections?\s+(\d+(?:\.\d+)*(?:\s*(?:-|–|,|and)\s*\d+(?:\.\d+)*)*)")
# A doc by name (``kafka-sink.md``, ``docs/kafka-sink.md``) or by path (``benchmarks/HISTORY.md``).
_DOC = re.compile(r"(?<![\w/-])((?:[\w-]+/)*[\w-]+)\.md\b")
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)[.!?]\s+(?=[A-Z(])")


def _numbers(spec: str) -> list[str]:
    out: list[str] = []
    for part in re.split(r"\s*(?:,|and)\s*", spec):
        bounds = re.split(r"\s*[-–]\s*", part.strip())
        if len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit():
            out.extend(str(n) for n in range(int(bounds[0]), int(bounds[1]) + 1))
        elif part.strip():
            out.append(part.strip())
    return out


def _doc_path(name: str, here: str) -> str:
    if name == "README" or "/" in name:
        return f"{name}.md"
    return f"docs/{name}.md" if (ROOT / "docs" / f"{name}.md").exists() else f"{name}.md"


def section_references() -> Iterator[tuple[str, int, str, str]]:
    """(doc, line, target doc, section number) of every "section N" in prose."""
    for path in DOCS:
        doc = path.relative_to(ROOT).as_posix()
        for first, text in paragraphs(doc):
            for at, target, number in sections_in(text, doc):
                yield doc, first + text[:at].count("\n"), target, number


def sections_in(text: str, here: str | None) -> Iterator[tuple[int, str, str]]:
    """(offset, target doc, number) of every "section N" in ``text``.

    The target is the last ``<name>.md`` named earlier in the same sentence, else ``here`` (None:
    a "section N" with no doc named is not a reference to check).
    """
    for m in _SECTION.finditer(text):
        before = text[: m.start()]
        ends = list(_SENTENCE_END.finditer(before))
        named = list(_DOC.finditer(before[ends[-1].end() :] if ends else before))
        target = _doc_path(named[-1].group(1), here or "") if named else here
        if target is not None:
            for number in _numbers(m.group(1)):
                yield m.start(), target, number


def test_every_section_reference_points_at_a_heading() -> None:
    failures = []
    for doc, line, target, number in section_references():
        if not (ROOT / target).exists():
            failures.append(f"{doc}:{line}: section {number} of {target}: no such doc")
        elif not any(h.number == number for h in headings(target)):
            failures.append(
                f"{doc}:{line}: section {number} of {target}: no heading numbered "
                f"{number} (numbered: {[h.number for h in headings(target) if h.number]})"
            )
    assert not failures, "section references without their section:\n" + "\n".join(failures)


_TITLED = re.compile(
    r"(?<![\w/-])((?:[\w-]+/)*[\w-]+)\.md,?\s+(?:sections?\s+[\d.]+,\s+)?\"([^\"]+)\""
)


def _has_title(doc: str, title: str) -> bool:
    """Whether a heading of ``doc``, or a paragraph's bold lead (``**Title.**``), is ``title``."""
    title = " ".join(title.split())
    leads = [m.group(1) for x in doc_lines(ROOT / doc) if (m := re.match(r"\*\*(.+?)\*\*", x.text))]
    for text in [h.title for h in headings(doc)] + [lead.rstrip(".:") for lead in leads]:
        if text == title or (text.startswith(title) and not text[len(title)].isalnum()):
            return True
    return False


def test_every_titled_reference_points_at_a_heading() -> None:
    failures = []
    for path in DOCS:
        doc = path.relative_to(ROOT).as_posix()
        for first, text in paragraphs(doc):
            for m in _TITLED.finditer(text):
                target = _doc_path(m.group(1), doc)
                line = first + text[: m.start()].count("\n")
                if not (ROOT / target).exists() or not _has_title(target, m.group(2)):
                    failures.append(f'{doc}:{line}: {target} has no heading "{m.group(2)}"')
    assert not failures, "references to headings that do not exist:\n" + "\n".join(failures)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.lower())
    return text.replace(" ", "-")


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_points_at_a_file_and_anchor() -> None:
    failures = []
    for line in all_lines():
        if line.fenced:
            continue
        for m in _LINK.finditer(line.text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: outside the repository
            file_part, _, anchor = target.partition("#")
            here = (ROOT / line.doc).parent
            dest = (here / file_part).resolve() if file_part else ROOT / line.doc
            if not dest.exists():
                failures.append(f"{line.doc}:{line.number}: link {target}: no file {file_part}")
            elif anchor and dest.suffix == ".md":
                doc = dest.relative_to(ROOT).as_posix()
                if anchor not in {_slug(h.text) for h in headings(doc)}:
                    failures.append(
                        f"{line.doc}:{line.number}: link {target}: no heading #{anchor} in {doc}"
                    )
    assert not failures, "broken links:\n" + "\n".join(failures)


# -- 4. options tables -------------------------------------------------------------------
def section_lines(doc: str, heading: str) -> tuple[int, list[Line]]:
    """(line of the heading, the lines of its section up to the next heading of its level)."""
    section = [h for h in headings(doc) if heading in (h.text, h.title)]
    assert section, f"{doc} has no heading {heading!r}"
    start = section[0]
    later = [h.line for h in headings(doc) if h.line > start.line and h.level <= start.level]
    end = later[0] if later else 10**9
    return start.line, [x for x in doc_lines(ROOT / doc) if start.line < x.number < end]


def table_options(doc: str, heading: str) -> tuple[int, set[str]]:
    """(line of the heading, names in the first column of the tables of that section)."""
    first_line, lines = section_lines(doc, heading)
    names: set[str] = set()
    for line in lines:
        if not line.fenced and line.text.startswith("|"):
            names.update(re.findall(r"`([^`]+)`", line.text.split("|")[1]))
    return first_line, names


def _fields(path: str) -> list[str]:
    module, _, cls = path.rpartition(".")
    return [f.name for f in dataclasses.fields(getattr(importlib.import_module(module), cls))]


def _source_options() -> list[str]:
    from connectors.kafka._source import _options

    return [*_options.OPTION_NAMES, "kafka.bootstrap.servers", "kafka.isolation.level"]


# config -> (doc, heading of its options table, how to compare names)
OPTION_TABLES = {
    "connectors.kafka.SinkConfig": ("docs/kafka-sink.md", "Options"),
    "connectors.postgres.PostgresSinkConfig": ("docs/postgres-sink.md", "Options"),
    "connectors.examples.sqlite.SqliteSinkConfig": (
        "docs/writing-a-db-connector.md",
        "1. The configuration",
    ),
    "connectors.lakehouse.DeltaSinkConfig": ("docs/delta-sink.md", "Options"),
    "connectors.lakehouse.IcebergSinkConfig": ("docs/iceberg-sink.md", "Options"),
    "connectors.async_io.AsyncConfig": ("docs/async-io.md", "Options"),
    "connectors.async_io.RetryPolicy": ("docs/async-io.md", "Options"),
    "kafka-rc": ("docs/kafka-source.md", "Options"),
}


@pytest.mark.parametrize("config", sorted(OPTION_TABLES))
def test_every_option_is_in_its_options_table(config: str) -> None:
    doc, heading = OPTION_TABLES[config]
    line, names = table_options(doc, heading)
    if config == "kafka-rc":  # spelled as users write them, both ways (kafka.* aside)
        documented = {n for n in names if n != "kafka.*"}
        known = set(_source_options())
        missing = sorted(known - documented)
        assert not documented - known, f"{doc}:{line}: unknown options {documented - known}"
    else:
        missing = [f for f in _fields(config) if f not in names]
    assert not missing, (
        f"{doc}:{line} ({heading}): {config} option(s) {missing} missing from the options table"
    )


def test_the_stage_options_are_in_every_sink_table() -> None:
    from connectors.stage import StageOptions

    stage = {f.name for f in dataclasses.fields(StageOptions)}
    for config in OPTION_TABLES:
        if config != "kafka-rc" and config.rsplit(".", 1)[1].endswith("SinkConfig"):
            assert stage <= set(_fields(config)), f"{config} does not extend StageOptions"


# -- 5. errors ---------------------------------------------------------------------------
@cache
def public_packages() -> list[str]:
    """Every public package of the kit (no ``_`` in its path) with an ``__all__``."""
    out = []
    for top in KIT:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT).parts
            if not any(p.startswith("_") for p in parts):
                name = ".".join(parts)
                if hasattr(importlib.import_module(name), "__all__"):
                    out.append(name)
    return out


def exported_errors() -> list[tuple[str, str]]:
    out = []
    for name in public_packages():
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if isinstance(obj, type) and issubclass(obj, Exception):
                out.append((name, attr))
    return out


TROUBLESHOOTING = ROOT / "docs" / "troubleshooting.md"


def troubleshooting_rows() -> Iterator[tuple[int, str, list[str], list[str]]]:
    """(line, error, modules its row names, modules its heading names) of every table row."""
    for line, first, named, section in _first_cells():
        for error in re.findall(r"`([A-Z]\w*)`", first):
            yield line, error, named, section


def _first_cells() -> Iterator[tuple[int, str, list[str], list[str]]]:
    for line in doc_lines(TROUBLESHOOTING):
        if line.fenced or not line.text.startswith("|") or set(line.text) <= set("|- "):
            continue
        first = line.text.split("|")[1]
        section = re.findall(r"`((?:txn|connectors|minikafka)[\w.]*)`", line.heading)
        named = re.findall(r"`((?:txn|connectors|minikafka)[\w.]*)`", first)
        yield line.number, first, named, section


def troubleshooting_codes() -> Iterator[tuple[int, str, str]]:
    """(line, code class, member) of every ``SomeCode.MEMBER`` a row's first cell names."""
    for line, first, _, _ in _first_cells():
        for code, member in re.findall(r"`([A-Z]\w*Code)\.([A-Z_]+)`", first):
            yield line, code, member


def exported_codes() -> dict[str, type[ErrorCode]]:
    """Every error-code enum a public package exports, by its (unique) name."""
    out: dict[str, type[ErrorCode]] = {}
    for name in public_packages():
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if isinstance(obj, type) and issubclass(obj, ErrorCode) and obj is not ErrorCode:
                assert out.get(attr, obj) is obj, f"two error-code enums named {attr}"
                out[attr] = obj
    return out


@pytest.mark.parametrize(
    ("code", "member"),
    [(name, m.name) for name, cls in exported_codes().items() for m in cls],
)
def test_every_error_code_is_in_troubleshooting(code: str, member: str) -> None:
    assert (code, member) in {(c, m) for _, c, m in troubleshooting_codes()}, (
        f"{code}.{member} has no row in docs/troubleshooting.md"
    )


def test_every_error_code_in_troubleshooting_exists() -> None:
    codes = exported_codes()
    missing = [
        f"docs/troubleshooting.md:{line}: {code}.{member}"
        for line, code, member in troubleshooting_codes()
        if code not in codes or member not in codes[code].__members__
    ]
    assert len(list(troubleshooting_codes())) > 40, "the parser broke"
    assert not missing, "codes in troubleshooting.md that do not exist:\n" + "\n".join(missing)


def _row_modules(named: list[str], section: list[str]) -> list[str]:
    """Where a row's error is defined: the modules the row names, else its section's
    package and that package's public subpackages."""
    return named or [
        p for p in public_packages() if any(p == s or p.startswith(f"{s}.") for s in section)
    ]


def _error_class(module: str, name: str) -> type[Exception] | None:
    obj = getattr(importlib.import_module(module), name, None)
    return obj if isinstance(obj, type) and issubclass(obj, Exception) else None


@cache
def documented_errors() -> frozenset[type[Exception]]:
    """The classes troubleshooting.md's rows name, resolved where each row says."""
    return frozenset(
        cls
        for _, error, named, section in troubleshooting_rows()
        for m in _row_modules(named, section)
        if (cls := _error_class(m, error)) is not None
    )


@pytest.mark.parametrize(("module", "error"), exported_errors())
def test_every_exported_error_is_in_troubleshooting(module: str, error: str) -> None:
    """The class itself, not only its name: two packages' classes of one name would need a row
    each (in their package's section, or a row naming the package)."""
    cls = _error_class(module, error)
    assert cls in documented_errors(), (
        f"{module}.{error} has no entry in docs/troubleshooting.md (a table row in the section "
        f"of its package, or a row naming the module it comes from)"
    )


def test_every_error_in_troubleshooting_exists() -> None:
    failures, seen = [], 0
    for number, error, named, section in troubleshooting_rows():
        seen += 1
        if error in dir(builtins):
            continue  # "(an `ImportError`)": what the kit's class derives from
        modules = _row_modules(named, section)
        if not any(_error_class(m, error) for m in modules):
            failures.append(
                f"docs/troubleshooting.md:{number}: {error} is no exception class "
                f"of {modules or 'any module named in its row or heading'}"
            )
    assert seen > 20, f"only {seen} errors found in the tables: the parser broke"
    assert not failures, "errors in troubleshooting.md that do not exist:\n" + "\n".join(failures)


def test_the_checks_see_what_they_check() -> None:
    """Guards against a parser that silently finds nothing (then every check would pass)."""
    paths = list(itertools.chain.from_iterable(repo_paths(line) for line in all_lines()))
    names = list(itertools.chain.from_iterable(dotted_names(line) for line in all_lines()))
    sections = list(section_references())
    assert len(paths) > 100, len(paths)
    assert len(names) > 100, len(names)
    assert len(sections) > 20, len(sections)
    assert "connectors.stage.TransactionalSink" in names
    assert ("docs/kafka-sink.md", "docs/architecture.md", "9") in {
        (d, t, n) for d, _, t, n in sections
    }


# command-line tool -> (doc, headings of the sections that list its options)
CLI_SECTIONS = {
    "connectors/demo/__main__.py": ("docs/demo.md", ("Options",)),
    "connectors/ops/_parser.py": ("docs/operations.md", ("The `eos` command",)),
    "minikafka/__main__.py": ("docs/minikafka.md", ("Running it", "Several nodes", "Security")),
    "minikafka/_control.py": ("docs/minikafka.md", ("Node faults",)),
}


@pytest.mark.parametrize("cli", sorted(CLI_SECTIONS))
def test_every_command_line_option_is_documented(cli: str) -> None:
    doc, headings = CLI_SECTIONS[cli]
    flags = sorted(set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", (ROOT / cli).read_text())))
    assert flags, f"{cli}: no options found: the parser of this test broke"
    sections = [section_lines(doc, heading) for heading in headings]
    text = "\n".join(x.text for _line, lines in sections for x in lines)
    missing = [f for f in flags if not re.search(rf"{re.escape(f)}(?![\w-])", text)]
    where = ", ".join(
        f"{doc}:{line} ({heading})" for (line, _), heading in zip(sections, headings, strict=True)
    )
    assert not missing, f"{where}: {cli} option(s) {missing} are not documented"


# -- 7. safety rules are named predicates, cited by name --------------------------------------
# Modules whose rules the docs and the code cite as ``_module.name`` (the module's short name).
RULE_MODULES = {"_reuse": "connectors.kafka._sink._reuse"}
# Where a numbered rule ("rule 5") must never be cited again: the rules have names.
NAMED_RULES_ONLY = (
    "docs/kafka-sink.md",
    "docs/architecture.md",
    "connectors/kafka",
    "connectors/stage",
)
_SHORT_CITE = re.compile(r"(?<![\w.])(_reuse)\.([A-Za-z_]\w*)")
_NUMBERED_RULE = re.compile(r"\brules? \d", re.IGNORECASE)


def _named_rules_files() -> list[Path]:
    out: list[Path] = []
    for rel in NAMED_RULES_ONLY:
        path = ROOT / rel
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def test_every_rule_is_cited_by_its_full_name_in_the_kafka_sink_doc() -> None:
    rules = importlib.import_module(RULE_MODULES["_reuse"]).RULES
    text = (ROOT / "docs" / "kafka-sink.md").read_text()
    assert len(rules) > 5, "no rules found: the check proves nothing"
    missing = [r.__name__ for r in rules if f"`{r.__module__}.{r.__name__}`" not in text]
    assert not missing, f"rules docs/kafka-sink.md does not cite by full name: {missing}"


def test_every_short_rule_citation_in_docs_and_code_exists() -> None:
    failures, seen = [], 0
    sources = [*DOCS, *sorted((ROOT / "connectors").rglob("*.py")), *(ROOT / "txn").rglob("*.py")]
    for path in sources:
        for number, text in enumerate(path.read_text().splitlines(), 1):
            for m in _SHORT_CITE.finditer(text):
                if m.group(2) in _EXTENSIONS:
                    continue  # the module's file (``_reuse.py``): a path, not a citation
                seen += 1
                module = importlib.import_module(RULE_MODULES[m.group(1)])
                if not hasattr(module, m.group(2)):
                    rel = path.relative_to(ROOT).as_posix()
                    failures.append(f"{rel}:{number}: {m.group(0)} ({module.__name__} has none)")
    assert seen > 20, f"only {seen} citations found: the parser broke"
    assert not failures, "rules cited that do not exist:\n" + "\n".join(failures)


def test_no_rule_is_cited_by_number() -> None:
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{number}: {text.strip()}"
        for path in _named_rules_files()
        for number, text in enumerate(path.read_text().splitlines(), 1)
        if _NUMBERED_RULE.search(text)
    ]
    assert not found, "rules cited by number (cite the predicate by name):\n" + "\n".join(found)
