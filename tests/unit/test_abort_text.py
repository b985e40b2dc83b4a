"""The traceback the job's exception hook prints leaves out the name of the TensorFlow
function an op failed in, and keeps everything else (ml_comm/faults/abort.py)."""

from __future__ import annotations

import sys

from ml_comm.faults import abort


def test_the_tensorflow_wrapper_text_is_left_out():
    wrapped = (
        "{{function_node __wrapped__MlCommBroadcastN_N_2_device_/job:localhost/replica:0/"
        "task:0/device:CPU:0}} ml_comm broadcast failed: ranks disagree on team 0 request 1"
    )
    try:
        raise RuntimeError(wrapped)
    except RuntimeError:
        text = abort._traceback_text(*sys.exc_info())
    assert "function_node" not in text and "{{" not in text
    assert text.rstrip().endswith(
        "RuntimeError: ml_comm broadcast failed: ranks disagree on team 0 request 1"
    )
    assert "Traceback (most recent call last):" in text and "test_abort_text.py" in text
