# Shared by the GPU recipes (docs/vllm-h200.md, docs/sglang-h200.md): source it, never run it.
#
# Here, with network (benchmarks/gpu/prepare.sh):
#   wheels_fetch LIST TIERS DIR    the listed wheels (tier, MiB, file) for CPython 3.12 there
#   workflow_wheels DIR            Snakemake's own wheels the image and DIR lack
#   wheels_stored IN OUT           each wheel rewritten as a stored (uncompressed) zip
#   wheels_pack DIR DEST           one reproducible tar, xz, parts DEST/1 ... DEST/N, sums
#   devtree_make WORKTREE MAIN     MAIN/.devtree: WORKTREE's HEAD, the code that runs there
#   exclude_add MAIN PATH...       PATHs ignored in MAIN (.git/info/exclude), so they travel
#                                  only when a call carries them
# There, on the lent machine (setup.sh, run.sh, wait.sh):
#   wheels_join W                  the parts in W joined and checked, the wheels in W/whl
#   wheels_install W SITE          pip install --no-index --no-deps --target SITE
#   stack_python PATH SITE VAR=V.. an interpreter (the image's python3, SITE in front)
#   engines_python PATH SGLANG_PY VLLM_PY VLLM_SITE
#                                  one interpreter for both engines: each engine's own, by
#                                  the module it runs (config/examples/h200-engines.yaml)
#   results_pack RUN OUT           RUN's results/ into OUT: records, request records apart,
#                                  parity/, and sweep.tar.xz (sweep_pack)
#   bring_back_parts FILE          FILE split into parts of 15 MiB when over 16 MiB
#   sweep_pack RUN OUT             OUT/sweep.tar.xz: what a later slot resumes from
#   sweep_resume ARCHIVE RUN       unpack a carried sweep archive into RUN
#   wait_pid PID DEADLINE_S        wait for PID, at most until DEADLINE_S (seconds from now)
#
# Every function prints one line saying what failed, and returns non-zero, on failure.

# What the device's image already has (KINDS.md's list, as far as the workflow and the
# engines' wheels need it): never fetched, so the image's versions are used.
GPU_IMAGE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio
 attrs certifi charset-normalizer click cloudpickle colorama contourpy cycler filelock fonttools
 frozenlist fsspec h11 hf-xet httpcore httpx huggingface-hub idna jinja2 kiwisolver
 markdown-it-py markupsafe matplotlib mdurl multidict numpy nvidia-ml-py packaging pandas pillow
 pip prometheus-client propcache protobuf psutil pygments pyparsing python-dateutil pyyaml regex
 requests rich safetensors scipy setuptools shellingham six tabulate tokenizers torch tqdm
 transformers typer typing-extensions urllib3 uvloop wheel wrapt yarl zipp"
# One part and the repo copy must fit in one call (64 MiB): 40 MiB leaves ~22 MiB for the
# checkout (19 MiB with the GPU records of 2026-12-07, which .devtree leaves out; 56 MiB
# parts stopped fitting at 15 MB).
GPU_PART_MIB=40
GPU_PART=${GPU_PART:-${GPU_PART_MIB}M} # split's size (the tests use a few KiB)

gpu_log() { echo "[$(date -u +%H:%M:%S)] $*"; }
gpu_fail() {
  echo "FAILED: $*" >&2
  return 1
}

# pip for downloads here: $PIP if set (a command line), else this python3's own.
gpu_pip() {
  local pip=${PIP:-python3 -m pip}
  # shellcheck disable=SC2086
  $pip "$@"
}

# pip's platform flags for the device: CPython 3.12, x86-64 manylinux (pip matches tags
# exactly, so every glibc level a wheel in the lists uses is named).
gpu_plat() {
  GPU_PLAT=(--python-version 3.12 --implementation cp --only-binary=:all:)
  local n
  for n in 5 17 24 26 27 28 31 34 35; do GPU_PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
  GPU_PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
}

# wheels_fetch LIST "TIER..." DIR: every wheel of the tiers, by exact version, without
# dependencies; fails unless DIR then holds exactly the listed files (another build of a
# version would change what runs there).
wheels_fetch() {
  local list=$1 tiers=$2 dir=$3
  [ -f "$list" ] || gpu_fail "wheels_fetch: no wheel list $list" || return
  gpu_pip --version >/dev/null 2>&1 ||
    gpu_fail "wheels_fetch: PIP='${PIP:-python3 -m pip}' does not run; set PIP to a pip" || return
  gpu_plat
  mkdir -p "$dir"
  awk -F'\t' -v t=" $tiers " 'NR > 1 && index(t, " " $1 " ") {print $3}' "$list" >"$dir/.want"
  [ -s "$dir/.want" ] || gpu_fail "wheels_fetch: no wheel of tiers '$tiers' in $list" || return
  # NAME-VERSION-...-PLATFORM.whl -> NAME==VERSION, one download per platform tag set: pip
  # takes, of several builds of a version, the one whose tags come first in what it is
  # given, so each file is asked for with its own platform tags only (pure wheels: any).
  local group plats
  rm -f "$dir"/.req.*
  while read -r f; do
    group=${f%.whl}
    group=${group##*-}
    echo "$(echo "$f" | cut -d- -f1)==$(echo "$f" | cut -d- -f2)" >>"$dir/.req.$group"
  done <"$dir/.want"
  for group in "$dir"/.req.*; do
    plats=(--python-version 3.12 --implementation cp --only-binary=:all:)
    if [ "${group##*/.req.}" = any ]; then
      plats=("${GPU_PLAT[@]}")
    else
      for f in $(echo "${group##*/.req.}" | tr . ' '); do plats+=(--platform "$f"); done
    fi
    gpu_pip download -q --no-deps "${plats[@]}" -d "$dir" -r "$group" ||
      gpu_fail "wheels_fetch: pip download of ${group##*/} ($list) failed" || return
  done
  rm -f "$dir"/.req.*
  local f missing=0
  while read -r f; do
    [ -f "$dir/$f" ] || {
      echo "wheels_fetch: $f (listed in $list) was not downloaded" >&2
      missing=1
    }
  done <"$dir/.want"
  rm -f "$dir/.want"
  [ "$missing" = 0 ] || gpu_fail "wheels_fetch: $list: files differ from the list"
}

# workflow_wheels DIR: Snakemake and what it needs, resolved by pip for the device, less
# the image's packages and those already in DIR (an engine's set).
workflow_wheels() {
  local dir=$1 w
  gpu_plat
  w=$(mktemp -d)
  # connection_pool (Snakemake's) is an sdist only: its pure-Python wheel, built here with
  # fixed timestamps (wheels_stored fixes them anyway).
  SOURCE_DATE_EPOCH=315532800 gpu_pip wheel -q --no-deps -w "$w/local" connection_pool==0.0.3 &&
    gpu_pip install -q --dry-run --ignore-installed --find-links "$w/local" "${GPU_PLAT[@]}" \
      --target "$w/t" --report "$w/report.json" "snakemake[reports]==9.27.1" jsonschema ||
    {
      rm -rf "$w"
      gpu_fail "workflow_wheels: pip could not resolve Snakemake for the device"
      return
    }
  local have
  have="$GPU_IMAGE $(find "$dir" -maxdepth 1 -name '*.whl' -printf '%f\n' | cut -d- -f1 |
    tr '_A-Z' '-a-z' | tr '\n' ' ')"
  python3 - "$w/report.json" "$have" >"$w/need.txt" <<'PY'
import json, sys
have = set(sys.argv[2].split())
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    name = meta["name"].lower().replace("_", "-")
    if name not in have and name != "connection-pool":
        print(f"{name}=={meta['version']}")
PY
  if [ -s "$w/need.txt" ]; then
    gpu_pip download -q --no-deps "${GPU_PLAT[@]}" -d "$dir" -r "$w/need.txt" ||
      gpu_fail "workflow_wheels: pip download failed" || {
      rm -rf "$w"
      return 1
    }
  fi
  cp "$w"/local/*.whl "$dir/"
  rm -rf "$w"
}

# wheels_stored IN OUT: each wheel of IN rewritten into OUT as a stored zip, entries sorted
# (the .dist-info last), one fixed timestamp and mode each: the same wheel gives the same
# bytes on every rebuild. pip installs it the same (RECORD hashes the files, not the zip).
# xz compresses the stored files far better than each wheel's own deflate. WHEEL_DROP:
# path prefixes left out (and out of RECORD), for parts nothing there uses.
wheels_stored() {
  mkdir -p "$2"
  python3 - "$1" "$2" <<'PY' || gpu_fail "wheels_stored: rewriting the wheels of $1 failed"
import os, pathlib, sys, zipfile

src, dst = map(pathlib.Path, sys.argv[1:])
drop = tuple(os.environ.get("WHEEL_DROP", "").split())
names = sorted(p.name for p in src.glob("*.whl"))
seen = {}
for name in names:
    dist = name.split("-")[0].lower().replace("-", "_")
    if dist in seen:
        sys.exit(f"two versions of {dist}: {seen[dist]} and {name}; keep one")
    seen[dist] = name
for name in names:
    with zipfile.ZipFile(src / name) as zin, zipfile.ZipFile(dst / name, "w") as zout:
        infos = sorted(zin.infolist(), key=lambda i: (".dist-info/" in i.filename, i.filename))
        for info in infos:
            if drop and info.filename.startswith(drop):
                continue
            data = zin.read(info)
            if drop and info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(x for x in lines if not x.startswith(drop)).encode()
            out = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            out.compress_type = zipfile.ZIP_STORED
            out.create_system = 3
            mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
            out.external_attr = ((0o040000 | 0o755) if info.is_dir() else (0o100000 | mode)) << 16
            zout.writestr(out, data)
print(f"{len(names)} wheels rewritten stored")
PY
}

# wheels_pack DIR DEST: DIR's wheels as one tar (sorted names, mtime 0, owner 0, fixed
# modes: the same wheels give the same tar), xz in blocks of a fixed 64 MiB (the same xz
# version gives the same bytes whatever the number of threads: checked with 2, 8 and 16),
# split into parts of GPU_PART, each in its own folder DEST/1 ... DEST/N (a call carries
# one). Sums, in sha256sum's format: DEST/K/part.I.sha256 for each part (checked as it
# lands), DEST/SHA256 (every wheel, the tar, the tar.xz, every part), copied into DEST/N
# so it travels with the last part.
wheels_pack() {
  local dir=$1 dest=$2 w i p
  w=$(mktemp -d)
  (cd "$dir" && sha256sum -- *.whl | sed 's|  |  whl/|') >"$w/SHA256" &&
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=u=rwX,go=rX \
      --format=gnu -C "$dir" -cf "$w/wheels.tar" --transform 's|^\./|whl/|' . &&
    xz -6 -T0 --block-size=64MiB -k "$w/wheels.tar" &&
    (cd "$w" && sha256sum wheels.tar wheels.tar.xz >>SHA256) &&
    (cd "$w" && split -b "$GPU_PART" -d -a 1 wheels.tar.xz part.) ||
    {
      rm -rf "$w"
      gpu_fail "wheels_pack: packing $dir failed"
      return
    }
  rm -rf "$dest" && mkdir -p "$dest"
  i=1
  for p in "$w"/part.*; do
    mkdir "$dest/$i"
    (cd "$w" && sha256sum "$(basename "$p")") | tee -a "$w/SHA256" >"$dest/$i/$(basename "$p").sha256"
    mv "$p" "$dest/$i/"
    i=$((i + 1))
  done
  cp "$w/SHA256" "$dest/SHA256"
  cp "$w/SHA256" "$dest/$((i - 1))/SHA256"
  gpu_log "$(ls "$dir"/*.whl | wc -l) wheels, tar $(du -m "$w/wheels.tar" | cut -f1) MiB," \
    "xz $(du -m "$w/wheels.tar.xz" | cut -f1) MiB in $((i - 1)) parts under $dest;" \
    "tar sha256 $(grep ' wheels.tar$' "$w/SHA256" | cut -c1-16)…"
  rm -rf "$w"
}

# devtree_make WORKTREE MAIN: MAIN/.devtree holds WORKTREE's HEAD (committed code only:
# the run names one commit, in .devtree/COMMIT); a device call carries it.
devtree_make() {
  local wt=$1 main=$2 commit
  commit=$(git -C "$wt" rev-parse HEAD) || gpu_fail "devtree_make: $wt is not a git checkout" || return
  [ -z "$(git -C "$wt" status --porcelain --untracked-files=no)" ] ||
    echo "devtree_make: $wt has uncommitted changes; .devtree holds HEAD ($commit) without them" >&2
  rm -rf "$main/.devtree" && mkdir -p "$main/.devtree" &&
    git -C "$wt" archive --format=tar HEAD -- . ':!benchmarks/results' | tar -x -C "$main/.devtree" &&
    echo "$commit" >"$main/.devtree/COMMIT" ||
    gpu_fail "devtree_make: could not write $main/.devtree"
}

# exclude_add MAIN PATH...: each PATH ignored in MAIN's checkout (its info/exclude), so it
# never travels as an untracked file (the 64 MiB limit) and only a call's carry sends it.
exclude_add() {
  local main=$1 file p
  shift
  file=$(git -C "$main" rev-parse --path-format=absolute --git-path info/exclude) ||
    gpu_fail "exclude_add: $main is not a git checkout" || return
  mkdir -p "$(dirname "$file")" && touch "$file"
  for p in "$@"; do grep -qxF "/$p/" "$file" || echo "/$p/" >>"$file"; done
  for p in "$@"; do
    git -C "$main" check-ignore -q "$p/x" || gpu_fail "exclude_add: $main/$p is not ignored" || return
  done
}

# wheels_join W: W/part.* (checked against W/part.*.sha256 and W/SHA256) joined into
# W/wheels.tar.xz, unpacked into W/whl/, the tar and every wheel checked against SHA256.
wheels_join() {
  local w=$1
  [ -f "$w/SHA256" ] || gpu_fail "wheels_join: $w/SHA256 missing (it travels with the last part)" || return
  (cd "$w" && sha256sum -c --quiet part.*.sha256) || gpu_fail "wheels_join: a part in $w is damaged" || return
  local want have
  want=$(grep -c ' part\.' "$w/SHA256")
  have=$(ls "$w"/part.? 2>/dev/null | wc -l)
  [ "$want" = "$have" ] || gpu_fail "wheels_join: $have of $want parts in $w" || return
  cat "$w"/part.? >"$w/wheels.tar.xz" && xz -dkf -T0 "$w/wheels.tar.xz" &&
    (cd "$w" && grep -E ' wheels\.tar(\.xz)?$' SHA256 | sha256sum -c --quiet) ||
    gpu_fail "wheels_join: the joined tar does not match SHA256" || return
  rm -rf "$w/whl" && tar -xf "$w/wheels.tar" -C "$w" &&
    (cd "$w" && grep ' whl/' SHA256 | sha256sum -c --quiet) ||
    gpu_fail "wheels_join: a wheel does not match SHA256" || return
  gpu_log "joined $have parts: $(ls "$w"/whl/*.whl | wc -l) wheels, every sum matches"
}

# wheels_install W SITE: W/whl's wheels into SITE (no index, no dependencies: the sets are
# complete by construction, and pins that conflict on paper do not matter there).
wheels_install() {
  local w=$1 site=$2 py
  py=$(command -v "${PY:-python3}")
  # shellcheck disable=SC2046
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" $(ls "$w"/whl/*.whl) || gpu_fail "wheels_install: pip install into $site failed"
}

# stack_python PATH SITE [VAR=VALUE | VAR+=VALUE ...]: an interpreter a stack of kind
# `existing` can name: the image's python3 with SITE in front and the variables (VAR=V:
# set unless the caller's environment has it; VAR+=V: V put in front, as for PATH).
stack_python() {
  local path=$1 site=$2 py kv
  shift 2
  py=$(command -v "${PY:-python3}")
  mkdir -p "$(dirname "$path")"
  {
    echo '#!/bin/sh'
    echo "export PYTHONPATH=$site\${PYTHONPATH:+:\$PYTHONPATH}"
    for kv in "$@"; do
      case $kv in
        *+=*) echo "export ${kv%%+=*}=${kv#*+=}\${${kv%%+=*}:+:\$${kv%%+=*}}" ;;
        *) echo "export ${kv%%=*}=\${${kv%%=*}:-${kv#*=}}" ;;
      esac
    done
    echo "exec $py \"\$@\""
  } >"$path" && chmod +x "$path"
}

# engines_python PATH SGLANG_PY VLLM_PY VLLM_SITE: the interpreter of a stack that serves
# both engines (one `existing` stack, the engine a variant's): `-m sglang...` runs SGLang's
# interpreter, `-m vllm...` vLLM's, each with the caller's PYTHONPATH dropped, so its own
# site alone is in front (as when the workflow ran with that site only); anything else (the
# stack probe) runs SGLang's with VLLM_SITE behind its site, so the manifest names both.
engines_python() {
  local path=$1 sglang=$2 vllm=$3 vsite=$4
  mkdir -p "$(dirname "$path")"
  {
    echo '#!/bin/sh'
    echo '# Written by benchmarks/gpu/lib.sh engines_python: each engine its own interpreter.'
    echo 'case "$1 $2" in'
    echo "  '-m sglang'*) unset PYTHONPATH; exec $sglang \"\$@\" ;;"
    echo "  '-m vllm'*) unset PYTHONPATH; exec $vllm \"\$@\" ;;"
    echo 'esac'
    echo "export PYTHONPATH=$vsite"
    echo "exec $sglang \"\$@\""
  } >"$path" && chmod +x "$path"
}

# results_pack RUN OUT: what a run has so far, into OUT (the device tool brings back 8 files
# of 16 MiB): OUT/results.tar.xz (results/ without request records, the manifests),
# OUT/requests.tar.xz (the request records) when under 16 MiB, OUT/parity.tar.xz if
# RUN/parity (a parity run has no results/), in parts when over 16 MiB (bring_back_parts).
results_pack() {
  local run=$1 out=$2
  mkdir -p "$out"
  if [ -d "$run/parity" ]; then
    (cd "$run" && tar -cf - parity 2>/dev/null | xz -3 -T4 >"$out/parity.tar.xz")
    bring_back_parts "$out/parity.tar.xz"
  fi
  [ -d "$run/results" ] || return 0
  (cd "$run" && tar -cf - --exclude='*.requests.jsonl' results \
    $(ls -d resources/stacks resources/models/*/manifest.json 2>/dev/null) 2>/dev/null |
    xz -3 -T4 >"$out/results.tar.xz")
  (cd "$run" && find results -name '*.requests.jsonl' -print0 | sort -z |
    tar -cf - --null -T - 2>/dev/null | xz -3 -T4 >"$out/requests.tar.xz")
  if over_back_limit "$out/requests.tar.xz"; then
    # Not split: with the results, sweep and log files a call's 8 files would not hold them.
    echo "request records: $(du -m "$out/requests.tar.xz" | cut -f1) MiB, over 16 MiB: not brought back"
    rm -f "$out/requests.tar.xz"
  fi
  sweep_pack "$run" "$out"
  return 0
}

# over_back_limit FILE: whether FILE is over the 16 MiB one file a call brings back
# (GPU_BACK_MAX bytes in the tests).
over_back_limit() {
  [ "$(stat -c %s "$1")" -gt "${GPU_BACK_MAX:-$((16 * 1024 * 1024))}" ]
}

# bring_back_parts FILE: FILE as it is when it is at most 16 MiB (the most one file a call
# brings back: over_back_limit), else FILE.part00, FILE.part01, ... of
# 15 MiB (GPU_BACK_PART) and FILE.sha256, FILE removed; here: `cat FILE.part* > FILE &&
# sha256sum -c FILE.sha256`. On the 2026-12-08 parity lease a 19.6 MB parity.tar.xz was
# not brought back (and, with no results/, not even packed) until split by hand.
bring_back_parts() {
  local file=$1
  [ -f "$file" ] || return 0
  over_back_limit "$file" || return 0
  (cd "$(dirname "$file")" && sha256sum "$(basename "$file")" >"$(basename "$file").sha256") ||
    gpu_fail "bring_back_parts: could not sum $file" || return 1
  split -b "${GPU_BACK_PART:-15M}" -d "$file" "$file.part" ||
    gpu_fail "bring_back_parts: could not split $file" || return 1
  rm -f "$file"
  echo "$(basename "$file"): over 16 MiB, brought back in $(ls "$file".part* | wc -l) parts" \
    "(cat $(basename "$file").part* > $(basename "$file"))"
}

# sweep_pack RUN OUT: OUT/sweep.tar.xz, what a later slot resumes from (every finished boot,
# request records included, and the hunt's steps: python -m servesweep.results.archive),
# when it is under 16 MiB (the most one file a call brings back).
sweep_pack() {
  local run=$1 out
  out=$(cd "$2" && pwd) || return 1
  (cd "$run" && "${PY:-python3}" -m servesweep.results.archive pack --out "$out/sweep.tar.xz") ||
    gpu_fail "sweep_pack: could not pack $run/results" || return 1
  if over_back_limit "$out/sweep.tar.xz"; then
    echo "sweep archive: $(du -m "$out/sweep.tar.xz" | cut -f1) MiB, over 16 MiB: not brought back"
    rm -f "$out/sweep.tar.xz"
  fi
  return 0
}

# sweep_resume ARCHIVE RUN: a sweep archive a call carried, unpacked into RUN (its results/),
# so that the same Snakemake target runs only the boots it lacks.
sweep_resume() {
  local archive=$1 run=$2
  [ -f "$archive" ] || gpu_fail "sweep_resume: no archive at $archive (carry it in .devtree/resume/)" ||
    return 1
  archive=$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")
  (cd "$run" && "${PY:-python3}" -m servesweep.results.archive unpack "$archive") ||
    gpu_fail "sweep_resume: could not unpack $archive" || return 1
}

# pid_alive PID: it runs (a zombie, ended but not yet reaped by its parent, does not).
pid_alive() {
  kill -0 "$1" 2>/dev/null && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]
}

# wait_pid PID DEADLINE_S: 0 once PID has ended, 1 if it still runs at the deadline (always
# inside the caller's own limit: a call that outruns its limit brings nothing back).
wait_pid() {
  local pid=$1 end=$((SECONDS + $2))
  while pid_alive "$pid"; do
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep 1
  done
  return 0
}
