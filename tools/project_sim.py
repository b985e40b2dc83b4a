"""Building and running the scale model's program (model/, mlcsim): the core's plan,
schedules and algorithm files compiled unchanged with the model's transport, kernels,
team mirror, device copies and Horovod cycle (docs/scale.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from simgrid_packages import ensure_simgrid

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "model"
MLCSIM = BUILD / "mlcsim"
KERNEL_SPEED = BUILD / "kernel_speed"
CORE_SOURCES = [
    "csrc/plan/plan.c",
    "csrc/base/schedule.c",
    "csrc/base/dtype.c",
    "csrc/base/tensors.c",
    "csrc/transport/post.c",
    "csrc/pipeline/pipeline.c",  # the pipelined step, as the front ends run it
]
MODEL_SOURCES = [
    "transport_simgrid.cpp",
    "kernels_timed.cpp",
    "team_mirror.cpp",
    "device_copies.cpp",
    "horovod_cycle.cpp",
    "main.cpp",
]
# maxmin/precision: SimGrid 3.32's default (1e-5) aborts a 1,024-node Rabenseifner
# allreduce ("Cannot saturate more a constraint"); 1e-4 and 1e-3 give the same times.
SIM_CFG = ["--cfg=network/model:CM02", "--cfg=maxmin/precision:1e-4", "--log=root.thres:warning"]


def build() -> None:
    """Compile the model (never part of the wheel): the core's plan, schedules and
    algorithm files unchanged, with the model's transport, kernels and team mirror."""
    why = ensure_simgrid()
    if why:
        sys.exit(f"project: SimGrid is missing: {why}")
    BUILD.mkdir(parents=True, exist_ok=True)
    sources = [ROOT / s for s in CORE_SOURCES] + sorted((ROOT / "csrc" / "algos").glob("*.c"))
    sources += [ROOT / "model" / s for s in MODEL_SOURCES]
    newest = max(p.stat().st_mtime for p in sources + list((ROOT / "model").glob("*.hpp")))
    inc = ["-I", ROOT / "csrc", "-I", ROOT / "csrc" / "include", "-I", ROOT / "csrc" / "base"]
    if not MLCSIM.exists() or MLCSIM.stat().st_mtime < newest:
        objs = []
        for src in sources:
            obj = BUILD / (src.stem + ".o")
            cc = ["gcc", "-std=c11"] if src.suffix == ".c" else ["g++", "-std=c++17"]
            flags = ["-O2", "-Wall", "-Wextra", "-DMLC_NO_CLONES", *inc, "-c", src, "-o", obj]
            subprocess.run([*cc, *flags], check=True)
            objs.append(obj)
        subprocess.run(["g++", "-o", MLCSIM, *objs, "-lsimgrid"], check=True)
    speed_src = [ROOT / "model" / "kernel_speed.c"]
    speed_src += [ROOT / "csrc" / "base" / f for f in ("reduce.c", "wire.c", "dtype.c", "clock.c")]
    if not KERNEL_SPEED.exists() or KERNEL_SPEED.stat().st_mtime < max(
        p.stat().st_mtime for p in speed_src
    ):
        flags = ["-O3", "-std=gnu11", "-Wall", "-Wextra", *inc]
        subprocess.run(["gcc", *flags, *speed_src, "-o", KERNEL_SPEED, "-lm"], check=True)


def node_args(node: dict) -> list[str]:
    return [
        "--reduce-bps",
        str(node["reduce_bytes_per_s"]),
        "--convert-bps",
        str(node["convert_bytes_per_s"]),
        "--copy-bps",
        str(node["copy_bytes_per_s"]),
        "--send-overhead",
        str(node["send_overhead_s"]),
        "--recv-overhead",
        str(node["recv_overhead_s"]),
        "--cpu-per-byte",
        str(node.get("cpu_per_byte_s", 0.0)),
        "--comm-weight",
        str(node.get("comm_weight", 1.0)),
    ]


def write_platform(xml: str, tmp: Path, name: str = "platform.xml") -> Path:
    path = tmp / name
    path.write_text(xml)
    return path


def mlcsim(platform: Path, nodes: int, args: list[str], timeout: float = 3600) -> dict:
    cmd = [str(MLCSIM), str(platform), "--nodes", str(nodes), *SIM_CFG, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"project: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
