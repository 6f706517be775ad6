"""The demo's faults: two Python workers killed and one failure before a commit."""

from __future__ import annotations


def chaos_faults(epochs: int, parallelism: int) -> list[dict[str, object]]:
    """Return the fault plan of ``--chaos`` (docs/demo.md).

    Spread over ``epochs``, on the first and the last of ``parallelism`` write partitions.
    """
    last_p = parallelism - 1
    return [
        {
            "id": "kill-worker-a",
            "step": "mid_write",
            "epoch": max(1, epochs // 5),
            "partition": 0,
            "action": "kill",
            "after_rows": 50,
            "times": 1,
        },
        {
            "id": "fail-before-commit",
            "step": "after_pre_commit",
            "epoch": max(2, epochs // 3),
            "partition": last_p,
            "action": "raise",
            "times": 1,
        },
        {
            "id": "kill-worker-b",
            "step": "before_commit",
            "epoch": max(3, (2 * epochs) // 3),
            "partition": last_p,
            "action": "kill",
            "times": 1,
        },
    ]
