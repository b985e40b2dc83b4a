"""python -m ml_comm.tfcnn path/to/tf_cnn_benchmarks.py [flags...]

Runs the script as `python path/to/tf_cnn_benchmarks.py [flags...]` would, with
--variable_update=ps_ml_comm added to its flags (importhook.py), and
TF_USE_LEGACY_KERAS=1 unless the environment sets it.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    script = Path(argv[0])
    if not script.is_file():
        print(f"ml_comm.tfcnn: no such script: {script}", file=sys.stderr)
        return 2
    # Before TensorFlow is imported: upstream needs Keras 2 (tf_keras).
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from . import importhook

    importhook.install()
    sys.argv = [str(script), *argv[1:]]
    sys.path.insert(0, str(script.resolve().parent))
    runpy.run_path(str(script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
