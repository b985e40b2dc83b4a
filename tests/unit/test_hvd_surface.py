"""ml_comm.horovod's surface: every public name of Horovod 0.28.1's horovod.tensorflow
and horovod.tensorflow.keras (listed here from Horovod's release) exists; the ones
ml_comm does not support raise naming the alternative; `python -m ml_comm.horovod`
answers `import horovod...` for an unchanged script; init touches no TensorFlow device;
the horovodrun-style launcher builds the MPI or srun command."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ml_comm.horovod import run

TENSORFLOW_NAMES = """
Adasum Average BroadcastGlobalVariablesHook Compression DistributedGradientTape
DistributedOptimizer LocalGradientAggregationHelper Max Min PartialDistributedGradientTape
ProcessSet Product Sum SyncBatchNormalization add_process_set allgather allgather_object
allreduce alltoall broadcast broadcast_ broadcast_global_variables broadcast_object
broadcast_object_fn broadcast_variables ccl_built check_extension check_num_rank_power_of_2
cross_rank cross_size cuda_built ddl_built device_compatibility_check elastic
global_process_set gloo_built gloo_enabled gpu_available grouped_allgather grouped_allreduce
grouped_reducescatter handle_average_backwards_compatibility init is_homogeneous
is_initialized join local_rank local_rank_op local_size local_size_op mpi_built mpi_enabled
mpi_threads_supported nccl_built process_set_included_op rank rank_op reducescatter
refs_to_vars remove_process_set rocm_built shutdown size size_op split_list start_timeline
stop_timeline vars_to_refs
""".split()

KERAS_NAMES = """
Average Compression DistributedOptimizer K ProcessSet Sum add_process_set allgather allreduce
broadcast broadcast_global_variables callbacks ccl_built cross_rank cross_size cuda_built
ddl_built elastic global_process_set gloo_built gloo_enabled init is_initialized load_model
local_rank local_size mpi_built mpi_enabled mpi_threads_supported nccl_built rank
reducescatter remove_process_set rocm_built shutdown size start_timeline stop_timeline
""".split()

KERAS_CALLBACKS = """
BestModelCheckpoint BroadcastGlobalVariablesCallback LearningRateScheduleCallback
LearningRateWarmupCallback MetricAverageCallback
""".split()

ELASTIC_NAMES = {
    "ml_comm.horovod.tensorflow.elastic": "HorovodInternalError ObjectState TensorFlowKerasState "
    "TensorFlowState broadcast_object broadcast_object_fn broadcast_variables init rank run "
    "run_fn shutdown".split(),
    "ml_comm.horovod.tensorflow.keras.elastic": "CommitStateCallback KerasState "
    "TensorFlowKerasState UpdateBatchStateCallback UpdateEpochStateCallback run".split(),
}


# Helpers that scripts (and Horovod's own tests) import from Horovod's internal modules.
HELPER_NAMES = {
    "ml_comm.horovod.common.util": ["is_version_greater_equal_than", "check_extension"],
    "ml_comm.horovod.tensorflow.util": ["_executing_eagerly", "vars_to_refs", "refs_to_vars"],
}


def test_every_horovod_name_exists():
    import importlib

    import ml_comm.horovod.keras as hk
    import ml_comm.horovod.tensorflow as hvd
    import ml_comm.horovod.tensorflow.keras as hvdk

    missing = [f"tensorflow.{n}" for n in TENSORFLOW_NAMES if not hasattr(hvd, n)]
    missing += [f"tensorflow.keras.{n}" for n in KERAS_NAMES if not hasattr(hvdk, n)]
    missing += [
        f"keras.{n}" for n in (*KERAS_NAMES, "PartialDistributedOptimizer") if not hasattr(hk, n)
    ]
    missing += [f"callbacks.{n}" for n in KERAS_CALLBACKS if not hasattr(hvdk.callbacks, n)]
    for module, names in {**ELASTIC_NAMES, **HELPER_NAMES}.items():
        m = importlib.import_module(module)
        missing += [f"{module}.{n}" for n in names if not hasattr(m, n)]
    assert not missing, missing


@pytest.mark.parametrize(
    "call, words",
    [
        ("hvd.start_timeline('t.json')", "ML_COMM_TIMELINE"),
        ("hvd.stop_timeline()", "ML_COMM_TIMELINE"),
        ("hvd.LocalGradientAggregationHelper()", "backward_passes_per_step"),
        ("hvd.device_compatibility_check()", "keras.mixed_precision"),
        ("hvd.ProcessSet([0, 1])", "global process set"),
        ("hvd.join()", "equal_steps"),
        ("hvd.init(process_sets=[hvd.ProcessSet])", "teams"),
    ],
)
def test_unsupported_names_raise_naming_the_alternative(call, words):
    import ml_comm.horovod.tensorflow as hvd

    with pytest.raises(NotImplementedError, match=words):
        eval(call, {"hvd": hvd})


def test_small_utilities():
    import ml_comm.horovod.tensorflow as hvd

    assert hvd.split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert [hvd.check_num_rank_power_of_2(n) for n in (1, 2, 3, 4, 6, 8)] == [
        True,
        True,
        False,
        True,
        False,
        True,
    ]
    assert hvd.handle_average_backwards_compatibility(None, None) == hvd.Average
    assert hvd.handle_average_backwards_compatibility(None, False) == hvd.Sum


SCRIPT = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    import horovod.tensorflow as hvd
    import horovod.tensorflow.keras as hvdk
    from horovod.tensorflow.keras import callbacks
    import horovod.keras
    hvd.init()
    # init created no TensorFlow device: the script may still configure them.
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    assert hvd.__name__ == "ml_comm.horovod.tensorflow", hvd.__name__
    assert hvdk.DistributedOptimizer is horovod.keras.DistributedOptimizer
    assert callbacks.MetricAverageCallback.__module__ == "ml_comm.horovod.callbacks"
    out = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum)
    print("args", sys.argv[1:], "sum", out.numpy().tolist(), "size", hvd.size())
    """
)


def test_runner_answers_horovod_imports(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "ml_comm.horovod", str(script), "--epochs", "2"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "args ['--epochs', '2'] sum [1.0, 2.0] size 1" in done.stdout


def test_launcher_commands():
    args = run.parse(["-np", "3", "-H", "a:2,b:1", "--mpi", "python", "train.py", "--lr", "1"])
    cmd = run.command(args, {"PATH": ""})
    assert cmd[1:] == [
        "-n",
        "3",
        "-hosts",
        "a:2,b:1",
        "python",
        "-m",
        "ml_comm.horovod",
        "train.py",
        "--lr",
        "1",
    ]
    args = run.parse(["-np", "4", "python", "-m", "pkg.train"])
    assert run.command(args, {"PATH": ""})[-3:] == ["python", "-m", "pkg.train"]
    with pytest.raises(SystemExit):
        run.parse(["-np", "2", "--gloo", "python", "x.py"])
