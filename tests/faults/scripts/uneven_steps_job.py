"""Ranks that run different numbers of steps, or leave while others wait in barrier().

    mpiexec -n 2 python uneven_steps_job.py MODE TOKEN

MODE:
  barrier_departure   rank 0 waits in mc.barrier(); rank 1 leaves (finalize) at once
  skip_one LEAVER     rank LEAVER skips the second of two allreduce_sum calls and leaves
  skip_one_barrier LEAVER  the same, but it enters barrier() first and prints what it raised
  custom_loop         a Keras custom loop over Dataset.shard of 101 samples (batches of
                      10: rank 0 runs 6 steps per epoch, rank 1 5), 2 epochs, then finalize
  custom_loop_barrier the same with mc.barrier() before finalize
  equal_steps         the same loop through ml_comm.data.equal_steps (ends well)
  fit_generator       model.fit on a generator of 23 batches on rank 0, 22 on rank 1
                      (the length is unknown before the data is read)
  fit_callback_raises rank 1's callback raises in fit's third step; every rank catches
                      what its fit raised and prints it, then finalizes
  fit_again_after_raise  the same, and rank 1 calls fit again before finalize
  evaluate_after_raise   the same, and rank 1 calls evaluate before finalize
  evaluate_on_rank_0     fit on every rank, then rank 0 evaluates while rank 1 fits again;
                      each catches and prints what it raised, then finalizes
  barrier_after_raise rank 1 enters mc.barrier() while rank 0 waits in gradients: it
                      raises, then makes the reduction; then 4 barriers, each with
                      another rank arriving last, print whether a rank left one early
Every rank prints "started rank R pid P" first and "done rank R" at its end.
"""

from __future__ import annotations

import os
import sys
import time

import ml_comm as mc

mode = sys.argv[1]
if mode in ("skip_one", "skip_one_barrier"):
    import numpy as np

    mc.init(1, 1, 16)
    leaver = int(sys.argv[2])
    print(f"started rank {mc.get_rank()} pid {os.getpid()}", flush=True)
    values = np.array([1.0, 2.0])
    mc.allreduce_sum(values)
    if mc.get_rank() != leaver:
        mc.allreduce_sum(values)
    elif mode == "skip_one_barrier":
        try:
            mc.barrier()
        except mc.MLCommError as exc:
            print(f"rank {leaver} barrier raised: {exc}", flush=True)
    mc.finalize()
    print(f"done rank {mc.get_rank()}", flush=True)
    sys.exit(0)
if mode == "barrier_departure":
    mc.init(1, 1, 16)
    print(f"started rank {mc.get_rank()} pid {os.getpid()}", flush=True)
    if mc.get_rank() == 0:
        print(f"rank 0 enters barrier() at {time.monotonic():.3f}", flush=True)
        mc.barrier()
    mc.finalize()
    print(f"done rank {mc.get_rank()}", flush=True)
    sys.exit(0)

if mode == "barrier_after_raise":
    import numpy as np
    from mpi4py import MPI

    mc.init(1, 1, 16)
    rank = mc.get_rank()
    print(f"started rank {rank} pid {os.getpid()}", flush=True)
    if rank == 1:
        try:
            mc.barrier()
        except mc.MLCommError as e:
            print(f"rank 1 barrier raised: {e}", flush=True)
    mc.gradients([np.ones(3, np.float32)])
    entered, left = [], []
    for k in range(4):
        if k % 2 == rank:
            time.sleep(0.1)  # this rank arrives last in barrier k
        entered.append(time.monotonic())
        mc.barrier()
        left.append(time.monotonic())
    all_entered, all_left = MPI.COMM_WORLD.allgather(entered), MPI.COMM_WORLD.allgather(left)
    early = [k for k in range(4) if min(t[k] for t in all_left) < max(t[k] for t in all_entered)]
    print(f"rank {rank}: barriers a rank left early: {early}", flush=True)
    mc.finalize()
    print(f"done rank {rank}", flush=True)
    sys.exit(0)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ml_comm.keras as mk  # noqa: E402
from ml_comm.data import equal_steps  # noqa: E402

mk.init(nthread_per_team=1, nteams=1, msglen=64)
rank = mc.get_rank()
print(f"started rank {rank} pid {os.getpid()}", flush=True)
rng = np.random.default_rng(0)
x = rng.integers(-3, 4, size=(101, 5)).astype(np.float32)
y = rng.integers(-3, 4, size=(101, 2)).astype(np.float32)
model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shard(mc.get_nranks(), rank).batch(10)


@tf.function
def step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb) - yb))
    model.optimizer.apply(tape.gradient(loss, model.trainable_variables))


if mode == "fit_generator":

    def batches(count):
        for i in range(count):
            yield x[4 * i : 4 * i + 4], y[4 * i : 4 * i + 4]

    model.fit(batches(23 if rank == 0 else 22), epochs=1, verbose=0)
    mk.finalize()
    print(f"done rank {rank}", flush=True)
    sys.exit(0)

if mode == "evaluate_on_rank_0":
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    call = "evaluate" if rank == 0 else "fit"  # rank 0 alone evaluates
    try:
        getattr(model, call)(x, y, batch_size=8, verbose=0)
    except Exception as exc:  # noqa: BLE001 - what the program caught
        print(f"rank {rank} {call} raised {type(exc).__name__}: {exc}", flush=True)
    mk.finalize()
    print(f"done rank {rank}", flush=True)
    sys.exit(0)

if mode in ("fit_callback_raises", "fit_again_after_raise", "evaluate_after_raise"):

    class FailsOnRank1(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if rank == 1 and batch == 2:
                raise ValueError("a callback of rank 1 failed")

    fits = 2 if rank == 1 and mode == "fit_again_after_raise" else 1
    for attempt in range(1, fits + 1):
        try:
            model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[FailsOnRank1()])
        except Exception as exc:  # noqa: BLE001 - what the program caught
            print(f"rank {rank} fit {attempt} raised {type(exc).__name__}: {exc}", flush=True)
    if rank == 1 and mode == "evaluate_after_raise":
        try:
            model.evaluate(x, y, batch_size=8, verbose=0)
        except Exception as exc:  # noqa: BLE001 - what the program caught
            print(f"rank {rank} evaluate raised {type(exc).__name__}: {exc}", flush=True)
    mk.finalize()
    print(f"done rank {rank}", flush=True)
    sys.exit(0)

model.optimizer.build(model.trainable_variables)
for _epoch in range(2):
    for xb, yb in equal_steps(dataset) if mode == "equal_steps" else dataset:
        step(xb, yb)
if mode == "custom_loop_barrier":
    mc.barrier()
mk.finalize()
print(f"done rank {rank}", flush=True)
