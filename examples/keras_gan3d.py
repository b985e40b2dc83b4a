"""A small 3D convolutional GAN for calorimeter showers, data-parallel on two ml_comm teams.

In the spirit of 3DGAN (CERN's GAN that generates electromagnetic showers in a
calorimeter as 3D images): a generator turns noise scaled by the primary energy into a
cells^3 grid of energy deposits; a discriminator says real or generated and, as 3DGAN's
auxiliary outputs do, estimates the primary energy and sums the deposits (the total
energy, which the generator must get right for the requested primary energy). The
training showers are synthetic (calo_showers.py: gamma-distributed longitudinal profile
with an energy-dependent maximum, core + halo transverse profile); nothing is downloaded.

Keras 3 training with ``train_on_batch``, as 3DGAN's loop does, plus ``ml_comm.keras``:
``init(nteams=2)``, ``set_team(combined, 0)`` (the model that trains the generator) and
``set_team(discriminator, 1)`` after compiling, ``finalize()`` at the end. Every rank
simulates its own showers (seeded by its rank), so each trains on its own data shard;
every step's gradients are averaged over the ranks on the model's team.

Two schedules (``--schedule``), both with ``train_on_batch``:

- ``alternate`` is 3DGAN's: per iteration the discriminator trains on a real and a
  generated batch, then the generator through the combined model, whose discriminator is
  a frozen copy refreshed with the discriminator's new weights. Each ``train_on_batch``
  returns only once its gradients are averaged and applied, so the two teams take turns:
  they never reduce at the same time.
- ``concurrent`` (the default) runs the discriminator's and the generator's steps of an
  iteration at the same time, in two threads: both start from the same state (the frozen
  copy is refreshed before the iteration: "simultaneous" GAN updates), so neither waits
  for the other, and team 1 averages the discriminator's gradients while team 0 averages
  the generator's or the generator computes. The results do not depend on the threads'
  timing. The other way to overlap the teams is a pipelined team (``mc.config_team``
  with ``ksteps``): the discriminator's step then applies the previous step's average
  while its own reduction runs behind the generator's step (one step of staleness
  instead of simultaneous updates). Overlap pays where communication takes time
  (between nodes); where the ranks already keep every core busy it buys nothing.

With ML_COMM_TIMELINE=trace.json rank 0 prints how long segment slices of the two teams
overlapped and how many segment batches of one team started while a reduction of the
other was under way (between the starts of its first and last batch: set
ML_COMM_CHUNK_BYTES=4096 so that a reduction has several); open the trace in Perfetto
to see the two teams' tracks.

At the end the script validates the generator the way physicists do: it generates
showers for the training showers' primary energies and compares the mean energy
profiles along x, y and z (sums over the other two axes), printed as a table (per-bin
mean energy, relative difference, and per axis the relative L1 distance
sum|gen - real| / sum(real)) and plotted to ``--plot``. It exits with status 1 if the
ranks' weights differ (``mc.check_buffers_match`` on both models).

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/keras_gan3d.py
    ML_COMM_TIMELINE=gan3d.json ML_COMM_CHUNK_BYTES=4096 \
        .venv/bin/mpiexec -n 2 .venv/bin/python examples/keras_gan3d.py --epochs 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from calo_showers import profile_distance, profiles, simulate  # noqa: E402

import ml_comm as mc  # noqa: E402
import ml_comm.keras as mk  # noqa: E402
from ml_comm.core import timeline  # noqa: E402

E_SCALE = 100.0  # GeV: primary energies enter the networks as E / E_SCALE
OUTPUTS = ("real", "energy", "total")  # P(real), primary energy, total deposited energy
LOG_KEYS = ("loss", "real_loss", "energy_loss", "total_loss")
LOSS_WEIGHTS = [3.0, 0.1, 0.1]  # real/fake, primary energy, total deposited energy
LOSSES = ["binary_crossentropy", "mean_absolute_percentage_error", "mean_absolute_percentage_error"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--epochs", type=int, default=4, help="epochs (4)")
    p.add_argument("--steps", type=int, default=32, help="iterations per epoch (32)")
    p.add_argument("--batch-size", type=int, default=16, help="showers per batch and rank (16)")
    p.add_argument("--cells", type=int, default=16, help="grid of cells^3, a multiple of 4 (16)")
    p.add_argument("--latent", type=int, default=32, help="generator input size (32)")
    p.add_argument("--lr", type=float, default=2e-3, help="RMSprop learning rate (2e-3)")
    p.add_argument(
        "--schedule", choices=("concurrent", "alternate"), default="concurrent", help="(concurrent)"
    )
    p.add_argument("--eval-showers", type=int, default=128, help="per rank, for the profiles")
    p.add_argument("--threads", type=int, default=1, help="ml_comm threads per team (1)")
    p.add_argument("--tf-threads", type=int, default=0, help="TF intra-op threads (0: TF's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the showers and weights (0)")
    p.add_argument("--plot", default="gan3d_profiles.png", help="PNG of the profiles (rank 0)")
    args = p.parse_args(argv)
    if args.cells < 4 or args.cells % 4:
        p.error(f"--cells must be a positive multiple of 4, got {args.cells}")
    for name in ("epochs", "steps", "batch_size", "latent", "eval_showers"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


# ---------------------------------------------------------------- the models


def build_generator(cells: int, latent: int) -> keras.Model:
    """latent (noise x E/E_SCALE) -> (cells, cells, cells, 1) energy deposits in GeV."""
    q = cells // 4
    return keras.Sequential(
        [
            keras.Input((latent,)),
            keras.layers.Dense(q * q * q * 32),
            keras.layers.LeakyReLU(0.2),
            keras.layers.Reshape((q, q, q, 32)),
            keras.layers.UpSampling3D(2),
            keras.layers.Conv3D(16, 3, padding="same"),
            keras.layers.LeakyReLU(0.2),
            keras.layers.Conv3D(8, 3, padding="same"),
            keras.layers.LeakyReLU(0.2),
            keras.layers.UpSampling3D(2),
            keras.layers.Conv3D(1, 3, padding="same", activation="relu"),
        ],
        name="generator",
    )


def build_discriminator(cells: int, name: str = "discriminator") -> keras.Model:
    """Shower -> [P(real), primary energy / E_SCALE, total deposited energy (GeV)].

    The last output is the sum of the input cells (no weights), as in 3DGAN: through the
    combined model it tells the generator to deposit the energy it was asked for."""
    shower = keras.Input((cells, cells, cells, 1))
    # Pooling rather than strided convolutions: TensorFlow's CPU gradients of strided
    # 3D convolutions are several times slower.
    h = keras.layers.Conv3D(8, 3, padding="same")(shower)
    h = keras.layers.LeakyReLU(0.2)(h)
    h = keras.layers.AveragePooling3D(2)(h)
    h = keras.layers.Conv3D(16, 3, padding="same")(h)
    h = keras.layers.LeakyReLU(0.2)(h)
    h = keras.layers.AveragePooling3D(2)(h)
    h = keras.layers.Flatten()(h)
    real = keras.layers.Dense(1, activation="sigmoid", name=OUTPUTS[0])(h)
    energy = keras.layers.Dense(1, name=OUTPUTS[1])(h)
    total = keras.layers.Lambda(lambda s: keras.ops.sum(s, axis=(1, 2, 3, 4)), name=OUTPUTS[2])(
        shower
    )
    return keras.Model(shower, [real, energy, total], name=name)


def build_models(args) -> tuple[keras.Model, keras.Model, keras.Model, keras.Model]:
    """(generator, discriminator, its frozen copy, combined: noise -> frozen(generator))."""
    generator = build_generator(args.cells, args.latent)
    discriminator = build_discriminator(args.cells)
    discriminator.compile(
        optimizer=keras.optimizers.RMSprop(args.lr), loss=LOSSES, loss_weights=LOSS_WEIGHTS
    )
    # The generator trains against a frozen copy of the discriminator rather than the
    # discriminator itself, so that the concurrent schedule's two steps share no variable.
    frozen = build_discriminator(args.cells, name="frozen_discriminator")
    frozen.trainable = False
    noise = keras.Input((args.latent,))
    outputs = [  # named like the discriminator's: the logs say "real_loss", not its name x3
        keras.layers.Identity(name=name)(out)
        for name, out in zip(OUTPUTS, frozen(generator(noise)))
    ]
    combined = keras.Model(noise, outputs, name="combined")
    combined.compile(
        optimizer=keras.optimizers.RMSprop(args.lr), loss=LOSSES, loss_weights=LOSS_WEIGHTS
    )
    return generator, discriminator, frozen, combined


# ---------------------------------------------------------------- training


class Batches:
    """This rank's shard: its own simulated showers, and the noise for the generator."""

    def __init__(self, args, rank: int):
        n = args.steps * args.batch_size
        self.showers, self.energies = simulate(n, args.cells, seed=(args.seed, rank))
        self.showers = self.showers[..., None]
        self.rng = np.random.default_rng((args.seed, rank, 1))
        self.args = args

    def containment(self) -> float:
        """Mean deposited / primary energy of this rank's showers."""
        return float(np.mean(self.showers.sum(axis=(1, 2, 3, 4)) / self.energies))

    def real(self, step: int):
        b = self.args.batch_size
        rows = slice(step * b, (step + 1) * b)
        return self.showers[rows], self.energies[rows]

    def noise(self, energies: np.ndarray) -> np.ndarray:
        z = self.rng.normal(size=(len(energies), self.args.latent)).astype(np.float32)
        return z * (energies[:, None] / E_SCALE)

    def energies_like(self, n: int) -> np.ndarray:
        return self.rng.uniform(10.0, 100.0, n).astype(np.float32)


def column(x) -> np.ndarray:
    return np.asarray(x, np.float32).reshape(-1, 1)


def discriminator_steps(discriminator, real, real_e, fake, fake_e) -> np.ndarray:
    """3DGAN's two discriminator updates: a real batch (label 1), a generated one (0)."""
    n = len(real_e)
    a = discriminator.train_on_batch(
        real,
        [np.ones((n, 1)), column(real_e / E_SCALE), column(real.sum(axis=(1, 2, 3, 4)))],
        return_dict=True,
    )
    b = discriminator.train_on_batch(
        fake,
        [np.zeros((n, 1)), column(fake_e / E_SCALE), column(fake.sum(axis=(1, 2, 3, 4)))],
        return_dict=True,
    )
    return np.array([(a[k] + b[k]) / 2 for k in LOG_KEYS])


def generator_step(combined, batches: Batches, containment: float) -> np.ndarray:
    """The generator's update: fool the frozen discriminator, hit the asked-for energies."""
    e = batches.energies_like(batches.args.batch_size)
    targets = [np.ones((len(e), 1)), column(e / E_SCALE), column(e * containment)]
    logs = combined.train_on_batch(batches.noise(e), targets, return_dict=True)
    return np.array([logs[k] for k in LOG_KEYS])


class Background:
    """Runs one function at a time in a thread of its own (the discriminator's steps)."""

    def __init__(self):
        self.result = self.error = None
        self.thread = None

    def start(self, fn, *args):
        def run():
            try:
                self.result = fn(*args)
            except BaseException as e:  # noqa: BLE001 - re-raised by join()
                self.error = e

        self.result = self.error = None
        self.thread = threading.Thread(target=run, name="discriminator")
        self.thread.start()

    def join(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.result


def train(args, models, batches: Batches, containment: float, rank: int) -> None:
    generator, discriminator, frozen, combined = models
    background = Background()
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        d_sum = np.zeros(4)
        g_sum = np.zeros(4)
        for step in range(args.steps):
            real, real_e = batches.real(step)
            fake_e = batches.energies_like(len(real_e))
            fake = generator.predict_on_batch(batches.noise(fake_e))
            # The first iteration runs in order, so that the two train steps are traced
            # one at a time (tracing is not something to do in two threads at once).
            concurrent = args.schedule == "concurrent" and (epoch, step) != (0, 0)
            if concurrent:
                frozen.set_weights(discriminator.get_weights())
                background.start(discriminator_steps, discriminator, real, real_e, fake, fake_e)
                g_sum += generator_step(combined, batches, containment)
                d_sum += background.join()
            else:
                d_sum += discriminator_steps(discriminator, real, real_e, fake, fake_e)
                frozen.set_weights(discriminator.get_weights())
                g_sum += generator_step(combined, batches, containment)
        losses = np.concatenate([d_sum, g_sum]) / args.steps
        mc.average(losses)  # the mean over the ranks, as fit would show
        if rank == 0:
            print(
                f"epoch {epoch + 1}/{args.epochs}  {time.perf_counter() - t0:6.1f} s  "
                f"D loss {losses[0]:.3f} (real/fake {losses[1]:.3f}, energy {losses[2]:.1f}%)  "
                f"G loss {losses[4]:.3f} (real/fake {losses[5]:.3f}, energy {losses[6]:.1f}%, "
                f"total {losses[7]:.1f}%)",
                flush=True,
            )


# ---------------------------------------------------------------- validation


def compare_profiles(args, generator, batches: Batches):
    """Mean profiles (3, cells) of training and generated showers of the same primary
    energies, averaged over the ranks (each rank contributes eval_showers showers)."""
    n = min(args.eval_showers, len(batches.energies))
    real, energies = batches.showers[:n], batches.energies[:n]
    fake = generator.predict(batches.noise(energies), batch_size=64, verbose=0)
    both = np.stack([profiles(real), profiles(fake)])
    mc.average(both)  # equal counts on every rank: the mean over all the showers
    return both[0], both[1]


def print_table(real: np.ndarray, fake: np.ndarray, n_showers: int) -> None:
    print(
        f"# energy profiles: mean energy per slice in GeV, {n_showers} training vs "
        f"{n_showers} generated showers of the same primary energies"
    )
    print(" bin |" + "|".join(f"   {a} real     {a} gen    rel " for a in "xyz"))
    for i in range(real.shape[1]):
        cols = []
        for axis in range(3):
            r, g = real[axis, i], fake[axis, i]
            rel = f"{100 * (g - r) / r:+6.0f}%" if r > 0 else "     - "
            cols.append(f" {r:9.4f} {g:9.4f} {rel}")
        print(f"{i:4d} |" + "|".join(cols))
    dist = profile_distance(real, fake)
    ratio = fake.sum(axis=1).mean() / real.sum(axis=1).mean()
    print(
        "profile distance sum|gen-real|/sum(real): "
        + "  ".join(f"{a} {d:.3f}" for a, d in zip("xyz", dist))
        + f"  (mean {dist.mean():.3f}); total energy gen/real {ratio:.3f}",
        flush=True,
    )


def plot(path: str, real: np.ndarray, fake: np.ndarray, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), constrained_layout=True)
    bins = np.arange(real.shape[1])
    for axis, ax in zip(range(3), axes):
        name = "xyz"[axis]
        ax.step(bins, real[axis], where="mid", color="black", label="training (simulated)")
        ax.plot(bins, fake[axis], "o", color="tab:red", markersize=4, label="GAN")
        ax.set_yscale("log")
        ax.set_xlabel(f"{name} cell" + (" (depth)" if name == "z" else ""))
        ax.set_ylabel("mean energy per slice [GeV]")
        ax.set_title(f"{name} profile")
    axes[0].legend()
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def timeline_concurrency(path: Path) -> tuple[float, int, int]:
    """From a rank's ML_COMM_TIMELINE trace: (seconds during which segment slices of both
    teams were open, as Perfetto shows them; number of segment batches of one team that
    started while a reduction of the other team was under way, i.e. after its first
    batch had started and before its last one did; number of batches). The count uses
    start times only; it needs reductions of several batches (small ML_COMM_CHUNK_BYTES)."""
    slices: dict[int, list] = {0: [], 1: []}
    starts: dict[tuple[int, int], list] = defaultdict(list)
    for e in json.loads(path.read_text())["traceEvents"]:
        if e["name"] == "segments":
            team = int(e["pid"].rsplit(" ", 1)[1])
            slices[team].append((e["ts"], e["ts"] + e["dur"]))
            starts[team, e["args"]["request"]].append(e["ts"])
    both = sum(max(0.0, min(b0, b1) - max(a0, a1)) for a0, b0 in slices[0] for a1, b1 in slices[1])
    under_way = {0: [], 1: []}
    for (team, _), ts in starts.items():
        under_way[team].append((min(ts), max(ts)))
    during = sum(
        any(first < a < last for first, last in under_way[1 - team])
        for team in (0, 1)
        for a, _ in slices[team]
    )
    return both * 1e-6, during, len(slices[0]) + len(slices[1])


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.tf_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.tf_threads)
    mk.init(nthread_per_team=args.threads, nteams=2)
    rank, nranks = mc.get_rank(), mc.get_nranks()
    t_start = time.perf_counter()

    batches = Batches(args, rank)
    containment = np.array([batches.containment()])
    mc.average(containment)  # the same target on every rank

    keras.utils.set_random_seed(1000 * args.seed + rank)  # different initial weights
    models = build_models(args)
    generator, discriminator, frozen, combined = models
    mk.set_team(combined, 0)  # broadcasts rank 0's generator; team 0 averages its gradients
    mk.set_team(discriminator, 1)  # team 1: the discriminator's

    if rank == 0:
        print(
            f"# 3D GAN, calorimeter showers {args.cells}^3 (Keras {keras.__version__}, "
            f"train_on_batch): {nranks} rank(s), schedule {args.schedule}, "
            f"generator {generator.count_params()} / discriminator "
            f"{discriminator.count_params()} parameters on teams 0 / 1, "
            f"{args.steps * args.batch_size} showers/rank, batch {args.batch_size}/rank, "
            f"{args.epochs} x {args.steps} iterations, containment {containment[0]:.3f}",
            flush=True,
        )
    train(args, models, batches, float(containment[0]), rank)
    real, fake = compare_profiles(args, generator, batches)

    mismatches = {
        "generator": mc.check_buffers_match(generator.get_weights()),
        "discriminator": mc.check_buffers_match(discriminator.get_weights()),
    }
    n_eval = min(args.eval_showers, len(batches.energies)) * nranks
    if rank == 0:
        print_table(real, fake, n_eval)
        title = (
            f"3D GAN on {args.cells}$^3$ showers, {nranks} rank(s), "
            f"{args.epochs} x {args.steps} iterations, {args.schedule}"
        )
        plot(args.plot, real, fake, title)
        print(f"profiles plotted to {args.plot}")
        print(
            "check_buffers_match: "
            + ", ".join(f"{name} {count}" for name, count in mismatches.items()),
            flush=True,
        )
    mk.finalize()  # writes the timeline, if ML_COMM_TIMELINE is set
    ok = not any(mismatches.values())
    if rank == 0:
        if timeline.enabled():
            both, during, batches = timeline_concurrency(timeline.path_for(0, nranks))
            print(
                f"timeline (rank 0): segment slices of teams 0 and 1 overlap for "
                f"{1e3 * both:.1f} ms; {during} of {batches} segment batches started while "
                f"the other team's reduction was under way"
            )
        verdict = "OK: weights identical" if ok else "FAILED: the weights differ"
        print(
            f"{verdict} on all {nranks} rank(s) in both models, "
            f"{time.perf_counter() - t_start:.1f} s",
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
