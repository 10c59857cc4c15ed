# Source on the lent H200 (no network), from the repo copy, the parts of
# benchmarks/gpu/prepare.sh already in /tmp/ENGINE-wheels (WHEELS_DIR):
#
#   ENGINE=sglang . benchmarks/gpu/setup.sh         (or ENGINE=vllm)
#
# Joins and checks the parts, installs every wheel with --no-index --no-deps into
# /tmp/site-ENGINE (once: a second source only writes the interpreter), writes the stack's
# interpreter /tmp/stack-ENGINE/bin/python3 (the image's python3, that site in front; what
# config/examples/h200-ENGINE.yaml names), and exports PYTHONPATH=/tmp/site-ENGINE for the
# workflow itself (Snakemake's wheels are in the same site).
#   sglang: CUDA_HOME=/usr/local/cuda-13.0 and its bin/ on PATH (SGLang's JIT kernels),
#           HF_HUB_OFFLINE=1. transformers 5.12.1 and tokenizers 0.22.2 from the site
#           shadow the image's 5.17 / 0.23 (SGLang 0.5.17's pins).
#   vllm:   VLLM_USE_FLASHINFER_SAMPLER=0 (flashinfer's sampler would JIT-compile), and a
#           `vllm` command beside the interpreter.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
W=${WHEELS_DIR:-/tmp/$ENGINE-wheels}
SITE=/tmp/site-$ENGINE
STACK=/tmp/stack-$ENGINE/bin
if [ ! -f "$SITE/.done" ]; then
  wheels_join "$W" && wheels_install "$W" "$SITE" && touch "$SITE/.done" || return 1
  gpu_log "installed into $SITE ($(du -sm "$SITE" | cut -f1) MiB)"
fi
case $ENGINE in
  sglang)
    stack_python "$STACK/python3" "$SITE" CUDA_HOME=/usr/local/cuda-13.0 \
      'PATH+=${CUDA_HOME}/bin' HF_HUB_OFFLINE=1 || return 1
    ;;
  vllm)
    stack_python "$STACK/python3" "$SITE" VLLM_USE_FLASHINFER_SAMPLER=0 || return 1
    printf '#!/bin/sh\nexec "$(dirname "$0")/python3" -c "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = \\"vllm\\"; main()" "$@"\n' \
      >"$STACK/vllm" && chmod +x "$STACK/vllm"
    ;;
  *)
    gpu_fail "setup.sh: ENGINE='$ENGINE' is not sglang or vllm"
    return 1
    ;;
esac
export PYTHONPATH=$SITE
for d in snakemake "$ENGINE" torch transformers tokenizers; do
  printf '%s ' "$d"
  "$STACK/python3" -c "import importlib.metadata as m; print(m.version('$d'))" 2>/dev/null || echo "-"
done
