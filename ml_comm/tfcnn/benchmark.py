"""BenchmarkCNN for ps_ml_comm: what upstream does for horovod, through overrides.

Upstream builds its variable manager in an if/elif chain in __init__ that rejects
unknown modes, so the subclass constructs itself as `independent` (one tower, no
communication) and then becomes ps_ml_comm: the worker count is the number of
ranks, the variable manager is VariableMgrMLComm. Every other mode passes through
untouched.
"""

from __future__ import annotations

import numpy as np
import tensorflow.compat.v1 as tf

from .. import api as mc
from . import MODE, runtime

# Files and directories that only rank 0 writes (horovod's is_chief outputs).
RANK0_OUTPUTS = {
    "train_dir": None,
    "benchmark_log_dir": None,
    "graph_file": None,
    "tfprof_file": None,
    "trace_file": "",
    "partitioned_graph_file_prefix": None,
}


def benchmark_class(base: type, manager: type, get_num_batches_and_epochs) -> type:
    """A subclass of upstream's BenchmarkCNN using `manager` for ps_ml_comm."""

    class BenchmarkCNN(base):
        __doc__ = base.__doc__

        def __init__(self, params, dataset=None, model=None):
            if params.variable_update != MODE:
                super().__init__(params, dataset, model)
                return
            job = runtime.start(params)
            if params.num_gpus != 1:
                raise ValueError(
                    f"--variable_update={MODE} runs one device per rank: use --num_gpus=1 "
                    f"and one rank per GPU (got --num_gpus={params.num_gpus})"
                )
            if params.job_name:
                raise ValueError(
                    f"--variable_update={MODE} does not use --job_name: start the ranks "
                    "with mpiexec or srun"
                )
            if job.rank > 0:
                params = params._replace(
                    **{k: v for k, v in RANK0_OUTPUTS.items() if k in params._fields}
                )
            super().__init__(params._replace(variable_update="independent"), dataset, model)
            self.params = self.params._replace(variable_update=MODE)
            self.num_workers = job.nranks
            subset = "validation" if params.eval else "train"
            self.num_batches, self.num_epochs = get_num_batches_and_epochs(
                params,
                self.batch_size * self.num_workers,
                self.dataset.num_examples_per_epoch(subset),
            )
            self.variable_mgr = manager(self)
            self.devices = self.variable_mgr.get_devices()

        def _ps_ml_comm(self) -> bool:
            return self.params.variable_update == MODE

        def print_info(self):
            super().print_info()
            if self._ps_ml_comm():
                j = runtime.job()
                print(
                    f"ml_comm:     {j.nranks} ranks, {j.nteams} team(s) of {j.threads} "
                    "communication thread(s)",
                    flush=True,
                )

        def _get_params_info(self):
            info = super()._get_params_info()
            if self._ps_ml_comm():
                info["device_list"] = [
                    f"ml_comm/{self.params.device}:{r}" for r in range(self.num_workers)
                ]
            return info

        def _build_model(self):
            if not self._ps_ml_comm():
                return super()._build_model()
            # Seeds offset by rank: different synthetic data and input order per rank
            # (the variables still start equal: rank 0's are broadcast).
            params = self.params
            self.params = params._replace(tf_random_seed=params.tf_random_seed + runtime.job().rank)
            try:
                return super()._build_model()
            finally:
                self.params = params

        def benchmark_with_session(
            self,
            sess,
            supervisor,
            graph_info,
            eval_graph_info,
            bcast_global_variables_op,
            is_chief,
            summary_writer,
            profiler,
        ):
            if not self._ps_ml_comm():
                return super().benchmark_with_session(
                    sess,
                    supervisor,
                    graph_info,
                    eval_graph_info,
                    bcast_global_variables_op,
                    is_chief,
                    summary_writer,
                    profiler,
                )
            job = runtime.job()
            stats = super().benchmark_with_session(
                sess,
                supervisor,
                graph_info,
                eval_graph_info,
                bcast_global_variables_op,
                is_chief and job.rank == 0,  # checkpoints and summaries: rank 0 only
                summary_writer,
                profiler,
            )
            _report_throughput(stats, job)
            if self.params.ml_comm_check_variables:
                _check_variables(sess, job)
            return stats

    return BenchmarkCNN


def _report_throughput(stats: dict, job: runtime.Job) -> None:
    # Upstream prints num_workers x this rank's rate, as it does for horovod; this is
    # the sum of what each rank measured.
    rates = runtime.gather(stats["images_per_sec"] / max(job.nranks, 1))
    runtime.say(
        f"ml_comm: total images/sec over {job.nranks} ranks (sum of each rank's rate): "
        f"{rates.sum():.2f} (per rank: {', '.join(f'{r:.2f}' for r in rates)})"
    )


def _check_variables(sess, job: runtime.Job) -> None:
    variables = tf.trainable_variables()
    values = [np.ascontiguousarray(v) for v in sess.run(variables)]
    differing = mc.check_buffers_match(values, flag=1)
    count = sum(v.size for v in values)
    if differing:
        raise RuntimeError(
            f"ml_comm: trainable variables differ from rank 0's on {differing} of "
            f"{job.nranks} ranks"
        )
    runtime.say(
        f"ml_comm: trainable variables identical on all {job.nranks} ranks "
        f"({len(values)} tensors, {count} values)"
    )
