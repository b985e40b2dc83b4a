"""ml_comm.keras.finalize() in a script that never called init: in a job of several
tasks each trained alone, which nothing else would tell; the launcher's rank 0 says it
once. One process: the launcher's variables stand for a launch."""

from __future__ import annotations

import threading

import pytest

from ml_comm.mpi import launch  # noqa: E402

mk = pytest.importorskip("ml_comm.keras")


@pytest.mark.parametrize(
    "size,rank,warns", [("2", "0", True), ("2", "1", False), ("1", "0", False)]
)
def test_finalize_without_init_says_the_tasks_trained_alone(monkeypatch, capfd, size, rank, warns):
    monkeypatch.setattr(mk, "_started", threading.Event())  # this process never ran init
    others = [name for name, _ in launch.TASK_COUNT_VARIABLES] + list(launch.RANK_VARIABLES)
    for name in [*others, "SLURM_STEP_ID"]:  # whatever launched this test
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PMI_SIZE", size)
    monkeypatch.setenv("PMI_RANK", rank)
    mk.finalize()
    said = capfd.readouterr().err
    assert ("finalize() without init(), in a job of 2 tasks" in said) == warns, said
