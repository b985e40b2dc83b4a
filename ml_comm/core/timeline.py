"""ML_COMM_TIMELINE=path.json: record what the teams' threads do and write it, at
finalize, as a Chrome trace (open it in Perfetto or chrome://tracing).

One file per rank: "{rank}" in the path is replaced by the rank, otherwise
".rank<r>" goes before the extension when there is more than one rank. Each team
thread is a track; reduced segment batches are slices, arrivals of a keyed
group's tensors (one per gradient op) are instant events, and the trace's
metadata holds the overlap: how much of the communication ran before the last
gradient of its step had arrived, i.e. while backprop was still computing.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .._core import ffi, lib
from . import settings

ENV = "ML_COMM_TIMELINE"


def enabled() -> bool:
    return bool(settings.get(ENV))


def enable(teams) -> None:
    capacity = settings.get("ML_COMM_TIMELINE_EVENTS")
    for team in teams:
        lib.mlc_team_timeline_enable(team, capacity)


def read(team) -> list[dict]:
    n = 1 << 16
    while True:
        buf = ffi.new("mlc_event[]", n)
        got = lib.mlc_team_timeline_read(team, buf, n)
        if got < n:
            break
        n *= 4
    keys = ("start", "end", "kind", "thread", "request", "detail", "bytes")
    return [{k: getattr(buf[i], k) for k in keys} for i in range(got)]


def overlap(events: list[dict]) -> dict:
    """Communication of keyed groups that ran before their last tensor arrived."""
    last_arrival: dict[int, float] = {}
    for e in events:
        if e["kind"] == lib.MLC_EVENT_ARRIVE:
            r = e["request"]
            last_arrival[r] = max(last_arrival.get(r, e["start"]), e["start"])
    busy = hidden = 0.0
    early = total = 0
    for e in events:
        if e["kind"] != lib.MLC_EVENT_SEGMENTS or e["request"] not in last_arrival:
            continue
        cut = last_arrival[e["request"]]
        busy += e["end"] - e["start"]
        hidden += max(0.0, min(e["end"], cut) - e["start"])
        total += 1
        early += e["start"] < cut
    return {
        "groups": len(last_arrival),
        "segment_batches": total,
        "batches_started_before_last_arrival": early,
        "communication_seconds": busy,
        "overlapped_seconds": hidden,
        "overlapped_fraction": hidden / busy if busy else 0.0,
    }


def trace(rank: int, per_team: list[list[dict]]) -> dict:
    out = []
    origin = min((e["start"] for events in per_team for e in events), default=0.0)
    names = {
        lib.MLC_EVENT_SEGMENTS: "segments",
        lib.MLC_EVENT_ARRIVE: "arrive",
        lib.MLC_EVENT_REQUEST: "request",
    }
    summary = {}
    for team, events in enumerate(per_team):
        for e in events:
            track = "caller" if e["thread"] < 0 else f"thread {e['thread']}"
            if e["kind"] == lib.MLC_EVENT_REQUEST:
                track = "requests"
            item = {
                "name": names.get(e["kind"], "event"),
                "ts": (e["start"] - origin) * 1e6,
                "pid": f"rank {rank} team {team}",
                "tid": track if e["kind"] != lib.MLC_EVENT_ARRIVE else "gradient ops",
                "args": {"request": e["request"], "detail": e["detail"], "bytes": e["bytes"]},
            }
            if e["kind"] == lib.MLC_EVENT_ARRIVE:
                item.update(ph="i", s="t")
            else:
                item.update(ph="X", dur=(e["end"] - e["start"]) * 1e6)
            out.append(item)
        summary[f"team {team}"] = overlap(events)
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": summary}


def path_for(rank: int, nranks: int) -> Path:
    raw = settings.get(ENV)
    if "{rank}" in raw:
        return Path(raw.replace("{rank}", str(rank)))
    p = Path(raw)
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix}") if nranks > 1 else p


def write(rank: int, nranks: int, teams) -> Path:
    path = path_for(rank, nranks)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace(rank, [read(t) for t in teams])))
    return path


def summarize(paths) -> dict:
    """Overlap summed over several ranks' trace files (for benchmarks)."""
    totals: dict[str, float] = defaultdict(float)
    for p in paths:
        for team in json.loads(Path(p).read_text())["otherData"].values():
            totals["communication_seconds"] += team["communication_seconds"]
            totals["overlapped_seconds"] += team["overlapped_seconds"]
            totals["segment_batches"] += team["segment_batches"]
            totals["batches_started_before_last_arrival"] += team[
                "batches_started_before_last_arrival"
            ]
    busy = totals["communication_seconds"]
    totals["overlapped_fraction"] = totals["overlapped_seconds"] / busy if busy else 0.0
    return dict(totals)
