import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py


class BuildPyWithHeader(build_py):
    """Ship csrc/include/ml_comm.h inside the package (the TensorFlow ops compile against it)."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "ml_comm" / "include"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path("csrc/include/ml_comm.h"), target / "ml_comm.h")


class BuildExtWithoutHostRunPath(build_ext):
    """Link without the run paths of the building Python's own flags (LDSHARED of a
    --enable-shared build names its lib folder, e.g. ~/.pyenv/versions/X/lib): a path of
    the build machine has no business in the module's RUNPATH. The core does not link
    libpython; its own run paths come from ml_comm/core/build_ffi.py."""

    def finalize_options(self):
        super().finalize_options()
        # Always compile afresh: objects left in build/ by a build against another MPI's
        # mpi.h (MPICH's integer handles, Open MPI's pointers) must never be linked in.
        self.force = True

    def build_extensions(self):
        add_numpy_headers(self.extensions)
        for attr in ("linker_so", "linker_so_cxx"):
            words = getattr(self.compiler, attr, None)
            if words:
                setattr(self.compiler, attr, [w for w in words if not is_run_path(w)])
        super().build_extensions()


def add_numpy_headers(extensions) -> None:
    """NumPy's include folder, looked up when building (pyproject.toml requires numpy; a
    build without isolation needs it installed first)."""
    try:
        import numpy
    except ImportError as exc:
        raise SystemExit(
            "building ml_comm needs NumPy's headers: pip install numpy first "
            "(--no-build-isolation uses the environment's packages)"
        ) from exc
    for ext in extensions:
        if ext.name == NUMPY_GLUE.name:
            ext.include_dirs.append(numpy.get_include())


def is_run_path(word: str) -> bool:
    return word.startswith(("-Wl,-rpath", "-Wl,-R", "-Wl,--rpath", "-R"))


# The C core is an out-of-line cffi module; all build details live in the builder.
# _numpy_glue: the results' pool and the one-array gradients call in C (its file says why);
# it needs no MPI, only NumPy's headers and ml_comm.h.
NUMPY_GLUE = Extension(
    "ml_comm.arrays._numpy_glue",
    sources=["ml_comm/arrays/_numpy_glue.c"],
    include_dirs=["csrc/include"],  # and NumPy's (add_numpy_headers)
)

setup(
    cffi_modules=["ml_comm/core/build_ffi.py:ffibuilder"],
    ext_modules=[NUMPY_GLUE],
    cmdclass={"build_py": BuildPyWithHeader, "build_ext": BuildExtWithoutHostRunPath},
)
