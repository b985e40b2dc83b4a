"""The README's Keras start with an empty op cache says within 5 s of its start that it
compiles the TensorFlow ops (what, where, once), on rank 0 only, before TensorFlow's
import is over (ml_comm/keras/compile_notice.py). The compile itself (minutes) is not
waited for: the job is killed a few seconds after the notice (or after a minute).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from jobs import MPIEXEC, PY, clean_env, kill_all_with

ROOT = Path(__file__).resolve().parents[2]
NOTICE_LIMIT_S = 5.0
WATCH_S = 60.0
AFTER_S = 3.0


def keras_start() -> str:
    readme = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", readme, flags=re.S)[0]


def test_first_keras_start_says_at_once_that_it_compiles(tmp_path):
    script = tmp_path / "train_keras.py"
    script.write_text(keras_start())
    cache = tmp_path / "cache"
    token = f"mlcnotice-{uuid.uuid4().hex[:12]}"
    cmd = [MPIEXEC, "-n", "2", PY, "-X", f"ml_comm_token={token}", str(script)]
    lines: list[tuple[float, str]] = []
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(ML_COMM_CACHE_DIR=str(cache)),
        start_new_session=True,
    )

    def read() -> None:
        for line in proc.stderr:
            lines.append((time.monotonic() - start, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while time.monotonic() - start < WATCH_S and proc.poll() is None:
            if any("compiling its TensorFlow ops" in text for _, text in lines):
                time.sleep(AFTER_S)  # time enough for another rank to say it too
                break
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        kill_all_with(token)
        proc.wait()
        reader.join(timeout=5)
    said = "\n".join(f"{t:6.1f} {text}" for t, text in lines)
    notices = [(t, text) for t, text in lines if "compiling its TensorFlow ops" in text]
    assert len(notices) == 1, said  # rank 0's only
    seconds, notice = notices[0]
    assert seconds < NOTICE_LIMIT_S, said
    assert notice.startswith("ml_comm: compiling its TensorFlow ops for TensorFlow "), said
    assert f"cached in {cache};" in notice and "once" in notice, said
    assert "`python -m ml_comm build-tf` does it ahead of a job" in notice, said
