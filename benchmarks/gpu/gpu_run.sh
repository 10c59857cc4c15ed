#!/bin/bash
# The workflow on one GPU machine without network (the lent H200): both stacks, the
# synthetic MoE, config/examples/h200-transformers.yaml, then the client benchmarks.
#
#   bash benchmarks/gpu/gpu_run.sh OUT STEP...  from the repo root, wheels in .whl/
#
# Steps, in the order given (each is rerunnable: Snakemake reruns only what is missing):
#   first    every cell's first boot (r0), so a short call already holds one of each
#   sweep    the rest, then results/report.html and results/plan.txt
#   clients  timing, capacity and parity: benchmarks/client/timing_accuracy.py (1,024 streams
#            against the scripted server), client_capacity.py (ours against sglang.bench_serving and SGLang's Rust
#            client, the instant stub, 1,024 streams) and parity.py (ours against
#            bench_serving through the same GPU server, 1,024 streams), into results/bench/
#   pack     OUT/results.tar.gz (results/ without request records, the manifests), plus
#            report.html and plan.txt, and OUT/gpu.txt: nvidia-smi after, with any compute
#            process still on the GPU (there should be none); 5 files with run.log
# Everything a step prints also goes to OUT/run.log. STEP_TIMEOUT=S stops a Snakemake step
# after S seconds with SIGINT (running cells tear their servers down; what finished stays).
set -u -o pipefail
OUT=${1:?usage: gpu_run.sh OUT STEP...}
shift
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
. benchmarks/gpu/gpu_setup.sh || exit 1
CFG=${SERVESWEEP_GPU_CONFIG:-config/examples/h200-transformers.yaml}
STACKS="tf-5.17 tf-5.24"
VARIANTS="baseline cuda-graphs"
MODEL=resources/models/moe-1b/files
# One GPU: cells queue for it (the workflow profile's gpu=8 is for an 8-GPU host). No ILP
# solver travels, so the greedy scheduler, said outright.
SM=(timeout -s INT "${STEP_TIMEOUT:-86400}" "$P" -m snakemake --cores 4 --resources gpu=1 --scheduler greedy)
# Targets go before --configfile, which takes every value after it.
sm() { "${SM[@]}" "$@" --configfile "$CFG"; }
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }

for step in "$@"; do
  stamp "step $step"
  case $step in
    first)
      targets=()
      for s in $STACKS; do
        for v in $VARIANTS; do targets+=("results/cells/$s/moe-1b/$v/r0/cell.json"); done
      done
      sm "${targets[@]}"
      ;;
    sweep)
      sm results/report.html results/plan.txt
      ;;
    clients | timing | capacity | parity)
      mkdir -p results/bench
      [ -f "$MODEL/tokenizer.json" ] || sm resources/models/moe-1b/manifest.json
      if [ "$step" = clients ] || [ "$step" = timing ]; then
        timeout 150 "$P" -m benchmarks.client.timing_accuracy --concurrency 1024 --repeats 3 \
          --out results/bench/timing_accuracy.json
      fi
      if [ "$step" = clients ] || [ "$step" = capacity ]; then
        timeout 150 "$P" -m benchmarks.client.client_capacity --peer-python "$P" --levels 1024 \
          --repeats 2 --clients ours,bench_serving,rust --prompts-per-stream 2 \
          --min-prompts 0 --model-dir "$MODEL" --out results/bench/client_capacity.json
      fi
      if [ "$step" = clients ] || [ "$step" = parity ]; then
        timeout 300 "$P" -m benchmarks.client.parity --peer-python "$P" --servers transformers \
          --server-python /tmp/stack-img/bin/python3 \
          --server-args "--device cuda --continuous-batching" --model-dir "$MODEL" \
          --concurrency 1024 --num-prompts 2048 --input-len 64 --output-len 16 --repeats 2 \
          --boot-timeout-s 240 --out results/bench/parity_gpu.json
      fi
      ;;
    pack)
      # shellcheck disable=SC2046
      tar czf "$OUT/results.tar.gz" --exclude='*.requests.jsonl' \
        $(ls -d results resources/stacks resources/models/*/manifest.json 2>/dev/null)
      for f in report.html plan.txt; do
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
