#!/bin/bash
# A waiting call on the lent H200: waits for start.sh's job (/tmp/ss.pid) at most WAIT_S
# seconds (keep it well inside the call's limit: a call that outruns its limit brings
# nothing back), then copies what the job has so far into the device tool's $OUT:
# results.tar.xz, requests.tar.xz, parity.tar.xz, sweep.tar.xz (lib.sh results_pack: the
# archive a later slot resumes from, run.sh's `resume`), run.log, gpu.txt.
#
#   bash /tmp/ss/benchmarks/gpu/wait.sh ENGINE WAIT_S
#
# Waits on the pid (kill -0), never on a process name: `pgrep -f run.sh` would find this
# command itself. Issue the next waiting call at once: the machine goes back 30 s after a
# call returns, and the job with it.
set -u -o pipefail
. "$(dirname "$0")/lib.sh"
ENGINE=${1:?usage: wait.sh ENGINE WAIT_S}
WAIT_S=${2:?usage: wait.sh ENGINE WAIT_S}
: "${OUT:?wait.sh runs in a device call (OUT is where files come back)}"
pid=$(cat /tmp/ss.pid 2>/dev/null) || gpu_fail "no job: /tmp/ss.pid is missing" || exit 1
if wait_pid "$pid" "$WAIT_S"; then state=ended; else state="still running after ${WAIT_S} s"; fi
results_pack /tmp/ss "$OUT"
cp /tmp/sout/run.log /tmp/sout/gpu.txt "$OUT/" 2>/dev/null
echo "== job $pid ($ENGINE): $state"
grep -E '^\[..:..:..\] (step|joined|installed)|rror|FAILED|server ready|L[0-9]+_r|flush check' \
  /tmp/sout/run.log 2>/dev/null | tail -n 30
# Each boot so far: variant, status, launch -> ready, its cache state.
python3 - /tmp/ss/results/cells <<'PY' 2>/dev/null
import json, pathlib, sys
for p in sorted(pathlib.Path(sys.argv[1]).glob("*/*/*/r*/cell.json"), key=lambda p: p.stat().st_mtime):
    c = json.loads(p.read_text())
    f, fail = c.get("boot_facts") or {}, c.get("failure") or {}
    tput = [round(lv.get("output_throughput") or 0) for lv in c.get("levels") or []]
    print(c["variant"], f"r{c['repeat']}", c["status"], c.get("boot_s"), f.get("caches"), tput, fail.get("cause") or "")
PY
ls -t /tmp/ss/results/logs/run_cell/*/*/*/*.log 2>/dev/null | head -1 | xargs -r tail -n 3
nvidia-smi --query-gpu=memory.used,power.draw --format=csv,noheader 2>/dev/null
ls -la "$OUT"
