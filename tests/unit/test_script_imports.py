"""The scripts in benchmarks/ and tools/ import names from each other's files (after putting
the folder on sys.path); a name removed from one file must not leave another script broken
until someone runs it. Checked from the source alone: no script is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("benchmarks", "tools")


def scripts() -> dict[str, Path]:
    """Module name -> file, for the scripts importable by their bare name."""
    found: dict[str, Path] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).glob("*.py")):
            found.setdefault(path.stem, path)
    return found


def top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def imports_between_scripts() -> list[tuple[Path, str, str]]:
    """(importing file, script module, name) for every `from SCRIPT import NAME`."""
    known = scripts()
    found = []
    for path in known.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                module = node.module.removeprefix("tools.").removeprefix("benchmarks.")
                if module in known:
                    found += [(path, module, alias.name) for alias in node.names]
    return found


def test_scripts_import_names_that_exist():
    known = scripts()
    pairs = imports_between_scripts()
    assert len(pairs) >= 10, "the scan found too few imports between scripts to be working"
    missing = [
        f"{path.relative_to(ROOT)}: from {module} import {name}"
        for path, module, name in pairs
        if name != "*" and name not in top_level_names(known[module])
    ]
    assert not missing, "names that no longer exist:\n" + "\n".join(missing)


def test_the_check_catches_a_missing_name(tmp_path):
    source = tmp_path / "lib.py"
    source.write_text("def kept():\n    pass\nVALUE = 1\nfrom os import path as p\n")
    assert {"kept", "VALUE", "p"} <= top_level_names(source)
    assert "removed" not in top_level_names(source)
