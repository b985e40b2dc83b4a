"""The core's latch (csrc/base/latch.c): a wait for the done callbacks of tensors handed
to keyed groups, which the Keras hook on torch uses from an autograd hook."""

from __future__ import annotations

import threading
import time

from ml_comm._core import ffi, lib

DONE = ffi.addressof(lib, "mlc_latch_done")


def test_wait_returns_the_first_failure_once_every_callback_ran():
    latch = lib.mlc_latch_create()
    lib.mlc_latch_add(latch, 3)
    DONE(latch, lib.MLC_OK)
    DONE(latch, lib.MLC_ERR_MISMATCH)
    DONE(latch, lib.MLC_ERR_STALL)
    assert lib.mlc_latch_wait(latch) == lib.MLC_ERR_MISMATCH
    assert lib.mlc_latch_wait(latch) == lib.MLC_OK  # nothing pending, the failure told
    lib.mlc_latch_free(latch)


def test_wait_blocks_until_the_last_callback_of_another_thread():
    latch = lib.mlc_latch_create()
    lib.mlc_latch_add(latch, 2)
    DONE(latch, lib.MLC_OK)
    called = []

    def late():
        time.sleep(0.2)
        called.append(time.monotonic())
        DONE(latch, lib.MLC_OK)

    thread = threading.Thread(target=late)
    thread.start()
    assert lib.mlc_latch_wait(latch) == lib.MLC_OK
    returned = time.monotonic()
    thread.join()
    assert called and returned >= called[0]
    lib.mlc_latch_free(latch)
