"""A Spark Python worker's long-lived heap, frozen once so PySpark's per-task collection is cheap.

PySpark's daemon runs a full ``gc.collect()`` in a reused Python worker after every task
(``pyspark.daemon``, with ``spark.python.worker.reuse``, on by default), before the worker
takes its next task. A full collection walks every object the cyclic collector tracks:
with PySpark, pyarrow, confluent-kafka and the kit imported, about 100,000 objects and
about 58 ms per task on a quiet 2-core machine (about 200 ms on a loaded one; see
docs/performance.md, "Python workers"), after every read, write and enrichment task.

:func:`freeze_worker_heap` moves what the worker holds when the kit's first task starts
(the imported modules, their classes and functions: what lives as long as the worker)
into the collector's permanent generation (``gc.freeze``), which later collections skip.
Objects created afterwards (rows, batches, clients, the next task's closures) are
collected as before. It runs once per process; a frozen object that later becomes
unreachable inside a reference cycle is never freed, so only the state at that one point
is frozen, never again (the memory soak, ``benchmarks.soak_memory``, checks the worker's
memory over an hour).
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_worker_heap() -> None:
    """Freeze this process's tracked objects once (later calls do nothing).

    Called at the start of each of the kit's Spark tasks (write, read, enrichment); the
    first call in a worker process does the work.
    """
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.freeze()
