"""What the restart benchmarks share: the bare relaunch, the step log, the ranks' logs.

A bare iroh-tinker restart is the baseline of the resize and recovery
benchmarks. It relaunches the job from specs written for the purpose, as the
provider renders them (:func:`write_bare_specs`), never from the job's own
spec files: once the ranks start, their ``envs`` values read ``***``.
:func:`check_same_launch` proves, from the salted fingerprints in the job's
manifest, that it runs what the provider launched. Both sides are timed from
the step log that global rank 0 writes in the ``onprem`` part; a side whose
ranks log no step did not really run, and :func:`wait_for_step` fails saying
so, quoting the end of every rank's log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.report import check, fail

if TYPE_CHECKING:
    from elasticgrid_provider.core.launch_spec import LaunchOptions
    from elasticgrid_provider.core.placement import Placement

RANK_ZERO_PART = "onprem"  # the provider that holds global rank 0 in every benchmark grid


def write_bare_specs(
    jobs_root: Path, job: str, placement: Placement, options: LaunchOptions, launch_id: str
) -> list[tuple[str, Path]]:
    """Render and write the job's part specs for a bare launch ``launch_id``; (part, spec) pairs.

    As the provider's launch renders them: ``options`` with a fresh rendezvous
    (created here), the launch id, and the job's shared folder (its checkpoint)
    unless ``options`` names one.
    """
    from elasticgrid_provider.core.launch_spec import build_launch_parts
    from elasticgrid_provider.hooks.launcher import private_folder

    folder = jobs_root / job
    rendezvous = folder / "rendezvous" / launch_id
    rendezvous.mkdir(parents=True)
    options = replace(
        options,
        rendezvous=f"dir:{rendezvous}",
        shared_dir=options.shared_dir or str(folder / "shared"),
        launch_id=launch_id,
    )
    spec_folder = private_folder(folder / "specs" / launch_id)
    return [
        (part.part_name, part.write_spec(spec_folder / f"{part.part_name}.json"))
        for part in build_launch_parts(placement, job, options)
    ]


def check_same_launch(options: LaunchOptions, manifest: dict[str, Any], side: str) -> None:
    """Fail unless ``options`` run what the job's manifest records (its salted fingerprints)."""
    from elasticgrid_provider.core.launch_record import changed_fields, launch_fingerprints

    ours = launch_fingerprints(
        options.run, options.envs, options.setup, manifest["fingerprint_salt"]
    )
    changed = changed_fields(manifest["fingerprints"], ours)
    check(not changed, f"{side} would not relaunch what the provider launched: its "
          f"{', '.join(changed)} differ from the job's manifest")  # fmt: skip


def launch_bare(jobs_root: Path, specs: list[tuple[str, Path]]) -> Callable[[], bool]:
    """Launch each part with iroh-tinker's ``JobManager``; a probe: are all its parts running?"""
    from iroh_tinker.cloud import JobManager

    from elasticgrid_provider.hooks.launcher import prepare_part_folder

    manager = JobManager(root=jobs_root)
    for name, spec in specs:
        prepare_part_folder(jobs_root, name)  # no marker left by the last launch
        manager.launch(spec)
    return lambda: all(manager.status(name).status == "running" for name, _ in specs)


def read_steps(jobs_root: Path, job: str) -> list[dict]:
    """Every step the job logged (global rank 0 runs in the ``onprem`` part)."""
    path = jobs_root / f"{job}--{RANK_ZERO_PART}" / "steps.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rank_log_tails(jobs_root: Path, parts: Iterable[str], lines: int = 4) -> str:
    """The last ``lines`` (not blank) of each rank's log in ``parts``: why ranks logged no step."""
    tails = []
    for part in parts:
        for log in sorted((jobs_root / part / "logs").glob("rank_*.log")):
            text = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
            tails.append(f"{part} {log.stem}: " + (" | ".join(text[-lines:]) or "(empty)"))
    return "; ".join(tails) or "no rank log at all"


def wait_for_step(
    what: str,
    jobs_root: Path,
    job: str,
    parts: Iterable[str],
    condition: Callable[[dict], bool],
    timeout: float = 180.0,
    running: Callable[[], bool] = lambda: True,
) -> list[dict]:
    """Wait until the job logs a step meeting ``condition``; the step log then.

    When ``running()`` turns false (the ranks exited) or on timeout, fail
    naming ``what`` and quoting the ranks' logs of ``parts``.
    """
    deadline = time.monotonic() + timeout
    while True:
        steps = read_steps(jobs_root, job)
        if any(condition(step) for step in steps):
            return steps
        if not running():
            why = "its ranks exited first"
        elif time.monotonic() > deadline:
            why = f"not within {timeout:.0f} s"
        else:
            time.sleep(0.05)
            continue
        fail(
            f"{what} did not really run: it logged no step ({why}); the ranks' logs end "
            f"with: {rank_log_tails(jobs_root, parts)}"
        )


def resumed_gap(steps: list[dict], restarted_at: float, nodes: int, side: str) -> float:
    """Seconds from the last step before ``restarted_at`` to the first after it at ``nodes``.

    Fails unless the job resumed from its checkpoint: the first step after
    must follow the last one before (at most one, logged after its commit,
    can be missing).
    """
    before = [s for s in steps if s["time"] <= restarted_at]
    after = [s for s in steps if s["time"] > restarted_at and s["nodes"] == nodes]
    if not before or not after:
        fail(f"{side}: no step on both sides of the restart at {restarted_at:.2f}")
    last, first = before[-1], after[0]
    if not last["step"] < first["step"] <= last["step"] + 2:
        fail(
            f"{side}: after the restart the job logged step {first['step']}, but the last "
            f"step before it was {last['step']}: it did not resume from its checkpoint"
        )
    return float(first["time"] - last["time"])
