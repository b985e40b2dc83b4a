"""Ranks started with different protocol settings (each in turn, at 2 ranks) fail at
init on every rank within 10 s, with both values and the ranks named, instead of
hanging in their first reduction; equal settings still train (ml_comm/core/settings_check.py).

Each case launches `mpiexec -n 1 -env ... python settings_job.py ARGS : -n 1 ...`, so
that each rank really gets its own environment and arguments.
"""

from __future__ import annotations

import re
import uuid

import pytest
from jobs import MPIEXEC, PY, SCRIPTS, clean_env, run_job

from ml_comm.core import settings_check

TIMEOUT_S = 90
BASE_ARGS = {"nthreads": "2", "nteams": "1", "msglen": "4096", "chunk": "0", "framework": "numpy"}


def launch(per_rank: list[tuple[dict[str, str], dict[str, str]]]):
    """per_rank: (environment, init arguments) of each rank, one program each."""
    token = f"mlcsettings-{uuid.uuid4().hex[:12]}"
    cmd = [MPIEXEC]
    for k, (env, args) in enumerate(per_rank):
        if k:
            cmd.append(":")
        cmd += ["-n", "1"]
        for name, value in env.items():
            cmd += ["-env", name, value]
        merged = {**BASE_ARGS, **args}
        cmd += [PY, str(SCRIPTS / "settings_job.py"), *merged.values(), token]
    return run_job(cmd, token, TIMEOUT_S, clean_env())


# (what the message calls it, rank 0's value and rank 1's, as env or init arguments)
ENV_CASES = {
    "ML_COMM_CHECK_LAYOUT": ("1", "0"),
    "ML_COMM_CHECK_FINITE": ("0", "1"),
    "ML_COMM_LATENCY_BYTES": ("524288", "1024"),
    "ML_COMM_INLINE_BYTES": ("4194304", "0"),
    "ML_COMM_SUBMIT_BYTES": ("1048576", "0"),
    "ML_COMM_DIRECT_BYTES": ("4096", "0"),
    "ML_COMM_RABENSEIFNER_BYTES": ("16777216", "0"),
    "ML_COMM_COMPRESSION": ("none", "bf16"),
    "ML_COMM_WEIGHTS_CHECK": ("1", "0"),
}


def test_every_protocol_variable_is_covered():
    assert set(ENV_CASES) | {"ML_COMM_CHUNK_BYTES"} == set(settings_check.PROTOCOL_VARIABLES)


def assert_both_fail(job, name: str, value0: str, value1: str):
    assert job.returncode == 0, job.detail()
    want = f"{name}: rank 0: {value0}; rank 1: {value1}"
    for rank in (0, 1):
        found = re.search(rf"rank {rank} raised after (\d+\.\d+) s: (.*)", job.stdout)
        assert found, job.detail()
        assert float(found.group(1)) < 10, job.detail()
        assert want in found.group(2), f"{want!r} not in\n{job.detail()}"
        assert f"rank {rank} raised MismatchError" in job.stdout, job.detail()


@pytest.mark.parametrize("name", sorted(ENV_CASES))
def test_environment_mismatch_fails_on_both_ranks(name):
    value0, value1 = ENV_CASES[name]
    job = launch([({name: value0}, {}), ({name: value1}, {})])
    assert_both_fail(job, name, value0, value1)


def test_threshold_set_on_one_rank_only():
    job = launch([({}, {}), ({"ML_COMM_DIRECT_BYTES": "0"}, {})])
    assert_both_fail(job, "ML_COMM_DIRECT_BYTES", "unset (default)", "0")


def test_chunk_from_environment_and_argument():
    job = launch([({"ML_COMM_CHUNK_BYTES": "65536"}, {}), ({}, {"chunk": "131072"})])
    assert_both_fail(job, "chunk_bytes (init argument or ML_COMM_CHUNK_BYTES)", "65536", "131072")


@pytest.mark.parametrize(
    "arg,name,value0,value1",
    [
        ("nthreads", "nthread_per_team", "2", "1"),
        ("nteams", "nteams", "1", "2"),
        ("msglen", "msglen", "4096", "8192"),
        ("framework", "framework", "numpy", "tensorflow"),
    ],
)
def test_init_argument_mismatch_fails_on_both_ranks(arg, name, value0, value1):
    job = launch([({}, {arg: value0}), ({}, {arg: value1})])
    assert_both_fail(job, name, value0, value1)


def test_equal_settings_train():
    env = {"ML_COMM_DIRECT_BYTES": "0", "ML_COMM_CHUNK_BYTES": "65536"}
    job = launch([(env, {}), (env, {})])
    assert job.returncode == 0, job.detail()
    for rank in (0, 1):
        assert f"rank {rank} averaged to 0.5" in job.stdout, job.detail()
