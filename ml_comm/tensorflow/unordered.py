"""Let each gradient's submit op run as soon as its gradient exists inside tf.function.

tf.function's automatic control dependencies run every stateful op that touches no
resource in program order: each op gets a control input from the one created before it.
The submit ops (MlCommGroupSubmit, stateful: they hand a tensor to the team) would then
form one chain, submit k waiting for gradient k-1's submit. TensorFlow's executor does not
produce gradients in list order: on one inter-op thread it follows backprop's critical
path depth-first and leaves side outputs (a Dense bias's BiasAddGrad, some BatchNorm and
filter gradients) queued until that path ends. One such gradient early in the chain held
back every submit until the end of backprop, so no communication overlapped it.

Submits need no order among themselves: a keyed group places each tensor by its index,
whatever order the tensors arrive in, and groups keep their order across ranks through
the explicit control dependency of `_chain`. So each submit is given a resource of its own
(its token output, which nothing else touches) for the ordering pass: an op that touches a
resource is ordered only with the other users of that resource, here none. It stays a
stateful op that must run, and the wait ops stay in program order.

The hook is TensorFlow's registry of resource resolvers in its private
`auto_control_deps` module; if a later TensorFlow moves it, `install` returns False and
the ops run in program order again (correct, only without the overlap;
tests/mpi/test_tf_overlap.py fails then).
"""

from __future__ import annotations

SUBMIT_OP = "MlCommGroupSubmit"
# The group's opener too: in program order it would wait for every stateful op of the
# forward pass, and a step failing there would leave nothing opened to cancel.
OPEN_OP = "MlCommGroupOpen"
_installed = False


def own_resource(op, reads, writes) -> bool:
    """ACD resolver: a submit op reads its own token, and an opener its own id, so
    nothing is ordered with them (the opener keeps its explicit dependencies)."""
    if op.type == SUBMIT_OP and len(op.outputs) >= 2:
        token = op.outputs[1]
    elif op.type == OPEN_OP and op.outputs:
        token = op.outputs[0]
    else:
        return False
    if token in reads or token in writes:
        return False  # already added: report no change, or the resolver loop never ends
    reads.add(token)
    return True


def install() -> bool:
    """Register the resolver once; True when TensorFlow accepted it."""
    global _installed
    if _installed:
        return True
    try:
        from tensorflow.python.framework import auto_control_deps
    except ImportError:
        return False
    register = getattr(auto_control_deps, "register_acd_resource_resolver", None)
    if register is None:
        return False
    register(own_resource)
    _installed = True
    return True
