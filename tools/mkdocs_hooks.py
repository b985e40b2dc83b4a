"""MkDocs hooks for the documentation site (mkdocs.yml names this file).

- Pages under docs/ that `nav` does not list are added under "More", so a new page
  appears in the site without an edit of mkdocs.yml (and `omitted_files: warn` then
  catches only what this missed).
- The marker SETTINGS_MARKER becomes the table of environment variables, made from
  `SETTINGS` in ml_comm/core/settings.py: the table the code reads its variables through.
  That module is pure Python and is loaded from its file, without running ml_comm's
  `__init__` (which loads the compiled core and MPI). Without it the build fails.
- A link to a file of the repository outside docs/ (`[text](../examples/x.py)`, which
  works where the Markdown is read in the repository) must name a file that exists, and
  becomes its path in the site, which holds no copy of it.
- The marker STARTS_MARKER becomes the README's "Three short starts" section (the home
  page shows the same starts as the README, which the tests run), its links made the
  site's.
- Offline: code is highlighted by Pygments at build time (no script from a CDN); its
  stylesheet is written to css/pygments.css. The search index is also written as a
  script, search/search_index.js, which docs/js/offline_search.js searches in a site
  opened from its files, where the search plugin's worker cannot start.
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_MARKER = "<!-- ml_comm: settings table -->"
STARTS_MARKER = "<!-- ml_comm: the README's starts -->"
STARTS_HEADING = "## Three short starts"
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
PYGMENTS_CSS = Path("css") / "pygments.css"
PYGMENTS_STYLE = "friendly"
SETTINGS_FILE = Path("ml_comm") / "core" / "settings.py"
SETTING_FIELDS = ("name", "default", "type", "compared", "effect")
OUTSIDE_LINK = re.compile(r"\[([^\]]+)\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")


# ---------------------------------------------------------------- nav


def _nav_files(nav) -> set[str]:
    found: set[str] = set()
    for item in nav or []:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            if isinstance(value, list):
                found |= _nav_files(value)
            elif isinstance(value, str):
                found.add(value)
    return found


def on_config(config):
    docs = Path(config["docs_dir"])
    listed = _nav_files(config["nav"])
    extra = sorted(
        p.relative_to(docs).as_posix()
        for p in docs.rglob("*.md")
        if p.relative_to(docs).as_posix() not in listed
    )
    if config["nav"] is not None and extra:
        config["nav"].append({"More": extra})
    return config


# ---------------------------------------------------------------- settings table


def load_settings(root: Path = ROOT) -> tuple:
    """ml_comm.core.settings.SETTINGS, imported from `root` without ml_comm's __init__."""
    path = root / SETTINGS_FILE
    if not path.is_file():
        raise PluginError(
            f"the environment-variable table is made from {SETTINGS_FILE} (its SETTINGS), "
            f"which is missing under {root}; the site is not built without it"
        )
    names = ("ml_comm", "ml_comm.core", "ml_comm.core.settings")
    saved = {name: sys.modules.pop(name, None) for name in names}
    present = set(sys.modules)
    try:
        # Namespace stand-ins for the two packages: their __init__ would load the core.
        for name, folder in ((names[0], root / "ml_comm"), (names[1], root / "ml_comm" / "core")):
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            sys.modules[name] = package
        settings = importlib.import_module(names[2]).SETTINGS
    except Exception as exc:
        raise PluginError(f"could not read SETTINGS from {path}: {exc!r}") from exc
    finally:
        # settings.py's own imports (core/errors.py) go too: they hang off the stand-ins.
        for name in [n for n in sys.modules if n.startswith("ml_comm") and n not in present]:
            sys.modules.pop(name, None)
        for name in names:
            sys.modules.pop(name, None)
            if saved[name] is not None:
                sys.modules[name] = saved[name]
    if not settings:
        raise PluginError(f"SETTINGS in {path} is empty: no environment variables to list")
    for setting in settings:
        missing = [f for f in SETTING_FIELDS if not hasattr(setting, f)]
        if missing:
            raise PluginError(f"a setting in {path} has no {', '.join(missing)}: {setting!r}")
    return tuple(settings)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def settings_table(settings) -> str:
    """One Markdown table row per setting, in the code's order."""
    rows = [
        "| Variable | Default | Type | Compared across ranks at `init` | Effect |",
        "|---|---|---|---|---|",
    ]
    for s in settings:
        compared = "yes" if s.compared else "no"
        rows.append(
            f"| `{_cell(s.name)}` | {_cell(s.default)} | {_cell(s.type)} | {compared} "
            f"| {_cell(s.effect)} |"
        )
    return "\n".join(rows)


# ---------------------------------------------------------------- the README's starts


def _site_link(match: re.Match) -> str:
    """A link of the README (relative to the repository root) as the home page's."""
    target = match.group(1)
    if "://" in target or target.startswith("#"):
        return match.group(0)
    if target.startswith("docs/"):
        return f"]({target[len('docs/') :]})"
    return f"](../{target})"


def readme_starts(root: Path = ROOT) -> str:
    """The README's section of the three starts, up to the next section."""
    readme = (root / "README.md").read_text()
    if STARTS_HEADING not in readme:
        raise PluginError(f"README.md has no '{STARTS_HEADING}' section for the home page")
    section = STARTS_HEADING + readme.split(STARTS_HEADING, 1)[1].split("\n## ", 1)[0]
    return MARKDOWN_LINK.sub(_site_link, section.rstrip() + "\n")


# ---------------------------------------------------------------- offline


def on_post_build(config):
    """Pygments' stylesheet, and the search index as a script (see the module's docstring)."""
    from pygments.formatters import HtmlFormatter

    site = Path(config["site_dir"])
    css = site / PYGMENTS_CSS
    css.parent.mkdir(parents=True, exist_ok=True)
    css.write_text(HtmlFormatter(style=PYGMENTS_STYLE).get_style_defs(".codehilite"))
    index = site / "search" / "search_index.json"
    if index.exists():
        script = "window.mlCommSearchIndex = " + index.read_text() + ";\n"
        (site / "search" / "search_index.js").write_text(script)


# ---------------------------------------------------------------- pages


def _outside_link(page_path: Path, docs: Path, match: re.Match) -> str:
    text, target = match.group(1), match.group(2)
    resolved = (page_path.parent / target).resolve()
    if resolved.is_relative_to(docs.resolve()):
        return match.group(0)  # inside the site: MkDocs checks it
    if not resolved.exists():
        raise PluginError(f"{page_path.name} links to {target}, which does not exist")
    path = resolved.relative_to(ROOT).as_posix()
    return text if path in text else f"{text} (`{path}`)"


def on_page_markdown(markdown, page, config, files):
    if SETTINGS_MARKER in markdown:
        markdown = markdown.replace(SETTINGS_MARKER, settings_table(load_settings()))
    if STARTS_MARKER in markdown:
        markdown = markdown.replace(STARTS_MARKER, readme_starts())
    docs = Path(config["docs_dir"])
    page_path = docs / page.file.src_uri
    return OUTSIDE_LINK.sub(lambda m: _outside_link(page_path, docs, m), markdown)
