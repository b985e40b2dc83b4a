"""When each gradient of a Keras model is ready in backprop, on this CPU: the per-tensor
backward profile that the scale model (tools/project.py) scales to a target's step time.

    flock -s /work/bench.lock .venv/bin/python benchmarks/layer_profile.py \\
        --model inception3 --json benchmarks/results/layer_profile_inception3.json

The model is keras.applications' (weights=None, 1,000 classes, its own input size),
trained on one fixed random batch with SGD, in a tf.function: forward, GradientTape,
apply. Each gradient tensor has a timestamp op that depends on it alone (a stateless
tf.numpy_function of one of its elements that appends time.monotonic()), so it runs as
soon as backprop has produced that gradient, as ml_comm's per-gradient op would; the
step's start and its loss get one each. Over the timed steps (default 100, after 3
untimed), each tensor's arrival is taken from the loss (the end of the forward pass), and
the file keeps its median, with the backward window (loss to last gradient) and the
step's other parts.

Beside it the FLOP-proportional alternative: each layer's backward work is twice its
forward multiply-adds (the input's gradient and the weights'), given to the layer's
weight tensor and spent in reverse layer order; normalisations and biases count their
elementwise work.

The process runs on one core (the first it may use) with one intra-op thread, so that
the profile is the layers' own and another job on the machine's other core changes it
little.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

MODELS = {
    # name: keras.applications constructor, input side
    "resnet50": ("ResNet50", 224),
    "resnet101": ("ResNet101", 224),
    "inception3": ("InceptionV3", 299),
    "vgg16": ("VGG16", 224),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--batch", type=int, default=8, help="images per step")
    p.add_argument("--steps", type=int, default=100, help="timed steps (at least 100)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--json", required=True, help="where to write the profile")
    args = p.parse_args(argv)
    if args.steps < 100:
        p.error("--steps: a profile takes at least 100 timed steps")
    return args


def layer_flops(layer, out_shape, in_shape) -> float:
    """Forward multiply-adds of one layer for one image (0 for layers without weights)."""
    name = type(layer).__name__
    if name in ("Conv2D", "DepthwiseConv2D"):
        kh, kw = layer.kernel_size
        cin = in_shape[-1]
        cout = out_shape[-1] if name == "Conv2D" else cin
        per_out = kh * kw * (cin if name == "Conv2D" else 1)
        return float(out_shape[1] * out_shape[2] * cout * per_out)
    if name == "Dense":
        return float(in_shape[-1] * out_shape[-1])
    if name == "BatchNormalization":
        n = 1
        for d in out_shape[1:]:
            n *= d
        return 4.0 * n  # normalise, scale, shift; its gradients about the same again
    return 0.0


def flop_profile(model) -> dict[str, float]:
    """Backward FLOPs per trainable tensor (by variable path): a weighted layer's backward
    is twice its forward, on its kernel; a bias or a normalisation's parameters take
    the layer's elementwise work."""
    per: dict[str, float] = {}
    for layer in model.layers:
        if not layer.trainable_weights:
            continue
        flops = 2.0 * layer_flops(layer, layer.output.shape, layer.input.shape)
        weights = layer.trainable_weights
        if type(layer).__name__ == "BatchNormalization":
            for w in weights:
                per[w.path] = flops / len(weights)
            continue
        kernel = weights[0]
        per[kernel.path] = flops
        for w in weights[1:]:
            per[w.path] = float(w.shape.num_elements()) * 2.0
    return per


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    core = sorted(os.sched_getaffinity(0))[0]
    os.sched_setaffinity(0, [core])  # threads started later inherit it
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import keras

    ctor, side = MODELS[args.model]
    model = getattr(keras.applications, ctor)(
        weights=None, input_shape=(side, side, 3), classes=1000
    )
    variables = model.trainable_variables
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((args.batch, side, side, 3), dtype=np.float32))
    y = tf.constant(rng.integers(0, 1000, args.batch), dtype=tf.int32)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    optimizer.build(variables)

    stamps: list[tuple[int, float]] = []

    def stamper(key: int):
        def stamp(*_) -> np.int64:
            stamps.append((key, time.monotonic()))
            return np.int64(0)

        return stamp

    def stamp_after(key: int, value):
        # Stateless, with one element of the value as input: tf.function runs stateful
        # ops in the order written (which would hold every stamp until the first
        # variable's gradient, the last of backprop).
        first = tf.reshape(value, [-1])[:1]
        return tf.numpy_function(stamper(key), [first], tf.int64, stateful=False)

    START, LOSS = -2, -1

    @tf.function
    def step():
        token = tf.numpy_function(stamper(START), [], tf.int64, stateful=True)
        with tf.control_dependencies([token]):
            inputs = tf.identity(x)
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        tokens = [stamp_after(LOSS, loss)]
        grads = tape.gradient(loss, variables)
        tokens += [stamp_after(i, g) for i, g in enumerate(grads)]
        optimizer.apply(grads, variables)
        # The stamps' zeros in the result: a stamp that nothing reads would be pruned.
        return loss + tf.cast(tf.add_n(tokens), loss.dtype)

    for _ in range(args.warmup):
        float(step())
    per_step: list[dict[int, float]] = []
    starts, ends = [], []
    for _ in range(args.steps):
        stamps.clear()
        starts.append(time.monotonic())
        float(step())
        ends.append(time.monotonic())
        per_step.append(dict(stamps))
    n = len(variables)
    forward = [s[LOSS] - s[START] for s in per_step]
    backward = [max(s[i] for i in range(n)) - s[LOSS] for s in per_step]
    after = [e - max(s[i] for i in range(n)) for s, e in zip(per_step, ends)]
    arrival = [statistics.median(s[i] - s[LOSS] for s in per_step) for i in range(n)]
    flops = flop_profile(model)
    tensors = [
        {
            "path": v.path,
            "elements": int(v.shape.num_elements()),
            "arrival_s": round(arrival[i], 6),
            "backward_flops": flops.get(v.path, 0.0) * args.batch,
        }
        for i, v in enumerate(variables)
    ]
    out = {
        "model": args.model,
        "keras_model": ctor,
        "input": [side, side, 3],
        "batch": args.batch,
        "steps": args.steps,
        "tensors": len(tensors),
        "parameters": sum(t["elements"] for t in tensors),
        "step_s": {"median": statistics.median(e - s for s, e in zip(starts, ends))},
        "forward_s": {"median": statistics.median(forward)},
        "backward_s": {
            "median": statistics.median(backward),
            "min": min(backward),
            "max": max(backward),
        },
        "after_backward_s": {"median": statistics.median(after)},
        "order": "tensors in keras' trainable_variables order; arrival_s: median seconds "
        "from the loss to the gradient's timestamp",
        "command": "benchmarks/layer_profile.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "cpu": platform_cpu(),
        "tensor_list": tensors,
    }
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(
        f"{args.model}: {len(tensors)} tensors, step {out['step_s']['median']:.3f} s, "
        f"forward {out['forward_s']['median']:.3f} s, backward {out['backward_s']['median']:.3f} s"
    )
    return 0


def platform_cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
