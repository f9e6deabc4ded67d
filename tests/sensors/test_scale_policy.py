"""The sensor's one policy object: ``policy=`` as a ScalePolicy, a dict, a templated dict,
or its fields one by one (never both)."""

from __future__ import annotations

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.sensors import ElasticScaleSensor
from tests.airflow_support import run_dag


def sensor(**arguments) -> ElasticScaleSensor:
    return ElasticScaleSensor(task_id="scale_check", job_name="job", **arguments)


def test_a_policy_object_is_used_as_given():
    policy = ScalePolicy(min_nodes=2, max_nodes=16, cooldown_s=60.0)
    assert sensor(policy=policy).scale_policy is policy


def test_a_policy_dict_and_flat_keywords_build_the_same_policy():
    from_a_dict = sensor(policy={"min_nodes": 2, "max_nodes": 16, "startup_s": 90}).scale_policy
    from_keywords = sensor(min_nodes=2, max_nodes=16, startup_s=90).scale_policy
    assert from_a_dict == from_keywords == ScalePolicy(min_nodes=2, max_nodes=16, startup_s=90.0)
    assert sensor().scale_policy == ScalePolicy()
    assert sensor(scale_down_cooldown_s=None).scale_policy == ScalePolicy()  # None: the default


def test_a_rendered_policy_reads_numbers_and_dict_text():
    assert sensor(policy={"max_nodes": "8", "headroom": " 0.3"}).scale_policy == ScalePolicy(
        max_nodes=8, headroom=0.3
    )
    assert sensor(policy='{"max_nodes": 8}').scale_policy == ScalePolicy(max_nodes=8)
    assert sensor(policy="{'max_nodes': 8}").scale_policy == ScalePolicy(max_nodes=8)


def test_policy_and_flat_keywords_together_are_refused_in_one_sentence():
    with pytest.raises(ElasticGridError) as refused:
        sensor(policy={"min_nodes": 2}, max_nodes=8, cooldown_s=10)
    assert str(refused.value) == (
        "policy is given both as policy= and as keyword arguments (cooldown_s, max_nodes); give one"
    )


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"max_nodes": "many"}, "max_nodes must be a number, got 'many'"),
        ({"deadline_s": 1}, "policy has an unknown field 'deadline_s'"),
        ({"min_nodes": 8, "max_nodes": 4}, "max_nodes must be at least 8, got 4"),
        ("not a dict", "policy must be a JSON object of the policy's fields, got 'not a dict'"),
        ("[1, 2]", "policy must be a ScalePolicy or a dict, got [1, 2]"),
    ],
)
def test_a_bad_policy_is_one_sentence_naming_the_field(policy, message):
    checker = sensor(policy=policy)  # parsed without checks: it may still hold templates
    with pytest.raises(ElasticGridError) as refused:
        _ = checker.scale_policy
    assert str(refused.value) == message


@pytest.mark.airflow
def test_a_templated_policy_from_the_run_conf_decides(airflow_db, jobs_root):
    run_dag("launch_sleeping", {"job_name": "templated-policy", "nodes": 2})
    result = run_dag(
        "scale_check_templated_policy", {"job_name": "templated-policy", "max_nodes": 3}
    )
    assert result.task_states == {"scale_check": "success"}
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["target_nodes"]) == ("scale_up", 3)
    assert decision["thresholds"]["max_nodes"] == 3
