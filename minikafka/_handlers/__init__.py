"""Request handlers, one module per API family, and the dispatch table."""

from __future__ import annotations

from . import admin, data, groups, sasl, txn  # noqa: F401 - modules register their handlers
from ._base import (
    API_TABLE as API_TABLE,
)
from ._base import (
    ApiSpec as ApiSpec,
)
from ._base import (
    Connection as Connection,
)
from ._base import (
    RequestContext as RequestContext,
)
