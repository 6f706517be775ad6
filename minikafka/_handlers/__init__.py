"""Request handlers, one module per API family, and the dispatch table."""

from __future__ import annotations

from . import admin, data, groups, sasl, txn  # noqa: F401 - modules register their handlers
from ._base import API_TABLE, ApiSpec, Connection, RequestContext

__all__ = ["API_TABLE", "ApiSpec", "Connection", "RequestContext"]
