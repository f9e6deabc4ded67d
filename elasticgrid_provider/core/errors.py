"""Every error type of the provider, and what each does to a task.

The hierarchy::

    ValueError
      ElasticGridError        bad input: one sentence naming the field and the value
        CorruptStateError     a stored scale state that cannot be used (left as it is)
        NewerRecordError      a record a newer release wrote (a higher major; left as it is)
        UsageError            a bad ``elasticgrid`` command line
        NotEnoughCapacityError  a plan that does not fit the capacity other jobs leave free
        JobNotFoundError      a stop of a job that was never launched under the jobs root
    RuntimeError
      JobLaunchError          a part could not be launched; the parts started were stopped
      JobStopError            a stop that could not finish; the job's record says ``stopping``
      JobFailedError          the checked job failed, is down, or was never launched
      RemoteHostError         an ssh training host was unreachable or refused a request
      CloudApiError           a cloud API call failed: the cloud's code and message
        CloudCapacityError    the cloud has no room (capacity, spot price, limits): no room here
      InstancesLeftError      instances that could not be terminated, named by id
      GridCapacityError       a reservation other jobs' nodes leave no room for (nothing changed)
      StateReadError          a job's scale state could not be read (nothing was decided)
      CheckpointFencedError   a rank of a replaced launch tried to commit (in the rank only)

What they do:

* The CLI turns an :class:`ElasticGridError` into exit status 2 and one line
  (``error: ...``), never a traceback.
* In Airflow, an ``AirflowFailException`` fails the try *without* retry; any
  other exception (but ``AirflowSensorTimeout``) fails it *with* retry while
  the task has retries left.

  * ``LaunchOperator`` and ``PlanPlacementOperator`` turn bad input
    (:class:`ElasticGridError`) into ``AirflowFailException``: the same input
    fails the same way. ``LaunchOperator`` turns a :class:`JobLaunchError`
    into ``AirflowException``: retried, because a provider that failed to
    start may start next time, and a retry never starts a second copy (the
    launch is reconciled from its record). A waited-on job that was stopped on
    purpose (a user's or a stop task's stop) fails it with
    ``AirflowFailException``: a retry would start the stopped job again. A :class:`GridCapacityError` (the
    grid ledger refused the launch's reservation; nothing was stopped) is
    retried the same way: the other jobs may have ended by the next try.
  * A fleet-aware ``PlanPlacementOperator`` does not raise these for a busy
    grid: its ``on_shortfall`` decides (wait, take what fits, or fail with
    ``AirflowFailException`` naming the holders).
  * ``StopJobOperator`` turns a :class:`JobNotFoundError` (and any other bad input)
    into ``AirflowFailException``, and a :class:`JobStopError` into ``AirflowException``:
    retried, and the next stop finishes what the record says is left (``elasticgrid stop``
    exits 2 on the former, 1 on the latter).
  * ``ElasticScaleSensor`` raises :class:`JobFailedError`, :class:`StateReadError`,
    :class:`ElasticGridError` and :class:`CorruptStateError` as they are,
    retried like any other failure. None is an ``AirflowException``,
    deliberately: ``soft_fail`` (for a check that found no reason to scale
    before its timeout) turns Airflow's exceptions into skips, and a failed
    job or a misconfigured check must never pass as a skip.

A failed read of the state is an error, never "no state": :class:`StateReadError`
fails the check before anything is decided or written (a fresh state written over
the stored one would lose its cooldown and history), and the next try reads again.

Every message is one sentence (a failed job's log tail may follow it on the
next lines).
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
