"""A one-node SLURM cluster on localhost for tests and CI, without systemd.

    python tests/cluster/localslurm.py up      # configure, start, wait until the node is idle
    python tests/cluster/localslurm.py down    # stop exactly the processes `up` started
    python tests/cluster/localslurm.py status  # what is recorded, and whether it is alive

`up` writes /etc/slurm/slurm.conf and /etc/slurm/gres.conf (the jobstep plugin drops
SLURM_CONF from a job's environment, so the configuration must be at the default path),
then starts munged (unless a working one is already there), slurmctld and slurmd in the
foreground as children it detaches, records their PIDs (with their start times, so a
reused PID is never signalled) in STATE/pids.json, and waits until `sinfo` shows the node
idle. `down` cancels this cluster's jobs, then stops exactly the recorded PIDs: SIGTERM,
then SIGKILL after a grace period. Both are idempotent; nothing is killed by name.

The node has the machine's real CPU count and memory (from `slurmd -C`), a count-only
GRES `gpu` of type `fake` (dummy device nodes: there is no GPU here), no accounting (job
status comes from squeue), `proctrack/pgid` and `task/none` (no cgroups needed).

Needs root and Debian's slurm-wlm and munge (`.ci/slurm-setup`). State, logs and spool
live under $SERVESWEEP_SLURM_STATE (default /var/tmp/servesweep-slurm).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("SERVESWEEP_SLURM_STATE", "/var/tmp/servesweep-slurm"))
CONF_DIR = Path("/etc/slurm")
SLURM_CONF = CONF_DIR / "slurm.conf"
GRES_CONF = CONF_DIR / "gres.conf"
MARKER = "# written by servesweep tests/cluster/localslurm.py"
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_SOCKET_DIR = Path("/run/munge")  # 0755: clients must reach the socket
NODE = "localhost"
PARTITION = "debug"
FAKE_GPUS = 2
GPU_TYPE = "fake"
# Short enough for tests; see docs/cluster.md for why MinJobAge must stay >= 3 x the
# plugin's init_seconds_before_status_checks when status comes from squeue.
KILL_WAIT_S = 5
MIN_JOB_AGE_S = 300
BINARIES = ("munged", "munge", "slurmctld", "slurmd", "sinfo", "squeue", "sbatch", "scancel")
ORDER = ("munged", "slurmctld", "slurmd")  # start order; stopped in reverse
_CHILDREN: list[subprocess.Popen] = []


class ClusterUnavailable(RuntimeError):
    """The cluster cannot be brought up here (missing packages, not root, ...)."""


def log(msg: str) -> None:
    print(f"localslurm: {msg}", file=sys.stderr, flush=True)


# --- processes, by PID only -----------------------------------------------------------


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None  # a zombie has already exited
    return int(fields[19])


def _same_process(entry: dict) -> bool:
    return _start_time(entry["pid"]) == entry["start"]


def _read_pids() -> dict:
    path = STATE / "pids.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _write_pids(pids: dict) -> None:
    path = STATE / "pids.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pids, indent=2) + "\n")
    tmp.replace(path)


def _spawn(name: str, argv: list[str], **kwargs) -> dict:
    """Start a foreground daemon detached in its own session; record it at once."""
    logfile = open(STATE / f"{name}.out", "ab")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=logfile,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
        **kwargs,
    )
    logfile.close()
    entry = {"pid": proc.pid, "start": None, "argv": argv}
    for _ in range(50):
        entry["start"] = _start_time(proc.pid)
        if entry["start"] is not None or proc.poll() is not None:
            break
        time.sleep(0.01)
    pids = _read_pids()
    pids[name] = entry
    _write_pids(pids)
    _CHILDREN.append(proc)  # keeps Popen from warning; the daemon outlives this helper
    return entry


def _stop(name: str, entry: dict, grace_s: float = 10.0) -> None:
    pid = entry["pid"]
    if not _same_process(entry):
        log(f"{name} (pid {pid}) is not running")
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            _reap(pid)
            if not _same_process(entry):
                log(f"stopped {name} (pid {pid}) with {signal.Signals(sig).name}")
                return
            time.sleep(0.1)
    raise RuntimeError(f"{name} (pid {pid}) survived SIGKILL")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)  # only when `up` ran in this same process
    except ChildProcessError:
        pass


def _run(argv: list[str], timeout: float = 15, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- configuration --------------------------------------------------------------------


def node_hardware() -> dict:
    """CPUs, topology and RealMemory as slurmd itself measures them."""
    out = _run(["slurmd", "-C"]).stdout
    first = out.splitlines()[0] if out else ""
    hw = dict(item.split("=", 1) for item in first.split() if "=" in item)
    hw.pop("NodeName", None)
    if "CPUs" not in hw or "RealMemory" not in hw:
        raise ClusterUnavailable(f"`slurmd -C` gave no node configuration: {out!r}")
    return hw


def slurm_conf(hw: dict) -> str:
    node = " ".join(
        f"{key}={hw[key]}"
        for key in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
        if key in hw
    )
    return f"""{MARKER}
# A one-node cluster on localhost for servesweep's SLURM test tier. Do not edit: `up`
# rewrites it. State, logs and spool: {STATE}
ClusterName=servesweep
SlurmctldHost={NODE}(127.0.0.1)
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={STATE}/slurmctld
SlurmdSpoolDir={STATE}/slurmd
SlurmctldPidFile={STATE}/slurmctld.pid
SlurmdPidFile={STATE}/slurmd.pid
SlurmctldLogFile={STATE}/slurmctld.log
SlurmdLogFile={STATE}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# Containers: no cgroups, no systemd. Processes are tracked by their process group, which
# a process keeps when its parent dies: by parentage (proctrack/linuxproc) a reparented
# one (ppid 1) left the job, and an idle jobstep Snakemake outlived scancel by an hour.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No accounting database: sacct fails, job status must come from squeue.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
GresTypes=gpu
MailProg=/bin/true
ReturnToService=2
# SIGTERM -> SIGKILL at a time limit or scancel.
KillWait={KILL_WAIT_S}
# Finished jobs stay visible to squeue this long (the plugin needs it, see docs).
MinJobAge={MIN_JOB_AGE_S}
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
SchedulerParameters=batch_sched_delay=0
NodeName={NODE} NodeAddr=127.0.0.1 {node} RealMemory={hw["RealMemory"]} \
Gres=gpu:{GPU_TYPE}:{FAKE_GPUS} State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def fake_gpu_devices() -> list[Path]:
    """Dummy device nodes for the fake GPUs. Slurm 22.05 drops a GPU GRES that has no
    File= ("Removing file-less GPU ... from final GRES list"; Flags=CountOnly does not
    help), and logs an error for File= paths that are not devices. Character devices
    1:3 (what /dev/null is) satisfy it; with task/none nothing is ever bound to them."""
    devdir = STATE / "fakegpu"
    devdir.mkdir(parents=True, exist_ok=True)
    paths = [devdir / f"gpu{i}" for i in range(FAKE_GPUS)]
    for path in paths:
        if not path.is_char_device():
            path.unlink(missing_ok=True)
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return paths


def gres_conf(devices: list[Path]) -> str:
    files = f"{devices[0].parent}/gpu[0-{len(devices) - 1}]"
    return f"{MARKER}\nNodeName={NODE} Name=gpu Type={GPU_TYPE} File={files}\n"


def _write_ours(path: Path, text: str, force: bool) -> None:
    if path.exists() and MARKER not in path.read_text() and not force:
        raise ClusterUnavailable(
            f"{path} exists and was not written by this helper; refusing to replace it "
            "(pass --force to replace it)"
        )
    path.write_text(text)


# --- munge ----------------------------------------------------------------------------


def munge_works() -> bool:
    try:
        cred = _run(["munge", "-n"], timeout=5)
        if cred.returncode != 0:
            return False
        return _run(["unmunge"], input=cred.stdout, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_munge() -> None:
    if munge_works():
        log("munged already answers; using it (not recorded, not stopped by `down`)")
        return
    if not MUNGE_KEY.exists():
        _run(["mungekey", "--create", "--keyfile", str(MUNGE_KEY)])
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o400)
    # The socket directory must be reachable by every user (0755); the key directory
    # stays private (0700). munged refuses to start when either is wrong.
    MUNGE_SOCKET_DIR.mkdir(parents=True, exist_ok=True)
    MUNGE_SOCKET_DIR.chmod(0o755)
    shutil.chown(MUNGE_SOCKET_DIR, "munge", "munge")
    for stale in (MUNGE_SOCKET_DIR / "munge.socket.2", MUNGE_SOCKET_DIR / "munge.socket.2.lock"):
        stale.unlink(missing_ok=True)  # left by a munged that was SIGKILLed
    _spawn(
        "munged",
        ["munged", "--foreground", "--log-file", str(STATE / "munged.log")],
        user="munge",
        group="munge",
        extra_groups=[],
    )
    _wait(munge_works, 15, "munged to answer", STATE / "munged.log")


# --- bring up, bring down -------------------------------------------------------------


def node_state() -> str | None:
    try:
        out = _run(["sinfo", "-h", "-N", "-n", NODE, "-o", "%T"], timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _wait(predicate, timeout_s: float, what: str, logfile: Path | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    tail = f"\n--- {logfile} ---\n{_tail(logfile)}" if logfile else ""
    raise ClusterUnavailable(f"timed out after {timeout_s:.0f} s waiting for {what}{tail}")


def running() -> bool:
    """Our daemons are alive, whatever the node is doing (another test session's jobs may
    hold it: that cluster is up and must not be restarted under them)."""
    pids = _read_pids()
    daemons = [name for name in ORDER if name in pids]
    alive = all(_same_process(pids[name]) for name in daemons)
    return alive and {"slurmctld", "slurmd"} <= set(daemons)


def is_up() -> bool:
    """Running and the node serving (idle, or busy with another session's jobs)."""
    state = node_state() if running() else None
    bad = ("down", "drain", "fail", "unknown", "not_responding")
    return state is not None and not state.endswith("*") and not state.startswith(bad)


def preflight() -> None:
    if os.geteuid() != 0:
        raise ClusterUnavailable("needs root (writes /etc/slurm, runs slurmd as root)")
    missing = [b for b in BINARIES if not shutil.which(b)]
    if missing:
        raise ClusterUnavailable(f"not installed: {', '.join(missing)} (run .ci/slurm-setup)")


def up(force: bool = False, timeout_s: float = 60) -> float:
    """Bring the cluster up (or confirm it is up). Returns the seconds it took. On
    failure, stops whatever it started (logs stay in STATE) and raises."""
    started = time.monotonic()
    preflight()
    try:
        return _up(started, force, timeout_s)
    except BaseException:
        down()
        raise


def _up(started: float, force: bool, timeout_s: float) -> float:
    STATE.mkdir(parents=True, exist_ok=True)
    if is_up():
        log("already up")
        return time.monotonic() - started
    if _read_pids():
        log("a previous cluster is partly running; stopping it first")
        down()
    CONF_DIR.mkdir(parents=True, exist_ok=True)
    _write_ours(SLURM_CONF, slurm_conf(node_hardware()), force)
    _write_ours(GRES_CONF, gres_conf(fake_gpu_devices()), force)
    for sub in ("slurmctld", "slurmd"):
        shutil.rmtree(STATE / sub, ignore_errors=True)  # a cold start: no old jobs
        (STATE / sub).mkdir(parents=True)
    for old in [*STATE.glob("*.log"), *STATE.glob("*.out")]:
        old.unlink()  # so a failure shows this start's log, not the last one's
    start_munge()
    ctld = _spawn("slurmctld", ["slurmctld", "-D", "-f", str(SLURM_CONF)])
    _wait(
        lambda: _alive_or_raise("slurmctld", ctld) and _run(["scontrol", "ping"]).returncode == 0,
        timeout_s,
        "slurmctld to answer",
        STATE / "slurmctld.log",
    )
    slurmd = _spawn("slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(SLURM_CONF)])
    _wait(
        lambda: _alive_or_raise("slurmd", slurmd) and node_state() == "idle",
        timeout_s,
        f"node {NODE} to be idle (state: {node_state()})",
        STATE / "slurmd.log",
    )
    elapsed = time.monotonic() - started
    log(f"up in {elapsed:.1f} s: node {NODE} idle, partition {PARTITION}")
    return elapsed


def _alive_or_raise(name: str, entry: dict) -> bool:
    _reap(entry["pid"])
    if not _same_process(entry):
        logfile = STATE / f"{name}.log"
        raise ClusterUnavailable(
            f"{name} exited during start-up\n--- {STATE / (name + '.out')} ---\n"
            f"{_tail(STATE / (name + '.out'))}\n--- {logfile} ---\n{_tail(logfile)}"
        )
    return True


def cancel_all_jobs(timeout_s: float = 30) -> None:
    """Cancel this cluster's jobs by ID and wait until none is left running, so no
    slurmstepd outlives slurmd."""
    try:
        out = _run(["squeue", "-h", "-o", "%i", "-t", "PD,R,CG,S,CF"], timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return
    ids = out.stdout.split() if out.returncode == 0 else []
    if not ids:
        return
    log(f"cancelling jobs {' '.join(ids)}")
    _run(["scancel", *ids])

    def drained() -> bool:
        left = _run(["squeue", "-h", "-o", "%i", "-t", "PD,R,CG,S,CF"], timeout=10)
        return left.returncode != 0 or not left.stdout.split()

    try:
        _wait(drained, timeout_s, "cancelled jobs to end")
    except ClusterUnavailable as error:
        log(str(error))


def down() -> None:
    pids = _read_pids()
    if not pids:
        log("nothing recorded; nothing to stop")
        return
    if "slurmctld" in pids and _same_process(pids["slurmctld"]):
        cancel_all_jobs()
    for name in reversed(ORDER):
        if name in pids:
            _stop(name, pids[name])
            del pids[name]
            _write_pids(pids)
    (STATE / "pids.json").unlink(missing_ok=True)
    log("down")


def status() -> dict:
    pids = _read_pids()
    return {
        "state_dir": str(STATE),
        "daemons": {
            name: {"pid": entry["pid"], "alive": _same_process(entry)}
            for name, entry in pids.items()
        },
        "node": node_state() if pids else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--force", action="store_true", help="replace a foreign slurm.conf")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            up(force=args.force)
        elif args.action == "down":
            down()
        else:
            print(json.dumps(status(), indent=2))
    except ClusterUnavailable as error:
        log(f"unavailable: {error}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
