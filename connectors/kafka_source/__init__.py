"""Alias of the Kafka connector's source, kept for code written before the move.

The source now lives beside the sink in :mod:`connectors.kafka`; import from there
(``from connectors.kafka import register``). This module re-exports the same objects; the
classes built on PySpark's data source API are imported on first use, as there.
"""

from typing import TYPE_CHECKING

from connectors.kafka import _source

__all__ = list(_source.__all__)

if TYPE_CHECKING:
    from connectors.kafka._source import *  # noqa: F403 - the alias re-exports the whole API
else:

    def __getattr__(name: str) -> object:
        return getattr(_source, name)
