"""Compile the TensorFlow op library into its cache (core/op_cache.py: where, and the key).

The ops (ops/*.cc) are compiled against the TensorFlow that is installed, with the
flags from tf.sysconfig, each source by its own compiler at once (as many as this
process has cores), and linked to ml_comm's own core module. Ranks that start together
build once: the first takes a file lock, the others wait for it and load its result.
The process that says (rank 0, or `python -m ml_comm build-tf`) prints the notice
(op_cache.notice: what, where, that it is once) and a line per compiled source; waiting
for another process's build, a line every WAIT_REPORT_SECONDS.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from ..core import op_cache
from ..core.errors import MLCommError

RETRY = op_cache.AHEAD
# Without news from the compilers (or from the process building) for this long, say so.
WAIT_REPORT_SECONDS = 30.0

# A process that does not speak for the job tries the lock this much later: ranks that
# start together then leave the compile to the one that reports its progress.
QUIET_DELAY_SECONDS = 2.0

Say = Callable[[str], None]


def library_path() -> Path:
    return op_cache.library_path()


def header_dir() -> Path:
    found = op_cache.header_dir()
    if found is None:
        raise MLCommError("ml_comm.h not found next to the package; reinstall ml_comm")
    return found


def compile_command(source: Path, output: Path) -> list[str]:
    import tensorflow as tf

    return [
        op_cache.compiler(),
        *op_cache.CXX_FLAGS,
        *tf.sysconfig.get_compile_flags(),
        f"-I{header_dir()}",
        "-c",
        str(source),
        "-o",
        str(output),
    ]


def link_command(objects: list[Path], output: Path) -> list[str]:
    import tensorflow as tf

    from .. import _core

    core = Path(_core.__file__).resolve()
    return [
        op_cache.compiler(),
        "-shared",
        "-fPIC",
        *(str(o) for o in objects),
        "-o",
        str(output),
        *tf.sysconfig.get_link_flags(),
        # The core's C functions come from the module Python has already loaded.
        f"-L{core.parent}",
        f"-l:{core.name}",
        f"-Wl,-rpath,{core.parent}",
    ]


def _run(cmd: list[str], verbose: bool) -> subprocess.CompletedProcess:
    if verbose:
        print("+", " ".join(cmd), flush=True)
    try:
        return subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise MLCommError(
            f"cannot run the C++ compiler ({exc}); install g++ and run: {RETRY}"
        ) from exc


def _failed(cmd: list[str], run: subprocess.CompletedProcess) -> MLCommError:
    return MLCommError(
        "building ml_comm's TensorFlow ops failed:\n"
        f"{' '.join(cmd)}\n{run.stderr.strip()}\n"
        f"Fix the cause above, then retry with: {RETRY}"
    )


def _compile_all(folder: Path, say: Say | None, verbose: bool) -> list[Path]:
    """Every source to an object in `folder`, several compilers at once; progress to say."""
    sources = op_cache.op_sources()
    commands = {s: compile_command(s, folder / f"{s.stem}.o") for s in sources}
    start = time.monotonic()
    jobs = max(1, min(len(sources), len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        pending = {pool.submit(_run, commands[s], verbose): s for s in sources}
        done = 0
        while pending:
            finished, _ = wait(pending, timeout=WAIT_REPORT_SECONDS, return_when=FIRST_COMPLETED)
            elapsed = time.monotonic() - start
            if not finished and say is not None:
                say(
                    f"ml_comm: still compiling the TensorFlow ops ({done} of {len(sources)} "
                    f"sources done, {elapsed:.0f} s)"
                )
            for future in finished:
                source = pending.pop(future)
                run = future.result()
                if run.returncode != 0:
                    raise _failed(commands[source], run)
                done += 1
                if say is not None:
                    say(
                        f"ml_comm: compiled {source.name} ({done} of {len(sources)}, "
                        f"{elapsed:.0f} s)"
                    )
    return [folder / f"{s.stem}.o" for s in sources]


def _lock(lock, say: Say | None) -> None:
    """Take the build lock; while another process holds it, say so now and then."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    start = last = time.monotonic()
    if say is not None:
        say("ml_comm: another process is compiling the TensorFlow ops; waiting for it")
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.5)
        if say is not None and time.monotonic() - last >= WAIT_REPORT_SECONDS:
            last = time.monotonic()
            say(f"ml_comm: still waiting for the TensorFlow ops' compile ({last - start:.0f} s)")


def build(force: bool = False, verbose: bool = False, say: Say | None = None) -> Path:
    """Return the cached op library, compiling it first if needed. `say` prints the
    notice and the progress (the rank that speaks for the job passes output.say)."""
    target = library_path()
    if target.exists() and not force:
        return target
    if say is not None:
        op_cache.announce(say)
    else:
        time.sleep(QUIET_DELAY_SECONDS)  # the rank that speaks takes the lock, and reports
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        _lock(lock, say)  # released when the file closes
        if target.exists() and not force:
            return target  # another rank built it while we waited
        start = time.monotonic()
        with tempfile.TemporaryDirectory(dir=target.parent, prefix="build-") as folder:
            objects = _compile_all(Path(folder), say, verbose)
            output = Path(folder) / target.name
            cmd = link_command(objects, output)
            run = _run(cmd, verbose)
            if run.returncode != 0:
                raise _failed(cmd, run)
            os.replace(output, target)
        if say is not None:
            say(f"ml_comm: TensorFlow ops compiled in {time.monotonic() - start:.0f} s: {target}")
    return target
