"""Task slots a barrier stage can use, asked of the running cluster (not guessed).

A barrier stage (the aligned write stage) runs all its tasks at once, so it needs as many
task slots as it has tasks. ``SparkContext.defaultParallelism`` does not say how many there
are: on a standalone cluster it is ``max(total cores, 2)``, which is 2 before any executor
registered and stays 2 on a one-core cluster. Spark's own barrier check counts the slots
of the executors that are registered: ``SparkContext.maxNumConcurrentTasks(profile)``, the
sum over live executors of ``executor cores // spark.task.cpus`` (``local[N]``: ``N //
spark.task.cpus``). :func:`task_slots` asks the JVM exactly that, through py4j, and counts
the tasks running right now from the status tracker.

Contract:

* :func:`task_slots` reads, never waits. Right after an application starts, or while a
  lost executor is being replaced, ``total`` can be below what the cluster will have a
  moment later; :func:`wait_for_task_slots` polls until ``wanted`` slots exist or a
  timeout passes, and returns the last count either way (the caller decides).
* ``free`` is ``total - running``: a barrier stage submitted now waits for the running
  tasks of other jobs to finish; Spark refuses it only when ``total`` is too small.
* Spark Connect sessions have no SparkContext (nor a status tracker): the count comes from
  the server's configuration, read through the session (:func:`conf_task_slots`):
  ``local[N]`` (and ``local-cluster[W,C,M]``) exactly; a cluster from
  ``spark.executor.instances`` x ``spark.executor.cores`` (static allocation only) or
  ``spark.cores.max``; otherwise :class:`connectors.stage.StageCode.SPARK_CONNECT`. ``running``
  is 0 there (not known), and nothing is waited for (the configuration does not change).
  :func:`check_slots` then leaves an unknown count to Spark's own barrier check;
  :func:`default_parallelism` needs it (or ``spark.default.parallelism``).
* :func:`check_slots` is the aligned mode's check: it waits for executors only while none
  has registered yet (an application starting), then refuses with
  :class:`connectors.stage.StageCode.INSUFFICIENT_SLOTS` before any job runs.
* If the JVM method is missing (another Spark version), the count falls back to the
  ``local[N]`` master string or, on a cluster, to the executors the status tracker lists
  times ``spark.executor.cores`` (``source`` says which).
* In local mode the executors are not asked for (there are none, and Spark's local
  scheduler logs a warning for every such request).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from connectors.stage._errors import StageCode, StageError

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    Spark: TypeAlias = SparkSession | SparkContext  # a session or its context

_log = logging.getLogger("connectors.stage")

# Seconds wait_for_task_slots waits by default: an executor start on a busy machine.
SLOTS_WAIT_TIMEOUT_S = 60.0
# Seconds between two counts while waiting.
SLOTS_POLL_INTERVAL_S = 0.5
SOURCE_SCHEDULER = "scheduler"  # SparkContext.maxNumConcurrentTasks (Spark's own check)
SOURCE_LOCAL_MASTER = "local-master"  # parsed from local[N] / local[N,F] / local[*]
SOURCE_EXECUTORS = "executor-count"  # status tracker executors x spark.executor.cores
SOURCE_CONF = "configuration"  # Spark Connect: the server's configuration (no live count)
_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")
_CONNECT_HINT = (
    "give the sink an explicit parallelism, or set spark.default.parallelism on the server"
)
_NO_CONTEXT = (
    "this needs a SparkContext, which a Spark Connect session does not have; pass the "
    "session itself (its task slots then come from the server's configuration)"
)


@dataclass(frozen=True, kw_only=True)
class TaskSlots:
    """Task slots of the application right now.

    ``total``: slots of the registered executors (what Spark's barrier check compares a
    barrier stage's task count with); ``running``: tasks running now; ``executors``:
    registered executors (0 in local mode, where the driver runs the tasks);
    ``source``: how ``total`` was found (``SOURCE_*``).
    """

    total: int
    running: int
    executors: int
    source: str

    @property
    def free(self) -> int:
        """Slots not taken by a running task."""
        return max(0, self.total - self.running)


def local_master_slots(
    master: str, cpus_per_task: int = 1, cpu_count: int | None = None
) -> int | None:
    """Slots of a ``local``/``local[N]``/``local[N,F]``/``local[*]`` master; None otherwise."""
    match = _LOCAL.match(master.strip())
    if match is None:
        return None
    threads = match.group(1) or "1"
    cores = (cpu_count or os.cpu_count() or 1) if threads == "*" else int(threads)
    return cores // max(1, cpus_per_task)


def conf_task_slots(conf: Mapping[str, str]) -> TaskSlots | None:
    """Count the slots that Spark configuration ``conf`` gives (None: it does not say).

    For a Spark Connect session, whose server's scheduler cannot be asked (module
    docstring): ``local``/``local[N]``/``local-cluster[W,C,M]`` masters exactly; otherwise
    static executors (``spark.executor.instances`` x ``spark.executor.cores``, dynamic
    allocation off), else ``spark.cores.max``.
    """
    master = conf.get("spark.master", "").strip()
    cpus = max(1, _int(conf.get("spark.task.cpus")) or 1)
    local = local_master_slots(master, cpus)
    if local is not None:
        return TaskSlots(total=local, running=0, executors=0, source=SOURCE_CONF)
    cluster = _LOCAL_CLUSTER.match(master)
    if cluster is not None:
        workers, per_worker = int(cluster.group(1)), int(cluster.group(2))
        return TaskSlots(
            total=workers * (per_worker // cpus), running=0, executors=workers, source=SOURCE_CONF
        )
    instances = _int(conf.get("spark.executor.instances"))
    cores = _int(conf.get("spark.executor.cores"))
    dynamic = conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true"
    if instances and cores and not dynamic:
        return TaskSlots(
            total=instances * (cores // cpus), running=0, executors=instances, source=SOURCE_CONF
        )
    cores_max = _int(conf.get("spark.cores.max"))
    if cores_max:
        return TaskSlots(total=cores_max // cpus, running=0, executors=0, source=SOURCE_CONF)
    return None


def _int(value: str | None) -> int | None:
    try:
        return int(str(value).strip()) if value is not None else None
    except ValueError:
        return None


def session_conf(spark: Any) -> dict[str, str]:
    """Return the settings a session shows (``spark.conf.getAll``: one call under Connect)."""
    try:
        return {str(k): str(v) for k, v in dict(spark.conf.getAll).items()}
    except Exception as exc:
        msg = (
            f"the Spark Connect server's configuration cannot be read ({type(exc).__name__}: "
            f"{str(exc)[:300]}), so its task slots are unknown; {_CONNECT_HINT}"
        )
        raise StageError(msg, code=StageCode.SPARK_CONNECT) from exc


def _connect_slots(spark: Any) -> TaskSlots:
    conf = session_conf(spark)
    slots = conf_task_slots(conf)
    if slots is None:
        master = conf.get("spark.master", "(not shown)")
        msg = (
            f"the Spark Connect server's configuration (spark.master={master}) does not "
            f"say how many task slots it has; {_CONNECT_HINT}"
        )
        raise StageError(msg, code=StageCode.SPARK_CONNECT)
    return slots


def default_parallelism(spark: Spark) -> int:
    """Return Spark's default parallelism for ``spark`` (a session or its context).

    Classic: ``SparkContext.defaultParallelism``. Spark Connect: ``spark.default.parallelism``
    when set, else the configuration's task slots (:func:`conf_task_slots`, as Spark's own
    default in local mode).

    Raises:
        StageCode.SPARK_CONNECT: under Connect, when the configuration says neither.

    """
    sc = _context_or_none(spark)
    if sc is not None:
        return max(1, int(sc.defaultParallelism))
    conf = session_conf(spark)
    explicit = _int(conf.get("spark.default.parallelism"))
    if explicit:
        return max(1, explicit)
    return max(1, _connect_slots(spark).total)


def _context_or_none(spark: Spark | None) -> SparkContext | None:
    """Return the SparkContext of ``spark``; None for a Spark Connect session."""
    try:
        return spark_context_of(spark)
    except StageError as exc:
        if spark is None or exc.code is not StageCode.SPARK_CONNECT:
            raise
        return None


def spark_context_of(spark: Spark | None) -> SparkContext:
    """Return the SparkContext of a SparkSession (or a SparkContext as is).

    None stands for the SparkContext a Spark Connect session lacks (as the stage passes it).

    Raises:
        StageCode.SPARK_CONNECT: a Spark Connect session (no SparkContext on the client).

    """
    if spark is None:
        raise StageError(_NO_CONTEXT, code=StageCode.SPARK_CONNECT)
    if hasattr(spark, "statusTracker"):  # a SparkContext (told by its duck type)
        return cast("SparkContext", spark)
    try:
        return spark.sparkContext
    except (AttributeError, NotImplementedError) as exc:  # Spark Connect: PySpark*Error
        raise StageError(_NO_CONTEXT, code=StageCode.SPARK_CONNECT) from exc


def task_slots(spark: Spark) -> TaskSlots:
    """Count the task slots of ``spark`` (a SparkSession or SparkContext) right now.

    Raises:
        StageCode.SPARK_CONNECT: a Spark Connect session whose configuration does not tell.

    """
    sc = _context_or_none(spark)
    if sc is None:
        return _connect_slots(spark)
    jvm_sc = sc._jsc.sc()  # noqa: SLF001 - py4j: no public Python API counts executor slots
    conf = jvm_sc.conf()  # one py4j call per read (sc.getConf() copies the whole SparkConf)
    cpus = max(1, int(conf.get("spark.task.cpus", "1")))
    # Local mode has no executors, and its scheduler cannot list them: asking logs
    # "WARN SparkContext: Requesting executors is not supported by current scheduler".
    local = local_master_slots(str(sc.master), cpus)
    executors = 0 if local is not None else int(jvm_sc.getExecutorIds().size())
    running = _running_tasks(sc)
    try:
        profile = jvm_sc.resourceProfileManager().defaultResourceProfile()
        return TaskSlots(
            total=int(jvm_sc.maxNumConcurrentTasks(profile)),
            running=running,
            executors=executors,
            source=SOURCE_SCHEDULER,
        )
    except Exception:  # noqa: BLE001 - py4j raises Py4JError subtypes for a missing method
        if local is not None:
            return TaskSlots(total=local, running=running, executors=0, source=SOURCE_LOCAL_MASTER)
        cores = int(conf.get("spark.executor.cores", "1"))
        return TaskSlots(
            total=executors * (cores // cpus),
            running=running,
            executors=executors,
            source=SOURCE_EXECUTORS,
        )


def wait_for_task_slots(
    spark: Spark,
    wanted: int,
    timeout_s: float = SLOTS_WAIT_TIMEOUT_S,
    poll_s: float = SLOTS_POLL_INTERVAL_S,
) -> TaskSlots:
    """Poll :func:`task_slots` until ``total >= wanted`` or ``timeout_s`` passed; return the last."""
    deadline = time.monotonic() + timeout_s
    slots = task_slots(spark)
    while slots.total < wanted and time.monotonic() < deadline:
        time.sleep(poll_s)
        slots = task_slots(spark)
    return slots


def _running_tasks(sc: SparkContext) -> int:
    tracker = sc.statusTracker()
    running = 0
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            running += int(info.numActiveTasks)
    return running


def _runs_locally(spark: Spark) -> bool:
    """Whether the master is ``local[...]``: its slots exist from the start (no executors)."""
    return str(spark_context_of(spark).master).startswith("local")


def may_grow(slots: TaskSlots, spark: Spark) -> bool:
    """Whether waiting can raise ``slots``: a live count, no executor yet, not local mode."""
    return slots.source != SOURCE_CONF and slots.executors == 0 and not _runs_locally(spark)


def check_slots(spark: Spark | None, parallelism: int) -> None:
    """Raise :class:`StageCode.INSUFFICIENT_SLOTS` unless ``parallelism`` tasks fit at once.

    While no executor has registered yet (an application starting on a cluster), waits up
    to ``SLOTS_WAIT_TIMEOUT_S`` for the first ones; otherwise (and always in local mode,
    which has no executors to wait for) answers at once. Under Spark Connect with a
    configuration that does not tell the slots, leaves the check to Spark's own (a
    barrier stage that does not fit fails its job: the epoch aborts, nothing visible).
    """
    if spark is None:
        raise StageError(_NO_CONTEXT, code=StageCode.SPARK_CONNECT)
    try:
        slots = task_slots(spark)
    except StageError as exc:
        if exc.code is not StageCode.SPARK_CONNECT:
            raise
        _log.warning("aligned mode: task slots not checked (%s)", exc)
        return
    if slots.total < parallelism and may_grow(slots, spark):
        slots = wait_for_task_slots(spark, parallelism)
    if parallelism > slots.total:
        msg = (
            f"aligned mode runs all {parallelism} write tasks of an epoch at once, but "
            f"Spark has only {slots.total} task slot(s) ({slots.executors} executor(s)); use "
            f"mode='unaligned' or parallelism<={slots.total} (an in-doubt epoch keeps the "
            "parallelism it was planned with: give the cluster enough slots until it has "
            "committed)"
        )
        raise StageError(msg, code=StageCode.INSUFFICIENT_SLOTS)
