"""The libraries an ELF shared object names (DT_NEEDED), the name it answers to
(DT_SONAME) and where it asks the loader to look for them (DT_RPATH, DT_RUNPATH), read
from its dynamic section: what `readelf -d` prints, without binutils on a compute node.
library.py uses it to tell which libmpi a fresh process would give the C core.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 14, 15, 29


@dataclass(frozen=True)
class Dynamic:
    needed: list[str]
    soname: str  # the name it answers to ("" where it has none)
    rpath: list[str]  # DT_RPATH's folders: searched before LD_LIBRARY_PATH
    runpath: list[str]  # DT_RUNPATH's: after it (and DT_RPATH is then ignored)


def read(path: str) -> Dynamic | None:
    """The dynamic section's names and paths, or None for a file that is no ELF shared
    object this reader understands."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        return _parse(data)
    except (struct.error, IndexError, ValueError):
        return None


def _parse(data: bytes) -> Dynamic | None:
    # 64-bit only (the only kind a 64-bit Python loads); either byte order
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] not in (1, 2):
        return None
    order = "<" if data[5] == 1 else ">"
    phoff, phentsize, phnum = struct.unpack_from(order + "Q14xHH", data, 32)
    segment = order + "IIQQQQ"  # type, flags, offset, vaddr, paddr, filesz
    entry = order + "qQ"
    loads, dynamic = [], None
    for k in range(phnum):
        kind, _, offset, vaddr, _, size = struct.unpack_from(segment, data, phoff + k * phentsize)
        if kind == PT_LOAD:
            loads.append((vaddr, offset, size))
        elif kind == PT_DYNAMIC:
            dynamic = (offset, size)
    if dynamic is None:
        return None
    tags: list[tuple[int, int]] = []
    step = struct.calcsize(entry)
    for at in range(dynamic[0], dynamic[0] + dynamic[1], step):
        tag, value = struct.unpack_from(entry, data, at)
        if tag == DT_NULL:
            break
        tags.append((tag, value))
    strtab = next((v for t, v in tags if t == DT_STRTAB), None)
    table = next((o + strtab - v for v, o, n in loads if v <= (strtab or -1) < v + n), None)
    if table is None:
        return None

    def text(offset: int) -> str:
        start = table + offset
        return data[start : data.index(b"\0", start)].decode(errors="replace")

    def folders(tag: int) -> list[str]:
        return [d for t, v in tags if t == tag for d in text(v).split(":") if d]

    needed = [text(v) for t, v in tags if t == DT_NEEDED]
    soname = next((text(v) for t, v in tags if t == DT_SONAME), "")
    return Dynamic(needed, soname, folders(DT_RPATH), folders(DT_RUNPATH))
