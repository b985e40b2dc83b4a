"""The op library cache (ml_comm/tensorflow/build.py), in a temporary cache directory:
built on first use, reused without rebuilding, rebuilt when the cached file is gone or
when the cache key changes (a TensorFlow patch-version upgrade), and every build loads
with its ops.

No MPI communication here. A build compiles for 10-30 s, so these tests run only in
the 1-rank run of the suite (one compiler per core at most); other rank counts skip
them.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tensorflow as tf

import ml_comm as mc
from ml_comm.core import op_cache
from ml_comm.core.errors import MLCommError
from ml_comm.tensorflow import build

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(
        mc.get_nranks() != 1,
        reason="compiles the op library three times: run only in the 1-rank run",
    ),
]

OP_NAMES = (
    "ml_comm_group_submit",
    "ml_comm_group_wait",
    "ml_comm_allreduce_n",
    "ml_comm_broadcast_n",
    "ml_comm_allreduce_op",
    "ml_comm_allgather",
    "ml_comm_reducescatter",
    "ml_comm_alltoall",
)

# A fresh process (the test process has loaded the library already, and TensorFlow
# does not register an op twice): load the library, list its ops.
LOAD = """
import sys, tensorflow as tf
mod = tf.load_op_library(sys.argv[1])
print(" ".join(name for name in dir(mod) if name.startswith("ml_comm_") and "_eager" not in name))
"""


def ops_in(path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "MPI", "HYDRA"))}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    run = subprocess.run(
        [sys.executable, "-c", LOAD, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert run.returncode == 0, f"loading {path} failed:\n{run.stderr[-3000:]}"
    return set(run.stdout.split())


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("ML_COMM_CACHE_DIR", str(d))
    return d


def libraries(d) -> list:
    return sorted(p.name for p in d.glob("*.so"))


def test_build_cache_and_rebuilds(cache, monkeypatch):
    assert not cache.exists()
    monkeypatch.setattr(op_cache, "_announced", False)
    # first use: builds into the empty cache directory, saying so and how far it got
    said: list[str] = []
    path = build.build(say=said.append)
    assert said[0] == op_cache.notice(), said
    assert str(cache) in said[0] and "once" in said[0] and build.RETRY in said[0]
    sources = op_cache.op_sources()
    for k, source in enumerate(sources):
        assert any(f"compiled {source.name} (" in line for line in said), said
        assert any(f"({k + 1} of {len(sources)}, " in line for line in said), said
    assert said[-1].startswith("ml_comm: TensorFlow ops compiled in ") and str(path) in said[-1]
    assert path.parent == cache
    assert path == build.library_path()
    assert path.exists()
    assert f"tf{tf.__version__}" in path.name
    assert libraries(cache) == [path.name]
    assert not list(cache.glob("*.tmp")), "a temporary file was left behind"
    assert not list(cache.glob("build-*")), "a build folder was left behind"
    mtime = path.stat().st_mtime_ns
    assert set(OP_NAMES) <= ops_in(path)

    # second use: the same file, not rebuilt, nothing said
    said.clear()
    again = build.build(say=said.append)
    assert said == []
    assert again == path
    assert again.stat().st_mtime_ns == mtime
    assert libraries(cache) == [path.name]

    # the cached library removed: rebuilt, transparently, at the same path
    path.unlink()
    rebuilt = build.build()
    assert rebuilt == path and rebuilt.exists()

    # a TensorFlow patch upgrade changes the key: a new library, built and loadable
    monkeypatch.setattr(op_cache, "tensorflow_version", lambda folder: "2.21.99")
    upgraded = build.library_path()
    assert upgraded != path
    assert "tf2.21.99" in upgraded.name
    assert not upgraded.exists()
    built = build.build()
    assert built == upgraded and built.exists()
    assert sorted(libraries(cache)) == sorted([path.name, upgraded.name])
    assert set(OP_NAMES) <= ops_in(built)

    # and back to the installed version: the first library again, no rebuild
    monkeypatch.undo()
    monkeypatch.setenv("ML_COMM_CACHE_DIR", str(cache))
    assert build.build() == path


def test_compiler_failure_says_what_to_run(cache, monkeypatch):
    """A compiler that fails: an MLCommError with the command to retry; nothing
    half-written is left in the cache."""
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(MLCommError) as info:
        build.build()
    assert build.RETRY in str(info.value)
    assert libraries(cache) == []
    assert not list(cache.glob("*.tmp")) and not list(cache.glob("build-*"))
