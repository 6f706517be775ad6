"""Exactly-once Delta Lake and Apache Iceberg sinks on the two-phase-commit core.

The third participant shape of the kit: **files prepared by the write tasks, committed by
the table's own log with the epoch recorded** (docs/writing-a-db-connector.md). Each write
task writes its rows as data files that no reader sees and a vote record naming them; after
the commit decision is logged, the coordinator commits one table transaction per epoch with
every partition's files and the epoch (Delta: the app transaction ``(sink_id, epoch)``;
Iceberg: the snapshot summary); a replay or a recovery asks the table whether the epoch is
there. So a reader sees an epoch entirely or not at all, in aligned and unaligned mode.

* :class:`DeltaSink` needs the extra ``[delta]`` (deltalake, delta-rs): docs/delta-sink.md;
* :class:`IcebergSink` needs the extra ``[iceberg]`` (pyiceberg with pyarrow and the SQL
  catalog): docs/iceberg-sink.md.

Importing this package needs neither; a sink names its extra when it is missing.
Exactly-once append only: upserts and changelogs are not offered (docs/delta-sink.md, "What
is not offered").
"""

from connectors.lakehouse._config import DeltaSinkConfig, IcebergSinkConfig, TableSinkOptions
from connectors.lakehouse._errors import LakehouseCode, LakehouseError
from connectors.lakehouse._sink import DeltaSink, IcebergSink, TableConnector
from connectors.lakehouse._table import TableFormat


def delta_table(uri: str, storage_options: dict[str, str] | None = None) -> TableFormat:
    """Return the Delta table at ``uri`` as the sinks see it (reading it needs ``[delta]``)."""
    from connectors.lakehouse._config import is_local, local_path
    from connectors.lakehouse._delta import DeltaFormat

    return DeltaFormat(
        uri=local_path(uri) if is_local(uri) else uri, storage_options=storage_options or {}
    )


def iceberg_table(
    table: str, catalog: str = "default", catalog_properties: dict[str, str] | None = None
) -> TableFormat:
    """Return the Iceberg table ``table`` as the sinks see it (reading it needs ``[iceberg]``)."""
    from connectors.lakehouse._iceberg import IcebergFormat

    return IcebergFormat(
        catalog_name=catalog, identifier=table, catalog_properties=catalog_properties or {}
    )


__all__ = [
    "LakehouseCode",
    "DeltaSink",
    "DeltaSinkConfig",
    "IcebergSink",
    "IcebergSinkConfig",
    "LakehouseError",
    "TableConnector",
    "TableSinkOptions",
    "delta_table",
    "iceberg_table",
]
