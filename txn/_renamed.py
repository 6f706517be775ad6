"""Public names kept importable after a rename (docs/upgrading.md lists every move).

A public package keeps its former names in a mapping, former -> current, and makes
:func:`renamed_names` its module ``__getattr__``: ``from pkg import Former`` still works
and gives the very object of the current name, with a :class:`DeprecationWarning` that
names it. The former names are not in the package's ``__all__``. For type checkers the
package repeats them as plain aliases under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping


def renamed_names(
    module: str,
    renames: Mapping[str, str],
    otherwise: Callable[[str], object] | None = None,
) -> Callable[[str], object]:
    """Return the module ``__getattr__`` of ``module`` resolving the former names of ``renames``.

    ``otherwise``, if given, resolves every other name (a package's names imported on first
    use); without it they raise ``AttributeError``.
    """

    def __getattr__(name: str) -> object:  # noqa: N807 - a module's __getattr__
        current = renames.get(name)
        if current is None:
            if otherwise is not None:
                return otherwise(name)
            msg = f"module {module!r} has no attribute {name!r}"
            raise AttributeError(msg)
        warnings.warn(
            f"{module}.{name} is now {module}.{current} (docs/upgrading.md); the former name "
            "will be removed",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(sys.modules[module], current)

    return __getattr__
