"""Every rank runs the same steps of `fit`: the agreement before `fit` runs
(`agree_on_steps`, one small allreduce per call).

Each rank puts in one table: its training steps per epoch and samples, a digest of its
first batch (ranks given the same data are told so), its BackupAndRestore count, rank
0's savers' batch counters, whether its callbacks may stop training, the sizes of its
first and last batch where its data say them (_batch_sizes), and the arguments that
decide fit's collective calls (_CALL_SHAPE). After the sum every rank reads the same
table: arguments that differ raise MismatchError naming them, and uneven data is cut to
the fewest steps (arrays to the fewest samples, so that every step's batch is the same
size on every rank; datasets to the fewest batches, less a last one whose size differs
between the ranks), with one warning on rank 0.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import zlib

import keras
import numpy as np

from .. import api as mc
from ..core.errors import MismatchError
from ..core.output import say
from ..core.settings_check import disagreements
from .backend import current
from .callbacks import ShareState, StopTogether
from .metrics import GlobalMetrics

_said: set[str] = set()  # the warnings given in this session
# The savers with an integer save_freq that fit agrees on.
_MOST_COUNTERS = 4


def forget() -> None:
    """finalize: the next session warns again."""
    _said.clear()


def _local_steps(arguments) -> tuple[int, int]:
    """(training steps per epoch, training samples) of this rank's `fit` call; -1 where
    it cannot be known before the data is read (generators, unknown cardinality)."""
    x = arguments.get("x")
    steps_per_epoch = arguments.get("steps_per_epoch")
    if steps_per_epoch is not None:
        return int(steps_per_epoch), -1
    batches = current().batches_of(x)  # tf.data, a torch DataLoader
    if batches is not None:
        return batches, -1
    if isinstance(x, keras.utils.PyDataset):
        try:
            return int(len(x)), -1
        except (TypeError, NotImplementedError):
            return -1, -1
    samples = sample_count(x)
    if samples < 0:
        return -1, -1
    split = _validation_split(arguments)
    train = int(math.floor(samples * (1.0 - split))) if split else samples
    batch = _batch_size(arguments)
    return math.ceil(train / batch), train


def sample_count(x) -> int:
    if x is None:
        return -1
    leaves = keras.tree.flatten(x)
    if not leaves or not all(_is_array(a) for a in leaves):
        return -1
    return int(leaves[0].shape[0])


def _is_array(value) -> bool:
    """A NumPy array or a tensor of the backend (Keras slices either into batches)."""
    return isinstance(value, np.ndarray) or keras.ops.is_tensor(value)


# fit's arguments that decide its collective calls, each rank's as a number in the table of
# agree_on_steps: how many epochs run (and from which), whether and when validation runs
# (each is an evaluate, whose metrics are reduced), and whether the logs are reduced after
# every batch. Ranks that differ would pair one call with another. Last, the batch size
# of arrays: ranks whose batches differ in size would run other numbers of steps, or
# average a large batch's gradient with a small one's as equals.
_CALL_SHAPE = (
    "epochs",
    "initial_epoch",
    "validation",
    "validation_freq",
    "per-batch metrics",
    "batch_size",
)


def _call_shape(arguments, metrics: GlobalMetrics | None) -> list[float]:
    """This rank's _CALL_SHAPE, as numbers: validation_freq only where the rank
    validates (Keras reads it only then), a list of epochs as a digest of its numbers,
    anything else as -1 (Keras judges it)."""
    validates = arguments.get("validation_data") is not None or _validation_split(arguments) > 0
    freq = arguments.get("validation_freq", 1) if validates else 0
    if isinstance(freq, numbers.Integral):
        code = float(freq)
    elif isinstance(freq, (list, tuple, set, range)) and all(
        isinstance(e, numbers.Integral) for e in freq
    ):
        code = -2.0 - zlib.crc32(repr(sorted(int(e) for e in freq)).encode())
    else:
        code = -1.0
    return [
        _number(arguments.get("epochs", 1)),
        _number(arguments.get("initial_epoch", 0)),
        float(validates),
        code,
        float(metrics is not None and metrics.per_batch),
        float(_batch_size(arguments)) if sample_count(arguments.get("x")) >= 0 else 0.0,
    ]


def _number(value) -> float:
    return float(value) if isinstance(value, numbers.Real) else -1.0


def _shape_text(column: int, value: float) -> str:
    """What a column's value says; values that differ read differently."""
    if column == 2:
        return "given" if value else "none"
    if column == 3 and value <= -2:
        return f"a list of epochs (digest {int(-2 - value):08x})"
    if column == 4:
        return "on" if value else "off"
    if column == 5 and value == 0:
        return "not used (the data are not arrays)"
    if value == -1:
        return "not a number"
    return str(int(value)) if value.is_integer() else str(value)


def _check_call_shapes(shapes: np.ndarray) -> None:
    """MismatchError on every rank (all read the same table) naming each of fit's
    arguments that differs between the ranks, with who passed what."""
    per_rank = [
        {name: _shape_text(c, row[c]) for c, name in enumerate(_CALL_SHAPE)} for row in shapes
    ]
    lines = disagreements(per_rank)
    if lines:
        raise MismatchError(
            "ml_comm.keras: the ranks called fit with different arguments, which decide its "
            "collective calls (epochs, validation, GlobalMetrics(per_batch=...), the batch "
            "size): " + " | ".join(lines) + ". Pass every rank's fit the same ones"
        )


def agree_on_steps(
    arguments,
    team: int,
    stopper: StopTogether,
    sharer: ShareState,
    metrics: GlobalMetrics | None = None,
) -> bool:
    """Make every rank run the same number of training steps per epoch, the smallest
    rank's (one small allreduce per fit call); warn once, on rank 0, when that drops data.
    The same allreduce tells every rank whether any rank's callbacks may stop training
    after a batch or an epoch, and when rank 0's callbacks save (the ranks' callbacks
    may differ: a checkpoint on rank 0 alone): then all agree, or share, there.

    Arrays of different lengths are all cut to the shortest, so that every step's
    batches are the same size on every rank too (the average of the ranks' gradients is
    then the gradient of the global batch, as one process would compute it, also for the
    last, partial batch). Datasets are cut to the fewest batches. Returns whether every
    rank's number of steps was known before its data is read."""
    steps, samples = _local_steps(arguments)
    rank, nranks = mc.get_rank(), mc.get_nranks()
    if nranks == 1:
        return True
    # Per rank: steps, samples, the data's fingerprint and its BackupAndRestore count;
    # then the batch counters of rank 0's savers with an integer save_freq (they write on
    # rank 0 alone: wrapped on the other ranks, they neither save nor count there), the
    # two stop flags; last, each rank's call shape.
    shaped = len(_CALL_SHAPE) * nranks
    sized = 4 * nranks + 4 * _MOST_COUNTERS + 2  # each rank's _batch_sizes
    table = np.zeros(sized + _SIZES * nranks + shaped, np.float64)
    table[sized + _SIZES * rank : sized + _SIZES * (rank + 1)] = _batch_sizes(arguments, steps)
    shape_row = len(table) - shaped + rank * len(_CALL_SHAPE)
    table[shape_row : shape_row + len(_CALL_SHAPE)] = _call_shape(arguments, metrics)
    table[rank], table[nranks + rank] = steps, samples
    first_rows = min(samples, _batch_size(arguments))  # the batch the digest reads
    table[2 * nranks + rank] = _fingerprint(arguments, samples, first_rows)
    table[3 * nranks + rank] = sharer.backups
    counters = table[4 * nranks : 4 * nranks + 4 * _MOST_COUNTERS].reshape(_MOST_COUNTERS, 4)
    if rank == 0:
        mine = sharer.rows()
        if len(mine) > _MOST_COUNTERS:
            counters[0, 0] = -1  # too many: every rank raises below
        elif mine:
            counters[: len(mine)] = mine
    flags = 4 * nranks + 4 * _MOST_COUNTERS
    table[flags : flags + 2] = stopper.agree_per_batch, stopper.agree_per_epoch
    mc.allreduce_sum(table, team)
    _check_call_shapes(table[len(table) - shaped :].reshape(nranks, len(_CALL_SHAPE)))
    stopper.agree_per_batch = bool(table[flags] > 0)
    stopper.agree_per_epoch = bool(table[flags + 1] > 0)
    backups = table[3 * nranks : 4 * nranks]
    if len(set(backups)) > 1:
        without = [r for r in range(nranks) if backups[r] < backups.max()]
        raise ValueError(
            f"ml_comm.keras: rank(s) {_listing(without)} pass fewer BackupAndRestore "
            "callbacks to fit than the others: pass it on every rank (every rank restores "
            "from the backup, rank 0 writes it)"
        )
    if counters[0, 0] < 0:
        raise ValueError(
            f"ml_comm.keras: more than {_MOST_COUNTERS} ModelCheckpoint or BackupAndRestore "
            "callbacks with an integer save_freq passed to fit"
        )
    sharer.agree([row for row in counters if row[0] > 0])
    _warn_if_one_data(table[2 * nranks : 3 * nranks], first_rows)
    sizes = table[sized : sized + _SIZES * nranks].reshape(nranks, _SIZES).astype(np.int64)
    table = table[: 2 * nranks]
    all_steps = [int(s) for s in table[:nranks]]
    all_samples = [int(s) for s in table[nranks:]]
    if min(all_steps) < 0:
        return False  # unknown somewhere: a mismatch is reported at the epoch's end
    fewest = min(all_steps)
    ragged = _ragged_last_batch(sizes, all_steps, fewest)
    fewest -= ragged
    if arguments.get("steps_per_epoch") is None and min(all_samples) >= 0:
        if len(set(all_samples)) == 1:
            return True
        batch = _batch_size(arguments)
        keep = min(all_samples)
        _truncate_arrays(arguments, keep)
        fewest = -(-keep // batch)
        dropped = _listing(s - keep for s in all_samples)
        what = (
            f"{_listing(all_samples)} training samples ({_listing(all_steps)} steps of "
            f"{batch}); every rank trains on {keep} per epoch (dropping {dropped})"
        )
    elif len(set(all_steps)) == 1 and not ragged:
        return True
    elif arguments.get("steps_per_epoch") is not None:
        arguments["steps_per_epoch"] = fewest
        what = f"steps_per_epoch {_listing(all_steps)}"
    else:
        x = arguments["x"]
        if isinstance(x, keras.utils.PyDataset):
            arguments["x"] = _FirstBatches(x, fewest)
        else:
            arguments["x"] = current().first_batches(x, fewest)  # tf.data, DataLoader
        dropped = _listing(s - fewest for s in all_steps)
        what = f"{_listing(all_steps)} batches per epoch (dropping {dropped} batches)"
        if ragged:
            lasts = _listing(
                int(sizes[r, 1 if s == fewest + 1 else 0]) for r, s in enumerate(all_steps)
            )
            where = "fit shuffles the batches, and it" if sizes[:, 3].any() else "its step"
            what += (
                f"; their batch {fewest + 1} holds {lasts} samples, and {where} would average "
                "a small batch's gradient with a large one's as equals"
            )
    if rank == 0:
        say(
            f"ml_comm: warning: uneven data: ranks 0..{nranks - 1} have {what}, so that "
            f"every rank runs {fewest} steps per epoch"
        )
    return True


# Per rank, what its data say of their batches (_batch_sizes): the samples of the first
# and of the last batch, whether the sizes are exact (a DataLoader's sampler; else a
# PyDataset's two batches, read), and whether fit shuffles the batches' order.
_SIZES = 4


def _batch_sizes(arguments, steps: int) -> tuple[int, int, int, int]:
    """(samples in the first batch, in the last, exact, shuffled) of a PyDataset or a
    torch DataLoader of `steps` batches: a DataLoader's from its batch sampler (exact,
    every batch full but the last; its sampler shuffles samples, not batches), a
    PyDataset's by reading its first and last batch (whose others may hold other sizes;
    fit shuffles its batches' order unless shuffle=False); zeros where unknown (arrays
    are cut to equal batches; other data are read only by training). Never raises: the
    others wait in the allreduce for this rank."""
    x = arguments.get("x")
    if steps <= 0 or arguments.get("steps_per_epoch") is not None:
        return 0, 0, 0, 0
    try:
        if isinstance(x, keras.utils.PyDataset):
            shuffled = int(bool(arguments.get("shuffle", True)))
            return _rows(x[0]), _rows(x[steps - 1]), 0, shuffled
        sampler = getattr(x, "batch_sampler", None)  # a torch DataLoader's
        batch = getattr(sampler, "batch_size", None)
        if isinstance(batch, int) and isinstance(getattr(sampler, "drop_last", None), bool):
            if sampler.drop_last:
                return batch, batch, 1, 0
            samples = len(sampler.sampler)
            return min(batch, samples), samples - (steps - 1) * batch, 1, 0
    except Exception:  # noqa: BLE001 - unknown; training reads the data and says what fails
        pass
    return 0, 0, 0, 0


def _rows(batch) -> int:
    """A batch's samples: the first dimension of its inputs' first array (0: unknown)."""
    inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
    leaves = keras.tree.flatten(inputs)
    shape = getattr(leaves[0], "shape", ()) if leaves else ()
    return int(shape[0]) if len(shape) and shape[0] is not None else 0


def _ragged_last_batch(sizes: np.ndarray, all_steps: list[int], fewest: int) -> bool:
    """Whether the last of the `fewest` steps must be dropped (sizes: each rank's
    _batch_sizes), so that no step averages a small batch's gradient with a large one's
    as equals: where the ranks' batches there differ in size, or, where fit shuffles a
    PyDataset's batches, where some rank's is a partial batch (it lands on any step).
    First batches that differ: MismatchError where the sizes are exact (another batch
    size, or a rank with less than one batch), else a warning (a PyDataset may batch by
    length: its sizes vary by design)."""
    if (sizes[:, :2] <= 0).any():
        return False
    firsts = sizes[:, 0].tolist()
    if len(set(firsts)) > 1:
        what = (
            f"the ranks' first batches hold {_listing(firsts)} samples on ranks "
            f"0..{len(firsts) - 1} (another batch size, or a rank with less than one batch), "
            "and a step would average a large batch's gradient with a small one's as equals"
        )
        if sizes[:, 2].all():
            raise MismatchError(f"ml_comm.keras: {what}. Give every rank batches of one size")
        _warn_once("batch sizes", f"ml_comm: warning: {what}; give every rank batches of one size")
        return False
    if fewest < 2:  # the only step: nothing is left to train on without it
        return False
    used = [int(sizes[r, 1 if s == fewest else 0]) for r, s in enumerate(all_steps)]
    if sizes[:, 3].any():
        return min(used) < firsts[0]
    return len(set(used)) > 1


def _warn_once(key: str, text: str) -> None:
    """Rank 0 says `text`, once a session."""
    if key not in _said:
        _said.add(key)
        if mc.get_rank() == 0:
            say(text)


def _batch_size(arguments) -> int:
    return int(arguments.get("batch_size") or 32)  # Keras's default


def _fingerprint(arguments, samples: int, rows: int) -> int:
    """Arrays' training data: a 48-bit digest (exact in a float64) of its count and its
    first batch of x, the same on ranks that were given the same data; 0 where unknown."""
    if samples <= 0:
        return 0
    first = keras.tree.flatten(arguments["x"])[0]
    digest = hashlib.blake2b(str(samples).encode(), digest_size=6)
    digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(first[:rows])).tobytes())
    return int.from_bytes(digest.digest(), "little") or 1


def _warn_if_one_data(fingerprints, rows: int) -> None:
    """Rank 0 warns, once a session, when every rank was given the same training arrays:
    the ranks then train on copies of one data set, and with the same shuffling (or none)
    average copies of one gradient, no faster than one rank."""
    if fingerprints[0] == 0 or len(set(fingerprints.tolist())) != 1 or "one data" in _said:
        return
    _said.add("one data")
    if mc.get_rank() == 0:
        say(
            f"ml_comm: warning: every rank was given the same training data (as many "
            f"samples, the same first {rows}): each rank trains on all of it, and ranks that "
            "shuffle alike (or not at all) average copies of one gradient, no faster than "
            "one rank. Give each rank its share: x = ml_comm.data.shard(x) (rows "
            "rank::nranks), the same for y"
        )


class _FirstBatches(keras.utils.PyDataset):
    """The first `count` batches of a PyDataset, every epoch (steps_per_epoch would go on
    where the previous epoch stopped)."""

    def __init__(self, inner: keras.utils.PyDataset, count: int):
        super().__init__(
            workers=inner.workers,
            use_multiprocessing=inner.use_multiprocessing,
            max_queue_size=inner.max_queue_size,
        )
        self.inner, self.count = inner, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        return self.inner[index]

    def on_epoch_begin(self):
        self.inner.on_epoch_begin()

    def on_epoch_end(self):
        self.inner.on_epoch_end()


def _validation_split(arguments) -> float:
    """The split Keras takes: none when validation_data is given (it wins, as in Keras)."""
    if arguments.get("validation_data") is not None:
        return 0.0
    return float(arguments.get("validation_split") or 0.0)


def _listing(values) -> str:
    return ", ".join(str(v) for v in values)


def _truncate_arrays(arguments, keep: int) -> None:
    """Keep the first `keep` training samples of x, y and sample_weight; a validation
    split is taken first, from all samples, as Keras would."""
    names = [n for n in ("x", "y", "sample_weight") if arguments.get(n) is not None]
    split = _validation_split(arguments)
    if split:
        samples = sample_count(arguments["x"])
        at = int(math.floor(samples * (1.0 - split)))
        validation = tuple(keras.tree.map_structure(lambda a: a[at:], arguments[n]) for n in names)
        arguments["validation_data"] = validation
        arguments["validation_split"] = 0.0
        for n in names:
            arguments[n] = keras.tree.map_structure(lambda a: a[:at], arguments[n])  # noqa: B023
    for n in names:
        arguments[n] = keras.tree.map_structure(lambda a: a[:keep], arguments[n])
