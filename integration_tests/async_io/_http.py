"""The tests' tiny HTTP/1.1 client for the local enrichment service.

It runs inside Spark's Python workers, where the test packages are not importable, so
the module registers itself to be pickled by value.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from pyspark import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])


async def get_json(port: int, path: str) -> tuple[int, Any]:
    """One GET on its own connection to 127.0.0.1; return (status, JSON body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        writer.write(request.encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)
