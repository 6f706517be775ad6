"""Write tasks of chosen sinks use ``RecordWriter`` as of another git revision (A/B runs).

``benchmarks.bench_routing`` writes the same micro-batches with an exactly-once sink
whose id contains :data:`MARKER`; in Spark's Python workers (through
``benchmarks/_worker_site/sitecustomize.py`` with ``EOS_BENCH_WRITER_REF`` set) the write
tasks of such sinks produce through the ``_writer.py`` of that revision, all other sinks
through the current one. Nothing else differs between the two.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

ENV_REF = "EOS_BENCH_WRITER_REF"
MARKER = "writer-ref"


def install_writer_swap(ref: str) -> None:
    """Swap ``RecordWriter`` for write tasks of sinks whose id contains :data:`MARKER`."""
    from benchmarks.bench_writer import load_reference
    from connectors.kafka._sink import _participant
    from connectors.stage import _run

    reference = load_reference(ref).RecordWriter
    current = _participant.RecordWriter
    original = _run.write_task

    @functools.wraps(original)
    def write_task(spec: Any, batches: Iterator[Any]) -> Iterator[Any]:
        if MARKER in spec.plan.sink_id:
            _participant.RecordWriter = reference  # type: ignore[misc]
        try:
            yield from original(spec, batches)
        finally:
            _participant.RecordWriter = current  # type: ignore[misc]

    _run.write_task = write_task
