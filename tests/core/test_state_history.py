"""The history a scale state keeps: changes, ends of the job, and runs of holds with counts."""

from __future__ import annotations

import json

from elasticgrid_provider.core.formatting import decision_summary, iso_time
from elasticgrid_provider.core.policy.memory import NO_MEASUREMENTS
from elasticgrid_provider.core.state import POLICY_V2_INPUT_FIELDS, DecisionRecord, ScaleState
from tests.plugins.recorded import T0, audited_job, check


def _shape(state: ScaleState) -> list[tuple]:
    return [
        (entry["action"], entry["rule"], entry.get("hold_run", {}).get("count", 1))
        for entry in state.history
    ]


def test_repeated_holds_fold_into_one_entry_with_a_count_and_the_changes_stay():
    state = audited_job()
    assert _shape(state) == [
        ("hold", "min_samples", 3),
        ("scale_up", "queue_bound", 1),
        ("hold", "queue_bound", 3),
    ]
    run = state.history[-1]["hold_run"]
    assert (run["first_at"], run["last_at"]) == (T0 + 600, T0 + 1200)
    assert (run["first_at_iso"], run["last_at_iso"]) == (
        "2026-01-01T00:10:00+00:00",
        "2026-01-01T00:20:00+00:00",
    )
    # the folded entry is the newest record, so it still replays exactly
    newest = DecisionRecord.model_validate(state.history[-1])
    assert newest.decision.decided_at == T0 + 1200
    assert newest.replay() == newest.decision


def test_a_hold_held_back_by_another_rule_starts_a_new_entry():
    state = audited_job()
    # past the cooldown the next queue-bound check scales up again: a new entry
    state = check(state, T0 + 300 + 3600, 4, 4, "again")
    assert _shape(state)[-2:] == [("hold", "queue_bound", 3), ("scale_up", "queue_bound", 1)]


def test_the_bound_drops_holds_before_changes_and_ends_of_the_job():
    state = audited_job()
    ended = {
        "action": "hold",
        "current_nodes": 4,
        "target_nodes": 4,
        "rule": "job_ended",
        "reason": "job 'audit-job' is done; there is nothing to scale",
        "decided_at": T0 + 2000,
    }
    revision = state.revision
    state = state.remember_event(ended, T0 + 2000, limit=3)
    assert (state.revision, state.updated_at) == (revision + 1, T0 + 2000)
    # limit 3: the oldest hold run went, the change and the end of the job stayed
    assert _shape(state) == [
        ("scale_up", "queue_bound", 1),
        ("hold", "queue_bound", 3),
        ("hold", "job_ended", 1),
    ]
    state = state.remember_event({**ended, "decided_at": T0 + 2100}, T0 + 2100, limit=2)
    assert _shape(state) == [("scale_up", "queue_bound", 1), ("hold", "job_ended", 2)]


def test_records_carry_iso_times_rounded_signals_and_the_summary_with_thresholds():
    record = audited_job().history[1]
    readable = record["context"]["readable"]
    assert readable["decided_at"] == iso_time(T0 + 300) == "2026-01-01T00:05:00+00:00"
    assert readable["signals"]["queue_fraction"] == 0.5
    assert readable["summary"] == decision_summary(record)
    target = record["target_nodes"]
    assert target > 2
    assert readable["summary"].startswith(
        f"scale_up 2 -> {target}; rule queue_bound (target_queue_fraction=0.2, "
    )
    held = audited_job().history[-1]
    assert "held by cooldown (cooldown_s=3600, scale_down_cooldown_s=3600)" in (
        decision_summary(held)
    )


def _version_1(state: ScaleState) -> dict:
    """``state`` as a version 1 Variable: no capacity, recent, hold_run or readable."""
    old = json.loads(json.dumps(state.model_dump()))
    old["schema_version"] = 1
    del old["capacity"], old["recent"]
    for entry in old["history"]:
        entry.pop("hold_run", None)
        entry["context"].pop("readable")
        for name in POLICY_V2_INPUT_FIELDS:
            del entry["inputs"][name]
    return old


def test_a_version_1_state_is_migrated_on_load_and_folds_on():
    """A v1 Variable (before capacity, recent, ``hold_run`` and ``readable``) loads as v2."""
    old = _version_1(audited_job())
    assert old["schema_version"] == 1 and "capacity" not in old and "recent" not in old
    loaded = ScaleState.model_validate(old)
    assert (loaded.capacity, loaded.recent) == (NO_MEASUREMENTS, ())
    assert loaded.model_dump()["schema_version"] == 2
    assert len(loaded.history) == len(old["history"])  # kept as recorded
    assert DecisionRecord.model_validate(loaded.history[-1]).decision.rule == "queue_bound"
    folded = check(loaded, T0 + 1500, 4, 4, "later")
    assert _shape(folded)[-1] == ("hold", "queue_bound", 2)


def test_replaying_a_version_1_decision_says_it_was_recorded_by_an_older_policy(tmp_path, capsys):
    from elasticgrid_provider.cli import main

    old = _version_1(audited_job())
    # the older policy worded its reasons without the restart price
    newest = old["history"][-1]
    newest["reason"] = newest["reason"].split("; scaling up pays")[0]
    path = tmp_path / "state.json"
    path.write_text(json.dumps(old))
    assert main(["simulate", "--state", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("note: recorded by an older policy; the replay uses today's rules")
    assert lines[-1] == "MISMATCH: the replay differs in reason (exit status 1)"
    assert main(["--json", "simulate", "--state", str(path)]) == 1
    assert json.loads(capsys.readouterr().out)["replay"]["older_policy"] is True
    # a record of today's policy gets no such note
    path.write_text(json.dumps(audited_job().model_dump()))
    assert main(["simulate", "--state", str(path)]) == 0
    assert "older policy" not in capsys.readouterr().out


def test_replaying_a_state_whose_job_ended_replays_the_newest_decision(tmp_path, capsys):
    """``simulate --state`` skips the end-of-job entry by default and refuses it by index."""
    from elasticgrid_provider.cli import main

    ended = {
        "action": "hold",
        "current_nodes": 4,
        "target_nodes": 4,
        "rule": "job_ended",
        "reason": "job 'audit-job' is done; there is nothing to scale",
        "decided_at": T0 + 2000,
    }
    path = tmp_path / "state.json"
    path.write_text(json.dumps(audited_job().remember_event(ended, T0 + 2000).model_dump()))
    assert main(["--json", "simulate", "--state", str(path)]) == 0
    replay = json.loads(capsys.readouterr().out)["replay"]
    assert (replay["index"], replay["matches"]) == (2, True)
    assert main(["simulate", "--state", str(path), "--decision", "-1"]) == 2
    error = capsys.readouterr().err
    assert "history entry 3 records the end of the job; it has no decision to replay" in error
