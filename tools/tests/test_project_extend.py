"""`project --extend`: a projection's JSON file lengthened by the replicates it lacks
(tools/project.py). No SimGrid needed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import project  # noqa: E402
import project_noise as noise  # noqa: E402
import project_runs as runs  # noqa: E402

SETTINGS = {"model": "toy", "platform": "aries", "spare_nodes": 0.0, "paper": {1024: 0.89}}


def extend_args(path: Path) -> argparse.Namespace:
    return argparse.Namespace(extend=True, json=str(path))


def test_a_file_made_with_the_same_settings_gives_its_rows(tmp_path):
    path = tmp_path / "p.json"
    rows = [{"nodes": 4, "algorithm": "auto", "replicates": 2}]
    made = {k: v for k, v in SETTINGS.items() if k != "spare_nodes"}  # before the option
    path.write_text(json.dumps({**made, "replicates": 2, "rows": rows}))
    assert project.earlier_rows(extend_args(path), {**SETTINGS, "replicates": 20}) == rows


def test_a_file_made_with_other_settings_is_refused(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**SETTINGS, "platform": "fattree", "rows": []}))
    with pytest.raises(SystemExit, match="platform 'fattree' \\(now 'aries'\\)"):
        project.earlier_rows(extend_args(path), SETTINGS)
    with pytest.raises(SystemExit, match="does not exist"):
        project.earlier_rows(extend_args(tmp_path / "none.json"), SETTINGS)


def test_new_replicates_follow_the_earlier_ones():
    case = runs.Case(platform="aries", nodes=4, model="toy", step_s=1.0, noise=noise.PRESETS["hpc"])
    steps = [1.05, 1.10]
    earlier = {
        "efficiencies": [runs.alone_step_s(case, k) / s for k, s in enumerate(steps)],
        "wall_s": 3.0,
    }
    new = runs.Result([0.9], [1.2], 4.0, 1.5)
    merged = project.extended(case, earlier, new)
    assert merged.efficiencies == earlier["efficiencies"] + [0.9]
    assert merged.step_s == pytest.approx(steps + [1.2], rel=1e-12)
    assert (merged.agree_messages_per_rank_per_request, merged.wall_s) == (4.0, 4.5)
