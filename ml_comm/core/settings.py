"""The table of ml_comm's environment variables, and the functions that read them.

Every `ML_COMM_*` variable ml_comm reads is a row of SETTINGS (name, default as users
see it, type, whether `init` compares it across ranks, what it does); the code reads
them with `get`, which parses the value by the row's type and falls back on its
default, so the table, the code and the documentation's table (made from SETTINGS by
tools/mkdocs_hooks.py) cannot disagree. An unset or empty variable takes the default.
A value that does not parse raises SettingsError naming the variable and the value.
`unknown` finds the ML_COMM_* variables set that are in no row (a misspelt name), each
with the row whose name is closest; init warns about them (settings_check.py).

The C core reads no environment: `init` reads these and hands the values over.
Two readers run where ml_comm cannot be imported and read os.environ themselves, under
the names listed here: the build (build_ffi.py: ML_COMM_CFLAGS; mpi_compiler.py:
ML_COMM_MPICC). tests/unit/test_settings_table.py keeps it so.

Pure Python: no import of the compiled core or of a higher layer (the documentation
build loads this file alone).
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .cpu_list import parse_per_local_rank
from .errors import SettingsError


@dataclass(frozen=True)
class Setting:
    name: str
    default: str  # as shown to users; "unset": the variable has no value by default
    type: str  # "bool", "int", "bytes", "microseconds", "seconds", "percent", "str", "path", "cpus"
    compared: bool  # compared across ranks at init (core/settings_check.py)
    effect: str  # one sentence


SETTINGS = (
    # What goes on the wire: every rank must hold the same value (init compares them).
    Setting("ML_COMM_CHUNK_BYTES", "1048576", "bytes", True,
            "Pipeline segment size of every team when init's chunk_bytes is not given."),
    Setting("ML_COMM_LATENCY_BYTES", "unset", "bytes", True,
            "Reductions smaller than this take recursive doubling instead of the ring "
            "(unset: the core's 524288)."),
    Setting("ML_COMM_RABENSEIFNER_BYTES", "unset", "bytes", True,
            "Up to this size, at a power-of-two rank count of 4 or more, reductions take "
            "Rabenseifner's algorithm; 0 turns it off (unset: the core's 8388608)."),
    Setting("ML_COMM_SUBMIT_BYTES", "unset", "bytes", True,
            "A TensorFlow gradient of one tensor up to this size (and ML_COMM_INLINE_BYTES) "
            "is reduced by its own op, not as a keyed group (unset: the core's 1048576)."),
    Setting("ML_COMM_INLINE_BYTES", "unset", "bytes", True,
            "Blocking calls up to this size run on the caller's thread instead of the "
            "team's threads (unset: the core's 4194304)."),
    Setting("ML_COMM_DIRECT_BYTES", "unset", "bytes", True,
            "Allreduces up to this size travel inside the agreement check's message; "
            "0 turns it off (unset: the core's 4096)."),
    Setting("ML_COMM_COMPRESSION", "none", "str", True,
            "none, bf16 or fp16: the values float32 reductions on the ring send, for "
            "every team (config_team sets one team's)."),
    Setting("ML_COMM_CHECK_LAYOUT", "1", "bool", True,
            "0 skips the agreement check before each request (a mismatch then hangs or "
            "reduces the wrong data instead of failing)."),
    Setting("ML_COMM_CHECK_FINITE", "0", "bool", True,
            "1 fails reductions whose input holds NaN or Inf, naming the ranks and tensors."),
    Setting("ML_COMM_WEIGHTS_CHECK", "1", "bool", True,
            "0 lets a job on more than one rank average a model's gradients a second step "
            "without having broadcast or checked its weights (each rank may train a model "
            "of its own)."),
    # Local to each rank.
    Setting("ML_COMM_STALL_WARN_SECONDS", "60", "seconds", False,
            "Warn about a wait this long, naming the ranks waited for, and again every "
            "as long; 0: never."),
    Setting("ML_COMM_STALL_ABORT_SECONDS", "1800", "seconds", False,
            "End the job (MPI_Abort) after a wait this long; 0: never "
            "(docs/fault-tolerance-defaults.md says why 30 minutes)."),
    Setting("ML_COMM_DEADLOCK_SECONDS", "120", "seconds", False,
            "End the job when every rank has waited inside ml_comm this long for requests "
            "the others have not made (teams called in another order on another rank), "
            "naming each rank's wait; ranks busy outside ml_comm keep the stall abort's "
            "limit; 0: never."),
    Setting("ML_COMM_ABORT_ON_EXCEPTION", "1", "bool", False,
            "An uncaught exception on one rank of several ends the whole job (MPI_Abort) "
            "instead of leaving the others waiting; 0 turns it off."),
    Setting("ML_COMM_SLOW_RANK_PERCENT", "3", "percent", False,
            "At finalize rank 0 names the ranks whose time outside ml_comm exceeds the "
            "median rank's by this many percent (the ranks every synchronous step waits "
            "for) and their hosts; 0: never."),
    Setting("ML_COMM_THREAD_SLICE_US", "100", "microseconds", False,
            "The time slice (µs) the teams' threads ask Linux for (6.12 and later), so "
            "that one woken to move bytes runs before a compute thread on its core ends "
            "its own; 0 keeps the kernel's."),
    Setting("ML_COMM_THREAD_CORES", "unset", "cpus", False,
            "The cores the teams' threads run on, a Linux CPU list such as 6-7 for every "
            "rank of a node, or one list per local rank separated by ':' (6-7:14-15); each "
            "thread may run on any core of its rank's list, which must be cores the rank may "
            "run on (unset: the cores they inherit from the thread that calls init)."),
    Setting("ML_COMM_ALLOW_ONE_RANK", "0", "bool", False,
            "1 lets init run when the launcher started several tasks but MPI sees one rank "
            "each (tasks meant to run alone)."),
    Setting("ML_COMM_REQUEUE_ON_STOP", "0", "bool", False,
            "1: after every rank stopped together on a signal, rank 0 requeues the Slurm "
            "job (scontrol requeue)."),
    Setting("ML_COMM_TIMELINE", "unset", "path", False,
            "Write what the teams' threads did as a Chrome trace to this file at finalize "
            '("{rank}" in it: the rank; otherwise one file per rank beside it).'),
    Setting("ML_COMM_TIMELINE_EVENTS", "1000000", "int", False,
            "How many events each team's timeline keeps."),
    Setting("ML_COMM_NUM_CUDA_STREAMS", "2", "int", False,
            "CUDA streams each team stages device arrays through (1-16): the first half "
            "carry copies to the host, the rest copies back (docs/gpu.md)."),
    Setting("ML_COMM_CPY_PER_CUDA_STREAM", "8", "int", False,
            "At most this many copies per staged piece on its stream (each piece's bytes "
            "cut so)."),
    Setting("ML_COMM_CUDA_PIECE_BYTES", "16777216", "bytes", False,
            "Device arrays are reduced in pieces of this size, staged through 3 pinned host "
            "buffers of it per team (48 MiB by default)."),
    Setting("ML_COMM_CUDA_LIBRARY", "unset", "path", False,
            "The CUDA driver library loaded at the first call with device arrays "
            "(unset: libcuda.so.1)."),
    Setting("ML_COMM_CHECK_SKIP_TF", "0", "bool", False,
            "1: `python -m ml_comm --check` leaves out TensorFlow and its op library."),
    Setting("ML_COMM_STRICT_SETTINGS", "0", "bool", False,
            "1: an ML_COMM_* variable that is not in this table makes init raise instead of "
            "warn (a misspelt name is otherwise ignored)."),
    Setting("ML_COMM_CACHE_DIR", "unset", "path", False,
            "Where `python -m ml_comm build-tf` puts the TensorFlow op library "
            "(unset: $XDG_CACHE_HOME/ml_comm, else ~/.cache/ml_comm)."),
    # Read when the C core is compiled (pip install), not at run time.
    Setting("ML_COMM_MPICC", "unset", "path", False,
            "The mpicc whose flags the C core is compiled with (unset: $MPICC, else the "
            "first mpicc on PATH); read by the build."),
    Setting("ML_COMM_CFLAGS", "unset", "str", False,
            "Extra C compiler flags for the C core (e.g. -DMLC_NO_LARGE_COUNT); read by "
            "the build."),
)  # fmt: skip

BY_NAME = {s.name: s for s in SETTINGS}
PREFIX = "ML_COMM_"
# Variables of the test suite and the developer tools (tests/, tools/), which the product
# does not read: never called unknown. The Horovod suite's runner hands its plugin
# ML_COMM_HVD_SUITE_* variables.
DEVELOPER_PREFIXES = ("ML_COMM_TEST", "ML_COMM_HVD_SUITE_")
DEVELOPER_VARIABLES = (
    "ML_COMM_HOROVOD_TESTS",
    "ML_COMM_LONG_TESTS",
    "ML_COMM_LONG_TESTBED",
    "ML_COMM_QUICK_TESTS",
    "ML_COMM_SKIP_TESTBED",
    "ML_COMM_TFCNN_TIMEOUT",
)

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise SettingsError(
        f"environment variable {name} must be 0 or 1 (or true/false, yes/no, on/off), got {raw!r}"
    )


def _int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(
            f"environment variable {name} must be an integer, got {raw!r}"
        ) from None


def _non_negative(name: str, raw: str) -> int:
    value = _int(name, raw)
    if value < 0:
        raise SettingsError(f"environment variable {name} must be >= 0, got {value}")
    return value


def _non_negative_number(name: str, raw: str, what: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise SettingsError(
            f"environment variable {name} must be {what} >= 0 (0: off), got {raw!r}"
        )
    return value


def _seconds(name: str, raw: str) -> float:
    return _non_negative_number(name, raw, "a number of seconds")


def _percent(name: str, raw: str) -> float:
    return _non_negative_number(name, raw, "a percentage")


def _text(name: str, raw: str) -> str:
    return raw.strip()


def _cpus(name: str, raw: str) -> tuple[tuple[int, ...], ...]:
    try:
        return parse_per_local_rank(raw)
    except ValueError as exc:
        raise SettingsError(
            f"environment variable {name} must be a Linux CPU list such as '6-7' or "
            f"'0,2,4-5', or one per local rank separated by ':' ('6-7:14-15'), got "
            f"{raw!r}: {exc}"
        ) from None


PARSERS = {
    "bool": _bool,
    "int": _int,
    "bytes": _non_negative,
    "microseconds": _non_negative,
    "seconds": _seconds,
    "percent": _percent,
    "str": _text,
    "path": _text,
    "cpus": _cpus,
}


def setting(name: str) -> Setting:
    """The row of `name`; KeyError for a name the table does not hold."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not in ml_comm's table of settings (core/settings.py)") from None


def get(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The value of `name` in `env` (default os.environ), parsed by its type; its
    default when unset or empty (None for a default of "unset")."""
    row = setting(name)
    raw = (os.environ if env is None else env).get(name)
    if raw is None or not raw.strip():
        if row.default == "unset":
            return None
        raw = row.default
    return PARSERS[row.type](name, raw)


def check_all(env: Mapping[str, str] | None = None) -> None:
    """Parse every setting: a malformed one raises SettingsError before anything starts."""
    for row in SETTINGS:
        get(row.name, env)


def compared() -> tuple[str, ...]:
    """The names that init compares across ranks."""
    return tuple(s.name for s in SETTINGS if s.compared)


def unknown(env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """Each ML_COMM_* variable set in `env` that ml_comm does not read, with the setting
    whose name is closest (None when none is close): a misspelt name does nothing."""
    env = os.environ if env is None else env
    found: dict[str, str | None] = {}
    for name in sorted(env):
        if not name.startswith(PREFIX) or name in BY_NAME or name in DEVELOPER_VARIABLES:
            continue
        if name.startswith(DEVELOPER_PREFIXES):
            continue
        # Compared without the prefix, which every name shares.
        suffixes = {known[len(PREFIX) :]: known for known in BY_NAME}
        close = difflib.get_close_matches(name[len(PREFIX) :], suffixes, n=1, cutoff=0.6)
        found[name] = suffixes[close[0]] if close else None
    return found


def unknown_text(found: Mapping[str, str | None]) -> str:
    """'ML_COMM_COMPRESION (did you mean ML_COMM_COMPRESSION?), ...'."""
    return ", ".join(
        f"{name} (did you mean {close}?)" if close else f"{name} (no setting is close)"
        for name, close in found.items()
    )
