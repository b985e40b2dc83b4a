"""The training-scaling driver's arithmetic (benchmarks/train_scaling_driver.py): paired
efficiencies, the machine's ceiling from `local` on n nodes, and --combine. Pure functions
over run records, so no test bed is needed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import train_scaling_driver as driver  # noqa: E402


def run(mode: str, nodes: int, rep: int, images_per_s: float) -> dict:
    return {
        "mode": mode,
        "nodes": nodes,
        "rep": rep,
        "ok": True,
        "images_per_s": images_per_s,
        "step_median_ms": 1000.0 / images_per_s,
        "veth_mb_out_per_step": [20.0 if nodes > 1 and mode != "local" else 0.0],
        "ranks": [{"cpu_ms_per_step": {"tf_Compute": 100.0}}],
    }


def runs_of(table: dict[str, list[tuple[float, float]]]) -> list[dict]:
    """{mode: [(img/s on 1 node, img/s on 2 nodes) per repetition]} -> run records."""
    return [
        run(mode, nodes, rep, value)
        for mode, reps in table.items()
        for rep, pair in enumerate(reps)
        for nodes, value in zip((1, 2), pair)
    ]


TABLE = {
    "local": [(10.0, 16.0), (10.0, 18.0), (20.0, 30.0)],  # ceilings 0.8, 0.9, 0.75
    "mlcomm-sync": [(10.0, 12.0), (10.0, 18.0), (10.0, 15.0)],  # 0.6, 0.9, 0.75
}


def test_efficiency_is_paired_within_a_repetition():
    summary = driver.summarize(runs_of(TABLE), list(TABLE), 2, None)
    assert summary["mlcomm-sync"]["efficiency"] == {"median": 0.75, "min": 0.6, "max": 0.9, "n": 3}
    assert summary["local"]["efficiency"]["median"] == pytest.approx(0.8)


def test_share_of_the_ceiling_divides_by_local_of_the_same_repetition():
    summary = driver.summarize(runs_of(TABLE), list(TABLE), 2, None)
    # 0.6 / 0.8, 0.9 / 0.9, 0.75 / 0.75
    of_ceiling = summary["mlcomm-sync"]["efficiency_of_ceiling"]
    assert of_ceiling["median"] == pytest.approx(1.0)
    assert of_ceiling["min"] == pytest.approx(0.75)
    assert "efficiency_of_ceiling" not in summary["local"]


def test_no_wire_time_without_bytes_on_the_wire():
    summary = driver.summarize(runs_of(TABLE), list(TABLE), 2, driver.rate_bytes("2gbit"))
    assert "effective_hidden_fraction" not in summary["local"]
    assert summary["mlcomm-sync"]["wire_ms_per_step"] == pytest.approx(80.0)


def test_combine_takes_each_mode_from_the_last_file_that_ran_it(tmp_path, capsys):
    header = {
        "nodes": 2,
        "rate": "2gbit",
        "date": "2026-11-26T17:00:00",
        "settings": {"width": 64, "batch": 8, "cores_per_node": 1},
    }
    stale_local = {"local": [(10.0, 10.0)] * 3}  # replaced by the second file's
    first = tmp_path / "modes.json"
    first.write_text(json.dumps({"header": header, "runs": runs_of({**stale_local, **TABLE})}))
    second = tmp_path / "local.json"
    second.write_text(json.dumps({"header": header, "runs": runs_of({"local": TABLE["local"]})}))
    out = tmp_path / "combined"
    assert driver.main(["--combine", str(first), str(second), "--out", str(out)]) == 0
    summary = json.loads(out.with_suffix(".json").read_text())["summary"]
    assert summary["local"]["efficiency"]["median"] == pytest.approx(0.8)
    assert summary["mlcomm-sync"]["efficiency_of_ceiling"]["median"] == pytest.approx(1.0)
    assert out.with_suffix(".png").stat().st_size > 0
    assert "mlcomm-sync" in capsys.readouterr().out


def test_combine_refuses_files_of_different_settings(tmp_path):
    files = []
    for rate in ("2gbit", "1gbit"):
        f = tmp_path / f"{rate}.json"
        header = {"nodes": 2, "rate": rate, "date": "x", "settings": {}}
        f.write_text(json.dumps({"header": header, "runs": runs_of(TABLE)}))
        files.append(str(f))
    with pytest.raises(SystemExit, match="different --nodes or --rate"):
        driver.main(["--combine", *files, "--out", str(tmp_path / "out")])
