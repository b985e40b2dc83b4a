"""The 3D GAN example (examples/keras_gan3d.py) at 1, 2 and 3 ranks with tiny settings:
it exits 0, prints its header, epochs, profile table and check_buffers_match result on
rank 0 only, writes the PNG, and the ranks end with identical weights in both models.

With ML_COMM_TIMELINE the two teams are checked for concurrency, from start times only
(an end is taken once a batch's results are unpacked, which a busy machine can
delay): a team's reduction is certainly under way between the
starts of its first and its last segment batch (it has not finished its last batch
while that has not started). ML_COMM_CHUNK_BYTES=4096 cuts every reduction into several
batches. Under the concurrent schedule some batches of one team must start while a
reduction of the other team is under way, on every rank; under the alternate schedule
(3DGAN's order: every train_on_batch has averaged and applied its gradients before the
next one starts) none may, which shows that the check tells the two apart.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from example_runner import run_example

CELLS = 8
TINY = [
    "--epochs", "2", "--steps", "4", "--batch-size", "4", "--cells", str(CELLS),
    "--eval-showers", "8", "--tf-threads", "1",
]  # fmt: skip

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras", "matplotlib")),
    reason="needs TensorFlow, Keras 3 and matplotlib (pip install 'ml_comm[tf,examples]')",
)


def check_output(out: str, nranks: int, schedule: str) -> None:
    lines = out.splitlines()
    headers = [line for line in lines if line.startswith("# 3D GAN")]
    assert len(headers) == 1, out  # rank 0 only
    assert f"{nranks} rank(s), schedule {schedule}" in headers[0], out
    epochs = [line.split()[1] for line in lines if line.startswith("epoch ")]
    assert epochs == ["1/2", "2/2"], out

    # The profile table: one row per cell with (real, generated, relative) for x, y, z.
    assert sum(line.startswith("# energy profiles") for line in lines) == 1, out
    rows = [line for line in lines if re.match(r"^ *\d+ \|", line)]
    assert [int(row.split("|")[0]) for row in rows] == list(range(CELLS)), out
    real = [[float(col.split()[0]) for col in row.split("|")[1:]] for row in rows]
    gen = [[float(col.split()[1]) for col in row.split("|")[1:]] for row in rows]
    # Each axis' profile sums to the mean deposited energy: the same for x, y and z.
    for profile in (real, gen):
        sums = [sum(row[axis] for row in profile) for axis in range(3)]
        assert max(sums) - min(sums) <= 1e-3 * CELLS + 1e-6 * max(sums), (sums, out)
    assert 1.0 < sum(row[2] for row in real) < 100.0, out  # GeV: primaries are 10-100 GeV
    distance = [line for line in lines if line.startswith("profile distance")]
    assert len(distance) == 1, out

    assert lines.count("check_buffers_match: generator 0, discriminator 0") == 1, out
    assert lines[-1].startswith(f"OK: weights identical on all {nranks} rank(s) in both"), out


def assert_png(path: Path) -> None:
    assert path.is_file(), f"{path} was not written"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, path


def concurrency(trace: Path) -> dict:
    """Per team the number of segment batches, of reductions in several batches, and of
    batches that started while a reduction of the other team was under way."""
    starts: dict[tuple[int, int], list[float]] = defaultdict(list)
    for event in json.loads(trace.read_text())["traceEvents"]:
        if event["name"] == "segments":
            team = int(event["pid"].split()[-1])
            starts[team, event["args"]["request"]].append(event["ts"])
    batches = {t: [s for (team, _), ts in starts.items() if team == t for s in ts] for t in (0, 1)}
    under_way = {
        t: [(min(ts), max(ts)) for (team, _), ts in starts.items() if team == t and len(ts) > 1]
        for t in (0, 1)
    }
    return {
        "batches": {t: len(batches[t]) for t in (0, 1)},
        "multi_batch": {t: len(under_way[t]) for t in (0, 1)},
        "during_other": {
            t: sum(any(a < s < b for a, b in under_way[1 - t]) for s in batches[t]) for t in (0, 1)
        },
    }


@pytest.mark.parametrize(
    "nranks, schedule", [(1, "concurrent"), (2, "concurrent"), (3, "alternate")]
)
def test_keras_gan3d(nranks: int, schedule: str, tmp_path: Path):
    args = [*TINY, "--schedule", schedule]
    env = {}
    if nranks == 1:
        plot = tmp_path / "gan3d_profiles.png"  # the default, in the working directory
    else:
        plot = tmp_path / "profiles.png"
        args += ["--plot", str(plot)]
        env = {"ML_COMM_TIMELINE": str(tmp_path / "trace.json"), "ML_COMM_CHUNK_BYTES": "4096"}
    out = run_example("keras_gan3d.py", *args, nranks=nranks, cwd=tmp_path, env=env)
    check_output(out, nranks, schedule)
    assert_png(plot)
    if nranks == 1:
        return

    assert sum(line.startswith("timeline (rank 0):") for line in out.splitlines()) == 1, out
    for rank in range(nranks):
        c = concurrency(tmp_path / f"trace.rank{rank}.json")
        # Both teams reduced, in several batches per reduction (else nothing to check).
        assert min(c["batches"].values()) >= 8 and min(c["multi_batch"].values()) >= 8, c
        overlapping = sum(c["during_other"].values())
        if schedule == "concurrent":
            assert overlapping > 0, f"rank {rank}: the two teams never reduced at once: {c}"
        else:
            assert overlapping == 0, f"rank {rank}: the teams overlapped in turn-taking: {c}"
