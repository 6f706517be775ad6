"""Docs that must not drift from the code: every exported error has its troubleshooting entry."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ["txn", "connectors.stage", "connectors.kafka", "connectors.postgres",
          "connectors.async_io", "connectors.testing", "connectors.verify",
          "connectors.demo.app", "connectors.examples.sqlite"]


def exported_errors() -> list[tuple[str, str]]:
    out = []
    for name in PUBLIC:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if isinstance(obj, type) and issubclass(obj, Exception):
                out.append((name, attr))
    return out


@pytest.mark.parametrize(("module", "error"), exported_errors())
def test_every_exported_error_is_in_troubleshooting(module: str, error: str) -> None:
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert f"`{error}`" in text, f"{module}.{error} has no entry in docs/troubleshooting.md"
