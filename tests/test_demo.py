"""The README's first command, end to end: the demo runs elastic_training and shows the scale-up."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import TESTS

pytestmark = [pytest.mark.airflow, pytest.mark.long]


def test_the_demo_scales_a_real_job_up_and_the_queue_fraction_drops(tmp_path):
    demo = subprocess.run(
        [
            sys.executable,
            str(TESTS.parent / "scripts" / "demo.py"),
            "--home",
            str(tmp_path),
            "--steps",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output
    # the trail line is the sensor's decision_summary: sizes, rule with thresholds, reason
    assert re.search(r"scale_up 2 -> 4; rule .*?; \d+% of the step was spent waiting", output)
    fractions = dict(re.findall(r"(\d) nodes: .* queue fraction (\d+)%", output))
    assert int(fractions["2"]) >= 20 and int(fractions["4"]) < int(fractions["2"])
    assert "Placement at the decided size: $2.40/h" in output
    assert re.search(r"Job elastic-demo-\d+: done at 4 nodes", output)
