"""The parser of Linux CPU lists behind ML_COMM_THREAD_CORES (ml_comm/core/cpu_list.py),
without MPI, and the setting's row parsing through it."""

from __future__ import annotations

import pytest

from ml_comm.core import settings
from ml_comm.core.cpu_list import MAX_CPU, for_local_rank, parse_cpu_list, parse_per_local_rank
from ml_comm.core.errors import SettingsError
from ml_comm.core.thread_cores import problem, written


@pytest.mark.parametrize(
    "text,cores",
    [
        ("0", (0,)),
        ("6-7", (6, 7)),
        ("0,2,4-5", (0, 2, 4, 5)),
        (" 3 , 1 ", (1, 3)),  # spaces around items; sorted
        ("2-4,3", (2, 3, 4)),  # overlaps counted once
        ("5-5", (5,)),
        ("1023-1025", (1023, 1024, 1025)),  # past CPU_SETSIZE: the core sizes its set
    ],
)
def test_lists_parse_as_taskset_writes_them(text, cores):
    assert parse_cpu_list(text) == cores


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "an empty item"),
        ("1,", "an empty item"),
        ("0,,1", "an empty item"),
        ("x", "'x' is neither a core nor a range"),
        ("-1", "'-1' is neither a core nor a range"),
        ("1-", "'1-' is neither a core nor a range"),
        ("0-6:2", "is neither"),  # taskset's strides are not taken
        ("1.5", "'1.5' is neither a core nor a range"),
        ("7-6", "the range '7-6' runs backwards"),
        (f"0-{MAX_CPU}", f"core {MAX_CPU} is past {MAX_CPU - 1}"),
    ],
)
def test_bad_lists_say_what_is_wrong(text, reason):
    with pytest.raises(ValueError, match="CPU list") as error:
        parse_cpu_list(text)
    assert reason in str(error.value)


def test_one_list_per_local_rank():
    assert parse_per_local_rank("6-7:14-15") == ((6, 7), (14, 15))
    assert parse_per_local_rank("1") == ((1,),)
    lists = parse_per_local_rank("0:1")
    assert for_local_rank(lists, 0) == (0,)
    assert for_local_rank(lists, 1) == (1,)
    assert for_local_rank(((4, 5),), 3) == (4, 5)  # one list: every local rank's
    with pytest.raises(ValueError, match="local ranks 0-1, but this node runs local rank 2"):
        for_local_rank(lists, 2)
    with pytest.raises(ValueError, match="an empty item"):
        parse_per_local_rank("0::1")


def test_the_setting_parses_through_the_table():
    name = "ML_COMM_THREAD_CORES"
    assert settings.get(name, {}) is None  # unset: the threads keep the inherited cores
    assert settings.get(name, {name: " 0,2-3:5 "}) == ((0, 2, 3), (5,))
    with pytest.raises(SettingsError) as error:
        settings.check_all({name: "1-x"})
    assert str(error.value).startswith(
        f"environment variable {name} must be a Linux CPU list such as '6-7'"
    )
    assert "got '1-x': '1-x' is neither a core nor a range" in str(error.value)


def test_problems_name_the_cores_outside_the_allowed_set():
    allowed = {0, 1, 2, 3}
    assert problem(((2, 3),), 0, allowed) is None
    assert problem(((5,),), 1, allowed) == "core 5 is outside the cores the rank may run on: 0-3"
    assert problem(((0,), (3, 6, 7)), 1, allowed) == (
        "cores 6-7 (local rank 1's list) are outside the cores the rank may run on: 0-3"
    )
    assert problem(((0,), (1,)), 0, allowed) is None
    assert "this node runs local rank 2" in problem(((0,), (1,)), 2, allowed)
    assert written(((0, 2, 3), (5,))) == "0,2-3:5"
