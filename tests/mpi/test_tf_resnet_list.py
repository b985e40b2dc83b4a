"""A gradients() list shaped like ResNet-50's (161 tensors: 53 conv kernels, 53 batch
norms' gamma and beta, the classifier), channels scaled down 4x so the ~1.5 M
parameters stay cheap at 4 ranks on 2 cores, reduces exactly in eager mode and inside
tf.function. The list is several times larger than the fusion buffer (msglen) and
spans thousands of segments. It runs with the plan's choice and with Rabenseifner, which
the plan gives keyed groups above 64 ranks (csrc/plan/plan.c), folded at 3 ranks."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import module_session_fixture, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi

MSGLEN = 1 << 18  # elements: the ~1.5 M of the list stream through it
CHUNK_BYTES = 16 << 10
ALWAYS_SYNC = 1_000_000  # far above the steps run: the team stays synchronous

tf_session = module_session_fixture(msglen=MSGLEN, chunk_bytes=CHUNK_BYTES)


def resnet50_shapes(scale: int = 4, classes: int = 1000) -> list[tuple]:
    """Trainable variable shapes of ResNet-50 in creation order, channels / scale."""

    def conv(k, cin, cout):
        return [(k, k, cin, cout), (cout,), (cout,)]  # kernel, BN gamma, BN beta

    shapes = conv(7, 3, 64 // scale)
    cin = 64 // scale
    for blocks, width in [(3, 64), (4, 128), (6, 256), (3, 512)]:
        w = width // scale
        for b in range(blocks):
            if b == 0:
                shapes += conv(1, cin, 4 * w)  # projection shortcut
            shapes += conv(1, cin, w) + conv(3, w, w) + conv(1, w, 4 * w)
            cin = 4 * w
    shapes += [(cin, classes // scale), (classes // scale,)]
    return shapes


SHAPES = resnet50_shapes()


def test_shapes_are_resnet50_like():
    full = resnet50_shapes(scale=1)
    assert len(full) == 161
    assert sum(int(np.prod(s)) for s in full) == 25_557_032  # ResNet-50's parameter count
    assert len(SHAPES) == 161
    assert 1_000_000 < sum(int(np.prod(s)) for s in SHAPES) < 2_000_000


@pytest.mark.parametrize("alg", ["ALG_AUTO", "ALG_RABENSEIFNER"])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_resnet50_like_list(tf_session, mode, alg):
    mc.config_team(0, getattr(mc, alg), ALWAYS_SYNC, ALWAYS_SYNC)
    try:
        check_resnet50_like_list(tf_session, f"{mode} {alg}", mode)
    finally:
        mc.config_team(0, mc.ALG_AUTO, ALWAYS_SYNC, ALWAYS_SYNC)


def check_resnet50_like_list(tf_session, tag: str, mode: str) -> None:
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    arrays = [make_input(r, s, np.float32, i) for i, s in enumerate(SHAPES)]
    tensors = [tf.constant(a) for a in arrays]
    fn = mc.gradients if mode == "eager" else tf.function(mc.gradients)
    for step in range(2):
        outs = [to_numpy(o) for o in fn(tensors)]
        c.true(len(outs) == len(SHAPES), f"{tag}: {len(outs)} results for {len(SHAPES)}")
        bad = 0
        for i, (o, s) in enumerate(zip(outs, SHAPES)):
            if not c.equal(o, expected_average(s, np.float32, n, i), f"{tag} step {step} #{i}"):
                bad += 1
            if bad >= 5:
                break
        c.same_on_all_ranks(outs, f"{tag} step {step}")
    c.finish()
