"""What the stage ships to the write tasks, and how rows are routed and checksummed.

A connector's schema check returns an :class:`InputSpec`; :func:`route` then turns the
micro-batch into exactly ``P`` write partitions (docs/architecture.md, section 9, step 4.1
of an epoch on Spark):

1. in the JVM, a 64-bit content hash per row (``_eos_hash``): ``xxhash64`` over every
   shipped column and its null flag, so the checksum of a partition covers all of it;
2. a routing hash: ``xxhash64`` of the ``route_by`` columns when none of them is null,
   else ``xxhash64(1, fallback columns)``; rows are repartitioned by it into ``P``
   partitions, so the same row lands in the same write partition whatever the upstream
   partitioning (a replay meets the same marker);
3. with ``order_by``, rows are sorted inside each partition (order by those columns,
   then by the content hash), so the order is deterministic and the checksum covers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from connectors.stage._rows import HASH_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ROUTE_COLUMN = "_eos_route"
_ORDER_PREFIX = "_eos_order_"


@dataclass(frozen=True, kw_only=True)
class InputSpec:
    """What a connector's schema check decided about the micro-batch's columns.

    ``columns``: shipped to the write tasks, in this order (the content hash covers them).
    ``route_by``: routing columns (rows with equal values land in the same partition, in
    input order within a partition); empty: route by ``fallback`` only.
    ``fallback``: routing columns for rows whose ``route_by`` holds a null (default: all
    ``columns``). ``order_by``: sort columns inside a partition. ``layout``: the
    connector's own picklable description of the input, handed back to it.
    """

    columns: tuple[str, ...]
    route_by: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()
    order_by: tuple[str, ...] = ()
    layout: Any = None

    @property
    def ordered(self) -> bool:
        """True when the rows of a partition have a deterministic order (``order_by``)."""
        return bool(self.order_by)


def _q(name: str) -> str:
    """Return ``name`` quoted for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def routing_expressions(spec: InputSpec) -> tuple[str, str]:
    """Spark SQL of the content hash and of the routing hash (steps 1 and 2)."""
    hashed = ", ".join(f"isnull({_q(n)}), {_q(n)}" for n in spec.columns)
    fallback = ", ".join(_q(c) for c in (spec.fallback or spec.columns))
    by_fallback = f"xxhash64(1, {fallback})"
    if spec.route_by:
        present = " AND ".join(f"{_q(c)} IS NOT NULL" for c in spec.route_by)
        keys = ", ".join(_q(c) for c in spec.route_by)
        routing = f"CASE WHEN {present} THEN xxhash64({keys}) ELSE {by_fallback} END"
    else:
        routing = by_fallback
    return f"xxhash64({hashed})", routing


def route(df: DataFrame, spec: InputSpec, parallelism: int | None) -> DataFrame:
    """Return ``df`` routed into ``parallelism`` partitions with the hash column (steps 1-3).

    ``parallelism`` None keeps the input's partitions (``keep_partitioning``: no routing
    shuffle). The plan is built from SQL strings: a handful of py4j calls on the driver
    instead of a few hundred for the same expressions built as Column objects. The routing
    hash is the exchange's partitioning expression itself, not a column: Spark's hash
    partitioning of an expression hashes its value exactly as it hashes a column holding
    it, so the rows land where a shipped routing column would put them (no 8 bytes per row
    through the shuffle, and no projection after it unless ``order_by`` or routing columns
    that are not shipped need one).
    """
    from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

    row_hash, routing = routing_expressions(spec)
    shipped = [_q(n) for n in spec.columns]
    order = [f"{_q(c)} AS {_ORDER_PREFIX}{i}" for i, c in enumerate(spec.order_by)]
    extra = [] if parallelism is None else _unshipped_routing_columns(spec)
    routed = df.selectExpr(*shipped, *order, *map(_q, extra), f"{row_hash} AS {HASH_COLUMN}")
    if parallelism is not None:
        routed = routed.repartition(parallelism, F.expr(routing))
    if spec.order_by:
        keys = [f"{_ORDER_PREFIX}{i}" for i in range(len(spec.order_by))]
        routed = routed.sortWithinPartitions(*keys, HASH_COLUMN)
    if not (order or extra):
        return routed
    return routed.selectExpr(*shipped, HASH_COLUMN)


def _unshipped_routing_columns(spec: InputSpec) -> list[str]:
    """Routing columns that are not shipped (carried to the exchange, dropped after it)."""
    wanted = dict.fromkeys((*spec.route_by, *(spec.fallback or spec.columns)))
    return [c for c in wanted if c not in spec.columns]
