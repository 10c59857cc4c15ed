#!/bin/bash
# Build .whl/ for benchmarks/gpu_run.sh: every wheel the lent H200 (Python 3.12, no network)
# lacks for the workflow, the second stack and the peer clients. Run here, with network:
#
#   bash benchmarks/gpu_wheels.sh            # -> .whl/ (about 40 MB; the carry limit is 64 MiB)
#
# What the image already has (the device notes' package list, IMAGE below) is left out, so
# its versions are used; pip's resolver picks the rest for CPython 3.12 on manylinux.
# Two wheels are slimmed, as nothing here uses what is dropped: pulp without its bundled CBC
# solver (gpu_run.sh uses Snakemake's greedy scheduler), and sglang with only what
# bench_serving and the Rust client (`_bench`) load, no server extensions, kernels or models.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-.venv/bin/pip}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PLAT=(--python-version 3.12 --implementation cp --only-binary=:all:)
for n in 5 17 24 27 28 31 34 35; do PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
WANT=("snakemake[reports]==9.27.1" pandas pyyaml matplotlib tabulate jinja2 numpy scipy
  safetensors tokenizers jsonschema uvloop nvidia-ml-py
  openai "pydantic>=2" uvicorn fastapi starlette rich # transformers serve's web stack
  msgspec orjson pybase64 pyzmq)                      # sglang's bench clients
IMAGE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
 certifi charset-normalizer click cloudpickle colorama contourpy cycler filelock fonttools
 frozenlist fsspec h11 hf-xet httpcore httpx huggingface-hub idna jinja2 kiwisolver markdown-it-py
 markupsafe matplotlib mdurl multidict numpy nvidia-ml-py packaging pandas pillow pip
 prometheus-client propcache protobuf psutil pygments pyparsing python-dateutil pyyaml regex
 requests rich safetensors scipy setuptools shellingham six tabulate tokenizers torch tqdm
 transformers typer typing-extensions urllib3 uvloop wheel wrapt yarl zipp"

# connection_pool (Snakemake) is published as an sdist only: build its pure-Python wheel.
mkdir -p "$W/local" "$W/dl"
$PIP wheel -q --no-deps -w "$W/local" connection_pool==0.0.3
$PIP install -q --dry-run --ignore-installed --find-links "$W/local" "${PLAT[@]}" \
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
$PIP download -q --no-deps "${PLAT[@]}" -d "$W/dl" -r "$W/need-index.txt"
cp "$W/local"/*.whl "$W/dl/"
$PIP download -q --no-deps "${PLAT[@]}" -d "$W/dl" transformers==5.24.0 sglang==0.5.23

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
