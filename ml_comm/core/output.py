"""Lines on stderr that arrive whole.

A launcher forwards each rank's stderr as it reads it: text written in pieces (print
writes the text, then the newline) can reach the job's output with another rank's
text between the pieces, two ranks' words on one line. Each call here writes its
whole text, ending in a newline, in one write.
"""

from __future__ import annotations

import os
import sys


def say(text: str) -> None:
    """Write `text` (one line or several) and a final newline to stderr in one write."""
    sys.stdout.flush()
    sys.stderr.flush()
    data = (text.rstrip("\n") + "\n").encode(errors="replace")
    try:
        while data:
            data = data[os.write(2, data) :]
    except OSError:
        pass
