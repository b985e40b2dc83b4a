#!/usr/bin/env python3
"""Which raw result files under benchmarks/results/ no page or program cites.

A result file stays in the tree while something names it: benchmarks/RESULTS.md, a page
under docs/, the README or CHANGELOG, or a program or data file that reads it (the scale
model's calibration, a benchmark's docstring). Citations are as people write them: a
path from the repository root or from benchmarks/ or benchmarks/results/, a file's name
alone, its name without the extension, a folder, and shell patterns with braces and
globs (`testbed_quiet/{3,4}node_gradients_r*.json`, `b8_{none,bf16}`).

    python3 tools/results_cited.py            # list the files nothing cites (exit 1 if any)
    python3 tools/results_cited.py --remove   # and `git rm` them

Only the standard library: it runs on a bare Python.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = "benchmarks/results/"
# Files whose text may cite a result (the results themselves do not count).
CITING_SUFFIXES = (".md", ".py", ".json", ".sh", ".toml", ".yml", ".yaml", ".c", ".h", ".txt")
TOKEN = re.compile(r"[A-Za-z0-9_./{},*\-]+")
PREFIXES = ("benchmarks/results/", "results/", "benchmarks/", "../benchmarks/results/")


def tracked(root: Path = ROOT) -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def expand_braces(text: str) -> list[str]:
    """`a{b,c}d{e,f}` -> abde, abdf, acde, acdf (no nesting needed here)."""
    match = re.search(r"\{([^{}]*)\}", text)
    if not match:
        return [text]
    head, tail = text[: match.start()], text[match.end() :]
    return [v for part in match.group(1).split(",") for v in expand_braces(head + part + tail)]


def patterns(text: str) -> set[str]:
    """The citation-like tokens of a text, braces expanded, each as patterns of a path
    under benchmarks/results/."""
    found: set[str] = set()
    for token in TOKEN.findall(text):
        token = token.strip(".,")
        if len(token) < 4 or not any(c in token for c in "_/."):
            continue
        for name in expand_braces(token):
            for prefix in PREFIXES:
                if name.startswith(prefix):
                    name = name[len(prefix) :]
                    break
            # a pattern must name something: `*.json` alone cites nothing
            if len(re.sub(r"[*?]|\.\w+$", "", name.rstrip("/").rsplit("/", 1)[-1])) >= 3:
                found.add(name)
    return found


WILDCARDS = "*?["


class Citations:
    """Citations indexed for lookups: a literal name is looked up, not matched against
    every path (the tree holds thousands of both); the few with wildcards are matched."""

    def __init__(self, names: set[str]) -> None:
        self.folders = {name.rstrip("/*") for name in names} - {""}
        self.literal = {n for n in names if not any(c in n for c in WILDCARDS)}
        self.stems = {n for n in self.literal if "_" in n and "/" not in n}
        self.patterns = [n for n in names if n not in self.literal]

    def cite(self, path: str) -> bool:
        parts = path.split("/")
        if any("/".join(parts[:k]) in self.folders for k in range(1, len(parts) + 1)):
            return True
        base = parts[-1]
        for candidate in (path, base):
            # the name itself, or the name and an extension: `rabenseifner/n4_ring_r1`
            if candidate in self.literal:
                return True
            if any(c == "." and candidate[:i] in self.literal for i, c in enumerate(candidate)):
                return True
        # a stem cited inside a family's name: `b8_rerun` in train_scaling_2gbit_b8_rerun.json
        for i, c in enumerate(base):
            if c == "." and any(base[j:i] in self.stems for j in range(i)):
                return True
        return any(_matches(path, base, name) for name in self.patterns)


def _matches(path: str, base: str, name: str) -> bool:
    for candidate in (path, base):
        if fnmatch.fnmatchcase(candidate, name) or fnmatch.fnmatchcase(candidate, name + ".*"):
            return True
    return "_" in name and "/" not in name and fnmatch.fnmatchcase(base, f"*{name}.*")


def cited(path: str, names: set[str]) -> bool:
    """Whether a path under benchmarks/results/ matches a citation."""
    return Citations(names).cite(path)


def uncited(root: Path = ROOT) -> list[str]:
    files = tracked(root)
    names: set[str] = set()
    for f in files:
        if f.startswith(RESULTS) or not f.endswith(CITING_SUFFIXES):
            continue
        path = root / f
        if path.is_file():
            names |= patterns(path.read_text(errors="replace"))
    results = [f[len(RESULTS) :] for f in files if f.startswith(RESULTS)]
    citations = Citations(names)
    return sorted(RESULTS + r for r in results if not citations.cite(r))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--remove", action="store_true", help="git rm the uncited files")
    args = parser.parse_args(argv)
    left = uncited()
    for f in left:
        print(f)
    if left and args.remove:
        subprocess.run(["git", "rm", "-q", "--", *left], cwd=ROOT, check=True)
    return 1 if left and not args.remove else 0


if __name__ == "__main__":
    sys.exit(main())
