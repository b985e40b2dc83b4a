import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithHeader(build_py):
    """Ship csrc/include/ml_comm.h inside the package: the TensorFlow ops compile against it."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "ml_comm" / "include"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path("csrc/include/ml_comm.h"), target / "ml_comm.h")


# The C core is an out-of-line cffi module; all build details live in the builder.
setup(
    cffi_modules=["ml_comm/_build_ffi.py:ffibuilder"],
    cmdclass={"build_py": BuildPyWithHeader},
)
