"""Public names from before the renames still import (docs/upgrading.md, "Names that say one thing").

Each former name is the very object of its new name, reached through the package's module
``__getattr__`` with a :class:`DeprecationWarning` that names the new one and points at the
caller's line; it is not in ``__all__`` (a star import stays quiet), and the package repeats
it under ``TYPE_CHECKING`` so that type checkers know it too.
"""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import pytest

# (package, former name, new name): every public rename of docs/upgrading.md.
RENAMED = [
    ("txn", "InProcessChannel", "InProcessExecutor"),
    ("connectors.stage", "TransactionalSinks", "CompositeSink"),
    ("connectors.stage", "InputPlan", "InputSpec"),
    ("connectors.kafka", "InputError", "KafkaInputError"),
    ("connectors.kafka", "InputSchemaError", "KafkaInputSchemaError"),
    ("connectors.kafka", "RecordError", "KafkaRecordError"),
    ("connectors.kafka", "SinkConfigError", "KafkaSinkConfigError"),
    ("connectors.kafka", "EpochLogFencedError", "KafkaEpochLogFencedError"),
    ("connectors.postgres", "Layout", "TableLayout"),
    ("connectors.postgres", "InputError", "PostgresInputError"),
    ("connectors.postgres", "InputSchemaError", "PostgresInputSchemaError"),
    ("connectors.postgres", "RecordError", "PostgresRecordError"),
    ("connectors.postgres", "SinkConfigError", "PostgresSinkConfigError"),
    ("connectors.postgres", "EpochLogFencedError", "PostgresEpochLogFencedError"),
    ("connectors.postgres", "TableNotFoundError", "PostgresTableNotFoundError"),
    ("connectors.postgres", "PartitionConflictError", "PostgresPartitionConflictError"),
    ("connectors.examples.sqlite", "TableNotFoundError", "SqliteTableNotFoundError"),
    ("connectors.examples.sqlite", "PartitionConflictError", "SqlitePartitionConflictError"),
    ("connectors.demo.app", "stage_input", "chunk_input"),
    ("minikafka", "ConfigError", "BrokerConfigError"),
]


@pytest.mark.parametrize(("package", "former", "new"), RENAMED, ids=lambda v: str(v))
def test_a_former_name_is_the_new_object_with_a_deprecation_warning(
    package: str, former: str, new: str
) -> None:
    module = importlib.import_module(package)
    expected = re.escape(f"{package}.{former} is now {package}.{new} ")
    with pytest.warns(DeprecationWarning, match=expected) as seen:
        old = getattr(module, former)  # what ``from package import former`` does
    assert old is getattr(module, new)
    assert [w.filename for w in seen] == [__file__]  # the warning points at the caller
    assert former not in module.__all__
    assert new in module.__all__


@pytest.mark.parametrize("package", sorted({p for p, _, _ in RENAMED}))
def test_the_former_names_of_a_package_are_all_listed_here_and_typed(package: str) -> None:
    """The aliases under ``TYPE_CHECKING`` are exactly this table's rows of the package."""
    module = importlib.import_module(package)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text())
    typed = {
        (node.targets[0].id, node.value.id)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and ast.unparse(branch.test) == "TYPE_CHECKING"
        for node in branch.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Name)
    }
    assert typed == {(former, new) for p, former, new in RENAMED if p == package}


@pytest.mark.parametrize("package", sorted({p for p, _, _ in RENAMED}))
def test_an_unknown_name_is_still_an_attribute_error_and_star_imports_stay_quiet(
    package: str,
) -> None:
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        module.NoSuchName  # noqa: B018 - the attribute access is the test
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        exec(f"from {package} import *", {})


def test_renamed_methods_of_the_testing_doubles_are_the_same_functions() -> None:
    from txn.testing import CrashWorld, MemoryStore

    assert MemoryStore.stage_marker is MemoryStore.put_marker
    assert CrashWorld.channel is CrashWorld.executor
