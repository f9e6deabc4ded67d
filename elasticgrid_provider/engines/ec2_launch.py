"""What the ec2 engine records and derives for one launch of a part: tags, tokens, intent.

The intent (``ec2-launch.json``) is written before any RunInstances, so a retry or a
repeated provision finds the same instances by client token and tag, never a second set.
The rules: docs/clouds.md ("What the engine does", "Spot").
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import Any

from elasticgrid_provider.atomic_files import write_json
from elasticgrid_provider.core.ec2_params import TAG_JOB, TAG_LAUNCH, TAG_PART, Ec2Params
from elasticgrid_provider.core.machines import Market
from elasticgrid_provider.engines.cloud_init import HostKey, new_host_key
from elasticgrid_provider.engines.instances import Ec2Instances, terminate_tagged

log = logging.getLogger(__name__)

INTENT_FILE = "ec2-launch.json"
"""The part's launch intent, in its LOCAL job folder, written before RunInstances (0600)."""
KNOWN_HOSTS_FILE = "known_hosts"
SSH_PARAMS_FILE = "ssh-params.json"
"""The ssh engine's params for the part's instances (what the hook pulls step logs with)."""
NO_LAUNCH_ID = "direct"  # a spec launched without the hook carries no launch id


def launch_tags(job: str, part: str | None, launch_id: str | None) -> dict[str, list[str]]:
    """The tag filter of a job's instances, of one part and/or launch when given; narrowest
    first (launch, part, job), the order :meth:`.instances.Ec2Instances.describe` asks in."""
    tags = {TAG_LAUNCH: [launch_id]} if launch_id is not None else {}
    if part is not None:
        tags[TAG_PART] = [part]
    tags[TAG_JOB] = [job]
    return tags


def client_token(launch_id: str, part: str, index: int, market: Market) -> str:
    """RunInstances' idempotency token of one instance of a launch's part (64 characters)."""
    return hashlib.sha256(f"{launch_id}/{part}/{index}/{market}".encode()).hexdigest()


def terminate_launch(
    params: Ec2Params, region: str | None, job: str, launch_id: str, part: str | None = None
) -> list[str]:
    """Terminate every instance of ``job``'s launch (one part of it when given), found by tag."""
    what = f"the instances of job {job!r} launch {launch_id}" + (f" part {part}" if part else "")
    api = Ec2Instances(params.aws_conn_id, region)
    return terminate_tagged(api, launch_tags(job, part, launch_id), what)


def record_intent(
    folder: Path, job: str, part: str, launch_id: str, count: int, spot: bool
) -> dict[str, Any]:
    """Write and return the part's launch intent, ``ec2-launch.json`` in the part's local
    folder (0600), before any RunInstances: job, part, launch id, count, market, client
    tokens, the host key and which ``attempt`` of the launch's part this is (only a later one
    can find instances already started). The same launch provisioned again keeps its host key,
    so the user data of instances already started still holds the key the worker checks."""
    folder.mkdir(parents=True, exist_ok=True)
    previous: dict[str, Any] = {}
    with suppress(OSError, ValueError):
        previous = json.loads((folder / INTENT_FILE).read_text())
    same = previous.get("launch_id") == launch_id and previous.get("part") == part
    key = HostKey.from_json(previous.get("host_key")) if same else None
    key = key or new_host_key(f"elasticgrid-{launch_id}")
    asked = Market.SPOT if spot else Market.ON_DEMAND
    market = Market(previous["market"]) if same and previous.get("market") else asked
    intent = {
        "job": job,
        "part": part,
        "launch_id": launch_id,
        "count": count,
        "market": str(market),
        "client_tokens": [client_token(launch_id, part, index, market) for index in range(count)],
        "host_key": key.to_json(),
        "attempt": int(previous.get("attempt", 1)) + 1 if same else 1,
        **({"fallback": previous["fallback"]} if same and "fallback" in previous else {}),
    }
    write_json(folder / INTENT_FILE, intent, private=True)
    return intent


def record_fallback(
    folder: Path, intent: dict[str, Any], price: float | None, cause: str
) -> dict[str, Any]:
    """Record, then log, that the part goes on-demand at ``price`` per node-hour (a spot
    request refused for capacity, ``spot_fallback: on_demand``)."""
    fallback = {"from": "spot", "to": "on-demand", "cost_per_node_hour": price, "cause": cause}
    intent = {**intent, "market": str(Market.ON_DEMAND), "fallback": fallback}
    write_json(folder / INTENT_FILE, intent, private=True)
    log.warning(
        "Part %s: spot capacity refused (%s); falling back to on-demand at %s per node-hour "
        "(spot_fallback: on_demand).",
        intent["part"],
        cause,
        price,
    )
    return intent


def ssh_engine_params(params: Ec2Params, folder: Path, hosts: Iterable[str]) -> dict[str, Any]:
    """The ssh engine's params for instances at ``hosts`` (``user@address``): their hosts, the
    launch's known_hosts and the key; the engine also writes them to ``ssh-params.json`` for
    the hook's step-log pulls."""
    distinct = list(dict.fromkeys(hosts))
    ssh: dict[str, Any] = {
        "hosts": distinct or [f"{params.ssh_user}@0.0.0.0"],
        "known_hosts": str(folder / KNOWN_HOSTS_FILE),
        "connect_timeout_s": params.connect_timeout_s,
        "python": params.python,
    }
    optional = {
        "ssh_key": params.ssh_key,
        "ssh_conn_id": params.ssh_conn_id,
        "remote_dir": params.remote_dir,
        "shared_dir": params.shared_dir,
    }
    ssh.update({name: value for name, value in optional.items() if value is not None})
    return ssh
