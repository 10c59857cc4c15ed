#!/bin/bash
# Wheels for benchmarks/vllm_run.sh: vLLM 0.26.0 on the lent H200 (Python 3.12, torch
# 2.11.0, no network), plus what the workflow itself needs there (Snakemake and its deps,
# as benchmarks/gpu_wheels.sh resolves them, minus what vLLM's set already holds). Run here,
# with network:
#
#   bash benchmarks/vllm_wheels.sh DEST     # DEST/wheels.tar split into DEST/1/ ... DEST/N/
#
# vLLM's set is the `core` and `compat` tiers of the measured list (WHEELS below, the
# device notes' WHEELS.txt): 0.26.0 is the last vLLM that pins the image's torch 2.11.0.
# Every wheel is fetched with --no-deps for CPython 3.12 on manylinux; one version of
# each name. The wheels go into one tar, split into parts of at most 60 MiB (one device
# call carries at most 64 MiB, the repo copy included), each part in its own folder so a
# call can carry one; DEST/SHA256 holds the tar's sum, checked after joining there.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:?usage: vllm_wheels.sh DEST}
PIP=${PIP:-.venv/bin/pip}
LIST=${WHEELS_TXT:-/work/shared/vllm-h200/WHEELS.txt}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PLAT=(--python-version 3.12 --implementation cp --only-binary=:all:)
for n in 5 17 24 26 27 28 31 34 35; do PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
mkdir -p "$W/dl" "$W/local"

# vLLM's tiers: NAME==VERSION from each wheel's file name.
awk -F'\t' '$1=="core" || $1=="compat" {print $3}' "$LIST" >"$W/files.txt"
python3 - "$W/files.txt" >"$W/vllm-req.txt" <<'PY'
import sys
for f in open(sys.argv[1]).read().split():
    name, version = f.split("-")[:2]
    print(f"{name}=={version}")
PY
$PIP download -q --no-deps "${PLAT[@]}" -d "$W/dl" -r "$W/vllm-req.txt"

# The workflow's own needs, less the image's packages and vLLM's set.
IMAGE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
 certifi charset-normalizer click cloudpickle colorama contourpy cycler filelock fonttools
 frozenlist fsspec h11 hf-xet httpcore httpx huggingface-hub idna jinja2 kiwisolver markdown-it-py
 markupsafe matplotlib mdurl multidict numpy nvidia-ml-py packaging pandas pillow pip
 prometheus-client propcache protobuf psutil pygments pyparsing python-dateutil pyyaml regex
 requests rich safetensors scipy setuptools shellingham six tabulate tokenizers torch tqdm
 transformers typer typing-extensions urllib3 uvloop wheel wrapt yarl zipp"
HAVE="$IMAGE $(sed 's/==.*//' "$W/vllm-req.txt" | tr '_A-Z' '-a-z' | tr '\n' ' ')"
$PIP wheel -q --no-deps -w "$W/local" connection_pool==0.0.3
$PIP install -q --dry-run --ignore-installed --find-links "$W/local" "${PLAT[@]}" \
  --target "$W/t" --report "$W/report.json" "snakemake[reports]==9.27.1" jsonschema
python3 - "$W/report.json" "$HAVE" >"$W/need.txt" <<'PY'
import json, sys
have = set(sys.argv[2].split())
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    name = meta["name"].lower().replace("_", "-")
    if name not in have and name != "connection-pool":
        print(f"{name}=={meta['version']}")
PY
$PIP download -q --no-deps "${PLAT[@]}" -d "$W/dl" -r "$W/need.txt"
cp "$W/local"/*.whl "$W/dl/"
# pulp without its bundled CBC solver (vllm_run.sh uses Snakemake's greedy scheduler).
if ls "$W"/dl/pulp-*.whl >/dev/null 2>&1; then
  p=$(ls "$W"/dl/pulp-*.whl)
  mkdir "$W/slim" && (cd "$W/slim" && python3 -m zipfile -e "$p" . && rm -rf pulp/solverdir/cbc)
  rm "$p" && (cd "$W/slim" && python3 -c "import zipfile,os,sys
with zipfile.ZipFile(sys.argv[1],'w',zipfile.ZIP_DEFLATED) as z:
    [z.write(os.path.join(r,f),os.path.relpath(os.path.join(r,f),'.')) for r,_,fs in os.walk('.') for f in fs]" "$p")
fi
ls "$W/dl" | sed 's/-.*//' | tr '_A-Z' '-a-z' | sort | uniq -d | grep . && {
  echo "two versions of one name: stop"
  exit 1
}
rm -rf "$DEST" && mkdir -p "$DEST"
(cd "$W/dl" && tar cf "$W/wheels.tar" ./*.whl)
(cd "$W" && sha256sum wheels.tar) >"$DEST/SHA256"
split -b 60M -d -a 1 "$W/wheels.tar" "$W/part."
i=1
for p in "$W"/part.*; do mkdir "$DEST/$i" && mv "$p" "$DEST/$i/" && i=$((i + 1)); done
echo "$(ls "$W/dl" | wc -l) wheels, $(du -sh "$W/wheels.tar" | cut -f1) in $((i - 1)) parts under $DEST"
