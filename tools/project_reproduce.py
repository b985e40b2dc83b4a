"""`tools/dev.py project --reproduce`: the scale model against published measurements
(project_targets), with every node term on, then each off in turn (--ablate), then all
off; one JSON record per target and model and case (docs/scale.md, "Reproduction").

The run with every term off is also held against the model as it was before the node
terms (an ideal node: backward spread equally, no copies, no noise), recorded in
IDEAL_BEFORE: within half a point.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import project_noise as noise_mod
import project_runs as runs
import project_targets as targets

ROOT = Path(__file__).resolve().parent.parent
# T1's configuration on the model before the node terms (commit b2a4d99's tools/project.py:
# Inception v3 as 94 equal tensors, a third of the step forward, backward spread equally;
# --platform aries --model inception3 --nodes 512 --threads 4 --cores 2 --sample 1).
IDEAL_BEFORE = ROOT / "benchmarks" / "results" / "scale_t1_ideal_before.json"
IDEAL_TOLERANCE = 0.005
# The exit status when a target is missed (1 is a Python error, 2 a wrong option).
MISSED_EXIT = 3


def case_of(target: targets.Target, profile: str = "measured") -> runs.Case:
    return runs.Case(
        platform=target.platform,
        nodes=target.nodes,
        model=target.model,
        step_s=target.step_s,
        ranks_per_node=target.ranks_per_node,
        profile=profile,
        scheme="horovod" if target.scheme == "horovod" else "ml_comm",
        threads=target.threads,
        cores=target.cores,
        overhead_s=target.overhead_s,
        pcie_bps=target.pcie_bps,
        noise=noise_mod.PRESETS["hpc"],
        fusion_bytes=target.fusion_bytes,
        cycle_s=target.cycle_s,
        reduce_bps=target.reduce_bps,
    )


def published_nodes(target: targets.Target) -> int:
    """The server count the target's figure was published at."""
    return next(
        t.nodes for t in targets.TARGETS if (t.name, t.model) == (target.name, target.model)
    )


def record(target: targets.Target, case: runs.Case, result: runs.Result, **extra) -> dict:
    lo, hi = result.band
    return {
        "target": target.name,
        "model": target.model,
        "nodes": target.nodes,
        "ranks": case.ranks,
        "published": target.published if target.nodes == published_nodes(target) else None,
        "modelled": round(result.median, 4),
        "band_lo": round(lo, 4),
        "band_hi": round(hi, 4),
        "replicates": len(result.efficiencies),
        "profile": case.profile,
        "efficiencies": [round(e, 5) for e in result.efficiencies],
        "mean_step_s": [round(s, 6) for s in result.step_s],
        "wall_s": result.wall_s,
        **extra,
    }


def reproduce(
    replicates: int,
    ablate: bool,
    chosen: list[str] | None,
    profile: str,
    out: Path | None,
    workers: int = 1,
    ablate_replicates: int | None = None,
    at_nodes: int | None = None,
) -> int:
    """Every chosen target's cases; each record is written to `out` as soon as it is
    made. A record already there for the same case is kept instead of run again, and one
    with fewer replicates runs only the replicates it lacks (a long run can be stopped and
    started again, or lengthened). The cases with a term off take `ablate_replicates`
    (default: `replicates`). `at_nodes` runs the targets' conditions at another server
    count, where nothing was published: its records are not judged."""
    cal = json.loads((ROOT / "model" / "calibration.json").read_text())
    done = json.loads(out.read_text()) if out and out.exists() else []
    records, missed = [], []
    cache: dict = {}
    picked = [t for t in targets.TARGETS if not chosen or t.name in chosen]
    if at_nodes:
        picked = [dataclasses.replace(t, nodes=at_nodes) for t in picked]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)

        def case_record(target: targets.Target, case: runs.Case, term: str | None) -> dict:
            extra = {"ablated": term} if term else {}
            count = replicates if not term else ablate_replicates or replicates
            wanted = 1 if case.deterministic else count
            shorter = None
            for rec in done:
                same = (rec["target"], rec["model"], rec["nodes"], rec.get("ablated")) == (
                    target.name, target.model, target.nodes, term
                )  # fmt: skip
                if not same or rec["profile"] != case.profile:
                    continue
                if rec["replicates"] == wanted:
                    records.append(rec)
                    show(rec)
                    return rec
                if rec["replicates"] < wanted:
                    shorter = rec
            first = shorter["replicates"] if shorter else 0
            result = runs.run(case, cal, count, tmp, cache=cache, workers=workers, first=first)
            if shorter:
                result = runs.continued(
                    shorter["efficiencies"], shorter["mean_step_s"], shorter["wall_s"], result
                )
                done.remove(shorter)
            rec = record(target, case, result, **extra)
            if not term and not at_nodes:
                rec["met"] = targets.met(target, rec["modelled"], rec["band_lo"], rec["band_hi"])
            records.append(rec)
            show(rec)
            if out:
                kept = [r for r in done if r not in records]
                out.write_text(json.dumps(kept + records, indent=1) + "\n")
            return rec

        for target in picked:
            case = case_of(target, profile)
            rec = case_record(target, case, None)
            if rec.get("met") is False:
                missed.append(f"{target.name} {target.model}: {rec['modelled']:.3f} "
                              f"[{rec['band_lo']:.3f}, {rec['band_hi']:.3f}] against "
                              f"{target.published:.2f}")  # fmt: skip
            for term in [*(runs.TERMS if ablate else ()), "all"]:
                off = runs.without(case, term)
                if off == case:  # the term is not part of this target
                    continue
                rec = case_record(target, off, term)
                if term == "all" and target.name == "T1" and not at_nodes:
                    missed += check_ideal(rec)
    for m in missed:
        print("missed:", m)
    return MISSED_EXIT if missed else 0


def check_ideal(rec: dict) -> list[str]:
    """The all-off T1 run against the model before the node terms."""
    if not IDEAL_BEFORE.exists():
        return [f"no {IDEAL_BEFORE.relative_to(ROOT)} to compare the ideal node with"]
    before = json.loads(IDEAL_BEFORE.read_text())["efficiency"]
    print(f"T1, every node term off: {rec['modelled']:.4f}; the model before them: {before:.4f}")
    if abs(rec["modelled"] - before) > IDEAL_TOLERANCE:
        return [f"T1 with every term off {rec['modelled']:.4f} against {before:.4f} before "
                "(bar 0.5 points)"]  # fmt: skip
    return []


def show(rec: dict) -> None:
    what = f"{rec['target']} {rec['model']}" + (
        f", {rec['ablated']} off" if "ablated" in rec else ""
    )
    print(
        f"{what}: modelled {rec['modelled']:.1%} [{rec['band_lo']:.1%}, {rec['band_hi']:.1%}] "
        f"({rec['replicates']} replicates, {rec['wall_s']:.0f} s); "
        + (
            f"published {rec['published']:.0%}"
            if rec["published"] is not None
            else f"{rec['nodes']} servers: nothing published"
        ),
        flush=True,
    )
