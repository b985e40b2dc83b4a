"""Rank 0's note at init when TensorFlow runs one inter-op thread (ml_comm/tensorflow/
overlap_note.py): given for one thread however it was chosen, not for two. Each case runs
in a process of its own, as TensorFlow reads its thread counts once."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow"
)

PROBE = """
import sys
import tensorflow as tf
if len(sys.argv) > 1:
    tf.config.threading.set_inter_op_parallelism_threads(int(sys.argv[1]))
from ml_comm.tensorflow import overlap_note
print(overlap_note.inter_op_threads(), overlap_note.note() is not None)
"""


def probe(*args: str, env: dict | None = None, cpus: set[int] | None = None) -> str:
    full = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTEROP_THREADS"}
    full.update(env or {}, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split("\n")[-2]


def test_one_thread_set_in_code_or_environment_gets_the_note():
    assert probe("1") == "1 True"
    assert probe(env={"TF_NUM_INTEROP_THREADS": "1"}) == "1 True"


def test_two_threads_get_none():
    assert probe("2") == "2 False"
    assert probe(env={"TF_NUM_INTEROP_THREADS": "2"}) == "2 False"


def test_the_default_on_one_core_is_one_thread():
    assert probe(cpus={min(os.sched_getaffinity(0))}) == "1 True"
