#!/bin/bash
# Build .whl/ for benchmarks/gpu/gpu_run.sh: every wheel the lent H200 (Python 3.12, no network)
# lacks for the workflow, the second stack and the peer clients. Run here, with network:
#
#   bash benchmarks/gpu/gpu_wheels.sh        # -> .whl/ (about 40 MB; the carry limit is 64 MiB)
#
# What the image already has (the device notes' package list, IMAGE below) is left out, so
# its versions are used; pip's resolver picks the rest for CPython 3.12 on manylinux.
# Two wheels are slimmed, as nothing here uses what is dropped: pulp without its bundled CBC
# solver (gpu_run.sh uses Snakemake's greedy scheduler), and sglang with only what
# bench_serving and the Rust client (`_bench`) load, no server extensions, kernels or models.
set -euo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/gpu/lib.sh # gpu_pip (PIP, default `python3 -m pip`), gpu_plat, GPU_IMAGE
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
gpu_plat
PLAT=("${GPU_PLAT[@]}")
WANT=("snakemake[reports]==9.27.1" pandas pyyaml matplotlib tabulate jinja2 numpy scipy
  safetensors tokenizers jsonschema uvloop nvidia-ml-py
  openai "pydantic>=2" uvicorn fastapi starlette rich # transformers serve's web stack
  msgspec orjson pybase64 pyzmq)                      # sglang's bench clients
IMAGE=$GPU_IMAGE

# connection_pool (Snakemake) is published as an sdist only: build its pure-Python wheel.
mkdir -p "$W/local" "$W/dl"
gpu_pip wheel -q --no-deps -w "$W/local" connection_pool==0.0.3
gpu_pip install -q --dry-run --ignore-installed --find-links "$W/local" "${PLAT[@]}" \
  --target "$W/t" --report "$W/report.json" "${WANT[@]}"
python3 - "$W/report.json" "$IMAGE" >"$W/need.txt" <<'EOF'
import json, sys
have = set(sys.argv[2].split())
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    name = meta["name"].lower().replace("_", "-")
    if name not in have:
        print(f"{name}=={meta['version']}")
EOF
grep -v '^connection-pool==' "$W/need.txt" >"$W/need-index.txt"
gpu_pip download -q --no-deps "${PLAT[@]}" -d "$W/dl" -r "$W/need-index.txt"
cp "$W/local"/*.whl "$W/dl/"
gpu_pip download -q --no-deps "${PLAT[@]}" -d "$W/dl" transformers==5.24.0 sglang==0.5.23

slim() { # slim WHEEL PATH... : rewrite the wheel without PATHs
  local d="$W/slim" whl=$1
  shift
  rm -rf "$d" && mkdir -p "$d" && (cd "$d" && python3 -m zipfile -e "$whl" .)
  for p in "$@"; do rm -rf "${d:?}/"$p; done
  rm "$whl"
  (cd "$d" && python3 -c "import zipfile,os,sys
with zipfile.ZipFile(sys.argv[1],'w',zipfile.ZIP_DEFLATED) as z:
    [z.write(os.path.join(r,f),os.path.relpath(os.path.join(r,f),'.')) for r,_,fs in os.walk('.') for f in fs]" "$whl")
}
slim "$(ls "$W"/dl/pulp-*.whl)" pulp/solverdir/cbc
slim "$(ls "$W"/dl/sglang-*.whl)" sglang/kernels sglang/multimodal_gen sglang/srt/models \
  sglang/jit_kernel 'sglang/srt/rust_extensions/_server*' 'sglang/srt/rust_extensions/_grpc*' \
  'sglang/srt/rust_extensions/_multimodal*' 'sglang/srt/mem_cache/rust_tree_core/*.so'
rm -rf .whl && mkdir .whl && cp "$W"/dl/*.whl .whl/
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/"
