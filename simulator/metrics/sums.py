"""Float sums that add exactly as a Python loop does (one ``+=`` after another, in order), but
in C: the summary's numbers must not move by a rounding when it stops looping per action.

``sum()`` adds floats one after another before Python 3.12 and compensates the rounding from
3.12 on, so it is the loop's sum only before 3.12; ``functools.reduce`` is the loop's sum on
every version (and a few times slower).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from functools import reduce
from operator import add

if sys.version_info < (3, 12):
    def added(values: Iterable[float], start: float = 0.0) -> float:
        """``start`` plus each of ``values`` in order, as ``for v in values: start += v``."""
        return sum(values, start)
else:
    def added(values: Iterable[float], start: float = 0.0) -> float:
        """``start`` plus each of ``values`` in order, as ``for v in values: start += v``."""
        return reduce(add, values, start)
