"""Failure classes, read from a server's log and exit status.

Signatures are taken from real SGLang, vLLM, PyTorch and NCCL log lines. The order is
the priority: a log that shows both an assertion and an OOM is an `oom` (the assertion
is usually the symptom).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

CAUSES = (
    "oom",
    "nccl",
    "cuda_error",
    "assertion",
    "import_error",
    "port_in_use",
    "boot_timeout",
    "bad_answer",
    "rejected_args",
    "died",
    "hung",
    "http_errors",
    "time_limit",
    "gpu_slots",
    "unknown",
)

# Boot failures a relaunch (`retries.boot`) may cure: resource and timing trouble. A
# missing module, a failed assertion, a rejected flag or a server that answers wrongly
# fails the same way every time, so it is not relaunched.
BOOT_RETRY_CAUSES = frozenset(
    {"oom", "nccl", "cuda_error", "port_in_use", "boot_timeout", "died", "unknown"}
)

# (cause, pattern) in priority order; matched against the log text.
SIGNATURES: list[tuple[str, re.Pattern]] = [
    (
        "oom",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|cudaErrorMemoryAllocation|"
            r"CUBLAS_STATUS_ALLOC_FAILED|out of memory|MemoryError|"
            r"Not enough memory|No available memory for the cache blocks",
            re.IGNORECASE,
        ),
    ),
    (
        "nccl",
        re.compile(
            r"NCCL error|NCCL WARN|ncclInternalError|ncclUnhandledCudaError|"
            r"ncclSystemError|ncclRemoteError|ProcessGroupNCCL.*(?:timeout|error)",
            re.IGNORECASE,
        ),
    ),
    ("port_in_use", re.compile(r"address already in use|Errno 98\b", re.IGNORECASE)),
    ("import_error", re.compile(r"ModuleNotFoundError|ImportError|undefined symbol")),
    (
        "cuda_error",
        re.compile(
            r"CUDA error|cudaError\w*|illegal memory access|"
            r"CUBLAS_STATUS_\w+|device-side assert",
            re.IGNORECASE,
        ),
    ),
    ("assertion", re.compile(r"AssertionError|Assertion `.*' failed")),
]


def classify_log(text: str) -> str | None:
    """The failure class a log shows, or None when it shows no known signature."""
    for cause, pattern in SIGNATURES:
        if pattern.search(text):
            return cause
    return None


# argparse's refusal: "PROG: error: MESSAGE" as its last words, then exit status 2 (vLLM,
# SGLang, transformers serve and most Python servers parse their flags with argparse; vLLM
# 0.26.0 on the H200: "api_server.py: error: unrecognized arguments: --no-such-flag";
# SGLang 0.5.17 names its parser in two words: "sglang serve: error: ...").
ARGPARSE_EXIT = 2
_ARGPARSE_ERROR = re.compile(r"^[\w.\-]+(?: [\w.\-]+)?: error: \S")


def rejected_args(returncode: int | None, log_text: str) -> str | None:
    """The argparse error line of a server that exited with status 2 refusing its command
    line (among the log's last 5 lines: the usage text before it can run to hundreds), or
    None."""
    if returncode != ARGPARSE_EXIT:
        return None
    for line in reversed(log_text.splitlines()[-5:]):
        if _ARGPARSE_ERROR.match(line.strip()):
            return line.strip()
    return None


# SGLang ends its own process tree with SIGKILL when a child (the scheduler) failed
# (0.5.17 on the H200, `--enable-single-batch-overlap` refused on SM90 with a ValueError):
# that SIGKILL is not the host's OOM killer.
SELF_KILLED = re.compile(
    r"Received sigquit from a child process|kill_process_tree called: .*include_parent=True"
)


def classify_exit(returncode: int | None, log_text: str, default: str = "died") -> str:
    """Cause for a server that exited: a command line argparse refused (`rejected_args`:
    before the log's signatures, since an import warning logged before parsing is not the
    cause), then the log's signature; a SIGKILL with no signature is most often the host's
    OOM killer, unless the server says it killed itself (SELF_KILLED)."""
    if rejected_args(returncode, log_text):
        return "rejected_args"
    cause = classify_log(log_text)
    if cause:
        return cause
    killed = returncode == -signal.SIGKILL or returncode == 128 + signal.SIGKILL
    if killed and not SELF_KILLED.search(log_text):
        return "oom"
    return default


# A Python exception's last line ("ValueError: SBO ... is not supported on SM90 ..."), what a
# reader of a failure wants first: SGLang logs a whole traceback and then a SIGKILL of its
# own tree, so the exit status alone says only "-9".
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit)\b(?::\s*\S.*)?$")
LAST_ERROR_CHARS = 300


def last_error(log_text: str, lines: int = 200) -> str | None:
    """The last exception line among the log's last `lines` lines (clipped to
    LAST_ERROR_CHARS), or None when the log ends without one."""
    for line in reversed(log_text.splitlines()[-lines:]):
        line = line.strip()
        if _EXCEPTION_LINE.match(line):
            return line if len(line) <= LAST_ERROR_CHARS else line[: LAST_ERROR_CHARS - 3] + "..."
    return None


def exit_message(returncode: int | None, log_text: str, when: str) -> str:
    """ "server exited with code C WHEN", and the log's last exception line when it has one."""
    message = f"server exited with code {returncode} {when}".rstrip()
    error = last_error(log_text)
    return f"{message}: {error}" if error else message


def log_tail(path: Path, lines: int = 50) -> list[str]:
    """The last `lines` lines of a log (decoded leniently; logs can hold anything)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return []
    text = data[-256 * 1024 :].decode("utf-8", errors="replace")
    return text.splitlines()[-lines:]


def read_log(path: Path, limit: int = 4 * 1024 * 1024) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")
