"""Start-up hook of Spark's Python workers in the benchmarks (on their PYTHONPATH only).

``benchmarks._requests.worker_env`` puts this directory first on the workers' path. Flags:

* ``EOS_BENCH_RDKAFKA_PROTOCOL_LOG``: every Kafka client of the worker logs its requests
  (``benchmarks._requests.install``);
* ``EOS_BENCH_PROBE_DIR``: write tasks record timestamps and profiles
  (``benchmarks._probe.install_task_probes``);
* ``EOS_BENCH_WRITER_REF``: write tasks of marked sinks use ``RecordWriter`` of that git
  revision (``benchmarks._writer_swap``).
"""

import os

if os.environ.get("EOS_BENCH_RDKAFKA_PROTOCOL_LOG"):
    from benchmarks import _requests

    _requests.install()
if os.environ.get("EOS_BENCH_PROBE_DIR"):
    from benchmarks import _probe

    _probe.install_task_probes(os.environ["EOS_BENCH_PROBE_DIR"])
if os.environ.get("EOS_BENCH_WRITER_REF"):
    from benchmarks import _writer_swap

    _writer_swap.install_writer_swap(os.environ["EOS_BENCH_WRITER_REF"])
