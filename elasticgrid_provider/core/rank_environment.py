"""The environment every rank of a launch gets: the contract between a launch and its ranks.

A launch (:mod:`elasticgrid_provider.core.launch_spec`) sets these on every rank of every
part; :mod:`elasticgrid_provider.runtime` reads them back. Names only: every rank imports
this, so it imports nothing. The rules: docs/runtime.md ("Which rank am I").
"""

ENV_JOB = "ELASTICGRID_JOB"
ENV_PART = "ELASTICGRID_PART"
ENV_RANK_OFFSET = "ELASTICGRID_RANK_OFFSET"
ENV_WORLD_SIZE = "ELASTICGRID_WORLD_SIZE"
ENV_PROCS_PER_NODE = "ELASTICGRID_PROCS_PER_NODE"
ENV_SHARED_DIR = "ELASTICGRID_SHARED_DIR"
ENV_LAUNCH_ID = "ELASTICGRID_LAUNCH_ID"
# set by the SSH engine: the socket transport binds all addresses and publishes this one
ENV_HOST = "ELASTICGRID_HOST"
ENV_CHECKPOINT_DIR = "ELASTICGRID_CHECKPOINT_DIR"  # the ec2 engine's params.checkpoint_dir
ELASTICGRID_ENV_NAMES = (
    ENV_JOB,
    ENV_PART,
    ENV_RANK_OFFSET,
    ENV_WORLD_SIZE,
    ENV_PROCS_PER_NODE,
    ENV_SHARED_DIR,
    ENV_LAUNCH_ID,
    ENV_HOST,
    ENV_CHECKPOINT_DIR,
)
"""The variables a launch (or its engine) sets on every rank."""

ENV_RANK = "RANK"
ENV_LOCAL_WORLD_SIZE = "WORLD_SIZE"
ENV_JOB_DIR = "IROH_TINKER_JOB_DIR"
ENV_RENDEZVOUS = "IROH_TINKER_RENDEZVOUS"
IROH_RUNNER_ENV_NAMES = (ENV_RANK, ENV_LOCAL_WORLD_SIZE, ENV_JOB_DIR, ENV_RENDEZVOUS)
"""Variables iroh-tinker's runner sets itself on every rank, after the spec's envs."""
