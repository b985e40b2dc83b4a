"""With one inter-op thread (TensorFlow runs a step depth first), a tf.function's
gradients reach ml_comm as backprop produces them, not all at the step's end, at 2 and 3
ranks. Plain pytest around `mpiexec -n N python scripts/tf_overlap_one_thread.py` (the
thread count is set before TensorFlow starts, so it needs a process of its own)."""

from __future__ import annotations

import re

import pytest
from jobs import mpiexec_job

TIMEOUT_S = 240
# The arrivals of a step's gradients spread over its backprop, a good part of the
# step; gradients that waited for one late op all arrive within a millisecond.
MIN_SPAN_OF_STEP = 0.1


@pytest.mark.parametrize("nranks", [2, 3])
def test_gradients_arrive_during_backprop_with_one_inter_op_thread(nranks):
    job = mpiexec_job(nranks, "tf_overlap_one_thread.py", timeout=TIMEOUT_S)
    assert job.returncode == 0, job.detail()
    found = re.findall(
        r"rank (\d+) arrival-span-ms ([0-9.]+) step-ms ([0-9.]+) exact (\d)", job.stdout
    )
    assert sorted(int(r) for r, *_ in found) == list(range(nranks)), job.detail()
    for rank, span, step, exact in found:
        assert exact == "1", f"rank {rank}: the ranks' weights differ\n{job.detail()}"
        assert float(span) > MIN_SPAN_OF_STEP * float(step), (
            f"rank {rank}: the step's gradients arrived within {span} ms of a {step} ms step "
            f"(all at its end)\n{job.detail()}"
        )
