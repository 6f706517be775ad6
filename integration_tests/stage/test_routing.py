"""The routing plan: the same partitions and hashes as the documented formula, every time."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F  # noqa: N812

from connectors.stage import HASH_COLUMN, InputPlan
from connectors.stage._input import route

pytestmark = pytest.mark.spark


def expected_routing(df, plan: InputPlan, parallelism: int):
    """docs/architecture.md, section 9, step 4.1, written with Column objects."""
    hashed = [c for n in plan.columns for c in (F.isnull(F.col(n)), F.col(n))]
    fallback = F.xxhash64(F.lit(1), *[F.col(c) for c in (plan.fallback or plan.columns)])
    present = F.lit(True)
    for name in plan.route_by:
        present = present & F.col(name).isNotNull()
    routing = (
        F.when(present, F.xxhash64(*[F.col(c) for c in plan.route_by])).otherwise(fallback)
        if plan.route_by
        else fallback
    )
    return (
        df.select(*plan.columns, F.xxhash64(*hashed).alias(HASH_COLUMN), routing.alias("r"))
        .repartition(parallelism, "r")
        .select(*plan.columns, HASH_COLUMN)
    )


def placement(df):
    return sorted(
        df.rdd.mapPartitionsWithIndex(
            lambda i, rows: [(i, r[HASH_COLUMN], tuple(r)) for r in rows]
        ).collect()
    )


@pytest.mark.parametrize(
    "plan",
    [
        InputPlan(("key", "value"), route_by=("key",), fallback=("value",)),
        InputPlan(("value",), fallback=("value",)),
        InputPlan(("key", "value", "odd name"), route_by=("key", "odd name")),
    ],
    ids=["by-key", "by-value", "two-keys-quoted"],
)
def test_routing_matches_the_formula(spark, plan: InputPlan) -> None:
    df = spark.range(300).selectExpr(
        "CASE WHEN id % 7 = 0 THEN NULL ELSE concat('k', id % 11) END AS key",
        "concat('v', id) AS value",
        "id % 3 AS `odd name`",
    )
    assert placement(route(df, plan, 3)) == placement(expected_routing(df, plan, 3))
