"""Which MPI library the environment names (ml_comm/mpi/library.py chosen_library) and
the dynamic sections it reads it from (ml_comm/mpi/elf_dynamic.py), on shared objects
compiled here: a stand-in libmpi.so.12 and a "core" that needs it, with a run path
($ORIGIN-relative, as the real core's) or an old-style DT_RPATH."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ml_comm.mpi import elf_dynamic
from ml_comm.mpi.library import MpiLibrary, chosen_library, not_chosen_message

CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")


def compile_so(out: Path, *flags: str) -> Path:
    source = out.with_suffix(".c")  # a string of its own: no two builds are the same bytes
    source.write_text(f'const char *mlc_stand_in = "{out}";\n')
    subprocess.run([CC, "-shared", "-fPIC", str(source), "-o", str(out), *flags], check=True)
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """top/pkg/core.so (needs libmpi.so.12, run path $ORIGIN/../lib), top/lib, a and b:
    three folders holding different files named libmpi.so.12; top/old/core.so: the same
    core with DT_RPATH $ORIGIN/../b."""
    top = tmp_path_factory.mktemp("choice")
    for folder in ("lib", "a", "b", "pkg", "old"):
        (top / folder).mkdir()
        if folder in ("lib", "a", "b"):
            compile_so(top / folder / "libmpi.so.12", "-Wl,-soname,libmpi.so.12")
    # --no-as-needed: the stand-in core calls nothing in it, and the need must stay
    link = [f"-L{top / 'lib'}", "-Wl,--no-as-needed", "-l:libmpi.so.12"]
    compile_so(top / "pkg" / "core.so", *link, "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib")
    compile_so(top / "old" / "core.so", *link, "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../b")
    return top


def test_dynamic_sections_as_readelf_shows_them(tree):
    new = elf_dynamic.read(str(tree / "pkg" / "core.so"))
    assert new is not None and "libmpi.so.12" in new.needed
    assert new.runpath == ["$ORIGIN/../lib"] and new.rpath == []
    old = elf_dynamic.read(str(tree / "old" / "core.so"))
    assert old is not None and old.rpath == ["$ORIGIN/../b"] and old.runpath == []
    assert elf_dynamic.read(str(tree / "pkg" / "core.c")) is None  # no ELF
    truncated = tree / "truncated.so"
    truncated.write_bytes((tree / "pkg" / "core.so").read_bytes()[:80])
    assert elf_dynamic.read(str(truncated)) is None
    assert elf_dynamic.read(str(tree / "missing.so")) is None


def test_the_loader_order_decides_without_settings(tree):
    core = str(tree / "pkg" / "core.so")
    found = chosen_library(core, {})
    assert found is not None and found.path == str(tree / "lib" / "libmpi.so.12")
    assert found.how.startswith("the core's run path")
    found = chosen_library(core, {"LD_LIBRARY_PATH": f"{tree / 'nothing'}:{tree / 'a'}"})
    assert found is not None and found.path == str(tree / "a" / "libmpi.so.12")
    assert found.how == f"LD_LIBRARY_PATH (as {tree / 'a' / 'libmpi.so.12'})"
    # DT_RPATH is searched before LD_LIBRARY_PATH
    found = chosen_library(str(tree / "old" / "core.so"), {"LD_LIBRARY_PATH": str(tree / "a")})
    assert found is not None and found.path == str(tree / "b" / "libmpi.so.12")


def test_mpi4py_libmpi_and_a_preload_name_it_first(tree):
    core = str(tree / "pkg" / "core.so")
    env = {"LD_LIBRARY_PATH": str(tree / "a"), "MPI4PY_LIBMPI": str(tree / "b")}
    found = chosen_library(core, env)  # a folder: its libmpi.so.12
    assert found is not None and found.path == str(tree / "b" / "libmpi.so.12")
    assert found.how.startswith("MPI4PY_LIBMPI")
    assert chosen_library(core, {"MPI4PY_LIBMPI": str(tree / "none.so")}) is None
    (tree / "b" / "libmpi.so").write_text("INPUT(libmpi.so.12)\n")  # a linker script
    found = chosen_library(core, {"MPI4PY_LIBMPI": str(tree / "b")})  # passed over
    assert found is not None and found.path == str(tree / "b" / "libmpi.so.12")
    env["LD_PRELOAD"] = f"libz.so.1 {tree / 'lib' / 'libmpi.so.12'}"
    found = chosen_library(core, env)
    assert found is not None and found.path == str(tree / "lib" / "libmpi.so.12")
    # a library preloaded beside the MPI (Cray's GPU transport, a profiler) names none
    gtl = compile_so(tree / "a" / "libmpi_gtl_cuda.so", "-Wl,-soname,libmpi_gtl_cuda.so.0")
    found = chosen_library(core, {"LD_PRELOAD": str(gtl), "LD_LIBRARY_PATH": str(tree / "a")})
    assert found is not None and found.path == str(tree / "a" / "libmpi.so.12")
    # MPI4PY_MPIABI: mpi4py opens no library, MPI4PY_LIBMPI names none
    env = {"MPI4PY_LIBMPI": str(tree / "b"), "MPI4PY_MPIABI": "mpich"}
    found = chosen_library(core, env)
    assert found is not None and found.path == str(tree / "lib" / "libmpi.so.12")


def test_the_message_names_the_library_in_use_and_the_one_named(tree):
    core = str(tree / "pkg" / "core.so")
    in_lib = MpiLibrary(str(tree / "lib" / "libmpi.so.12"), "MPICH Version: 5.0.2")
    assert not_chosen_message(in_lib, core, {}) == ""
    assert (
        not_chosen_message(MpiLibrary("", "MPICH"), core, {"MPI4PY_LIBMPI": str(tree / "a")}) == ""
    )
    said = not_chosen_message(in_lib, core, {"LD_LIBRARY_PATH": str(tree / "a")})
    assert said.startswith(f"this process runs on {tree / 'lib' / 'libmpi.so.12'} (MPICH Version")
    assert f"LD_LIBRARY_PATH (as {tree / 'a' / 'libmpi.so.12'}) names" in said
    assert "Import ml_comm first" in said and "MPI4PY_LIBMPI=" in said
    said = not_chosen_message(in_lib, core, {"MPI4PY_LIBMPI": str(tree / "b" / "libmpi.so.12")})
    assert "mpi4py takes an MPI library already loaded over MPI4PY_LIBMPI" in said
    assert "holds it as libmpi.so.12" in said


def test_an_interposer_in_front_of_the_mpi_is_not_judged(tree):
    """The core names the file of its MPI_Get_library_version: a profiler's, where one
    wraps it, which is no MPI library of the name the core asks for."""
    core = str(tree / "pkg" / "core.so")
    wrapper = compile_so(tree / "a" / "libmpiP.so", "-Wl,-soname,libmpiP.so")
    env = {"LD_LIBRARY_PATH": str(tree / "a")}
    assert not_chosen_message(MpiLibrary(str(wrapper), "MPICH"), core, env) == ""


def test_a_byte_identical_copy_is_the_same_library(tree):
    """impi-rt ships libmpi.so and libmpi.so.12 as copies: mpi4py loads the first."""
    core = str(tree / "pkg" / "core.so")
    copy = tree / "a" / "libmpi.so"
    shutil.copy2(tree / "lib" / "libmpi.so.12", copy)
    assert not_chosen_message(MpiLibrary(str(copy), "MPICH"), core, {}) == ""
    assert not_chosen_message(MpiLibrary(str(tree / "a" / "libmpi.so.12"), "MPICH"), core, {})
