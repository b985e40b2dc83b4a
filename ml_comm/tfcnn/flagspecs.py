"""The entries that ps_ml_comm adds to tf_cnn_benchmarks's parameter table.

Upstream keeps every parameter in `flags.param_specs` (name -> ParamSpec namedtuple
of flag_type, default_value, description, kwargs); tf_cnn_benchmarks.py turns the
table into absl flags with `flags.define_flags()` after importing benchmark_cnn, and
`benchmark_cnn.Params` has one field per entry. So adding entries right after
benchmark_cnn is loaded is enough for them to be flags and params.
"""

from __future__ import annotations

from . import MODE

# name -> (flag_type, default, help, kwargs); kwargs as upstream's DEFINE_* store them.
FLAGS: dict[str, tuple[str, object, str, dict]] = {
    "number_ml_comm_threads": (
        "integer",
        2,
        "ps_ml_comm: communication threads per ml_comm team on each rank",
        {"lower_bound": 1, "upper_bound": 256},
    ),
    "ml_comm_teams": (
        "integer",
        1,
        "ps_ml_comm: ml_comm teams; the gradients are cut into this many contiguous "
        "blocks of about equal size, each averaged by its own team concurrently",
        {"lower_bound": 1, "upper_bound": 64},
    ),
    "ml_comm_verbosity": (
        "integer",
        0,
        "ps_ml_comm: 1 = rank 0 prints ml_comm's communication report every "
        "--ml_comm_perf_freq reductions and at the end, 2 = every rank does",
        {"lower_bound": 0, "upper_bound": 2},
    ),
    "ml_comm_perf_freq": (
        "integer",
        100,
        "ps_ml_comm: ml_comm reductions (about one per step and team) between two "
        "communication reports (see --ml_comm_verbosity)",
        {"lower_bound": 1, "upper_bound": None},
    ),
    "ml_comm_ksteps": (
        "integer",
        None,
        "ps_ml_comm: synchronous steps before the teams pipeline (each step then applies "
        "the previous step's averaged gradients); negative -k: pipelined first, synchronous "
        "for the last k steps; unset: every step synchronous (ml_comm config_team ksteps, "
        "with max_steps = --num_warmup_batches + --num_batches)",
        {},
    ),
    "ml_comm_compression": (
        "enum",
        None,
        "ps_ml_comm: bf16 or fp16 sends the float32 gradients' ring reductions as 16-bit "
        "values, added in float32 (half the bytes on the wire, rounded results; fp16 fails "
        "the step on every rank past +-65504); none: float32; unset: ML_COMM_COMPRESSION's "
        "(ml_comm config_team compression)",
        {"enum_values": ("none", "bf16", "fp16")},
    ),
    "ml_comm_check_variables": (
        "boolean",
        False,
        "ps_ml_comm: after the last step, compare the trainable variables of all "
        "ranks byte for byte, print the result, and fail if they differ",
        {},
    ),
}

MODE_HELP = (
    f" {MODE}: one tower per MPI rank, gradients averaged over the ranks by ml_comm "
    "(launch with mpiexec or srun; see --number_ml_comm_threads)."
)


def add_ps_ml_comm(param_specs: dict) -> None:
    """Add MODE to the variable_update enum and FLAGS to the table, in place.

    Idempotent. Raises ValueError when the table does not look like upstream's, or
    when one of FLAGS' names is already taken by something else.
    """
    spec = param_specs.get("variable_update")
    if spec is None or getattr(spec, "flag_type", None) != "enum":
        raise ValueError("the parameter table has no enum 'variable_update'")
    values = tuple(spec.kwargs["enum_values"])
    if MODE in values:
        return
    spec_type = type(spec)
    ours = {
        name: spec_type(t, default, text, dict(kw))
        for name, (t, default, text, kw) in FLAGS.items()
    }
    # Ours already there is fine: a reloaded benchmark_cnn redefines only its own.
    taken = sorted(n for n in FLAGS if n in param_specs and param_specs[n] != ours[n])
    if taken:
        raise ValueError(f"parameters already defined by someone else: {', '.join(taken)}")
    param_specs["variable_update"] = spec._replace(
        description=spec.description.rstrip() + MODE_HELP,
        kwargs={**spec.kwargs, "enum_values": (*values, MODE)},
    )
    param_specs.update(ours)
