"""The documentation site builds with warnings as errors, its variable table is made from
the code's table of settings (or the build fails), every public function has a docstring
for the API reference, and the README's links lead somewhere."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = ("ml_comm", "ml_comm.keras", "ml_comm.tensorflow", "ml_comm.data")
# A source file or a docs/ page named in a docstring (links to pages are fine).
FILE_NAME = re.compile(r"\b[\w/]+\.py\b|\bdocs/[\w-]+\.md\b")

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
        "ml_comm.horovod.tensorflow.rank",  # a process query, imported from basics
        "ml_comm.horovod.tensorflow.keras.size",
        "ml_comm.horovod.tensorflow.keras.DistributedOptimizer",
        "ml_comm.horovod.tensorflow.keras.callbacks.LearningRateWarmupCallback",
        "ml_comm.horovod.tensorflow.keras.callbacks.BroadcastGlobalVariablesCallback",
    ):
        assert f'id="{name}"' in reference, name
    # the public calls first, the TensorFlow binding's internals not at all
    assert reference.index('id="ml_comm.init"') < reference.index('id="ml_comm.MLCommError"')
    for internal in ("load_ops", "reset_pipelines", "set_live_teams", "check_version"):
        assert f'id="ml_comm.tensorflow.{internal}"' not in reference, internal
    # the home page shows the README's three starts and the Horovod front end
    home = (tmp_path / "index.html").read_text()
    for shown in ("import ml_comm.keras as mk", "@tf.function", "msglen=8 * 4 + 4"):
        assert shown in html.unescape(re.sub(r"<[^>]+>", "", home)), shown
    assert "python -m ml_comm.horovod" in home
    offline(tmp_path)


def offline(site: Path) -> None:
    """Nothing loads from the network; code is highlighted at build time; the search index
    is also a script, for a site opened from its files."""
    for page in site.rglob("*.html"):
        text = page.read_text()
        remote = re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?:[^"]+)"', text)
        assert not remote, f"{page.relative_to(site)} loads {remote}"
    assert "{" in (site / "css" / "pygments.css").read_text()
    assert 'class="codehilite"' in (site / "keras" / "index.html").read_text()
    script = (site / "search" / "search_index.js").read_text()
    assert script.startswith("window.mlCommSearchIndex = {")
    assert "js/offline_search.js" in (site / "index.html").read_text()


def test_the_navbar_has_few_entries():
    """Six top-level entries fit a 1280 px navbar on one line (checked in Chromium)."""
    config = (ROOT / "mkdocs.yml").read_text()
    nav = config.split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    assert len(re.findall(r"^  - ", nav, flags=re.M)) <= 6, nav


def test_reference_docstrings_link_pages_rather_than_name_files():
    griffe = pytest.importorskip("griffe", reason="griffe is not installed (the `docs` extra)")
    package = griffe.load("ml_comm", search_paths=[str(ROOT)], resolve_aliases=True)
    named = []
    shown = re.findall(r"^::: (\S+)", (ROOT / "docs" / "reference.md").read_text(), re.M)
    # The Horovod modules list the process queries as `*basics.__all__`: basics' own too.
    for module_name in [*shown, "ml_comm.horovod.basics"]:
        module = package if module_name == "ml_comm" else package[module_name[8:]]
        objects = [module] if module_name in shown else []  # basics' own is not shown
        exported = module.exports is not None
        for name in module.exports if exported else module.members:
            if not isinstance(name, str):  # `*basics.__all__`: basics is scanned itself
                continue
            member = module.members.get(name)
            if member is not None and not name.startswith("_"):
                if exported or not member.is_alias:  # the reference shows these
                    objects.append(member)
        for obj in objects:
            text = obj.docstring.value if obj.docstring else ""
            for found in FILE_NAME.findall(re.sub(r"\]\([^)]*\)", "]", text)):
                named.append(f"{obj.path}: {found}")
    assert not named, named


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
