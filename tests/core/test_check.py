"""The scale check's state transitions (core/check.py), in milliseconds and without Airflow.

The sensor is a thin shell over :class:`ScaleCheck`: these tests drive the
same rules with plain inputs (a state, a job snapshot, new samples or
step-log chunks, the time, the policy) and read what the
sensor would do: hold, resize to N, finish (an ended job), or fail with a
message. The last test proves the module (and this test module) import no
Airflow.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from elasticgrid_provider.core.check import (
    ARGUMENT_SOURCE,
    CheckOutcome,
    CheckVerdict,
    DeadlineChoice,
    ScaleCheck,
    TaskIdentity,
    unshared_root_sentence,
)
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, PartRecord
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import EventRule
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.core.step_log import LogCursor, SkippedLine, StepLogChunk
from tests.conftest import PROJECT

T0 = 1_700_000_000.0
TASK = TaskIdentity(dag_id="dag", run_id="run", task_id="check", try_number=1)
GRID = providers_from_dicts(
    [{"name": "local", "max_nodes": 64, "cost_per_node_hour": 0.0, "spot": False}]
)
PLANNER = GridPlanner(providers=GRID)


def snapshot(nodes: int, status: str = "running", **manifest: Any) -> JobSnapshot:
    """A one-part job of ``nodes`` nodes whose part has ``status``."""
    data = {
        "job_name": "job",
        "launch_id": "20261202T000000Z-abcdef",
        "launched_at": "2026-12-02T00:00:00+00:00",
        "placement": PLANNER.plan(nodes).model_dump(),
        "world_size": nodes,
        "procs_per_node": 1,
        "rendezvous": "dir:/nowhere",
        "run": "python train.py",
        "parts": [],
        **manifest,
    }
    part = PartRecord.model_validate(
        {
            "name": "job--local",
            "provider": "local",
            "engine_target": "local",
            "nodes": nodes,
            "rank_offset": 0,
            "spec_path": "/nowhere/spec.json",
            "status": status,
            "job_dir": "/nowhere/job--local",
            "last_error": None,
        }
    )
    return JobSnapshot(manifest=JobManifest.model_validate(data), parts=(part,))


def samples(nodes: int, steps: range) -> list:
    """Back-to-back queue-bound steps at ``nodes``: half of each step waits for a worker.

    The step time halves when the nodes double (the job scales perfectly), so a
    scale-up measured at the new size keeps paying off.
    """
    step_s = 0.8 / nodes
    queue_s = step_s / 2
    return [
        {"step": step, "duration_s": step_s, "queue_s": queue_s, "nodes": nodes, "time": T0 + step}
        for step in steps
    ]


def no_deadline_expected() -> DeadlineChoice:
    raise AssertionError("the deadline is resolved only when a decision is made")


@dataclass
class Check:
    """One check to run: the job's size and status, what is handed in, and the time."""

    nodes: int
    at: float
    handed_in: list | None = None
    status: str = "running"
    chunks: list = field(default_factory=list)


def run_checks(checks: list[Check], **settings: Any) -> list[CheckOutcome]:
    """Run the checks in order, each on the state the previous one left."""
    rules = ScaleCheck("job", ScalePolicy(), **settings)
    state = ScaleState(job_name="job")
    outcomes = []
    for check in checks:
        outcome = rules.run(
            state,
            snapshot(check.nodes, check.status),
            check.at,
            task=TASK,
            samples=check.handed_in,
            chunks=check.chunks,
            deadline=lambda: DeadlineChoice(None, "no deadline"),
            planner=PLANNER,
        )
        outcomes.append(outcome)
        state = outcome.state
    return outcomes


# (name, checks, expected (verdict, rule, rules holding it back, current, target) of each check)
TRANSITIONS = [
    (
        "first check, not enough samples: hold",
        [Check(2, T0, samples(2, range(2)))],
        [("hold", "min_samples", [], 2, 2)],
    ),
    (
        "enough queue-bound samples: scale up",
        [Check(2, T0, samples(2, range(2))), Check(2, T0 + 30, samples(2, range(4)))],
        [("hold", "min_samples", [], 2, 2), ("resize", "queue_bound", [], 2, 4)],
    ),
    (
        "the cooldown holds the next change, and lets it pass once over",
        [
            Check(2, T0, samples(2, range(4))),
            Check(4, T0 + 60, samples(4, range(4, 8))),
            Check(4, T0 + 400, samples(4, range(8, 12))),
        ],
        [
            ("resize", "queue_bound", [], 2, 4),
            ("hold", "queue_bound", ["cooldown"], 4, 4),
            ("resize", "queue_bound", [], 4, 8),
        ],
    ),
    (
        "a job that ended: finish with a job_ended record",
        [Check(2, T0, samples(2, range(4)), status="done")],
        [("finish", EventRule.JOB_ENDED, [], 2, 2)],
    ),
]


@pytest.mark.parametrize(
    ("checks", "expected"),
    [(checks, expected) for _, checks, expected in TRANSITIONS],
    ids=[name for name, _, _ in TRANSITIONS],
)
def test_state_transitions(checks, expected):
    outcomes = run_checks(checks)
    assert [
        (
            o.verdict.value,
            o.record["rule"],
            [held["rule"] for held in o.record.get("held_by", [])],
            o.record["current_nodes"],
            o.record["target_nodes"],
        )
        for o in outcomes
    ] == expected
    # every check writes a state one revision on, and records the task
    assert [o.state.revision for o in outcomes] == list(range(1, len(checks) + 1))
    assert all(o.record["context"]["dag_id"] == "dag" for o in outcomes)
    assert outcomes[-1].state.history[-1]["rule"] == expected[-1][1]


def test_a_change_records_the_proposed_placement_and_a_hold_does_not():
    hold, change = run_checks(
        [Check(2, T0, samples(2, range(2))), Check(2, T0 + 30, samples(2, range(4)))]
    )
    assert "proposed_placement" not in hold.record["context"]
    context = change.record["context"]
    assert context["proposed_placement"]["total_nodes"] == 4
    assert (context["placement"]["total_nodes"], context["deadline_source"]) == (2, "no deadline")
    assert change.state.cooldown.last_action == "scale_up"
    assert change.state.cooldown.last_change_at == T0 + 30


def test_an_ended_job_is_recorded_without_resolving_the_deadline():
    rules = ScaleCheck("job", ScalePolicy())
    state = ScaleState(job_name="job")
    stopped = snapshot(3, "stopped", state="stopped", down_reason="stopped on request")
    assert rules.failure(stopped, jobs_root="/jobs") is None  # stopped on purpose: it ended
    outcome = rules.run(state, stopped, T0, task=TASK, deadline=no_deadline_expected)
    assert outcome.verdict is CheckVerdict.FINISH
    assert outcome.reason == "job 'job' is stopped; there is nothing to scale"
    assert outcome.record["context"]["readable"]["summary"].startswith("hold")
    assert [entry["rule"] for entry in outcome.state.history] == [EventRule.JOB_ENDED]
    assert (outcome.state.revision, outcome.state.updated_at) == (1, T0)


def test_handed_in_samples_are_consumed_once():
    first, second = run_checks(
        [Check(2, T0, samples(2, range(2))), Check(2, T0 + 1, samples(2, range(0, 2)))]
    )
    assert [s.step for s in first.state.window.samples] == [0, 1]
    assert [s.step for s in second.state.window.samples] == [0, 1]  # nothing taken twice
    assert second.state.cursor(ARGUMENT_SOURCE) == 2
    # an overlapping list: only the steps not seen yet are taken
    third = run_checks(
        [Check(2, T0, samples(2, range(2))), Check(2, T0 + 1, json.dumps(samples(2, range(1, 4))))]
    )[-1]
    assert [s.step for s in third.state.window.samples] == [0, 1, 2, 3]


def test_samples_at_another_size_are_counted_out_and_a_resize_starts_a_fresh_window():
    first, resized = run_checks(
        [
            Check(2, T0, samples(2, range(3))),
            Check(4, T0 + 30, samples(2, range(3, 5)) + samples(4, range(5, 6))),
        ]
    )
    assert [s.step for s in resized.state.window.samples] == [5]
    assert (
        logging.INFO,
        "Ignored 2 sample(s) measured at another size than the current 4 nodes.",
    ) in resized.log
    assert any("changed size 2 -> 4" in line for _, line in resized.log)
    assert first.state.current_nodes == 2 and resized.state.current_nodes == 4


def test_step_log_chunks_move_their_cursor_and_count_skipped_lines():
    bad = tuple(SkippedLine("/logs/steps.jsonl", offset, "not JSON") for offset in range(7))
    chunk = StepLogChunk(
        source="/logs/steps.jsonl",
        samples=tuple(StepSample.model_validate(s) for s in samples(2, range(3))),
        cursor=LogCursor(offset=900, last_step=2),
        skipped=bad,
        lines_read=10,
        notes=("the log was truncated",),
    )
    [outcome] = run_checks([Check(2, T0, chunks=[chunk])])
    assert outcome.state.log_cursor("/logs/steps.jsonl") == LogCursor(offset=900, last_step=2)
    assert outcome.state.skipped_lines == 7
    assert len(outcome.state.window.samples) == 3
    warnings = [line for level, line in outcome.log if level == logging.WARNING]
    assert warnings[0] == "the log was truncated"
    assert len([w for w in warnings if w.startswith("Skipped a step-log line")]) == 5
    assert warnings[-1] == "Skipped 2 more bad line(s) of /logs/steps.jsonl."
    assert (
        logging.INFO,
        "Read 10 new line(s) from /logs/steps.jsonl (first check: from its end, as far back "
        "as the window needs).",
    ) in outcome.log


def test_the_history_stays_bounded():
    checks = [
        Check(2, T0, samples(2, range(4))),
        Check(4, T0 + 400, samples(4, range(4, 8))),
        Check(8, T0 + 800, samples(8, range(8, 12))),
        Check(16, T0 + 1200, samples(16, range(12, 16))),
    ]
    outcomes = run_checks(checks, history_limit=2)
    assert [o.record["target_nodes"] for o in outcomes] == [4, 8, 16, 32]
    assert [entry["target_nodes"] for entry in outcomes[-1].state.history] == [16, 32]
    assert outcomes[-1].state.revision == 4


# (name, snapshot, keyword arguments, expected message or None)
FAILURES = [
    ("running: no failure", snapshot(2), {}, None),
    (
        "never launched",
        None,
        {},
        "job 'job' has no manifest under /jobs; launch it with LaunchOperator first",
    ),
    (
        "never launched here, but a state exists: the jobs root is not shared",
        None,
        {"unshared_message": unshared_root_sentence("job", "/jobs", "state_key")},
        unshared_root_sentence("job", "/jobs", "state_key"),
    ),
    (
        "failed: the message and the failed ranks' log tail",
        snapshot(2, "failed"),
        {"failure_report": "part job--local rank 0 failed\nTraceback"},
        "job 'job' failed.\npart job--local rank 0 failed\nTraceback",
    ),
    (
        "down: the down_reason",
        snapshot(2, "stopped", state="down", down_reason="rank 1 exited"),
        {},
        "job 'job' is down, so there is nothing to scale: its launch "
        "20261202T000000Z-abcdef was confirmed dead (rank 1 exited); launch it again "
        "with LaunchOperator",
    ),
    (
        "cut short while stopping: what the record says, and what is left",
        snapshot(2, "failed", state="stopping", down_reason="being replaced by launch L2"),
        {},
        "job 'job' was cut short while its launch 20261202T000000Z-abcdef was being stopped "
        "(being replaced by launch L2): the task doing it ended before it recorded what came "
        "next, and no rank is left, so there is nothing to scale; launch it again with "
        "LaunchOperator",
    ),
    (
        "cut short while stopping, a part still running",
        snapshot(2, "running", state="stopping", down_reason="stopped on request"),
        {},
        "job 'job' was cut short while its launch 20261202T000000Z-abcdef was being stopped "
        "(stopped on request): the task doing it ended before it recorded what came next, and "
        "part(s) job--local still run, so there is nothing to scale; launch it again with "
        "LaunchOperator",
    ),
    (
        "vanished: every part stopped, the launch recorded running",
        snapshot(2, "stopped"),
        {},
        "job 'job' has no rank left, yet its launch 20261202T000000Z-abcdef is recorded "
        "running: its parts were stopped outside elasticgrid or never started, so there is "
        "nothing to scale; launch it again with LaunchOperator",
    ),
]


@pytest.mark.parametrize(
    ("job", "arguments", "expected"),
    [(job, arguments, expected) for _, job, arguments, expected in FAILURES],
    ids=[name for name, *_ in FAILURES],
)
def test_jobs_that_cannot_be_checked_fail_with_one_message(job, arguments, expected):
    rules = ScaleCheck("job", ScalePolicy())
    assert rules.failure(job, jobs_root="/jobs", **arguments) == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"samples": "[not json"}, "samples is not valid JSON"),
        ({"samples": {"step": 1}}, "samples must be a list of sample objects"),
        ({"remaining_steps": "many"}, "remaining_steps"),
        ({"remaining_tokens": -5}, "remaining_tokens"),
    ],
)
def test_bad_input_is_one_sentence_and_no_outcome(arguments, message):
    rules = ScaleCheck("job", ScalePolicy())
    with pytest.raises(ElasticGridError, match=message):
        rules.run(ScaleState(job_name="job"), snapshot(2), T0, task=TASK, **arguments)


def test_total_steps_counts_the_steps_left_from_the_newest_sample_at_every_check():
    rules = ScaleCheck("job", ScalePolicy())

    def deadline() -> DeadlineChoice:
        return DeadlineChoice(T0 + 3600, "deadline argument")

    state = ScaleState(job_name="job")
    left = []
    for now, taken in ((T0 + 10, range(4)), (T0 + 20, range(4, 7))):
        outcome = rules.run(
            state,
            snapshot(2),
            now,
            task=TASK,
            samples=samples(2, taken),
            deadline=deadline,
            total_steps="100",
        )
        state = outcome.state
        left.append(outcome.record["inputs"]["remaining_steps"])
    assert left == [96, 93]  # steps 0-3 done, then 0-6
    # a total already reached leaves nothing
    done = rules.run(state, snapshot(2), T0 + 30, task=TASK, deadline=deadline, total_steps=5)
    assert done.record["inputs"]["remaining_steps"] == 0
    # an empty window (a new job, or one just resized) does not know its progress yet
    fresh = rules.run(
        ScaleState(job_name="job"), snapshot(2), T0, task=TASK, deadline=deadline, total_steps=50
    )
    assert fresh.record["inputs"]["remaining_steps"] is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"total_steps": -1}, "total_steps"),
        ({"total_steps": float("nan")}, "total_steps"),
        ({"total_steps": "lots"}, "total_steps"),
        (
            {"total_steps": 100, "remaining_steps": 10},
            "remaining_steps 10 and total_steps 100 are both set; give one",
        ),
    ],
)
def test_bad_total_steps_is_one_sentence(arguments, message):
    rules = ScaleCheck("job", ScalePolicy())
    with pytest.raises(ElasticGridError, match=message):
        rules.run(ScaleState(job_name="job"), snapshot(2), T0, task=TASK, **arguments)


def test_a_decision_on_bad_input_keeps_the_error_where_it_was_raised():
    # the check used to re-raise the same text from check.py, losing type and traceback
    rules = ScaleCheck("job", ScalePolicy())
    with pytest.raises(ElasticGridError, match="remaining_tokens") as refused:
        rules.run(ScaleState(job_name="job"), snapshot(2), T0, task=TASK, remaining_tokens=-5)
    assert refused.traceback[-1].path.name == "validation.py"


def test_the_check_and_these_tests_import_no_airflow():
    code = (
        "import sys, tests.core.test_check; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'iroh_tinker', 'numpy'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PROJECT
    )
    assert result.stdout.strip() == "[]"


def test_samples_far_from_the_checks_clock_are_reported_once_and_never_enter_the_window():
    handed_in = samples(2, range(6))
    handed_in[2]["time"] = T0 + 3600.0  # an hour ahead: a skewed clock
    handed_in[4]["time"] = 12.5  # a clock counting from boot: "1970"
    first, second = run_checks([Check(2, T0 + 6, handed_in), Check(2, T0 + 7, handed_in)])
    assert [s.step for s in first.state.window.samples] == [0, 1, 3, 5]
    warnings = [line for level, line in first.log if level == logging.WARNING]
    assert [line.split(":")[0] for line in warnings] == ["Left out step 2", "Left out step 4"]
    assert "3594s after the check's clock" in warnings[0]
    assert "days before the check's clock" in warnings[1]
    assert first.state.cursor(ARGUMENT_SOURCE) == 6  # consumed: not reported again
    assert not [line for _, line in second.log if "Left out" in line]
    assert [s.step for s in second.state.window.samples] == [0, 1, 3, 5]
