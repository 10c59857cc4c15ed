# Source from the repo root on the lent H200 (no network), the wheels tar joined:
#   WHEELS_TAR=/tmp/vllm-wheels/wheels.tar . benchmarks/vllm_setup.sh
# Unpacks benchmarks/vllm_wheels.sh's tar and installs every wheel (no index, no deps) into
# /tmp/site-vllm: vLLM 0.26.0 and its missing dependencies, and Snakemake's. --no-deps on
# purpose: vLLM pins numba==0.65.0 and mistral-common numpy<2.4, which the image's numpy
# 2.5.2 breaks on paper only (both import and serve). Writes the stack's interpreter, the
# machine's own python3 with that path in front:
#   /tmp/stack-vllm/bin/python3   PYTHONPATH=/tmp/site-vllm, VLLM_USE_FLASHINFER_SAMPLER=0
# and exports PYTHONPATH=/tmp/site-vllm for the workflow (same interpreter, same packages).
P=$(command -v "${PY:-python3}")
T=${WHEELS_TAR:-/tmp/vllm-wheels/wheels.tar}
D=$(dirname "$T")/whl
SITE=/tmp/site-vllm
if [ ! -f "$SITE/.done" ]; then
  rm -rf "$D" && mkdir -p "$D" && tar xf "$T" -C "$D" || return 1
  # shellcheck disable=SC2046
  "$P" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" $(ls "$D"/*.whl) || return 1
  touch "$SITE/.done"
fi
mkdir -p /tmp/stack-vllm/bin
printf '#!/bin/sh\nexport PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}\nexport VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}\nexec %s "$@"\n' \
  "$SITE" "$P" >/tmp/stack-vllm/bin/python3
printf '#!/bin/sh\nexec "$(dirname "$0")/python3" -c "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = \"vllm\"; main()" "$@"\n' \
  >/tmp/stack-vllm/bin/vllm
chmod +x /tmp/stack-vllm/bin/python3 /tmp/stack-vllm/bin/vllm
export PYTHONPATH=$SITE
for d in snakemake vllm torch transformers; do
  printf '%s ' "$d"
  "$P" -c "import importlib.metadata as m; print(m.version('$d'))" 2>/dev/null || echo "-"
done
