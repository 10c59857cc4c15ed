#!/bin/bash
# config/examples/h200-vllm.yaml through real Snakemake on the lent H200 (no network), then
# pack what came back. From a copy of the repo (not the device tool's
# checkout, which each call replaces), the wheel parts of benchmarks/vllm_wheels.sh already
# copied into /tmp/vllm-wheels/ (part.0 ... part.N, SHA256):
#
#   bash benchmarks/vllm_run.sh OUT STEP...
#
# Steps, in the order given (each rerunnable: Snakemake reruns only what is missing):
#   join     cat the parts into wheels.tar, check its sha256
#   setup    install the wheels (benchmarks/vllm_setup.sh; always sourced)
#   first    every cell's first boot (r0): a config's cold compile
#   sweep    the rest (r1: compile cache reused), results/report.html and results/plan.txt
#   pack     OUT/results.tar.gz (results/ without request records, the manifests),
#            report.html, plan.txt, and OUT/gpu.txt (nvidia-smi after: no compute process)
# Run it in its own session and wait on its pid (docs/vllm-h200.md gives the device calls).
# Everything goes to OUT/run.log too. STEP_TIMEOUT=S stops a Snakemake step after S
# seconds with SIGINT (running cells tear their servers down; what finished stays).
set -u -o pipefail
OUT=${1:?usage: vllm_run.sh OUT STEP...}
shift
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
W=${WHEELS_DIR:-/tmp/vllm-wheels}
CFG=${SERVESWEEP_GPU_CONFIG:-config/examples/h200-vllm.yaml}
S=vllm-0.26
M=moe-1b
VARIANTS="bad-flag baseline eager no-prefix-cache ngram-spec"
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
if [ "${1:-}" = join ]; then
  stamp "join"
  cat "$W"/part.* >"$W/wheels.tar" && (cd "$W" && sha256sum -c SHA256) || exit 1
  shift
fi
stamp "setup"
WHEELS_TAR=$W/wheels.tar . benchmarks/vllm_setup.sh || exit 1
[ "${1:-}" = setup ] && shift
P=$(command -v python3)
SM=(timeout -s INT "${STEP_TIMEOUT:-86400}" "$P" -m snakemake --cores 4 --scheduler greedy)
# Targets go before --resources and --configfile, which take every value after them.
sm() { "${SM[@]}" "$@" --resources gpu=1 --configfile "$CFG"; }

for step in "$@"; do
  stamp "step $step"
  case $step in
    first)
      t=(); for v in $VARIANTS; do t+=("results/cells/$S/$M/$v/r0/cell.json"); done
      sm "${t[@]}"
      ;;
    sweep)
      sm results/report.html results/plan.txt
      ;;
    pack)
      # shellcheck disable=SC2046
      tar czf "$OUT/results.tar.gz" --exclude='*.requests.jsonl' \
        $(ls -d results resources/stacks resources/models/*/manifest.json 2>/dev/null)
      for f in report.html plan.txt plan.json summary.csv; do
        [ -f "results/$f" ] && cp "results/$f" "$OUT/"
      done
      {
        echo "after the run:"
        nvidia-smi --query-gpu=index,name,memory.used,power.draw --format=csv
        echo "compute processes (none expected):"
        nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
      } >"$OUT/gpu.txt" 2>&1
      cat "$OUT/gpu.txt"
      ;;
    *)
      echo "unknown step $step"
      exit 2
      ;;
  esac
  stamp "step $step: exit $?"
done
