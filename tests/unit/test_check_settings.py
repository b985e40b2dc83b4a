"""The environment variables of the agreement checks and the stall watchdog
(ml_comm/core/checks.py): defaults, accepted spellings, and a ValueError that names the
variable for anything else (raised by init before anything starts)."""

from __future__ import annotations

import pytest

from ml_comm.core import checks


def test_defaults():
    assert checks.from_env({}) == checks.GuardSettings(True, False, 60.0, 1800.0)


def test_stall_abort_on_by_default():
    # A lost rank ends the job after 30 minutes unless told otherwise; 0 still turns it off.
    assert checks.from_env({}).stall_abort == 1800.0
    assert checks.GuardSettings().stall_abort == 1800.0
    assert checks.from_env({"ML_COMM_STALL_ABORT_SECONDS": "0"}).stall_abort == 0.0


def test_values():
    env = {
        "ML_COMM_CHECK_LAYOUT": "0",
        "ML_COMM_CHECK_FINITE": "yes",
        "ML_COMM_STALL_WARN_SECONDS": "2.5",
        "ML_COMM_STALL_ABORT_SECONDS": "30",
    }
    assert checks.from_env(env) == checks.GuardSettings(False, True, 2.5, 30.0)
    assert checks.from_env({"ML_COMM_STALL_WARN_SECONDS": "0"}).stall_warn == 0.0


@pytest.mark.parametrize(
    "name,value",
    [
        ("ML_COMM_CHECK_LAYOUT", "2"),
        ("ML_COMM_CHECK_FINITE", "maybe"),
        ("ML_COMM_STALL_WARN_SECONDS", "-1"),
        ("ML_COMM_STALL_WARN_SECONDS", "soon"),
        ("ML_COMM_STALL_ABORT_SECONDS", "nan"),
        ("ML_COMM_STALL_ABORT_SECONDS", "inf"),
    ],
)
def test_bad_values_name_the_variable(name, value):
    with pytest.raises(ValueError, match=rf"^environment variable {name} must be .*{value!r}"):
        checks.from_env({name: value})
