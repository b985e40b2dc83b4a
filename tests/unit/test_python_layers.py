"""The Python layers (docs/developer.md, "The Python layers"): each folder of ml_comm imports only
the folders below it, its modules form no import circle, and the NumPy API runs without
importing any framework (a framework comes in only through its backend, when init
names it).

    ml_comm (__init__, __main__, data, errors) -> keras/, tfcnn/, horovod/ -> api -> tensorflow/
      -> arrays/ -> faults/, mpi/ -> core/ (and the compiled ml_comm._core)

Folders of one rank (keras/, tfcnn/ and horovod/; faults/ and mpi/) import nothing of each other.
Every import statement counts, also one inside a function or under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ml_comm"
FRAMEWORKS = ("tensorflow", "keras", "ml_comm.tensorflow", "ml_comm.keras")

# Layer -> rank: a module imports modules of its own layer and of lower ranks only.
RANK = {
    "core": 0,
    "faults": 1,
    "mpi": 1,
    "arrays": 2,
    "tensorflow": 3,
    "jax": 3,
    "api": 4,
    "keras": 5,
    "tfcnn": 5,
    "horovod": 5,
    "torch": 5,
    "top": 6,
}
TOP_MODULES = {"ml_comm", "ml_comm.__main__", "ml_comm.data", "ml_comm.errors"}
COMPILED = {"ml_comm._core"}  # the cffi module (C sources of others sit beside them)

SCRIPT = """
import sys
import numpy as np
import ml_comm as mc

mc.init(1, 1, 16)
out = mc.gradients([np.arange(3, dtype=np.float32), np.float64(2)])
mc.broadcast([np.zeros(2)])
assert mc.check_buffers_match(np.int64(1)) == 0
mc.finalize()
assert out[0].tolist() == [0, 1, 2] and out[1] == 2, out
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")
                or m.startswith(("ml_comm.tensorflow", "ml_comm.keras")))
print("frameworks loaded:", loaded)
assert not loaded
"""


def test_numpy_session_loads_no_framework(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert run.returncode == 0, run.stdout + run.stderr


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def known_modules(package: Path = PACKAGE) -> set[str]:
    """The package's Python modules and its compiled ones (a C file of the package is
    the source of one of the same name)."""
    compiled = {module_name(p, package) for p in package.rglob("*.c")}
    return set(modules(package)) | compiled | COMPILED


def _import_statements(path: Path, package: Path = PACKAGE) -> list[tuple[str, list[str]]]:
    """(module, names) of each import statement: (a.b, []) for `import a.b`, (a, [b, c])
    for `from a import b, c`; relative modules resolved against the file's package."""
    this = module_name(path, package)
    here = this.split(".") if path.name == "__init__.py" else this.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = here[: len(here) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append((base, [a.name for a in node.names]))
    return found


def _imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """Every name an import statement of the file may load (`from a import b`: a and a.b)."""
    names = set()
    for base, imported in _import_statements(path, package):
        names.add(base)
        names.update(f"{base}.{name}" for name in imported)
    return names


def layer_of(module: str) -> str | None:
    """The layer of an ml_comm module (None: not ml_comm's)."""
    parts = module.split(".")
    if parts[0] != "ml_comm":
        return None
    if module in TOP_MODULES:
        return "top"
    if module in COMPILED:
        return "core"
    if parts[1] in RANK and parts[1] != "top":
        return parts[1]
    raise AssertionError(f"{module} is in no layer: put it in a layer's folder")


def internal_edges(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the ml_comm modules it imports: `from a import b` imports a.b where that
    is a module, else a (b is a name defined in a)."""
    known = known_modules(package)
    edges = {}
    for name, path in modules(package).items():
        targets = set()
        for base, imported in _import_statements(path, package):
            if not imported:
                targets.add(base)
            for item in imported:
                targets.add(f"{base}.{item}" if f"{base}.{item}" in known else base)
        edges[name] = {t for t in targets if t in known and t != name}
    return edges


def upward_imports(package: Path = PACKAGE) -> list[str]:
    """Each import of a module of a higher layer, or of a sibling layer of one rank."""
    bad = []
    for source, targets in sorted(internal_edges(package).items()):
        mine = layer_of(source)
        for target in sorted(targets):
            theirs = layer_of(target)
            if theirs != mine and RANK[theirs] >= RANK[mine]:
                bad.append(f"{source} ({mine}) imports {target} ({theirs})")
    return bad


def circles(package: Path = PACKAGE) -> list[list[str]]:
    """Import circles between modules, each once (starting from its smallest name)."""
    edges = internal_edges(package)
    found = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(edges.get(path[-1], ())):
            if nxt == path[0]:
                found.append(path + [nxt])
            elif nxt > path[0] and nxt not in path:
                walk(path + [nxt])

    for start in sorted(edges):
        walk([start])
    return found


def test_every_module_is_in_a_layer():
    for name in known_modules():
        assert layer_of(name) in RANK, name


def test_no_layer_imports_a_higher_one():
    bad = upward_imports()
    assert not bad, "imports against the layers' order:\n" + "\n".join(bad)


def test_no_import_circles():
    found = circles()
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_checks_find_a_circle_and_an_upward_import(tmp_path):
    """The checks themselves, on a small package made for it."""
    pkg = tmp_path / "ml_comm"
    for folder in ("core", "arrays"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from . import api\n")
    (pkg / "api.py").write_text("from .arrays import a\n")
    (pkg / "arrays" / "a.py").write_text("from . import b\n")
    (pkg / "arrays" / "b.py").write_text("def f():\n    from .a import g\n")
    (pkg / "core" / "c.py").write_text("from ..arrays.b import f\n")
    assert upward_imports(pkg) == ["ml_comm.core.c (core) imports ml_comm.arrays.b (arrays)"]
    assert circles(pkg) == [["ml_comm.arrays.a", "ml_comm.arrays.b", "ml_comm.arrays.a"]]


def test_numpy_layers_import_no_framework():
    for name, path in modules().items():
        if layer_of(name) not in ("core", "faults", "mpi", "arrays", "api"):
            continue
        imported = _imports(path)
        bad = {m for m in imported for f in FRAMEWORKS if m == f or m.startswith(f + ".")}
        assert not bad, f"{name} imports {bad}"
