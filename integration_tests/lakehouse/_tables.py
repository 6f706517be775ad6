"""The two table formats as the Spark tests see them: build a sink, read the table back."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from connectors.lakehouse import DeltaSink, IcebergSink, TableConnector
from connectors.stage import TransactionalSink

FORMATS = ("delta", "iceberg")


@dataclass
class Table:
    """One table of format ``kind`` under ``tmp``; every sink id of a test writes it."""

    kind: str
    tmp: Path

    @property
    def catalog(self) -> dict[str, str]:
        return {
            "type": "sql",
            "uri": f"sqlite:///{self.tmp}/catalog.db",
            "warehouse": f"file://{self.tmp}/warehouse",
        }

    @property
    def uri(self) -> str:
        return str(self.tmp / "delta")

    def sink(self, sink_id: str, **options: Any) -> TransactionalSink:
        if self.kind == "delta":
            return DeltaSink(self.uri, sink_id, **options)
        options.setdefault("epoch_log", str(self.tmp / f"{sink_id}.epochlog"))
        return IcebergSink(
            "db.t", sink_id, catalog="tests", catalog_properties=self.catalog, **options
        )

    def rows(self, *columns: str) -> Counter[tuple[Any, ...]]:
        """Every row a reader of the table sees (the ``columns`` of it)."""
        arrow = self.arrow()
        data = [arrow[c].to_pylist() for c in columns]
        return Counter(zip(*data, strict=True))

    def arrow(self) -> Any:
        if self.kind == "delta":
            from deltalake import DeltaTable

            return DeltaTable(self.uri).to_pyarrow_table()
        return self.iceberg().scan().to_arrow()

    def iceberg(self) -> Any:
        from pyiceberg.catalog import load_catalog

        return load_catalog("tests", **self.catalog).load_table("db.t")

    def create(self, arrow_schema: Any, partition_by: tuple[str, ...] = ()) -> None:
        if self.kind == "delta":
            from deltalake import DeltaTable

            DeltaTable.create(
                self.uri, schema=arrow_schema, partition_by=list(partition_by) or None
            )
            return
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog("tests", **self.catalog)
        catalog.create_namespace_if_not_exists("db")
        table = catalog.create_table("db.t", schema=arrow_schema)
        if partition_by:
            with table.update_spec() as spec:
                for name in partition_by:
                    spec.add_identity(name)

    def unnamed_files(self) -> set[str]:
        """Data files on storage that no commit of the table names (leftovers)."""
        if self.kind == "delta":
            root = Path(self.uri)
            named = set()  # every file a commit ever added (a merge removes files, kept on disk)
            for commit in sorted((root / "_delta_log").glob("*.json")):
                actions = [json.loads(line) for line in commit.read_text().splitlines()]
                named |= {unquote(a["add"]["path"]) for a in actions if "add" in a}
            skip = ("_delta_log", "_eos")
        else:
            table = self.iceberg()
            root = Path(urlparse(table.location()).path)
            named = {
                str(Path(urlparse(t.file.file_path).path).relative_to(root))
                for t in table.scan().plan_files()
            }
            skip = ("_eos", "metadata")
        on_disk = {
            str(p.relative_to(root))
            for p in root.rglob("*.parquet")
            if p.relative_to(root).parts[0] not in skip
        }
        return on_disk - named

    def staged(self, sink: TransactionalSink) -> list[str]:
        """Vote records left in the staging area of ``sink``."""
        connector = sink.connector
        assert isinstance(connector, TableConnector)
        staging = connector.driver.table_format(None, ()).staging(sink.sink_id)
        return [r.name for e in staging.epochs() for r in staging.records(e)]
