"""ps_ml_comm's pieces that need no tf_cnn_benchmarks checkout: the parameter-table patch
(upstream's table layout, turned into real absl flags), the split of gradients over
teams, the opt-in wrapper (`python -m ml_comm.tfcnn`), and nothing of ml_comm in a
Python started otherwise. The runs of upstream itself are in tests/tfcnn."""

from __future__ import annotations

import collections
import importlib.util
import os
import subprocess
import sys

import pytest

from ml_comm.tfcnn import MODE, flagspecs, teams

# Upstream's flags.ParamSpec and the variable_update entry, in its layout.
ParamSpec = collections.namedtuple(
    "_ParamSpec", ["flag_type", "default_value", "description", "kwargs"]
)
UPSTREAM_MODES = (
    "parameter_server",
    "replicated",
    "distributed_replicated",
    "independent",
    "distributed_all_reduce",
    "collective_all_reduce",
    "horovod",
)


def upstream_table() -> dict:
    return {
        "variable_update": ParamSpec(
            "enum",
            "parameter_server",
            "The method for managing variables",
            {"enum_values": UPSTREAM_MODES},
        ),
        "num_batches": ParamSpec(
            "integer", None, "number of batches", {"lower_bound": 1, "upper_bound": None}
        ),
    }


def test_mode_joins_the_enum_and_flags_join_the_table():
    table = upstream_table()
    flagspecs.add_ps_ml_comm(table)
    spec = table["variable_update"]
    assert spec.kwargs["enum_values"] == (*UPSTREAM_MODES, MODE)
    assert spec.default_value == "parameter_server"
    assert MODE in spec.description and spec.description.startswith("The method")
    assert type(spec) is ParamSpec
    for name, (flag_type, default, _, kwargs) in flagspecs.FLAGS.items():
        assert table[name] == ParamSpec(flag_type, default, table[name].description, kwargs)
        assert type(table[name]) is ParamSpec
    assert table["num_batches"] == upstream_table()["num_batches"]


def test_patch_is_idempotent():
    table = upstream_table()
    flagspecs.add_ps_ml_comm(table)
    once = dict(table)
    flagspecs.add_ps_ml_comm(table)
    assert table == once


def test_patch_again_after_upstream_redefined_its_enum():
    """importlib.reload(benchmark_cnn) runs upstream's DEFINE_* again: variable_update
    loses the mode, our entries stay; patching again must work."""
    table = upstream_table()
    flagspecs.add_ps_ml_comm(table)
    table["variable_update"] = upstream_table()["variable_update"]
    flagspecs.add_ps_ml_comm(table)
    assert table["variable_update"].kwargs["enum_values"] == (*UPSTREAM_MODES, MODE)


@pytest.mark.parametrize(
    "table, message",
    [
        ({}, "no enum 'variable_update'"),
        ({"variable_update": ParamSpec("string", "x", "", {})}, "no enum 'variable_update'"),
        (
            {**upstream_table(), "ml_comm_teams": ParamSpec("integer", 3, "theirs", {})},
            "already defined by someone else: ml_comm_teams",
        ),
    ],
)
def test_tables_that_are_not_upstreams_are_refused(table, message):
    before = dict(table)
    with pytest.raises(ValueError, match=message):
        flagspecs.add_ps_ml_comm(table)
    assert table == before


@pytest.mark.skipif(importlib.util.find_spec("absl") is None, reason="needs absl-py (TensorFlow's)")
def test_patched_table_parses_as_absl_flags():
    """What upstream's flags.define_flags() does with the table, on a private FlagValues."""
    from absl import flags

    table = upstream_table()
    flagspecs.add_ps_ml_comm(table)
    values = flags.FlagValues()
    define = {
        "enum": flags.DEFINE_enum,
        "integer": flags.DEFINE_integer,
        "boolean": flags.DEFINE_boolean,
    }
    for name, spec in table.items():
        define[spec.flag_type](
            name, spec.default_value, help=spec.description, flag_values=values, **spec.kwargs
        )
    values(
        [
            "prog",
            f"--variable_update={MODE}",
            "--number_ml_comm_threads=4",
            "--ml_comm_check_variables",
            "--ml_comm_compression=bf16",
        ]
    )
    assert values.variable_update == MODE
    assert values.number_ml_comm_threads == 4
    assert values.ml_comm_teams == 1 and values.ml_comm_check_variables is True
    assert values.ml_comm_compression == "bf16"
    for bad in (
        "--number_ml_comm_threads=0",
        "--ml_comm_verbosity=3",
        "--ml_comm_compression=int8",
        "--variable_update=ps_mlcomm",
    ):
        values.unparse_flags()
        with pytest.raises(flags.IllegalFlagValueError):
            values(["prog", bad])


@pytest.mark.parametrize("nteams", [1, 2, 3, 4, 7])
@pytest.mark.parametrize(
    "sizes",
    [
        [],
        [5],
        [0, 0, 0],
        [1] * 10,
        [100, 1, 1, 1, 1],
        [1, 1, 1, 1, 100],
        [3, 9, 27, 81, 243, 729],
        list(range(1, 40)),
    ],
)
def test_team_blocks_are_contiguous_nonempty_and_balanced(sizes, nteams):
    blocks = teams.split(sizes, nteams)
    assert [i for b in blocks for i in b] == list(range(len(sizes)))
    assert all(len(b) > 0 for b in blocks)
    assert len(blocks) <= nteams
    if len(sizes) >= nteams and sum(sizes) > 0:
        assert len(blocks) == nteams or any(s * nteams >= sum(sizes) for s in sizes)
    # No block overshoots its share by more than its own last element.
    total = sum(sizes)
    for b in blocks[:-1]:
        assert sum(sizes[i] for i in b) - sizes[b[-1]] < total / nteams + 1e-9


def test_team_split_refuses_zero_teams():
    with pytest.raises(ValueError, match="nteams must be >= 1"):
        teams.split([1, 2], 0)


def test_a_plain_python_runs_nothing_of_ml_comm():
    """tf_cnn_benchmarks' mode is opt-in (`python -m ml_comm.tfcnn`): a Python started
    otherwise has no finder of ml_comm's and loads no module of it."""
    code = (
        "import json, sys; "
        "finders = [getattr(f, '__module__', '') or '' for f in sys.meta_path]; "
        "print(json.dumps([finders, sorted(sys.modules)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    finders, loaded = __import__("json").loads(out)
    ours = ("ml_comm", "_ml_comm")  # the package, and the start-up hook it once installed
    assert [f for f in finders if f.startswith(ours)] == [], finders
    assert [m for m in loaded if m.startswith(ours)] == [], loaded


def test_the_wrapper_runs_the_script_with_the_hook(tmp_path):
    """`python -m ml_comm.tfcnn SCRIPT ARGS` runs SCRIPT as __main__ with its own argv and
    folder on sys.path, the import hook first, and legacy Keras asked for."""
    (tmp_path / "helper_module.py").write_text("VALUE = 7\n")
    (tmp_path / "script.py").write_text(
        "import os, sys\n"
        "import helper_module\n"
        "from ml_comm.tfcnn.importhook import Finder\n"
        "assert __name__ == '__main__' and helper_module.VALUE == 7\n"
        "print(sys.argv[1:], sys.meta_path[0] is Finder, os.environ['TF_USE_LEGACY_KERAS'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run(
        [sys.executable, "-m", "ml_comm.tfcnn", str(tmp_path / "script.py"), "--a=1", "b"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "['--a=1', 'b'] True 1", proc.stdout


def test_a_foreign_benchmark_cnn_module_is_left_alone(tmp_path):
    """A module that happens to be called benchmark_cnn but is not tf_cnn_benchmarks's
    loads unchanged under the hook, without a warning."""
    (tmp_path / "benchmark_cnn.py").write_text("VALUE = 42\n")
    code = (
        "import warnings; warnings.simplefilter('error'); "
        "from ml_comm.tfcnn import importhook; importhook.install(); "
        "import benchmark_cnn; "
        "assert benchmark_cnn.VALUE == 42; "
        "assert not hasattr(benchmark_cnn, '_ml_comm_patched'); "
        "assert type(benchmark_cnn.__loader__).__name__ == 'SourceFileLoader'; "
        "print('ok')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
