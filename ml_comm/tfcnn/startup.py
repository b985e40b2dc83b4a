"""Start-up hook for tf_cnn_benchmarks, run by every Python of the environment.

The build installs this file as site-packages/_ml_comm_tfcnn.py together with
ml_comm-tfcnn.pth (`import _ml_comm_tfcnn`), see setup.py. It must stay cheap and
self-contained (the standard library only, no import of ml_comm): it adds a finder
to sys.meta_path that ignores every module name except `benchmark_cnn`. Only when
that module is imported does it import ml_comm.tfcnn, which loads the module and
adds --variable_update=ps_ml_comm to it. ML_COMM_TFCNN=0 turns it off.
"""

import os
import sys

_TARGETS = frozenset({"benchmark_cnn"})


class TfCnnBenchmarksFinder:
    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname not in _TARGETS:
            return None
        try:
            from ml_comm.tfcnn import importhook
        except Exception as exc:  # a broken ml_comm must not break tf_cnn_benchmarks
            print(f"ml_comm: ps_ml_comm is not available: {exc!r}", file=sys.stderr)
            return None
        return importhook.find_spec(fullname, path, target)


def _install():
    # Read here, not through ml_comm.core.settings (importing ml_comm would load MPI in
    # every Python); the same spellings of "off" as the table's bool.
    if os.environ.get("ML_COMM_TFCNN", "").strip().lower() in ("0", "false", "no", "off"):
        return
    if TfCnnBenchmarksFinder not in sys.meta_path:
        sys.meta_path.insert(0, TfCnnBenchmarksFinder)


_install()
