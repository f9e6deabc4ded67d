"""Binary search over a monotone predicate on integers.

Both the planner (the smallest largest share that holds a job) and the scale
policy (the smallest size that meets a deadline or covers demand) ask the
same question: given ``fits`` that is False up to some size and True from it
on, which is the first size where it holds? One search answers both.
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
