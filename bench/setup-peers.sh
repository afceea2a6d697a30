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
# Only what is missing: a node that ships its own npm (e.g. a nodejs build that bundles it)
# conflicts with Debian's npm package, so npm is asked for only when no npm command exists.
pkgs=()
for p in python3-redis python3-kazoo python3-etcd3; do
  dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || pkgs+=("$p")
done
command -v node >/dev/null || pkgs+=(nodejs)
command -v npm >/dev/null || pkgs+=(npm)
if ((${#pkgs[@]})); then
  $sudo apt-get install -y "${pkgs[@]}"
fi

if [ -f "$peers/node/package-lock.json" ]; then
  mkdir -p "$node_dir"
  cp "$peers/node/package.json" "$peers/node/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund)
  echo "node modules in $modules"
fi

# The C++ peer, redis-plus-plus: not packaged by Debian, and its source never enters this
# repository. Build and install it yourself from its public repository (CMake,
# -DREDIS_PLUS_PLUS_BUILD_SHARED=OFF, against Debian's libhiredis-dev) and pass its prefix in
# RPP_PREFIX: DIR/rpp's driver is then compiled into the cache directory, where bench/run finds it
# ($DLOCK_BENCH_RPP_DRIVER overrides the place).
rpp_driver=${DLOCK_BENCH_RPP_DRIVER:-$HOME/.cache/dlock-bench-peers/rpp/rpp_driver}
if [ -x "$peers/rpp/build_driver.sh" ]; then
  if [ -n "${RPP_PREFIX:-}" ]; then
    PEERS_BUILD=$(dirname "$rpp_driver") RPP_PREFIX=$RPP_PREFIX "$peers/rpp/build_driver.sh"
    [ "$(dirname "$rpp_driver")/rpp_driver" = "$rpp_driver" ] || cp "$(dirname "$rpp_driver")/rpp_driver" "$rpp_driver"
  else
    echo "redis-plus-plus peer not built: set RPP_PREFIX to an installed redis-plus-plus" >&2
  fi
fi
