"""Training throughput of a ResNet-style CNN on 1 node and on N nodes: ml_comm against
a naive allreduce and TensorFlow's own MultiWorkerMirroredStrategy.

    # one run = one mode at one node count; every rank prints one line "RESULT {json}"
    srun -N 1 --ntasks-per-node=1 --mpi=pmi2 .venv/bin/python benchmarks/train_scaling.py \\
        --mode local
    srun -N 2 --ntasks-per-node=1 --mpi=pmi2 .venv/bin/python benchmarks/train_scaling.py \\
        --mode mlcomm-sync
    benchmarks/train_scaling_driver.py  # every mode at 1 and 2 test-bed nodes, JSON and a plot

All modes share the model (a ResNet-10-style network on synthetic 32x32x3 images, ~4.9 M
parameters = 19.6 MB of float32 gradients at --width 64), the data (fixed random tensors, a
different batch per rank, no input pipeline), the loss, the optimizer (Keras SGD with
momentum) and the step code (tf.function: forward, GradientTape, aggregate, apply). Only the
aggregation differs:

  local        none: the serial baseline (one process, no MPI, no strategy); on n tasks,
               n such trainings at once, each alone (the machine's own scaling ceiling)
  mlcomm-sync  mc.gradients in the step: one op pair per gradient, submitted as backprop
               produces it, so the reduction overlaps the rest of backprop
  mlcomm-pipe  the same after config_team(0, alg=0, ksteps=0, max_steps=warmup+steps):
               pipelined from the first step (a step applies the previous step's average)
  mlcomm-bf16  mlcomm-sync with ML_COMM_COMPRESSION=bf16: 16-bit values on the wire
  naive        after backprop, all gradients concatenated into one buffer and reduced by one
               blocking mpi4py Allreduce (tf.numpy_function), then split again
  mwms         tf.distribute.MultiWorkerMirroredStrategy over the cluster that
               SlurmClusterResolver reads from srun's environment, ring collectives over
               gRPC; the Keras optimizer all-reduces the gradients inside apply()

The batch is per rank (weak scaling: N nodes train on N times the images per step).
Throughput = ranks * batch * steps / the slowest rank's time for the timed steps; the driver
compares it with the same mode's run on one node (and with `local`).

CPU and threads: --cores-per-node C pins rank i (SLURM_NODEID) to C cores of its own,
before TensorFlow starts a thread, and sets intra-op threads to C (or --intra, e.g. C - 1
to leave a core to ml_comm's threads; inter-op: --inter), so a 1-node run and each node
of a 2-node run get the same cores and threads. ml_comm's communication threads
(--threads), MPI's and gRPC's run on those cores too.

Overlap (ml_comm modes, with ML_COMM_TIMELINE set): from this rank's timeline events, the
fraction of the communication time (reduced segment batches, timed steps only) that lies
inside a compute window, i.e. between the start of a step and the last gradient that its
backprop submitted. That covers both modes: synchronous reductions hidden behind the rest of
backprop, and pipelined reductions of step t running during step t+1's forward and backprop.
`overlap_ml_comm` is ml_comm's own measure (communication before the last gradient of the
same step; meaningful for the synchronous mode only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import time
import warnings

MODES = ("local", "mlcomm-sync", "mlcomm-pipe", "mlcomm-bf16", "naive", "mwms")
NUM_CLASSES = 10


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mode", choices=MODES, required=True)
    ap.add_argument("--batch", type=int, default=8, help="images per rank per step")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (tracing)")
    ap.add_argument("--width", type=int, default=64, help="channels of the first stage")
    ap.add_argument("--blocks", type=int, default=1, help="residual blocks per stage")
    ap.add_argument(
        "--cores-per-node", type=int, default=1, help="pin each rank to this many cores (0: no pin)"
    )
    ap.add_argument(
        "--intra",
        type=int,
        default=0,
        help="TensorFlow intra-op threads (0: the pinned cores; fewer leaves cores to ml_comm)",
    )
    ap.add_argument("--inter", type=int, default=1, help="TensorFlow inter-op threads")
    ap.add_argument("--threads", type=int, default=1, help="ml_comm threads per team")
    ap.add_argument("--port-base", type=int, default=8888, help="mwms: gRPC port of each task")
    ap.add_argument(
        "--pack-bytes", type=int, default=0, help="mwms: CommunicationOptions.bytes_per_pack"
    )
    ap.add_argument("--tag", default="", help="copied into the RESULT line")
    ap.add_argument(
        "--result-dir", help="also write RESULT's json to DIR/rank<r>.json (srun cuts long lines)"
    )
    args = ap.parse_args(argv)
    if args.batch < 1 or args.steps < 1 or args.warmup < 1:
        ap.error("--batch, --steps and --warmup must be >= 1")
    return args


def node_index() -> int:
    """This rank's node within the job step (0 without Slurm)."""
    for name in ("SLURM_NODEID", "PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def pin(cores_per_node: int) -> list[int]:
    """Pin this process to its node's cores; threads started later inherit the mask.

    The test-bed "nodes" share one machine's cores: node i gets cores [i*C, (i+1)*C) of the
    cores this process may use (wrapping around when there are too few).
    """
    allowed = sorted(os.sched_getaffinity(0))
    if cores_per_node <= 0:
        return allowed
    first = node_index() * cores_per_node
    cores = sorted({allowed[(first + k) % len(allowed)] for k in range(cores_per_node)})
    os.sched_setaffinity(0, cores)
    return cores


def build_model(keras, width: int, blocks: int):
    """ResNet-style: a 3x3 stem, four stages (width x1, x2, x4, x8; stride 2 from the
    second) of basic blocks (two 3x3 conv + BN, identity or 1x1 projection shortcut)."""
    layers = keras.layers

    def conv_bn(x, filters, kernel, stride, relu):
        x = layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        return layers.ReLU()(x) if relu else x

    inputs = keras.Input((32, 32, 3))
    x = conv_bn(inputs, width, 3, 1, True)
    for stage, mult in enumerate((1, 2, 4, 8)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            if stride != 1 or x.shape[-1] != width * mult:
                shortcut = conv_bn(x, width * mult, 1, stride, False)
            y = conv_bn(x, width * mult, 3, stride, True)
            y = conv_bn(y, width * mult, 3, 1, False)
            x = layers.ReLU()(layers.Add()([y, shortcut]))
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(NUM_CLASSES)(x)
    return keras.Model(inputs, outputs, name=f"resnet10_w{width}")


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of this process's threads, summed per kind of thread:
    "main" (the Python thread), "python" (other threads started without a name: ml_comm's
    communication threads, mpi4py's), and the names TensorFlow, gRPC and UCX give theirs."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        key = "main" if int(tid) == os.getpid() else name
        out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def step_overlap(events: list[dict], lib, starts, ends, t0: float, stamps=()) -> dict:
    """Communication of the timed steps inside compute windows [step start, end of backprop].

    events: this rank's team-0 timeline (CLOCK_MONOTONIC seconds, like time.monotonic).
    The end of backprop is the last gradient op's arrival in the step; where the step has
    none (the pipelined op takes all gradients at once and records no arrivals), the time
    that `stamps` recorded when backprop had produced every gradient."""
    marks = sorted([e["start"] for e in events if e["kind"] == lib.MLC_EVENT_ARRIVE] + list(stamps))
    windows = []
    tails = []
    for s, e in zip(starts, ends):
        inside = [a for a in marks if s <= a <= e]
        last = inside[-1] if inside else e
        windows.append((s, last))
        tails.append(e - last)
    busy = hidden = 0.0
    for ev in events:
        if ev["kind"] != lib.MLC_EVENT_SEGMENTS or ev["start"] < t0:
            continue
        busy += ev["end"] - ev["start"]
        for ws, we in windows:
            hidden += max(0.0, min(ev["end"], we) - max(ev["start"], ws))
    return {
        "communication_s": busy,
        "hidden_s": hidden,
        "hidden_fraction": hidden / busy if busy else 0.0,
        # time from the last gradient submitted to the end of the step (waiting for the
        # reduction, then the optimizer update), median over the timed steps
        "tail_after_backprop_ms": 1e3 * statistics.median(tails) if tails else 0.0,
    }


def _team_cpu(mc) -> float:
    """CPU seconds of team 0's threads (0 without ml_comm, or a build older than the counter,
    which A/B runs against earlier trees meet)."""
    return mc.team_stats(0).get("thread_cpu_seconds", 0.0) if mc is not None else 0.0


def main(argv=None) -> int:
    args = parse_args(argv)
    cores = pin(args.cores_per_node)
    intra = args.intra or len(cores)
    os.environ.setdefault("OMP_NUM_THREADS", str(intra))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    mode = args.mode
    mc = comm = None
    # MPI starts before TensorFlow is imported: started after it, MPI_Init under
    # `srun --mpi=pmi2` sometimes sent garbage to slurmstepd's PMI2 server on the test
    # bed ("invalid client request", then a failed UCX address exchange).
    if mode == "naive":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, nranks = comm.Get_rank(), comm.Get_size()
    elif mode.startswith("mlcomm"):
        if mode == "mlcomm-bf16":
            os.environ["ML_COMM_COMPRESSION"] = "bf16"  # read by mc.init, as a user sets it
        import ml_comm as mc

        mc.init_mpi()
        rank, nranks = mc.get_rank(), mc.get_nranks()
    elif mode == "local":
        # On several tasks each trains alone, all at once, with no communication: what
        # running n nodes side by side on one machine costs a step (shared memory, caches,
        # host), the ceiling of every mode's scaling efficiency there.
        rank = int(os.environ.get("SLURM_PROCID", "0"))
        nranks = int(os.environ.get("SLURM_STEP_NUM_TASKS", "1"))

    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter)
    import keras

    strategy = None
    notes = []
    if mode == "mwms":
        # SlurmClusterResolver picks GPUs for each task; on CPU-only nodes nvidia-smi is
        # missing, so say "one (unused) GPU slot per task" and do not touch CUDA_VISIBLE_DEVICES.
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            port_base=args.port_base, gpus_per_node=1, gpus_per_task=1, auto_set_gpu=False
        )
        options = tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=args.pack_bytes,
            implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        )
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options
        )
        rank = resolver.task_id
        nranks = strategy.num_replicas_in_sync
        notes.append(f"cluster {resolver.cluster_spec().as_dict()}")

    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        model = build_model(keras, args.width, args.blocks)
        optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
        optimizer.build(model.trainable_variables)
    variables = model.trainable_variables
    nparams = int(sum(np.prod(v.shape) for v in variables))

    pipelined = None
    if mc is not None:
        mc.init(args.threads, 1, nparams, "tensorflow")
        if mode == "mlcomm-pipe":
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                mc.config_team(0, 0, 0, args.warmup + args.steps)
            # Until the pipelined mode exists, config_team warns and runs synchronously.
            pipelined = not any("not implemented" in str(w.message) for w in caught)
            notes += [str(w.message) for w in caught]
        for v, value in zip(model.weights, mc.broadcast(list(model.weights), 0)):
            v.assign(value)
    elif comm is not None:
        for v in model.weights:
            value = np.ascontiguousarray(v.numpy())
            comm.Bcast(value, root=0)
            v.assign(value)

    rng = np.random.default_rng(1234 + rank)
    x = tf.constant(rng.normal(size=(args.batch, 32, 32, 3)).astype(np.float32))
    y = tf.constant(rng.integers(0, NUM_CLASSES, size=args.batch).astype(np.int32))
    # Keras' optimizer under MWMS sums the replicas' gradients: scale the loss by 1/replicas
    # so that every mode applies the average over the ranks of per-rank mean gradients.
    loss_scale = 1.0 / nranks if mode == "mwms" else 1.0

    def naive_allreduce(flat: np.ndarray) -> np.ndarray:
        flat = np.ascontiguousarray(flat)
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        flat *= np.float32(1.0 / nranks)
        return flat

    stamps: list[float] = []

    def stamp():
        stamps.append(time.monotonic())
        return np.int32(0)

    def aggregate(grads):
        if mode == "mlcomm-pipe" and os.environ.get("ML_COMM_TIMELINE"):
            # Record when backprop has produced every gradient (the pipelined op starts
            # only then anyway, so this dependency changes nothing in the schedule).
            with tf.control_dependencies(grads):
                token = tf.numpy_function(stamp, [], tf.int32, stateful=True)
            with tf.control_dependencies([token]):
                grads = [tf.identity(g) for g in grads]
        if mode.startswith("mlcomm"):
            return mc.gradients(grads, 0)
        if mode == "naive":
            flat = tf.concat([tf.reshape(g, [-1]) for g in grads], 0)
            flat = tf.numpy_function(naive_allreduce, [flat], tf.float32, stateful=True)
            sizes = [int(np.prod(g.shape)) for g in grads]
            parts = tf.split(tf.reshape(flat, [sum(sizes)]), sizes)
            return [tf.reshape(p, g.shape) for p, g in zip(parts, grads)]
        return grads  # local: nothing; mwms: optimizer.apply all-reduces

    def train_step():
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
            loss = tf.reduce_mean(per_example) * loss_scale
        grads = aggregate(tape.gradient(loss, variables))
        optimizer.apply(grads, variables)
        return loss

    if strategy is not None:

        @tf.function
        def step():
            per_replica = strategy.run(train_step)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    else:
        step = tf.function(train_step)

    t_start = time.monotonic()
    for _ in range(args.warmup):
        float(step())
    warm_s = time.monotonic() - t_start
    # Start the timed steps together: a pipelined step does not wait for the other ranks,
    # so without this a rank still tracing would count in the others' first timed step.
    # (MWMS steps all-reduce synchronously; the last warm-up step lines the ranks up.)
    if mc is not None:
        mc.barrier()
    elif comm is not None:
        comm.Barrier()
    starts, ends = [], []
    cpu0, times0 = thread_cpu(), os.times()
    team_cpu0 = _team_cpu(mc)
    t0 = time.monotonic()
    for _ in range(args.steps):
        starts.append(time.monotonic())
        loss = float(step())
        ends.append(time.monotonic())
    elapsed = ends[-1] - t0
    step_times = [e - s for s, e in zip(starts, ends)]
    cpu1, times1 = thread_cpu(), os.times()
    team_cpu1 = _team_cpu(mc)
    # CPU per timed step, per kind of thread: with one core per node, every millisecond
    # that communication (ml_comm's threads, the kernel's TCP work in "sys") takes is a
    # millisecond that backprop does not get.
    cpu_ms = {
        k: round(1e3 * (v - cpu0.get(k, 0.0)) / args.steps, 2)
        for k, v in sorted(cpu1.items())
        if v - cpu0.get(k, 0.0) > 0
    }
    cpu_ms["process_user"] = round(1e3 * (times1.user - times0.user) / args.steps, 2)
    cpu_ms["process_sys"] = round(1e3 * (times1.system - times0.system) / args.steps, 2)
    if mc is not None:  # the team's threads by their own CPU clocks (ml_comm team_stats)
        cpu_ms["ml_comm_threads"] = round(1e3 * (team_cpu1 - team_cpu0) / args.steps, 2)

    # Every rank must end with the same trainable weights (BatchNorm's moving statistics
    # are per rank, as in any data-parallel run). MWMS keeps them mirrored itself.
    weights = [v.numpy() for v in variables]
    weights_match = None
    if mc is not None:
        weights_match = mc.check_buffers_match(weights, flag=1) == 0
    elif comm is not None:
        mine = np.concatenate([w.reshape(-1) for w in weights])
        ref = mine.copy()
        comm.Bcast(ref, root=0)
        weights_match = comm.allreduce(int(not np.array_equal(mine, ref))) == 0

    result = {
        "mode": mode,
        "rank": rank,
        "nranks": nranks,
        "host": socket.gethostname(),
        "cores": cores,
        "intra_op_threads": intra,
        "inter_op_threads": args.inter,
        "batch_per_rank": args.batch,
        "steps": args.steps,
        "warmup": args.warmup,
        "warmup_s": warm_s,
        "elapsed_s": elapsed,
        "step_median_ms": 1e3 * statistics.median(step_times),
        "step_min_ms": 1e3 * min(step_times),
        "step_max_ms": 1e3 * max(step_times),
        # every timed step: the per-node spread that the scale model's jitter draws from
        "step_ms": [round(1e3 * t, 3) for t in step_times],
        "cpu_ms_per_step": cpu_ms,
        "images_per_s_rank": args.batch * args.steps / elapsed,
        "final_loss": loss,
        "loss_finite": bool(np.isfinite(loss)),
        "weights_match": weights_match,
        "model": model.name,
        "parameters": nparams,
        "gradient_tensors": len(variables),
        "gradient_bytes": 4 * nparams,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "tag": args.tag,
        "notes": notes,
    }
    if mc is not None:
        result["ml_comm_threads"] = args.threads
        result["pipelined"] = pipelined if mode == "mlcomm-pipe" else False
        result["team_stats"] = mc.team_stats(0)
        from ml_comm.core import timeline

        if timeline.enabled():
            # The raw events (absolute CLOCK_MONOTONIC times) before finalize writes the trace.
            handle = mc.api.session().team(0)
            events = timeline.read(handle)
            from ml_comm._core import lib

            result["overlap"] = step_overlap(events, lib, starts, ends, t0, stamps)
            late = [e for e in events if e["start"] >= t0]
            result["overlap_ml_comm"] = timeline.overlap(late)["overlapped_fraction"]
        mc.finalize()
    text = json.dumps(result, default=str)
    if args.result_dir:
        os.makedirs(args.result_dir, exist_ok=True)
        with open(os.path.join(args.result_dir, f"rank{rank}.json"), "w") as f:
            f.write(text + "\n")
    print("RESULT " + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
