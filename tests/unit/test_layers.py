"""The C core's layers run one way (docs/developer.md).

    team -> agree, plan -> algos -> transport -> base
    team -> cuda -> base (device buffers staged through host memory)
    pipeline -> base (the pipelined step: front ends and the scale model link it)

A file may include and call files of its own layer and of the layers below; nothing calls
upward except through a function pointer handed down (the transport's progress hook, the
watchdog's abort). Checked twice: on the #include lines (and that they form no circle), and
on the compiled objects (every mlc_ symbol a layer's object uses is defined in that layer or
below). The public header (csrc/include/ml_comm.h) only declares, and any layer may include it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
RANK = {"base": 0, "cuda": 1, "transport": 1, "algos": 2, "agree": 3, "plan": 3, "pipeline": 3}
RANK["team"] = 4
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path: Path) -> str:
    return path.relative_to(CSRC).parts[0]


def core_files() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*.[ch]") if layer_of(p) != "include")


def resolve(name: str, including: Path) -> Path:
    for base in (including.parent, CSRC, CSRC / "include"):
        if (base / name).exists():
            return (base / name).resolve()
    raise AssertionError(f'{including}: #include "{name}" names no file of csrc/')


def includes(path: Path) -> list[Path]:
    return [resolve(n, path) for n in INCLUDE.findall(path.read_text())]


def test_every_file_belongs_to_a_layer():
    assert {layer_of(p) for p in core_files()} == set(RANK)


def test_includes_go_down_or_sideways_within_a_layer():
    wrong = []
    for f in core_files():
        for inc in includes(f):
            to = layer_of(inc)
            if to == "include":
                continue
            if RANK[to] > RANK[layer_of(f)] or (
                RANK[to] == RANK[layer_of(f)] and to != layer_of(f)
            ):
                wrong.append(f"{f.relative_to(CSRC)} includes {inc.relative_to(CSRC)}")
    assert not wrong, "includes against the layer rule:\n" + "\n".join(wrong)


def test_includes_form_no_circle():
    graph = {f.resolve(): includes(f) for f in core_files()}
    state: dict[Path, int] = {}  # 1: on the current path, 2: done

    def visit(node: Path, path: list[Path]) -> None:
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                circle = [*path, node, nxt]
                raise AssertionError(" -> ".join(str(p.relative_to(CSRC)) for p in circle))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [])


def symbols(obj: Path) -> tuple[set[str], set[str]]:
    out = subprocess.run(["nm", str(obj)], check=True, capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-1].startswith("mlc_"):
            (used if parts[-2] == "U" else defined).add(parts[-1])
    return defined, used


def test_no_layer_calls_a_higher_one(tmp_path):
    mpicc = Path(sys.prefix) / "bin" / "mpicc"
    if not mpicc.exists() or not shutil.which("nm"):
        pytest.skip("needs the environment's mpicc and nm")
    defined_in: dict[str, str] = {}
    used_by: dict[Path, set[str]] = {}
    for src in sorted(CSRC.glob("*/*.c")):
        obj = tmp_path / f"{layer_of(src)}_{src.stem}.o"
        subprocess.run([str(mpicc), "-c", "-std=gnu11", f"-I{CSRC}", f"-I{CSRC / 'include'}",
                        str(src), "-o", str(obj)], check=True)  # fmt: skip
        defined, used = symbols(obj)
        for name in defined:
            defined_in[name] = layer_of(src)
        used_by[src] = used
    wrong = [
        f"{src.relative_to(CSRC)} calls {name} ({defined_in[name]})"
        for src, used in used_by.items()
        for name in sorted(used)
        if name in defined_in and RANK[defined_in[name]] > RANK[layer_of(src)]
    ]
    sideways = [
        f"{src.relative_to(CSRC)} calls {name} ({defined_in[name]})"
        for src, used in used_by.items()
        for name in sorted(used)
        if name in defined_in
        and RANK[defined_in[name]] == RANK[layer_of(src)]
        and defined_in[name] != layer_of(src)
    ]
    assert not wrong + sideways, "calls against the layer rule:\n" + "\n".join(wrong + sideways)
