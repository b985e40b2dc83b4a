"""16-bit values on the wire: the names users give and the core's codes.

`ML_COMM_COMPRESSION=bf16|fp16` sets it for every team at init; `config_team(team, ...,
compression="bf16")` for one team. float32 reductions that take the ring then send
bfloat16 or float16 and add in float32 (csrc/algos/allreduce_ring.c); the plan
(csrc/plan/plan.c) decides per request. Every rank must use the same setting: init
compares the variable, and each request's agreement check compares the team's value.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._core import ffi, lib
from . import settings

VARIABLE = "ML_COMM_COMPRESSION"
# The names users write, and the spellings NumPy and TensorFlow use for the same types.
CODES = {
    "none": lib.MLC_COMPRESSION_NONE,
    "bf16": lib.MLC_COMPRESSION_BF16,
    "bfloat16": lib.MLC_COMPRESSION_BF16,
    "fp16": lib.MLC_COMPRESSION_FP16,
    "float16": lib.MLC_COMPRESSION_FP16,
}


def code(value, what: str = "compression") -> int:
    """The core's code for a name ("none", "bf16", "fp16"; None and "" mean "none")."""
    if value is None:
        return lib.MLC_COMPRESSION_NONE
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string such as 'bf16', got {type(value).__name__}")
    key = value.strip().lower() or "none"
    if key not in CODES:
        raise ValueError(f"{what} must be 'none', 'bf16' or 'fp16', got {value!r}")
    return CODES[key]


def name(compression: int) -> str:
    """'none', 'bf16' or 'fp16', as the core names them."""
    return ffi.string(lib.mlc_compression_name(compression)).decode()


def from_env(env: Mapping[str, str] | None = None) -> int:
    """The code ML_COMM_COMPRESSION asks for (unset: none); SettingError (a ValueError
    too, as every malformed variable's) names a bad value."""
    try:
        return code(settings.get(VARIABLE, env), f"environment variable {VARIABLE}")
    except ValueError as exc:
        raise settings.SettingError(str(exc)) from None
