#!/bin/bash
# benchmarks/vllm_parity.py on the lent H200 (no network), from a copy of the repo, with
# benchmarks/vllm_wheels.sh's parts already copied into /tmp/vllm-wheels/ (part.0 ... part.N,
# SHA256). One vLLM server, our client and `vllm bench serve` at 1, 10, 256 and 1,024 streams
# (ABBA, 2 repeats), then the sweep's prompts chunk by chunk (the retokenized_mismatch
# evidence). Run it in its own session and wait on its pid (docs/vllm-h200.md):
#
#   bash benchmarks/vllm_parity.sh OUT [join]
#
# PARITY_ARGS: more `run` arguments (e.g. "--levels 1,10 --repeats 4"); PROBE_LEVELS: the
# probe's levels (default 1,10,256,1024; empty: no probe).
#
# OUT gets parity.log (everything printed), vllm_parity.json (the comparison), runs.tar.gz
# (each run's JSON, our request records, the server's and the peer's logs, the model's
# tokenizer), probe.tar.gz (the chunk-level probe) and gpu.txt (nvidia-smi after).
set -u -o pipefail
OUT=${1:?usage: vllm_parity.sh OUT [join]}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/parity.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
W=${WHEELS_DIR:-/tmp/vllm-wheels}
RUN=${RUN_DIR:-/tmp/vparity}
MODEL=/tmp/parity-model
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
if [ "${2:-}" = join ]; then
  stamp "join"
  cat "$W"/part.* >"$W/wheels.tar" && (cd "$W" && sha256sum -c SHA256) || exit 1
fi
stamp "setup"
WHEELS_TAR=$W/wheels.tar . benchmarks/vllm_setup.sh || exit 1
stamp "parity"
# shellcheck disable=SC2086
python3 benchmarks/vllm_parity.py run --out-dir "$RUN" --model-dest "$MODEL" \
  --probe-levels "${PROBE_LEVELS-1,10,256,1024}" --out "$OUT/vllm_parity.json" ${PARITY_ARGS:-}
stamp "parity: exit $?"
tar czf "$OUT/runs.tar.gz" -C "$RUN" --exclude=probe.jsonl . -C "$MODEL/files" tokenizer.json
[ -f "$RUN/probe.jsonl" ] && tar czf "$OUT/probe.tar.gz" -C "$RUN" probe.jsonl
{
  echo "after the run:"
  nvidia-smi --query-gpu=index,name,memory.used,power.draw --format=csv
  echo "compute processes (none expected):"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
} >"$OUT/gpu.txt" 2>&1
ls -la "$OUT"
stamp "done"
