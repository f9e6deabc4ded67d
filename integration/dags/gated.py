"""Run a command once a gate file exists: ``gated.py GATE COMMAND [ARG...]``, ``-`` for none.

The fleet suite starts its ranks through this, so a test can hold every job before its
first step until the grid shows what the test checks (two jobs placed and a third queued,
say), however slowly a busy machine starts the runs. The command replaces this process,
so the rank keeps its PID and its environment.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    """Wait for the gate, then become the command."""
    gate, command = sys.argv[1], sys.argv[2:]
    while gate != "-" and not os.path.exists(gate):
        time.sleep(0.2)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
