"""`python -m ml_comm.horovod script.py args...`: run a Horovod script unchanged, its
`horovod.*` imports answered by ml_comm.horovod. Launch it as any ml_comm job
(`mpiexec -n 4 python -m ml_comm.horovod train.py`, `srun ...`), or with
`python -m ml_comm.horovod.run -np 4 python train.py` (horovodrun's flags)."""

from __future__ import annotations

import runpy
import sys

from .aliases import install


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if argv else 2)
    install()
    sys.argv = list(argv)
    if argv[0] == "-m":
        if len(argv) < 2:
            raise SystemExit("python -m ml_comm.horovod -m: name the module to run")
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
