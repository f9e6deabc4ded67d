"""Binary search over a monotone predicate on integers: the first size where ``fits`` holds.

The planner (the smallest largest share that holds a job) and the scale
policy (the smallest size that meets a deadline or covers demand) share it.
"""

from __future__ import annotations

from collections.abc import Callable


def smallest_satisfying(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest ``n`` in ``[low, high]`` with ``fits(n)``; None when even ``high`` fails."""
    if low > high or not fits(high):
        return None
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return low
