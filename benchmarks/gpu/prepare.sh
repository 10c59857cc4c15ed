#!/bin/bash
# Here, with network: everything a GPU recipe carries to the lent H200, in one command.
#
#   bash benchmarks/gpu/prepare.sh ENGINE [MAIN]        ENGINE: sglang | vllm | engines
#
# `engines`: both sets, one after the other (MAIN/.sglang-whl and MAIN/.vllm-whl), for
# config/examples/h200-engines.yaml; docs/engines-h200.md lists the lease's calls.
#
# MAIN is the checkout the device tool sends (default: this one). It gets, all ignored by
# git there (MAIN's .git/info/exclude), so none of it travels unless a call carries it:
#   MAIN/.ENGINE-whl/1 ... N   the wheels as one reproducible tar.xz in parts of <= 40 MiB,
#                              each folder carried by one call; N/ also holds SHA256
#   MAIN/.devtree              this checkout's HEAD (committed code: the run names a commit)
# Wheels: benchmarks/gpu/wheels-ENGINE.tsv (tier, MiB, file; the measured sets: SGLang
# 0.5.17's core + extra tiers, vLLM 0.26.0's core + compat), plus Snakemake's own, for
# CPython 3.12 on x86-64 manylinux, cached in WHEEL_CACHE (default ~/.cache/servesweep-wheels).
# PIP: the pip to download with (default `python3 -m pip`). Prints the device calls.
set -euo pipefail
if [ "${1:-}" = engines ]; then
  bash "$0" sglang "${2:-.}" && bash "$0" vllm "${2:-.}" || exit
  echo
  echo "Both engines in one lease: the calls above, the SGLang parts and then the vLLM ones, the"
  echo "last with .devtree, starting 'start.sh engines 500 setup plan sweep pack' (docs/engines-h200.md)."
  exit 0
fi
cd "$(dirname "$0")/../.."
. benchmarks/gpu/lib.sh
ENGINE=${1:?usage: prepare.sh sglang|vllm|engines [MAIN]}
MAIN=$(cd "${2:-.}" && pwd)
case $ENGINE in
  sglang) TIERS="core extra" ;;
  vllm) TIERS="core compat" ;;
  *) gpu_fail "prepare.sh: engine '$ENGINE' is not sglang or vllm" || exit 2 ;;
esac
CACHE=${WHEEL_CACHE:-$HOME/.cache/servesweep-wheels}/$ENGINE
DEST=$MAIN/.$ENGINE-whl

gpu_log "fetching wheels into $CACHE/dl"
wheels_fetch "benchmarks/gpu/wheels-$ENGINE.tsv" "$TIERS" "$CACHE/dl"
workflow_wheels "$CACHE/dl"
(cd "$CACHE/dl" && sha256sum -- *.whl) >"$CACHE/PYPI.sha256" # the files as PyPI serves them
rm -rf "$CACHE/stored"
# pulp without its bundled CBC solver binaries (16 MiB; the runs use Snakemake's greedy
# scheduler, which needs no solver).
WHEEL_DROP="pulp/solverdir/cbc/" wheels_stored "$CACHE/dl" "$CACHE/stored"
wheels_pack "$CACHE/stored" "$DEST"
cp "$CACHE/PYPI.sha256" "$DEST/"
exclude_add "$MAIN" .devtree ".$ENGINE-whl"
devtree_make . "$MAIN"

# What each call sends: MAIN's tracked and untracked-not-ignored files, plus its carry.
tree=$(cd "$MAIN" && { git ls-files -z; git ls-files -z -o --exclude-standard; } |
  xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
tree=${tree:-0}
n=$(ls -d "$DEST"/[0-9]* | wc -l)
part=$(du -cb "$DEST/$n" | tail -1 | cut -f1)
dev=$(du -cb "$MAIN/.devtree" | tail -1 | cut -f1)
mib() { echo $(($1 / 1048576)); }
limit=$((63 * 1048576)) # the tool's 64 MiB, less a margin
[ $((tree + GPU_PART_MIB * 1048576)) -lt "$limit" ] || gpu_fail "a part call would not fit in 64 MiB"
[ $((tree + dev)) -lt "$limit" ] || gpu_fail ".devtree ($(mib "$dev") MiB) would not fit in a call"
gpu_log "checkout $(mib "$tree") MiB; a part call $(mib $((tree + GPU_PART_MIB * 1048576))) MiB;" \
  "part $n + .devtree $(mib $((tree + part + dev))) MiB; the limit is 64"
pc() { echo "mkdir -p /tmp/$ENGINE-wheels && cp .$ENGINE-whl/$1/* /tmp/$ENGINE-wheels/ && cd /tmp/$ENGINE-wheels && sha256sum -c part.*.sha256"; }
start="bash .devtree/benchmarks/gpu/start.sh $ENGINE 500 STEP..."
echo
echo "Device calls, back to back (the machine goes back 30 s after a call returns), kind nvidia-h200:"
if [ $((tree + part + dev)) -lt "$limit" ]; then
  echo "Calls 1..$((n - 1)), carry [\".$ENGINE-whl/K\"]:"
  echo "  $(pc K)"
  echo "Call $n, carry [\".$ENGINE-whl/$n\", \".devtree\"]: the last part, then the run in its own"
  echo "session (docs/$ENGINE-h200.md lists the steps), waiting on it for 500 s:"
  echo "  mkdir -p /tmp/$ENGINE-wheels && cp .$ENGINE-whl/$n/* /tmp/$ENGINE-wheels/ && $start"
else
  echo "Calls 1..$n, carry [\".$ENGINE-whl/K\"] (.devtree does not fit beside part $n):"
  echo "  $(pc K)"
  echo "Call $((n + 1)), carry [\".devtree\"]: the run in its own session (docs/$ENGINE-h200.md"
  echo "lists the steps), waiting on it for 500 s:"
  echo "  $start"
fi
echo 'Then, until it says "job ... ended", carry []:'
echo "  bash /tmp/ss/benchmarks/gpu/wait.sh $ENGINE 540"
