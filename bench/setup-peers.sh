#!/usr/bin/env bash
# Installs what the peer workers of `bench/run --peers DIR` need (docs/benchmarks.md, "Side by
# side"): Debian's python3-redis, python3-kazoo and python3-etcd3, node + npm, and the npm modules
# of DIR/node (npm ci from its package-lock.json) into a cache directory outside the work tree
# ($DLOCK_BENCH_PEERS_NODE_MODULES's parent; default ~/.cache/dlock-bench-peers/node), which
# bench/run puts on NODE_PATH. Not part of CI's test path: benchmarks only.
#   bench/setup-peers.sh DIR        (or DLOCK_BENCH_PEERS=DIR bench/setup-peers.sh)
set -euo pipefail
peers=${1:-${DLOCK_BENCH_PEERS:-}}
[ -n "$peers" ] && [ -d "$peers" ] || { echo "usage: bench/setup-peers.sh PEERS_DIR" >&2; exit 2; }
modules=${DLOCK_BENCH_PEERS_NODE_MODULES:-$HOME/.cache/dlock-bench-peers/node/node_modules}
node_dir=$(dirname "$modules")

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo apt-get install -y python3-redis python3-kazoo python3-etcd3 nodejs npm

if [ -f "$peers/node/package-lock.json" ]; then
  mkdir -p "$node_dir"
  cp "$peers/node/package.json" "$peers/node/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund)
  echo "node modules in $modules"
fi
