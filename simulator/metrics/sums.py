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



def mean(values: Iterable[float]) -> float:
    """``statistics.mean(values)``, to the bit, without importing ``statistics`` (its imports,
    fractions, decimal and random, are a few per cent of a small ``pipesim run``). Both are
    the exact sum over the count, rounded once: each float is an integer over a power of two,
    so the sum is one integer over the largest of them, and int / int is correctly rounded
    (which is how ``statistics`` turns its exact Fraction into a float). Integers alone give
    an int when the mean is whole, as ``statistics`` does."""
    vals = list(values)
    if not vals:
        raise ValueError("mean requires at least one data point")
    ratios = [v.as_integer_ratio() for v in vals]
    den = max(d for _, d in ratios)
    num = sum(n * (den // d) for n, d in ratios)
    den *= len(vals)
    if num % den == 0 and all(type(v) is int for v in vals):
        return num // den
    return num / den
