"""The table of settings (ml_comm/core/settings.py) holds every ML_COMM_* variable the
product reads, each of its rows is read somewhere, the code reads them through it, and
its accessors parse and reject values as documented."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ml_comm.core import settings, settings_check
from ml_comm.core.errors import MLCommError, SettingsError

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bML_COMM_[A-Z0-9_]+")
C_MACRO = re.compile(r"#\s*define\s+(ML_COMM_[A-Z0-9_]+)")
SETTINGS_FILE = ROOT / "ml_comm" / "core" / "settings.py"
# Readers that run where ml_comm cannot be imported (settings.py's docstring says why);
# the names they may read from os.environ themselves.
OWN_READERS = {
    "ml_comm/core/build_ffi.py": {"ML_COMM_CFLAGS"},
    "ml_comm/core/mpi_compiler.py": {"ML_COMM_MPICC"},
}


def product_files() -> list[Path]:
    files = [p for p in (ROOT / "ml_comm").rglob("*") if p.suffix in (".py", ".cc", ".h", ".c")]
    files += [p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".c", ".h")]
    return sorted(p for p in files if p.is_file() and p != SETTINGS_FILE)


def test_every_variable_the_product_names_is_in_the_table():
    named: dict[str, str] = {}
    macros: set[str] = set()
    for path in product_files():
        text = path.read_text(errors="replace")
        macros |= set(C_MACRO.findall(text))
        for name in NAME.findall(text):
            named.setdefault(name, str(path.relative_to(ROOT)))
    missing = {n: where for n, where in named.items() if n not in macros}
    missing = {n: where for n, where in missing.items() if n not in settings.BY_NAME}
    assert not missing, f"add a row to ml_comm/core/settings.py for: {missing}"


def _string_constants(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_every_row_is_read_somewhere():
    used: set[str] = set()
    for path in product_files():
        if path.suffix == ".py":
            used |= _string_constants(path)
    unread = [s.name for s in settings.SETTINGS if s.name not in used]
    assert not unread, f"rows of the table that no code reads: {unread}"


def _environ_reads(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each os.environ / os.getenv read of a literal ML_COMM_* name (or of
    a module constant holding one)."""
    tree = ast.parse(path.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }

    def name_of(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    def is_environ(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    reads = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and is_environ(node.value):
            key = name_of(node.slice)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            func = node.func
            if (func.attr in ("get", "setdefault", "pop") and is_environ(func.value)) or (
                func.attr == "getenv"
            ):
                key = name_of(node.args[0])
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            key = name_of(node.left)
        if key and key.startswith("ML_COMM_"):
            reads.append((node.lineno, key))
    return reads


def test_the_code_reads_its_variables_through_the_table():
    direct = []
    for path in product_files():
        if path.suffix != ".py":
            continue
        allowed = OWN_READERS.get(path.relative_to(ROOT).as_posix(), set())
        for line, name in _environ_reads(path):
            if name not in allowed:
                direct.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not direct, f"read these through ml_comm.core.settings.get: {direct}"
    for readers in OWN_READERS.values():
        assert readers <= set(settings.BY_NAME)


def test_the_c_core_reads_no_environment():
    readers = [
        f"{p.relative_to(ROOT)}"
        for p in product_files()
        if "getenv(" in p.read_text(errors="replace")
    ]
    assert not readers, readers


def test_rows_are_well_formed():
    names = [s.name for s in settings.SETTINGS]
    assert len(names) == len(set(names))
    for s in settings.SETTINGS:
        assert NAME.fullmatch(s.name), s
        assert s.type in settings.PARSERS, s
        assert isinstance(s.compared, bool), s
        assert s.effect.strip().endswith((".", ")")), s
        if s.default != "unset":
            settings.PARSERS[s.type](s.name, s.default)  # the default parses


def test_compared_list_is_the_tables_column():
    assert settings_check.PROTOCOL_VARIABLES == tuple(
        s.name for s in settings.SETTINGS if s.compared
    )
    assert "ML_COMM_CHUNK_BYTES" in settings_check.PROTOCOL_VARIABLES
    assert "ML_COMM_STALL_WARN_SECONDS" not in settings_check.PROTOCOL_VARIABLES


def test_defaults_and_values():
    assert settings.get("ML_COMM_CHUNK_BYTES", {}) == 1 << 20
    assert settings.get("ML_COMM_LATENCY_BYTES", {}) is None
    assert settings.get("ML_COMM_LATENCY_BYTES", {"ML_COMM_LATENCY_BYTES": "0"}) == 0
    assert settings.get("ML_COMM_CHECK_LAYOUT", {}) is True
    assert settings.get("ML_COMM_CHECK_LAYOUT", {"ML_COMM_CHECK_LAYOUT": " Off "}) is False
    assert settings.get("ML_COMM_ABORT_ON_EXCEPTION", {"ML_COMM_ABORT_ON_EXCEPTION": ""}) is True
    assert settings.get("ML_COMM_STALL_WARN_SECONDS", {}) == 60.0
    assert settings.get("ML_COMM_TIMELINE", {}) is None
    assert settings.get("ML_COMM_TIMELINE", {"ML_COMM_TIMELINE": "/tmp/t.json"}) == "/tmp/t.json"
    assert settings.get("ML_COMM_TIMELINE_EVENTS", {}) == 1_000_000


ZERO_OR_ONE = "0 or 1 (or true/false, yes/no, on/off)"


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("ML_COMM_REQUEUE_ON_STOP", "maybe", f"must be {ZERO_OR_ONE}, got 'maybe'"),
        ("ML_COMM_ALLOW_ONE_RANK", "2", f"must be {ZERO_OR_ONE}, got '2'"),
        ("ML_COMM_TIMELINE_EVENTS", "1e6", "must be an integer, got '1e6'"),
        ("ML_COMM_DIRECT_BYTES", "-1", "must be >= 0, got -1"),
        (
            "ML_COMM_STALL_ABORT_SECONDS",
            "-3",
            "must be a number of seconds >= 0 (0: off), got '-3'",
        ),
    ],
)
def test_bad_values_name_the_variable_and_the_value(name, value, message):
    with pytest.raises(SettingsError) as error:
        settings.check_all({name: value})
    assert str(error.value) == f"environment variable {name} {message}"
    assert isinstance(error.value, ValueError)  # what init raised before for these


def test_a_name_outside_the_table_is_refused():
    with pytest.raises(KeyError, match="ML_COMM_NOT_A_SETTING is not in ml_comm's table"):
        settings.get("ML_COMM_NOT_A_SETTING")


def test_a_misspelt_name_gets_the_closest_setting():
    env = {
        "ML_COMM_COMPRESION": "bf16",
        "ML_COMM_STALL_ABORT_SECOND": "60",
        "ML_COMM_CACHEDIR": "/tmp",
        "ML_COMM_FOO": "1",
        "ML_COMM_CHUNK_BYTES": "65536",  # a setting
        "ML_COMM_TEST_COMM": "dup",  # the test suite's
        "ML_COMM_SKIP_TESTBED": "1",
        "OTHER_COMPRESION": "bf16",
    }
    assert settings.unknown(env) == {
        "ML_COMM_CACHEDIR": "ML_COMM_CACHE_DIR",
        "ML_COMM_COMPRESION": "ML_COMM_COMPRESSION",
        "ML_COMM_FOO": None,
        "ML_COMM_STALL_ABORT_SECOND": "ML_COMM_STALL_ABORT_SECONDS",
    }
    assert settings.unknown_text(
        {"ML_COMM_COMPRESION": "ML_COMM_COMPRESSION", "ML_COMM_FOO": None}
    ) == (
        "ML_COMM_COMPRESION (did you mean ML_COMM_COMPRESSION?), ML_COMM_FOO (no setting is close)"
    )


# Names that tests make up or misspell on purpose.
MADE_UP = {"ML_COMM_NOT_A_SETTING", "ML_COMM_ONE", "ML_COMM_TWO", "ML_COMM_FOO", "ML_COMM_CACHEDIR"}
MISSPELT = {"ML_COMM_COMPRESION", "ML_COMM_STALL_ABORT_SECOND"}


def test_the_test_suites_and_tools_variables_are_not_called_unknown():
    """Every ML_COMM_* name the tests and tools read is a setting or a developer variable,
    so that running the suite with them set warns of nothing."""
    files = [p for d in ("tests", "tools") for p in (ROOT / d).rglob("*.py")]
    files += [ROOT / ".ci" / "run"]
    named = {
        name
        for path in files
        if path.is_file()
        for name in NAME.findall(path.read_text(errors="replace"))
    }
    misspelt = set(settings.unknown(dict.fromkeys(named, "1"))) - MADE_UP - MISSPELT
    assert not misspelt, f"add to settings.DEVELOPER_VARIABLES or the table: {misspelt}"


def test_a_bad_compression_is_a_setting_error():
    from ml_comm.core import compression

    with pytest.raises(SettingsError, match="ML_COMM_COMPRESSION must be 'none', 'bf16'"):
        compression.from_env({"ML_COMM_COMPRESSION": "bf17"})
    assert issubclass(SettingsError, MLCommError)
    assert issubclass(SettingsError, ValueError)
