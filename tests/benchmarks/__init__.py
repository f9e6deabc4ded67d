"""Tests of the benchmarks (simulators, baselines, runner); ``load_bench_policy`` imports one."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_POLICY = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_policy.py"


def load_bench_policy() -> ModuleType:
    """``benchmarks/bench_policy.py`` as the module ``bench_policy`` (loaded once)."""
    loaded = sys.modules.get("bench_policy")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("bench_policy", BENCH_POLICY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_policy"] = module
    spec.loader.exec_module(module)
    return module
