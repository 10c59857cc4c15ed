#!/bin/bash
# The call that starts a GPU recipe on the lent H200 (run from the device tool's checkout,
# where .devtree was carried): .devtree copied to /tmp/ss (the tool replaces its own
# checkout every call), benchmarks/gpu/run.sh started there in its own session (it outlives
# this call, until the machine goes back), then the wait of wait.sh for WAIT_S seconds.
#
#   bash .devtree/benchmarks/gpu/start.sh ENGINE WAIT_S STEP...   ENGINE: sglang | vllm | engines
#
# The job's pid is in /tmp/ss.pid, its output in /tmp/sout (run.log, gpu.txt).
set -u -o pipefail
ENGINE=${1:?usage: start.sh ENGINE WAIT_S STEP...}
WAIT_S=${2:?usage: start.sh ENGINE WAIT_S STEP...}
shift 2
if [ -f /tmp/ss.pid ] && kill -0 "$(cat /tmp/ss.pid)" 2>/dev/null; then
  echo "a job is already running (pid $(cat /tmp/ss.pid)): not starting another"
  exit 1
fi
HERE=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf /tmp/ss && cp -a "$HERE" /tmp/ss || exit 1
cd /tmp/ss || exit 1
setsid nohup bash benchmarks/gpu/run.sh "$ENGINE" /tmp/sout "$@" >/tmp/sjob.out 2>&1 </dev/null &
echo $! >/tmp/ss.pid
echo "started pid $(cat /tmp/ss.pid): run.sh $ENGINE /tmp/sout $*"
exec bash benchmarks/gpu/wait.sh "$ENGINE" "$WAIT_S"
