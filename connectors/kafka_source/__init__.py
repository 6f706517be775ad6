"""Alias of the Kafka connector's source, kept for code written before the move.

The source now lives beside the sink in :mod:`connectors.kafka`; import from there
(``from connectors.kafka import register``). This module re-exports the same objects.
"""

from connectors.kafka._source import *  # noqa: F403 - the alias re-exports the whole API
from connectors.kafka._source import __all__  # noqa: F401 - same public names
