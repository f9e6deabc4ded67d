"""Example elastic training job: a real multi-rank iroh-tinker run that can be resized.

Run by every rank of a launch (``run: <python> example_dags/train_elastic.py
--steps 40 --global-batch 4 --microbatch-seconds 0.15 --checkpoint-dir DIR``).
It reads its global rank and world size with
:func:`elasticgrid_provider.runtime.distributed_context`, so it works the same
whether the job runs as one iroh-tinker job or as one part per provider.

Each step models a queue of work. ``--global-batch`` micro-batches arrive at
the start of the step; rank ``r`` takes micro-batches ``r, r+W, r+2W, ...``
one at a time, and each costs ``--microbatch-seconds`` of accelerator time
(a sleep standing in for the GPU) plus a real forward/backward of the tiny
numpy model. Gradients are accumulated locally, then averaged over all ranks
by a real socket allreduce in ``optim_step``. Measured with
``time.perf_counter``:

* ``duration_s``: global rank 0's wall time of the step (queue + compute +
  allreduce);
* ``queue_s``: how long the step's last micro-batch waited before a worker
  took it: every rank measures the wait of the last micro-batch it took, and
  a small extra allreduce gives every rank the maximum over ranks. With 4
  micro-batches on 2 ranks about half the step is queue; on 4 ranks nearly 0;
* ``tokens``: tokens processed in the step (global batch x sequence length).

Global rank 0 appends each step to the step log (``steps.jsonl`` in its
part's job directory, or ``--step-log``) and prints one line per step.

Resume: with ``--checkpoint-dir`` (default: the job's shared folder), rank 0
commits after every step through :class:`elasticgrid_provider.runtime.Checkpoint`:
the model parameters, then ``progress.json`` (``{"completed_steps": n, ...}``),
each via a temporary file and an atomic rename, ``progress.json`` last, so the
checkpoint is always consistent. On start every rank reads it and continues from step ``n``, at
whatever world size it now runs, so a job stopped and relaunched at another
size continues where it left off. Each commit carries the step's log line,
and the line is written only after the commit, so the step log has every
committed step exactly once, whatever instant a kill lands at: a step killed
before its commit is computed again; one killed between its commit and its
line is not, and on resume rank 0 replays the line
(``StepReporter.replay``). Adam moments are not saved: they restart from
zero after a resume. When all steps are done the script exits 0.

**A stream** (``--arrivals FILE``): step ``k`` serves the ``k``-th batch of a stream
whose rate the file sets, one ``<epoch seconds> <batches per second>`` line per change
(a test appends lines to change the load; a last rate of 0 ends the stream, and the job
exits once every batch that arrived is served). Every rank derives the same arrival
times from the file, so the batch waits (``queue_s``) and its ``duration_s`` counts from
its arrival: the step log of a job that keeps up has idle gaps, one that falls behind a
growing queue, and a relaunch serves the batches that arrived during its restart first.

Every launch needs a fresh rendezvous directory (the socket transport trusts
any ``rank-<n>.json`` it finds there).
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from elasticgrid_provider.core.errors import CheckpointFencedError
from elasticgrid_provider.runtime import (
    Checkpoint,
    DistributedContext,
    StepReporter,
    distributed_context,
    training_client,
)

VOCAB = 1024  # the "tiny" numpy model's vocabulary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="total steps of the job")
    parser.add_argument(
        "--global-batch", type=int, default=4, help="micro-batches per step, over all ranks"
    )
    parser.add_argument(
        "--microbatch-seconds",
        type=float,
        default=0.15,
        help="accelerator time each micro-batch costs (slept)",
    )
    parser.add_argument("--seq-len", type=int, default=16, help="tokens per micro-batch")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--model", default="tiny", help="iroh-tinker base model")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    parser.add_argument(
        "--checkpoint-dir",
        default=None,
        help="shared directory to resume from (rank 0 writes); "
        "default: <ELASTICGRID_SHARED_DIR>/checkpoint when launched by LaunchOperator",
    )
    parser.add_argument(
        "--step-log", default=None, help="step log path (default: <job dir>/steps.jsonl)"
    )
    parser.add_argument(
        "--arrivals",
        default=None,
        help="serve a stream whose rate this file sets ('<epoch> <batches/s>' per line)",
    )
    args = parser.parse_args(argv)
    if args.steps < 0:
        parser.error(f"--steps must be at least 0, got {args.steps}")
    if args.global_batch < 1:
        parser.error(f"--global-batch must be at least 1, got {args.global_batch}")
    if not args.microbatch_seconds >= 0:
        parser.error(f"--microbatch-seconds must be at least 0, got {args.microbatch_seconds}")
    if args.seq_len < 1:
        parser.error(f"--seq-len must be at least 1, got {args.seq_len}")
    return args


def make_microbatch(step: int, index: int, seq_len: int, seed: int) -> Any:
    """The micro-batch ``index`` of ``step``: the same on any rank and after a resume."""
    import numpy as np
    from iroh_tinker import Datum

    rng = np.random.default_rng([seed, step, index])
    tokens = rng.integers(0, VOCAB, size=seq_len + 1)
    return Datum(input_ids=[int(t) for t in tokens[:-1]], target_ids=[int(t) for t in tokens[1:]])


def read_rates(path: Path) -> list[tuple[float, float]]:
    """The stream's rate changes, ``(since epoch, batches per second)`` in file order; a
    line being written (no newline yet) is not read."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    rates = []
    for line in text.splitlines(keepends=True):
        fields = line.split()
        if line.endswith("\n") and len(fields) == 2:
            rates.append((float(fields[0]), max(float(fields[1]), 0.0)))
    return rates


def arrival_time(rates: list[tuple[float, float]], index: int) -> float | None:
    """When batch ``index`` (from 0) has arrived under ``rates``; None when it never does."""
    owed = index + 1.0
    for number, (since, rate) in enumerate(rates):
        until = rates[number + 1][0] if number + 1 < len(rates) else float("inf")
        if rate > 0 and since + owed / rate <= until:
            return since + owed / rate
        owed -= rate * (until - since) if rate > 0 else 0.0
    return None


def wait_for_batch(path: Path, index: int) -> float | None:
    """Block until batch ``index`` of the stream arrived; its arrival time (epoch), or None
    once the stream ended (its last rate is 0) before it."""
    while True:
        rates = read_rates(path)
        arrived = arrival_time(rates, index)
        now = time.time()
        if arrived is not None and now >= arrived:
            return arrived
        if arrived is None and rates and rates[-1][1] <= 0:
            return None
        time.sleep(0.05 if arrived is None else min(0.05, arrived - now))


def train(args: argparse.Namespace, ctx: DistributedContext) -> int:
    import numpy as np
    from iroh_tinker import AdamParams

    # launched by LaunchOperator, the default is the job's shared folder: it outlives relaunches
    checkpoint = Checkpoint(ctx, args.checkpoint_dir)
    step_log = Path(args.step_log).resolve() if args.step_log else None
    arrivals = Path(args.arrivals).resolve() if args.arrivals else None
    rank, world = ctx.rank, ctx.world_size
    if world > 1 and ctx.rendezvous_dir is None and not ctx.rendezvous_uri:
        print(
            "error: a multi-rank run needs a dir: or s3:// rendezvous for the socket transport",
            file=sys.stderr,
        )
        return 2
    if ctx.rendezvous_dir:  # a relative rendezvous is relative to where the rank started
        ctx = dataclasses.replace(ctx, rendezvous_dir=str(Path(ctx.rendezvous_dir).resolve()))

    try:
        completed, model = checkpoint.load()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reporter = StepReporter(ctx, step_log)
    reporter.replay(checkpoint)  # the last commit's line, if a kill kept it from the log
    if completed >= args.steps:
        if ctx.is_rank_zero:
            print(f"all {args.steps} steps already done (checkpoint at {completed})", flush=True)
        return 0
    # iroh-tinker keeps relative caches (.cache/iroh_tinker/checkpoints, ...) in the
    # working directory, which for the local engine is the launcher's: use the job dir,
    # or, run outside a JobManager, a temporary folder removed at exit.
    if ctx.job_dir:
        os.chdir(ctx.job_dir)
    else:
        scratch = tempfile.mkdtemp(prefix="train-elastic-")
        atexit.register(shutil.rmtree, scratch, True)
        os.chdir(scratch)

    client = training_client(ctx, base_model=args.model, backend="numpy")
    if model is not None:
        client.backend.restore(model)
        client.step = completed
    if ctx.is_rank_zero:
        start = "resuming at" if completed else "starting at"
        print(f"{start} step {completed}/{args.steps} with world size {world}", flush=True)

    my_microbatches = range(rank, args.global_batch, world)
    tokens_per_step = float(args.global_batch * args.seq_len)
    for step in range(completed, args.steps):
        arrived = None if arrivals is None else wait_for_batch(arrivals, step)
        if arrivals is not None and arrived is None:
            break  # the stream ended: every rank reads the same file, so all stop here
        served_from = time.time()
        step_start = time.perf_counter()
        last_wait = 0.0
        loss_sum = 0.0
        accumulated: dict[str, Any] | None = None
        for index in my_microbatches:
            last_wait = time.perf_counter() - step_start
            time.sleep(args.microbatch_seconds)
            output = client.forward_backward(
                [make_microbatch(step, index, args.seq_len, args.seed)]
            )
            loss_sum += output.loss
            gradients = client.backend.extract_gradients()
            client.backend.zero_grad()
            if accumulated is None:
                accumulated = gradients
            else:
                for name, gradient in gradients.items():
                    accumulated[name] += gradient
        if accumulated is not None:
            # optim_step averages over ranks; scale the local sum so the result
            # is the mean over all micro-batches of the step.
            scale = world / args.global_batch
            client.backend.apply_gradients({k: v * scale for k, v in accumulated.items()})
        client.optim_step(AdamParams(learning_rate=args.learning_rate))
        duration = time.perf_counter() - step_start

        # Every rank contributes its last wait and its loss; the mean times W
        # recovers each rank's values, so every rank knows the max wait.
        shared = np.zeros(2 * world, dtype=np.float32)
        shared[rank] = last_wait
        shared[world + rank] = loss_sum
        if world > 1:
            shared = client.allreduce.allreduce({"stats": shared})["stats"] * world
        queue = float(shared[:world].max())
        loss = float(shared[world:].sum()) / args.global_batch

        if arrived is not None:  # a stream's batch: waited since it arrived, then served
            queue = max(served_from - arrived, 0.0)
            duration = queue + duration
        if ctx.is_rank_zero:
            line = reporter.sample(
                step=step,
                duration_s=duration,
                queue_s=queue,
                nodes=ctx.nodes,
                tokens=tokens_per_step,
            )
            state = client.backend.checkpoint()
            checkpoint.save(step + 1, state, step_record=line, step_log=reporter.path)
            reporter.write(line)
            print(
                f"step {step + 1}/{args.steps} world={world} duration_s={duration:.3f} "
                f"queue_s={queue:.3f} loss={loss:.4f}",
                flush=True,
            )
    # No final barrier: iroh's mesh socket barrier is answered by a peer's
    # reader thread even before that peer arrives, and waits up to 600 s for a
    # peer that already closed. The stats allreduce above is the last real
    # synchronisation, and close() flushes what this rank still has to send.
    client.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ctx = distributed_context()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return train(args, ctx)
    except CheckpointFencedError as exc:  # a newer launch took over: stop, write nothing
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
