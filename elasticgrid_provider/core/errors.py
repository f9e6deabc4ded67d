"""Every error type of the provider, in one module; which ones fail a task with or without
a retry, and what the CLI does with them: ``docs/errors.md``. Every message is one
sentence (a failed job's log tail may follow it on the next lines).
"""

from __future__ import annotations


class ElasticGridError(ValueError):
    """A user-facing error: one sentence naming the bad field and its value."""


class CorruptStateError(ElasticGridError):
    """A stored scale state cannot be used; it is left exactly as it is for a person to fix."""


class NewerRecordError(ElasticGridError):
    """A record (state, ledger, manifest, request) has a higher major version than this
    release reads: a newer release wrote it. Refused in one sentence and left as it is; the
    operators fail such a try *with* retry (an upgraded worker may take the next one)."""


class UsageError(ElasticGridError):
    """A bad ``elasticgrid`` command line (argparse's complaint), one line with exit status 2."""


class JobLaunchError(RuntimeError):
    """A part could not be launched; the parts already started were stopped."""


class JobFailedError(RuntimeError):
    """The checked job failed, is down, or was never launched (never a skip: module docstring)."""


class RemoteHostError(RuntimeError):
    """A training host could not be reached or refused a request: one sentence naming the host."""


class CloudApiError(RuntimeError):
    """A cloud API call failed: one sentence with the provider, the call, and the cloud's
    own error code and message (never swallowed)."""


class CloudCapacityError(CloudApiError):
    """The cloud had no room for a part's instances (no capacity, a spot price or instance
    limit): the provider counts as having no capacity, so a recovery may place elsewhere."""


class InstancesLeftError(RuntimeError):
    """Instances that termination could not end after its retries: the sentence names every
    instance id still alive (the reconcile keeps trying; nothing moves on silently)."""


class StateReadError(RuntimeError):
    """A job's scale state could not be read, or its absence could not be confirmed; the
    check decided and wrote nothing (retried: a metadata-DB blip passes)."""


class CheckpointFencedError(RuntimeError):
    """A rank of a launch that a newer launch replaced tried to commit the job's checkpoint
    (say, on a host that was cut off and recovered elsewhere): it stops without writing."""


class GridCapacityError(RuntimeError):
    """A reservation asked a provider for more nodes than are free: one sentence naming the
    provider, the free and asked nodes and the jobs holding them; the ledger is unchanged."""


class NotEnoughCapacityError(ElasticGridError):
    """A plan does not fit the grid's free capacity: the sentence says how much other jobs hold
    (a shortfall mode decides whether the job waits, takes what fits or fails)."""


class JobNotFoundError(ElasticGridError):
    """A job has no launch record under the jobs root (never launched there): nothing was done."""


class JobStopError(RuntimeError):
    """A stop could not finish: one sentence saying what was stopped; the job's record says
    ``stopping``, so the next stop (a retry, ``elasticgrid stop``) finishes it."""
