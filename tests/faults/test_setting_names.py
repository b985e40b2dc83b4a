"""An ML_COMM_* variable that is no setting (a misspelt name, which does nothing) gets a
warning at init, once for the job, from rank 0, naming the setting meant; with
ML_COMM_STRICT_SETTINGS=1 init fails on every rank instead (core/settings_check.py).
Real 2-rank jobs, each rank with its own environment (test_settings_job.launch)."""

from __future__ import annotations

import re

from test_settings_job import launch

WARNING = re.compile(r"^ml_comm: warning: ignoring (.*): not a setting of ml_comm \(.*\)$", re.M)


def test_a_misspelt_setting_warns_once_naming_the_setting_meant():
    env = {"ML_COMM_COMPRESION": "bf16"}
    job = launch([(env, {}), (env, {})])
    assert job.returncode == 0, job.detail()
    for rank in (0, 1):
        assert f"rank {rank} averaged to 0.5" in job.stdout, job.detail()
    warnings = WARNING.findall(job.stderr)
    assert warnings == ["ML_COMM_COMPRESION (did you mean ML_COMM_COMPRESSION?)"], job.detail()
    assert job.stderr.count("ML_COMM_COMPRESION") == 1, job.detail()


def test_a_name_set_on_one_rank_only_is_said_with_that_rank():
    job = launch([({}, {}), ({"ML_COMM_STALL_ABORT_SECOND": "60"}, {})])
    assert job.returncode == 0, job.detail()
    warnings = WARNING.findall(job.stderr)
    assert warnings == [
        "ML_COMM_STALL_ABORT_SECOND (did you mean ML_COMM_STALL_ABORT_SECONDS?) "
        "(ML_COMM_STALL_ABORT_SECOND set on rank 1 only)"
    ], job.detail()


def test_strict_settings_make_init_fail_on_every_rank():
    env = {"ML_COMM_COMPRESION": "bf16", "ML_COMM_STRICT_SETTINGS": "1"}
    job = launch([(env, {}), (env, {})])
    assert job.returncode == 0, job.detail()  # the script catches what init raises
    want = "not a setting of ml_comm: ML_COMM_COMPRESION (did you mean ML_COMM_COMPRESSION?)"
    for rank in (0, 1):
        found = re.search(rf"rank {rank} raised after [\d.]+ s: (.*)", job.stdout)
        assert found and want in found.group(1), job.detail()
        assert f"rank {rank} raised SettingsError" in job.stdout, job.detail()
    assert "averaged" not in job.stdout, job.detail()
