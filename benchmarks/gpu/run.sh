#!/bin/bash
# A GPU recipe on the lent H200 (no network), from a copy of the repo (start.sh makes it:
# the device tool replaces its own checkout on every call), the wheel parts of
# benchmarks/gpu/prepare.sh in /tmp/ENGINE-wheels:
#
#   bash benchmarks/gpu/run.sh ENGINE OUT STEP...        ENGINE: sglang | vllm | engines
#
# `engines`: both wheel sets (/tmp/sglang-wheels, /tmp/vllm-wheels), each engine in its own
# site, and config/examples/h200-engines.yaml (both engines in one sweep; docs/engines-h200.md).
# Steps, in the order given (each rerunnable: Snakemake reruns only what is missing):
#   setup    join, check and install the wheels (benchmarks/gpu/setup.sh; always sourced)
#   resume   unpack a sweep archive an earlier slot brought back (sweep.tar.xz from
#            wait.sh or pack), carried in .devtree/resume/ (RESUME_ARCHIVE: another path);
#            the steps after it run only the boots it lacks
#   plan     results/plan.txt and plan.json: what the sweep will launch
#   first    every cell's first boot (r0)
#   sweep    the rest (config/examples/h200-ENGINE.yaml), results/report.html, the plan
#   parity   benchmarks/gpu/ENGINE_parity.py run into parity/ (PARITY_ARGS: more arguments;
#            under `engines`, PARITY_ENGINE's: sglang unless set)
#   probe    vLLM only: the sweep's prompts chunk by chunk (vllm_stream_probe.py)
#   pack     OUT/results.tar.xz, requests.tar.xz, parity.tar.xz, sweep.tar.xz (lib.sh
#            results_pack) and OUT/gpu.txt: nvidia-smi after (no compute process expected)
# Everything printed also goes to OUT/run.log. STEP_TIMEOUT=S stops a Snakemake step after
# S seconds with SIGINT (running cells tear their servers down; what finished stays).
set -u -o pipefail
ENGINE=${1:?usage: run.sh sglang|vllm|engines OUT STEP...}
OUT=${2:?usage: run.sh sglang|vllm|engines OUT STEP...}
shift 2
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
CFG=${SERVESWEEP_GPU_CONFIG:-config/examples/h200-$ENGINE.yaml}
gpu_log_step() { echo "[$(date -u +%H:%M:%S)] $*"; }
gpu_log_step "setup ($ENGINE, commit $(cat COMMIT 2>/dev/null || echo '?'))"
. benchmarks/gpu/setup.sh || exit 1
export SERVESWEEP_COMMIT=${SERVESWEEP_COMMIT:-$(cat COMMIT 2>/dev/null || echo unknown)}
P=$(command -v python3)
# One GPU: cells queue for it. No ILP solver travels: the greedy scheduler, said outright.
SM=(timeout -s INT "${STEP_TIMEOUT:-86400}" "$P" -m snakemake --cores 4 --scheduler greedy)
# Targets go before --resources and --configfile, which take every value after them.
# SM_CONFIG: one --config override on top of the sweep file (Snakemake merges it into the
# section), e.g. SM_CONFIG="benchmark={repeats: 3}": a lease's variation of an example
# without an edited copy of it.
sm() {
  local over=()
  [ -z "${SM_CONFIG:-}" ] || over=(--config "$SM_CONFIG")
  "${SM[@]}" "$@" --resources gpu=1 ${over[@]+"${over[@]}"} --configfile "$CFG"
}
first_boots() {
  "$P" -c "import sys
from servesweep.sweep.config import load_file
from pathlib import Path
from servesweep.sweep.layout import Paths
print(' '.join(str(Paths(Path('.')).cell_json(*j)) for j in load_file(sys.argv[1]).jobs if j[3] == 0))" "$CFG"
}

for step in "$@"; do
  gpu_log_step "step $step"
  case $step in
    setup) ;;
    resume) sweep_resume "${RESUME_ARCHIVE:-resume/sweep.tar.xz}" . || exit 1 ;;
    plan) sm results/plan.txt ;;
    # shellcheck disable=SC2046
    first) sm $(first_boots) ;;
    sweep) sm results/report.html results/plan.txt ;;
    parity)
      # One engine's; under `engines` both stacks are installed, so PARITY_ENGINE picks.
      pe=$ENGINE
      [ "$pe" != engines ] || pe=${PARITY_ENGINE:-sglang}
      # shellcheck disable=SC2086
      "$P" "benchmarks/gpu/${pe}_parity.py" run --out-dir parity \
        --out parity/"${pe}_parity.json" ${PARITY_ARGS:-}
      ;;
    probe)
      [ "$ENGINE" != engines ] || {
        echo "probe is vLLM's (run.sh vllm ... probe)"
        exit 2
      }
      # shellcheck disable=SC2086
      "$P" benchmarks/gpu/vllm_parity.py run --out-dir parity --levels "" \
        --probe-levels "${PROBE_LEVELS:-1,10,256,1024}" --out parity/probe.json
      ;;
    pack)
      results_pack . "$OUT"
      {
        echo "after the run:"
        nvidia-smi --query-gpu=index,name,memory.used,power.draw --format=csv
        echo "compute processes (none expected):"
        nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
      } >"$OUT/gpu.txt" 2>&1
      cat "$OUT/gpu.txt"
      ls -la "$OUT"
      ;;
    *)
      echo "unknown step $step"
      exit 2
      ;;
  esac
  gpu_log_step "step $step: exit $?"
done
