#!/usr/bin/env bash
# The CLI beside etcd's own (docs/benchmarks.md, "CLI: dlock run and etcdctl lock"): the wall time
# of one `dlock run --url etcd://... NAME -- true` against one `etcdctl lock NAME true`, each a
# whole process (start, connect, lease, lock, run `true`, unlock, exit), on a private etcd-server
# started here on free loopback ports and stopped on exit. The two alternate in rounds, so load
# from other work hits both alike.
#   bench/cli_etcd.sh [BUILD_DIR] [RUNS_PER_ROUND] [ROUNDS]      (defaults: build 20 3)
set -euo pipefail
build=${1:-build}
runs=${2:-20}
rounds=${3:-3}
dlock="$build/tools/dlock/dlock"
for tool in etcd etcdctl "$dlock"; do
  command -v "$tool" >/dev/null || { echo "cli_etcd.sh: $tool not found" >&2; exit 2; }
done
work=$(mktemp -d /tmp/dlock-cli-etcd.XXXXXX)
read -r client peer < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
etcd --data-dir "$work/data" --name bench \
  --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "bench=http://127.0.0.1:$peer" >"$work/etcd.log" 2>&1 &
etcd_pid=$!
trap 'kill "$etcd_pid" 2>/dev/null || true; wait "$etcd_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
export ETCDCTL_API=3
for _ in $(seq 300); do
  etcdctl --endpoints "127.0.0.1:$client" endpoint health >/dev/null 2>&1 && break
  sleep 0.05
done
etcdctl --endpoints "127.0.0.1:$client" endpoint health >/dev/null 2>&1 ||
  { cat "$work/etcd.log" >&2; exit 1; }

# one_round TOOL: milliseconds per run of TOOL's lock + `true` + unlock, over $runs runs.
one_round() {
  local start end
  start=$(date +%s%N)
  for _ in $(seq "$runs"); do
    if [ "$1" = etcdctl ]; then
      etcdctl --endpoints "127.0.0.1:$client" lock cli-bench true >/dev/null
    else
      "$dlock" run --url "etcd://127.0.0.1:$client" cli-bench -- true >/dev/null
    fi
  done
  end=$(date +%s%N)
  echo $(((end - start) / runs / 1000)) # microseconds
}
printf '%-8s %s\n' tool "µs per lock+true+unlock, each round of $runs runs"
declare -A all
for _ in $(seq "$rounds"); do
  for tool in etcdctl dlock; do all[$tool]+="$(one_round "$tool") "; done
done
for tool in etcdctl dlock; do printf '%-8s %s\n' "$tool" "${all[$tool]}"; done
