"""The routing plan: the same partitions and hashes as the documented formula, every time."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F  # noqa: N812

from connectors.stage import InputSpec
from connectors.stage._input import route, routing_expressions
from connectors.stage._rows import HASH_COLUMN

pytestmark = pytest.mark.spark


def expected_routing(df, spec: InputSpec, parallelism: int):
    """docs/architecture.md, section 9, step 4.1, written with Column objects."""
    hashed = [c for n in spec.columns for c in (F.isnull(F.col(n)), F.col(n))]
    fallback = F.xxhash64(F.lit(1), *[F.col(c) for c in (spec.fallback or spec.columns)])
    present = F.lit(True)
    for name in spec.route_by:
        present = present & F.col(name).isNotNull()
    routing = (
        F.when(present, F.xxhash64(*[F.col(c) for c in spec.route_by])).otherwise(fallback)
        if spec.route_by
        else fallback
    )
    return (
        df.select(*spec.columns, F.xxhash64(*hashed).alias(HASH_COLUMN), routing.alias("r"))
        .repartition(parallelism, "r")
        .select(*spec.columns, HASH_COLUMN)
    )


def placement(df):
    return sorted(
        df.rdd.mapPartitionsWithIndex(
            lambda i, rows: [(i, r[HASH_COLUMN], tuple(r)) for r in rows]
        ).collect()
    )


@pytest.mark.parametrize(
    "spec",
    [
        InputSpec(columns=("key", "value"), route_by=("key",), fallback=("value",)),
        InputSpec(columns=("value",), fallback=("value",)),
        InputSpec(columns=("key", "value", "odd name"), route_by=("key", "odd name")),
        InputSpec(columns=("value",), route_by=("key",), fallback=("odd name",)),
        InputSpec(
            columns=("key", "value"), route_by=("key",), fallback=("value",), order_by=("value",)
        ),
    ],
    ids=["by-key", "by-value", "two-keys-quoted", "routing-columns-not-shipped", "ordered"],
)
def test_routing_matches_the_formula(spark, spec: InputSpec) -> None:
    df = spark.range(300).selectExpr(
        "CASE WHEN id % 7 = 0 THEN NULL ELSE concat('k', id % 11) END AS key",
        "concat('v', id) AS value",
        "id % 3 AS `odd name`",
    )
    routed = route(df, spec, 3)
    assert routed.columns == [*spec.columns, HASH_COLUMN]
    assert placement(routed) == placement(expected_routing(df, spec, 3))


def shuffles(df) -> int:
    """Shuffle exchanges of ``df``'s executed plan (the final plan under adaptive execution)."""
    df.collect()
    plan = df._jdf.queryExecution().executedPlan().toString()
    return plan.split("Initial Plan")[0].count("Exchange hashpartitioning")


def test_an_input_already_routed_is_not_shuffled_again_and_lands_where_the_formula_says(
    spark,
) -> None:
    # Spark drops the routing exchange only when the input is hash-partitioned by the very
    # routing expression into P partitions: the placement is the formula's by construction.
    # Any other upstream partitioning (here: by the key alone) is shuffled again, so where a
    # row lands never depends on how the input was partitioned (an in-doubt replay meets
    # the same markers whatever the upstream plan).
    spec = InputSpec(columns=("key", "value"), route_by=("key",), fallback=("value",))
    df = spark.range(300).selectExpr(
        "CASE WHEN id % 7 = 0 THEN NULL ELSE concat('k', id % 11) END AS key",
        "concat('v', id) AS value",
    )
    by_routing = df.repartition(3, F.expr(routing_expressions(spec)[1]))
    by_key = df.repartition(3, "key")
    assert shuffles(route(by_routing, spec, 3)) == shuffles(by_routing) == 1
    assert shuffles(route(by_key, spec, 3)) == 2
    expected = placement(expected_routing(df, spec, 3))
    assert placement(route(by_routing, spec, 3)) == placement(route(by_key, spec, 3)) == expected
