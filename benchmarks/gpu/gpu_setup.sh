# Source from the repo root on a GPU machine without network, wheels in .whl/:
#   . benchmarks/gpu/gpu_setup.sh
# Installs the carried wheels (no index, no deps): every wheel but transformers' and
# sglang's into /tmp/site (Snakemake, transformers serve's web deps), the transformers
# wheel alone into /tmp/site-new (the second stack), sglang's into /tmp/site (the peer
# client). Writes two stack interpreters, the machine's own python3 with a path in front:
#   /tmp/stack-img/bin/python3   PYTHONPATH=/tmp/site               (the image's transformers)
#   /tmp/stack-new/bin/python3   PYTHONPATH=/tmp/site-new:/tmp/site (the carried transformers)
# each with a `transformers` CLI beside it, and exports PYTHONPATH=/tmp/site for the workflow.
# benchmarks/README.md ("On a GPU machine without network") lists the wheels.
P=$(command -v "${PY:-python3}")
I="$P -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target"
# shellcheck disable=SC2046
$I /tmp/site $(ls .whl/*.whl | grep -v -e /transformers- -e /sglang-) || return 1
C=$(ls .whl/transformers-*.whl 2>/dev/null)
S=$(ls .whl/sglang-*.whl 2>/dev/null)
if [ -n "$C" ]; then $I /tmp/site-new "$C" || return 1; fi
if [ -n "$S" ]; then $I /tmp/site "$S" || echo "sglang wheel NOT installed"; fi
for s in img:/tmp/site new:/tmp/site-new:/tmp/site; do
  d=/tmp/stack-${s%%:*}/bin
  mkdir -p "$d"
  printf '#!/bin/sh\nexport PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}\nexec %s "$@"\n' \
    "${s#*:}" "$P" >"$d/python3"
  printf '#!/bin/sh\nexec "$(dirname "$0")/python3" -m transformers.cli.transformers "$@"\n' \
    >"$d/transformers"
  chmod +x "$d/python3" "$d/transformers"
done
export PYTHONPATH=/tmp/site
for d in snakemake fastapi sglang; do
  printf '%s ' "$d"; "$P" -c "import importlib.metadata as m; print(m.version('$d'))" 2>/dev/null || echo "-"
done
for s in img new; do
  printf 'stack %s: transformers ' "$s"
  /tmp/stack-$s/bin/python3 -c "import importlib.metadata as m; print(m.version('transformers'))"
done
