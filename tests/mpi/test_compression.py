"""16-bit values on the wire (config_team(..., compression="bf16"|"fp16")), NumPy API.

float32 reductions that take the ring at more than one rank travel as bfloat16 or
float16 and are added in float32; every rank returns the same float32 bits, each a
16-bit value (the owner of a block keeps exactly the value it sends). Checked: exact
results on inputs whose sums 16 bits hold (an average's quotient rounded to 16 bits,
the same rounding as NumPy's astype), bit-identical and repeatable results on random
inputs, other dtypes and the latency paths untouched, float16 overflow failing alike
on every rank, and ranks whose settings differ failing with their ranks named. The
rules of mpi_helpers.py hold (same calls on every rank, checks gathered at the end).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from mpi_helpers import Checks, expected_average, make_input

import ml_comm as mc
from ml_comm.core.errors import MismatchError, WireOverflowError

pytestmark = pytest.mark.mpi

WIRE = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}
# With the session's scaled thresholds (mpi_helpers): 5 elements ride the agreement
# exchange, 37 take recursive doubling, 1500 the ring on the caller's thread, 20011 the
# ring on the team's threads. Only the last two are compressed.
RING_COUNTS = [1500, 20011]
LATENCY_COUNTS = [5, 37]


@pytest.fixture(params=["bf16", "fp16"])
def wire(request, session):
    """Team 0 with this compression for one test, float32 on the wire again after it."""
    mc.config_team(0, mc.ALG_AUTO, 0, 0, compression=request.param)
    yield request.param
    mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="none")


def small_ints(rank: int, count: int, seed: int = 0) -> np.ndarray:
    """Integers in [-8, 8]: every partial sum over 4 ranks is exact in 16 bits."""
    i = np.arange(count, dtype=np.int64)
    return (((i * 7 + rank * 3 + seed) % 17) - 8).astype(np.float32)


def wire_average(count: int, nranks: int, wire: str, seed: int = 0) -> np.ndarray:
    """The float32 average, rounded to the wire's type as the ring's allgather sends it."""
    total = sum(small_ints(r, count, seed) for r in range(nranks))
    quotient = total / np.float32(nranks)
    return quotient.astype(WIRE[wire]).astype(np.float32) if nranks > 1 else quotient


def is_16_bit(x: np.ndarray, wire: str) -> bool:
    return bool(np.array_equal(x.astype(WIRE[wire]).astype(np.float32), x))


def test_settings_report_the_compression(session, wire):
    assert mc.team_settings(0)["compression"] == wire
    assert mc.team_settings(1)["compression"] == "none"


@pytest.mark.parametrize("count", RING_COUNTS)
def test_average_exact_on_16_bit_inputs(session, wire, count):
    c = Checks()
    x = small_ints(session.rank, count)
    c.equal(mc.average(x), wire_average(count, session.nranks, wire), f"average of {count}")
    c.finish()


@pytest.mark.parametrize("count", LATENCY_COUNTS)
def test_latency_paths_stay_float32(session, wire, count):
    c = Checks()
    x = small_ints(session.rank, count)
    total = sum(small_ints(r, count) for r in range(session.nranks))
    c.equal(mc.average(x), total / np.float32(session.nranks), f"average of {count}")
    c.finish()


def test_gradients_exact_on_16_bit_inputs(session, wire):
    """A fused list (small tensors packed, large ones reduced where they lie)."""
    c = Checks()
    counts = [3, 20011, 40, 1500]
    grads = [small_ints(session.rank, n, seed=k) for k, n in enumerate(counts)]
    out = mc.gradients(grads, 0)
    for k, n in enumerate(counts):
        c.equal(out[k], wire_average(n, session.nranks, wire, seed=k), f"gradients[{k}]")
    c.finish()


def test_random_inputs_same_16_bit_results_everywhere_and_again(session, wire):
    c = Checks()
    rng = np.random.default_rng(77 + session.rank)
    x = (rng.standard_normal(20011) * 10 ** rng.uniform(-2, 2, 20011)).astype(np.float32)
    first, second = mc.gradients([x], 0)[0], mc.gradients([x], 0)[0]
    c.true(first.tobytes() == second.tobytes(), "the same inputs gave other bits")
    c.same_on_all_ranks([first], f"{wire} average of random float32")
    reference = mc.gradients([x], 1)[0]  # team 1: float32 on the wire
    if session.nranks > 1:
        c.true(is_16_bit(first, wire), "a result is not a 16-bit value")
        c.true(not np.array_equal(first, reference), "the results look uncompressed")
        # Rounded once per hop and once at the end, each within half a 16-bit ulp.
        ulp = 2.0 ** (-8 if wire == "bf16" else -11)
        scale = np.abs(np.stack(session_inputs(session, 77))).sum(axis=0) / session.nranks
        c.true(np.all(np.abs(first - reference) <= 2 * session.nranks * (ulp * scale + 2.0**-24)),
               "a result is further from the float32 average than the roundings allow")  # fmt: skip
    else:
        c.equal(first, reference, "one rank: nothing on the wire")
    c.finish()


def session_inputs(session, seed: int) -> list[np.ndarray]:
    out = []
    for r in range(session.nranks):
        rng = np.random.default_rng(seed + r)
        out.append(
            (rng.standard_normal(20011) * 10 ** rng.uniform(-2, 2, 20011)).astype(np.float32)
        )
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float16, ml_dtypes.bfloat16, np.int32])
def test_other_dtypes_go_uncompressed(session, wire, dtype):
    c = Checks()
    x = make_input(session.rank, (20011,), np.dtype(dtype))
    want = expected_average((20011,), np.dtype(dtype), session.nranks)
    c.equal(mc.gradients([x], 0)[0], want, f"{np.dtype(dtype).name} under {wire}")
    c.finish()


def test_fp16_overflow_fails_on_every_rank_naming_the_tensor(session):
    """Values beyond +-65504 cannot travel as float16: the call fails alike on every
    rank (each sees the same Inf on the wire), and the team goes on in step."""
    c = Checks()
    mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="fp16")
    try:
        grads = [small_ints(session.rank, 1500), np.full(20011, 70000.0, np.float32)]
        if session.nranks > 1:
            c.raises(WireOverflowError, mc.gradients, grads, 0, words=["float16 overflow"])
            e = c.raises(WireOverflowError, mc.gradients, grads, 0, words=["gradients[1]"])
            c.true(e is None or "65504" in str(e), f"the message names no range: {e}")
        else:
            out = mc.gradients(grads, 0)  # one rank: nothing on the wire
            c.equal(out[1], grads[1], "one rank")
        ok = mc.gradients([small_ints(session.rank, 20011)], 0)[0]
        c.equal(ok, wire_average(20011, session.nranks, "fp16"), "the next call")
    finally:
        mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="none")
    c.finish()


def test_bf16_has_float32_range(session, wire):
    c = Checks()
    big = np.full(20011, 70000.0 + session.rank, np.float32)
    if wire == "fp16":
        pytest.skip("float16's range: test_fp16_overflow_fails_on_every_rank_naming_the_tensor")
    out = mc.gradients([big], 0)[0]
    c.same_on_all_ranks([out], "bf16 average of large values")
    c.true(np.all(np.abs(out / 70000.0 - 1) < 0.01), f"far from 70000: {out[:3]}")
    c.finish()


def test_ranks_with_other_compression_fail_naming_them(session):
    if session.nranks == 1:
        pytest.skip("needs 2 or more ranks")
    c = Checks()
    mine = "bf16" if session.rank == 0 else "none"
    mc.config_team(0, mc.ALG_AUTO, 0, 0, compression=mine)
    try:
        x = small_ints(session.rank, 20011)
        e = c.raises(MismatchError, mc.average, x, words=["ranks disagree"])
        message = str(e)
        c.true("rank 0 submitted" in message and "compression=bf16" in message, message)
        others = "rank 1" if session.nranks == 2 else f"ranks 1-{session.nranks - 1}"
        c.true(f"{others} submitted" in message, message)
    finally:
        mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="none")
    x = small_ints(session.rank, 20011)
    total = sum(small_ints(r, 20011) for r in range(session.nranks))
    c.equal(mc.average(x), total / np.float32(session.nranks), "in step again")
    c.finish()


def test_bad_compression_names_raise_before_anything_is_sent(session):
    with pytest.raises(ValueError, match="'none', 'bf16' or 'fp16'"):
        mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="int8")
    with pytest.raises(TypeError):
        mc.config_team(0, mc.ALG_AUTO, 0, 0, compression=16)
    assert mc.team_settings(0)["compression"] == "none"


@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_rabenseifner_carries_16_bit_values(session, name):
    """The algorithm the plan takes above 64 ranks, chosen here at any rank count: exact
    on 16-bit sums, the same 16-bit bits on every rank, float16 overflow failing alike."""
    c = Checks()
    mc.config_team(0, mc.ALG_RABENSEIFNER, 0, 0, compression=name)
    try:
        counts = [1500, 20011]
        out = mc.gradients([small_ints(session.rank, n, seed=k) for k, n in enumerate(counts)], 0)
        for k, n in enumerate(counts):
            c.equal(out[k], wire_average(n, session.nranks, name, seed=k), f"gradients[{k}]")
        rng = np.random.default_rng(5 + session.rank)
        x = (rng.standard_normal(20011) * 10 ** rng.uniform(-2, 2, 20011)).astype(np.float32)
        noisy = mc.gradients([x], 0)[0]
        c.same_on_all_ranks([noisy], f"{name} Rabenseifner average of random float32")
        c.true(session.nranks == 1 or is_16_bit(noisy, name), "a result is not a 16-bit value")
        big = [np.full(20011, 2.0**17, np.float32)]  # beyond float16, exact in bfloat16
        if session.nranks > 1 and name == "fp16":
            c.raises(WireOverflowError, mc.gradients, big, 0, words=["float16 overflow"])
        else:
            c.true(np.all(mc.gradients(big, 0)[0] == 2.0**17), "2**17 does not come back")
    finally:
        mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="none")
    c.finish()
