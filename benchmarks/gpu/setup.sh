# Source on the lent H200 (no network), from the repo copy, the parts of
# benchmarks/gpu/prepare.sh already in /tmp/ENGINE-wheels (WHEELS_DIR):
#
#   ENGINE=sglang . benchmarks/gpu/setup.sh         (or ENGINE=vllm, or ENGINE=engines)
#
# Joins and checks the parts, installs every wheel with --no-index --no-deps into
# /tmp/site-ENGINE (once: a second source only writes the interpreter), writes the stack's
# interpreter /tmp/stack-ENGINE/bin/python3 (the image's python3, that site in front; what
# config/examples/h200-ENGINE.yaml names), and exports PYTHONPATH=/tmp/site-ENGINE for the
# workflow itself (Snakemake's wheels are in the same site).
#   sglang:  CUDA_HOME=/usr/local/cuda-13.0 and its bin/ on PATH (SGLang's JIT kernels),
#            HF_HUB_OFFLINE=1. transformers 5.12.1 and tokenizers 0.22.2 from the site
#            shadow the image's 5.17 / 0.23 (SGLang 0.5.17's pins).
#   vllm:    VLLM_USE_FLASHINFER_SAMPLER=0 (flashinfer's sampler would JIT-compile), and a
#            `vllm` command beside the interpreter.
#   engines: both of the above, from /tmp/sglang-wheels and /tmp/vllm-wheels, each into its
#            own site (both sets hold Snakemake's wheels: two --target sites, no clash), and
#            /tmp/stack-engines/bin/python3, which runs each engine's own interpreter by the
#            module it runs (lib.sh engines_python; config/examples/h200-engines.yaml). The
#            workflow runs on SGLang's site.
# GPU_TMP: where the device's /tmp is (the tests use a temp dir).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
GPU_TMP=${GPU_TMP:-/tmp}

# engine_stack E W: E's wheels in W joined, checked and installed into GPU_TMP/site-E
# (once), its interpreter GPU_TMP/stack-E/bin/python3 written.
engine_stack() {
  local e=$1 w=$2 site=$GPU_TMP/site-$1 stack=$GPU_TMP/stack-$1/bin
  if [ ! -f "$site/.done" ]; then
    wheels_join "$w" && wheels_install "$w" "$site" && touch "$site/.done" || return 1
    gpu_log "installed into $site ($(du -sm "$site" | cut -f1) MiB)"
  fi
  case $e in
    sglang)
      stack_python "$stack/python3" "$site" CUDA_HOME=/usr/local/cuda-13.0 \
        'PATH+=${CUDA_HOME}/bin' HF_HUB_OFFLINE=1 || return 1
      ;;
    vllm)
      stack_python "$stack/python3" "$site" VLLM_USE_FLASHINFER_SAMPLER=0 || return 1
      printf '#!/bin/sh\nexec "$(dirname "$0")/python3" -c "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = \\"vllm\\"; main()" "$@"\n' \
        >"$stack/vllm" && chmod +x "$stack/vllm"
      ;;
  esac
}

case $ENGINE in
  sglang | vllm)
    engine_stack "$ENGINE" "${WHEELS_DIR:-$GPU_TMP/$ENGINE-wheels}" || return 1
    SITE=$GPU_TMP/site-$ENGINE
    SHOW="$ENGINE:$GPU_TMP/stack-$ENGINE/bin/python3"
    ;;
  engines)
    engine_stack sglang "$GPU_TMP/sglang-wheels" && engine_stack vllm "$GPU_TMP/vllm-wheels" &&
      engines_python "$GPU_TMP/stack-engines/bin/python3" "$GPU_TMP/stack-sglang/bin/python3" \
        "$GPU_TMP/stack-vllm/bin/python3" "$GPU_TMP/site-vllm" || return 1
    SITE=$GPU_TMP/site-sglang
    SHOW="sglang:$GPU_TMP/stack-sglang/bin/python3 vllm:$GPU_TMP/stack-vllm/bin/python3"
    ;;
  *)
    gpu_fail "setup.sh: ENGINE='$ENGINE' is not sglang, vllm or engines"
    return 1
    ;;
esac
export PYTHONPATH=$SITE
for s in $SHOW; do
  for d in snakemake "${s%%:*}" torch transformers tokenizers; do
    printf '%s ' "$d"
    "${s#*:}" -c "import importlib.metadata as m; print(m.version('$d'))" 2>/dev/null || echo "-"
  done
done
