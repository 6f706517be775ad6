"""The nearest known name to a misspelt option: one rule for every connector's options."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# A name at least this close to a known one (difflib's ratio, case ignored) is answered
# with "did you mean": close enough for a dropped or swapped letter, not for another word.
SUGGEST_CUTOFF = 0.75


def nearest_name(name: str, known: Iterable[str]) -> str | None:
    """Return the known name nearest to ``name`` in its own spelling; None: none is near."""
    by_lower = {k.lower(): k for k in known}
    near = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=SUGGEST_CUTOFF)
    return by_lower[near[0]] if near else None
