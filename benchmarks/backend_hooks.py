"""The Keras hook's reduction on JAX (the XLA FFI custom call inside a jitted function)
or on torch (the hook's zero-copy hand-over of CPU tensors to the NumPy path) against
mc.gradients on NumPy arrays of the same sizes, ResNet-50's gradient list, in one run:
the two alternate call by call (each call after a barrier), and each one's median time
per call is reported with their ratio.

    KERAS_BACKEND=jax .venv-jax/bin/mpiexec -n 2 .venv-jax/bin/python -P \\
        benchmarks/backend_hooks.py --framework jax --reps 30
    KERAS_BACKEND=torch .venv-torch/bin/mpiexec -n 2 .venv-torch/bin/python -P \\
        benchmarks/backend_hooks.py --framework torch --reps 30

The NumPy calls go through the session's NumPy path (on JAX, the NumPy backend that the
JAX backend holds for host work: the same code as mc.gradients with framework=None).
Every result is checked exactly against the expected average (integer-valued inputs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alternating import report  # noqa: E402
from product_paths import resnet50_shapes  # noqa: E402

import ml_comm as mc  # noqa: E402

# The arrays averaged here are no model's gradients: there are no weights to share.
os.environ.setdefault("ML_COMM_WEIGHTS_CHECK", "0")


def inputs(shapes, rank: int) -> list[np.ndarray]:
    """Integer-valued float32 gradients: rank + 1 + (index mod 7)."""
    out = []
    for i, s in enumerate(shapes):
        out.append(np.full(s, rank + 1 + (i % 7), np.float32))
    return out


def expected(shapes, nranks: int) -> list[np.ndarray]:
    return [np.full(s, (nranks + 1) / 2 + (i % 7), np.float32) for i, s in enumerate(shapes)]


def jax_hook(grads: list[np.ndarray]):
    """The custom call in a compiled function that owns its gradients, as a train step owns
    what backprop made (donated here: the call then averages them in place). The inputs
    are made, and their copies finished, before each timed call (untimed), by a compiled
    copy: buffers XLA allocated, as backprop's are. `jax.device_put` of a NumPy array
    would not do: it shares the array's memory where the array is 64-byte aligned (about
    a fifth of this list), XLA cannot take such a buffer for a result, and copies it
    inside the timed call."""
    import jax

    step = jax.jit(lambda g: mc.gradients(g, 0), donate_argnums=0)
    owned_copies = jax.jit(lambda g: [jax.numpy.copy(x) for x in g])

    def prepare():
        return jax.block_until_ready(owned_copies(grads))

    def call(arrays):
        return jax.block_until_ready(step(arrays))

    return prepare, call


def results_in_place(prepare, call) -> int:
    """How many of one JAX call's results lie in their operand's buffer (untimed)."""
    made = prepare()
    before = [a.unsafe_buffer_pointer() for a in made]
    return sum(o.unsafe_buffer_pointer() == b for o, b in zip(call(made), before))


def torch_hook(grads: list[np.ndarray]):
    import torch

    from ml_comm.keras.backend import torch as hook

    tensors = [torch.from_numpy(g.copy()) for g in grads]
    return (lambda: None), (lambda _: hook.average(tensors, 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--framework", choices=("jax", "torch"), required=True)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", help="write the figures here (rank 0)")
    args = parser.parse_args()
    framework = "jax" if args.framework == "jax" else None
    shapes = resnet50_shapes()
    count = sum(int(np.prod(s)) for s in shapes)
    mc.init(2, 1, count, framework)
    rank, nranks = mc.get_rank(), mc.get_nranks()
    comm = mc.init_mpi().COMM_WORLD
    grads = inputs(shapes, rank)
    want = expected(shapes, nranks)
    numpy_path = mc.api.session().backend
    numpy_path = getattr(numpy_path, "host", numpy_path)
    calls = {
        "numpy": ((lambda: None), (lambda _: numpy_path.gradients(grads, 0))),
        args.framework: (jax_hook if args.framework == "jax" else torch_hook)(grads),
    }
    in_place = results_in_place(*calls["jax"]) if args.framework == "jax" else None
    times: dict[str, list[float]] = {name: [] for name in calls}
    wrong = dict.fromkeys(calls, 0)
    for rep in range(args.warmup + args.reps):
        for name, (prepare, call) in calls.items():
            out = None  # the last call's results are freed here, not inside the next timing
            made = prepare()
            comm.Barrier()
            start = time.perf_counter()
            out = call(made)
            seconds = time.perf_counter() - start
            if rep >= args.warmup:
                times[name].append(seconds)
            if rep == args.warmup:  # check once each: every element exactly
                got = [np.asarray(o) for o in out]
                wrong[name] = sum(int(np.count_nonzero(g != w)) for g, w in zip(got, want))
    info = mc.version_info()
    header = [
        f"ml_comm Keras-hook reduction on {args.framework} vs mc.gradients on NumPy arrays",
        f"ml_comm {info['ml_comm']}, {info['mpi_library'].splitlines()[0]}, ranks {nranks}",
        f"ResNet-50 gradient list: {len(shapes)} float32 tensors, {count} elements",
        f"{args.reps} calls each after {args.warmup} warm-up, alternating; median per call, "
        "the slowest rank's",
    ]
    if in_place is not None:
        header.append(f"JAX results in their operand's buffer: {in_place} of {len(shapes)}")
    extra = {"framework": args.framework, "results_in_place": in_place}
    wrong = report(comm, mc.init_mpi(), times, wrong, "numpy", header, args.json, extra)
    mc.finalize()
    return 0 if not any(wrong.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
