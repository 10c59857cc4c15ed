"""Job logs: timestamped lines, flushed at once, so `tail -f` shows progress."""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from pathlib import Path


@contextlib.contextmanager
def job_logger(path: str | Path, echo: bool = False):
    """Yield log(msg) writing to `path`; an exception is logged, then re-raised."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", buffering=1) as handle:

        def log(message: str) -> None:
            line = f"{time.strftime('%H:%M:%S')} {message}"
            handle.write(line + "\n")
            if echo:
                print(line, file=sys.stderr, flush=True)

        try:
            yield log
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                log(f"interrupted ({type(exc).__name__}); torn down")
            else:
                handle.write(traceback.format_exc())
                log(f"ERROR: {exc}")
            raise
