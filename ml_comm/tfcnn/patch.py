"""Extend a freshly loaded upstream benchmark_cnn module with ps_ml_comm, in place.

Module-level functions are replaced by wrappers that change nothing unless
params.variable_update is ps_ml_comm; upstream looks them up in its module globals
at call time, so its own calls go through the wrappers too. Each wrapper does what
upstream does for horovod at the same place:

- setup: start MPI before the first session config (hvd.init());
- create_config_proto: pin the GPU of this rank's local rank;
- get_learning_rate: the per-step example count is the global batch, so the
  models' default learning rates scale with the number of ranks.
"""

from __future__ import annotations

import collections
import functools
import warnings

from . import MODE, benchmark, flagspecs, runtime, variables

REQUIRED = (
    "flags",
    "variable_mgr",
    "BenchmarkCNN",
    "Params",
    "setup",
    "create_config_proto",
    "get_learning_rate",
    "get_num_batches_and_epochs",
)


def looks_like_upstream(module) -> bool:
    flags = getattr(module, "flags", None)
    return all(hasattr(module, name) for name in REQUIRED) and isinstance(
        getattr(flags, "param_specs", None), dict
    )


def apply(module) -> bool:
    """Patch `module` (tf_cnn_benchmarks's benchmark_cnn); False if it is not that."""
    patched = getattr(module, "_ml_comm_patched", None)
    if patched is not None and patched is getattr(module, "BenchmarkCNN", None):
        return True  # (a reload runs the module again: then it is patched again)
    if not looks_like_upstream(module):
        if hasattr(module, "BenchmarkCNN"):
            missing = [n for n in REQUIRED if not hasattr(module, n)]
            warnings.warn(
                f"ml_comm: {module.__file__} looks like tf_cnn_benchmarks but lacks "
                f"{', '.join(missing) or 'flags.param_specs'}; --variable_update={MODE} "
                "is not available",
                stacklevel=2,
            )
        return False
    flagspecs.add_ps_ml_comm(module.flags.param_specs)
    # Params has one field per parameter and was built when the module ran.
    module.Params = collections.namedtuple(
        "Params", module.flags.param_specs.keys(), module=module.__name__
    )
    manager = variables.manager_class(module.variable_mgr.VariableMgrIndependent)
    module.BenchmarkCNN = benchmark.benchmark_class(
        module.BenchmarkCNN, manager, module.get_num_batches_and_epochs
    )
    module.setup = _wrap_setup(module.setup)
    module.create_config_proto = _wrap_create_config_proto(module.create_config_proto)
    module.get_learning_rate = _wrap_get_learning_rate(module.get_learning_rate)
    module._ml_comm_patched = module.BenchmarkCNN
    return True


def _wrap_setup(setup):
    @functools.wraps(setup)
    def wrapper(params):
        if params.variable_update == MODE:
            runtime.start(params)
        return setup(params)

    return wrapper


def _wrap_create_config_proto(create_config_proto):
    @functools.wraps(create_config_proto)
    def wrapper(params):
        config = create_config_proto(params)
        if params.variable_update == MODE and params.device == "gpu":
            config.gpu_options.visible_device_list = str(runtime.start(params).local_rank)
        return config

    return wrapper


def _wrap_get_learning_rate(get_learning_rate):
    @functools.wraps(get_learning_rate)
    def wrapper(params, global_step, num_examples_per_epoch, model, batch_size):
        if params.variable_update == MODE:
            batch_size = batch_size * runtime.job().nranks
        return get_learning_rate(params, global_step, num_examples_per_epoch, model, batch_size)

    return wrapper
