"""The documentation site builds with warnings as errors, its variable table is made from
the code's table of settings (or the build fails), every public function has a docstring
for the API reference, and the README's links lead somewhere."""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = ("ml_comm", "ml_comm.keras", "ml_comm.tensorflow", "ml_comm.data")

SETTINGS_MODULE = """
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    type: str
    compared: bool
    effect: str


SETTINGS = (
    Setting("ML_COMM_ONE", "60", "float", False, "Warn after this long | 0: never."),
    Setting("ML_COMM_TWO", "unset", "int", True, "Below this size, another path."),
)
"""


def hooks():
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `docs` extra)")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mkdocs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return mkdocs_hooks


def test_site_builds_in_strict_mode(tmp_path):
    hooks()
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed (`docs` extra)")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    table = (tmp_path / "environment" / "index.html").read_text()
    rows = hooks().load_settings()
    assert table.count("<td><code>ML_COMM_") == len(rows)  # one row per setting
    assert [s.name for s in rows if f"<td><code>{s.name}</code></td>" not in table] == []
    reference = (tmp_path / "reference" / "index.html").read_text()
    for name in (
        "ml_comm.gradients",
        "ml_comm.keras.init",
        "ml_comm.data.equal_steps",
        "ml_comm.horovod.tensorflow.DistributedOptimizer",
        "ml_comm.horovod.tensorflow.DistributedGradientTape",
        "ml_comm.horovod.tensorflow.broadcast_variables",
        "ml_comm.horovod.tensorflow.keras.DistributedOptimizer",
        "ml_comm.horovod.tensorflow.keras.callbacks.LearningRateWarmupCallback",
        "ml_comm.horovod.tensorflow.keras.callbacks.BroadcastGlobalVariablesCallback",
    ):
        assert f'id="{name}"' in reference, name


def test_variable_table_has_a_row_per_setting(tmp_path):
    h = hooks()
    (tmp_path / "ml_comm" / "core").mkdir(parents=True)
    (tmp_path / "ml_comm" / "core" / "settings.py").write_text(SETTINGS_MODULE)
    before = sys.modules.get("ml_comm")
    table = h.settings_table(h.load_settings(tmp_path)).splitlines()
    assert sys.modules.get("ml_comm") is before  # the stand-in packages are gone again
    assert table[2:] == [
        "| `ML_COMM_ONE` | 60 | float | no | Warn after this long \\| 0: never. |",
        "| `ML_COMM_TWO` | unset | int | yes | Below this size, another path. |",
    ]


def test_build_fails_without_the_table_of_settings(tmp_path):
    h = hooks()
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match=r"ml_comm/core/settings\.py.*missing"):
        h.load_settings(tmp_path)
    (tmp_path / "ml_comm" / "core").mkdir(parents=True)
    (tmp_path / "ml_comm" / "core" / "settings.py").write_text("SETTINGS = ()\n")
    with pytest.raises(PluginError, match="empty"):
        h.load_settings(tmp_path)


def test_every_public_function_has_a_docstring():
    griffe = pytest.importorskip("griffe", reason="griffe is not installed (the `docs` extra)")
    package = griffe.load("ml_comm", search_paths=[str(ROOT)], resolve_aliases=True)
    missing = []
    for module_name in PUBLIC_MODULES:
        module = package if module_name == "ml_comm" else package[module_name[8:]]
        for name, member in module.members.items():
            if member.is_public and member.kind.value in ("function", "class"):
                if not member.docstring:
                    missing.append(f"{module_name}.{name}")
    assert not missing, missing


def _slug(heading: str) -> str:
    """Python-Markdown's toc slug (what MkDocs makes anchors of)."""
    text = re.sub(r"<[^>]+>|`", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_readme_links_lead_to_files_and_headings():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    broken = []
    for link in links:
        if "://" in link:
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists():
            broken.append(link)
        elif anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), flags=re.M)
            if anchor not in {_slug(h) for h in headings}:
                broken.append(link)
    assert links and not broken, broken


def test_readme_installs_from_the_checkout_only():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    # ml_comm is not on PyPI: a bare name would install whatever someone published there.
    assert not re.search(r"pip install [\"']?ml_comm", readme)
    assert 'pip install ".[tf,mpich]"' in readme
