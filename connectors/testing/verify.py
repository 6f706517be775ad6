"""Alias of :mod:`connectors.verify`, the exactly-once checker, under its former name.

The checker is part of the product (``eos verify`` runs it), so it lives in
``connectors.verify``; this module keeps ``from connectors.testing.verify import ...``
working for users' tests. It re-exports the public names only (``__all__``), not the
private modules.
"""

from connectors.verify import *  # noqa: F403 - the alias is the checker's whole public API
from connectors.verify import __all__ as __all__
