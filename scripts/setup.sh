#!/usr/bin/env bash
# Installs what dlock needs to build and test (Debian 12 packages) and builds one tree.
#
#   scripts/setup.sh                      packages + plain build in build/   (RelWithDebInfo, Ninja)
#   scripts/setup.sh --sanitize address   packages + ASan/UBSan build in build-asan/
#   scripts/setup.sh --sanitize thread    packages + TSan build in build-tsan/
#   scripts/setup.sh --deps-only          packages only
#   --configure-only (with or without --sanitize): packages + configure, no build (scripts/test.sh
#   then builds only the targets a stage runs)
#   --target T (repeatable): the packages a build needs (not the test stages' tools) + configure,
#   then build only target T (scripts/demo.sh: the CLI, dlock_cli, and its libraries); without
#   --target every package is installed and everything is built
#   -DNAME=VALUE (repeatable): passed to cmake when configuring (scripts/test.sh:
#   -DDLOCK_ETCD_STUBS_FROM=build for the sanitizer trees, cmake/etcd_proto.cmake)
#
# The sanitizer trees compile with -O1 -g1 (line tables: reports still name file:line) instead of
# RelWithDebInfo's -O2 -g: about 40% less compile time, and -O1 is what the sanitizers' authors
# recommend.
#
# Idempotent: apt runs only when a package is missing (then `apt-get update` once), and build
# trees are reused (incremental). Needs root or sudo only when something must be installed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# What configuring a tree and building any of its targets needs, plus redis-server for the demo:
# all that --target installs (scripts/demo.sh). Optional libraries (libbenchmark-dev,
# prometheus-cpp-dev) are found when a later full setup has installed them.
BUILD_PACKAGES=(build-essential cmake ninja-build pkg-config redis-server libhiredis-dev googletest
                libgtest-dev libgmock-dev libfmt-dev nlohmann-json3-dev libcli11-dev
                libzookeeper-mt-dev libssl-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev)
# Everything the build and the test stages use (scripts/test.sh).
PACKAGES=("${BUILD_PACKAGES[@]}" redis-tools libbenchmark-dev gnuplot-nox clang-format clang
          clang-tidy zookeeper etcd-server etcd-client iproute2 iptables spin groff-base zsh prometheus-cpp-dev dpkg-dev
          file tmux lintian openssl)

sanitize=""
build=1
targets=()
cmake_args=()
usage() { sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --sanitize) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; sanitize=$2; shift 2 ;;
    --sanitize=*) sanitize=${1#--sanitize=}; shift ;;
    --deps-only) build=0; shift ;;
    --configure-only) build=configure; shift ;;
    --target) [[ $# -ge 2 && -n $2 ]] || { usage >&2; exit 2; }; targets+=("$2"); shift 2 ;;
    --target=?*) targets+=("${1#--target=}"); shift ;;
    -D?*) cmake_args+=("$1"); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$sanitize" in
  "") dir="build" ;;
  address) dir="build-asan" ;;
  thread) dir="build-tsan" ;;
  *) echo "setup.sh: --sanitize takes 'address' or 'thread', not '$sanitize'" >&2; exit 2 ;;
esac

say() { printf '[setup] %s\n' "$*"; }

# --- packages -------------------------------------------------------------------------------
wanted=("${PACKAGES[@]}")
((${#targets[@]} == 0)) || wanted=("${BUILD_PACKAGES[@]}")
missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  say "packages: all ${#wanted[@]} installed"
else
  say "packages: installing ${missing[*]}"
  sudo=()
  if [[ $(id -u) != 0 ]]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 -qq update
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 -qq -y \
    install --no-install-recommends "${missing[@]}" >/dev/null
  say "packages: done"
fi
if [[ $build == 0 ]]; then exit 0; fi

# etcd's .proto files for the etcd backend's generated stubs (docs/etcd.md): downloaded and
# unpacked into the build tree once (configuring would do the same when they are missing).
if ! bash "$ROOT/scripts/fetch-etcd-proto.sh" "$ROOT/$dir/etcd-proto"; then
  say "etcd .proto files: FAILED (configure with -DDLOCK_WITH_ETCD=OFF to build without etcd)" >&2
  exit 1
fi

# --- configure + build ------------------------------------------------------------------------
jobs=$(nproc)
mkdir -p "$ROOT/$dir"
log="$ROOT/$dir/setup-configure.log"
generator=()
[[ -f "$ROOT/$dir/CMakeCache.txt" ]] || generator=(-G Ninja)   # keep an existing tree's generator
say "configure $dir/ (RelWithDebInfo${sanitize:+, DLOCK_SANITIZE=$sanitize})"
flags=()
if [[ -n $sanitize ]]; then
  flags=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
fi
if ! cmake -S "$ROOT" -B "$ROOT/$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
       "-DDLOCK_SANITIZE=$sanitize" -DDLOCK_WERROR=ON "${flags[@]}" "${cmake_args[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  say "configure $dir/ FAILED" >&2
  exit 1
fi
if [[ $build == configure ]]; then exit 0; fi
start=$SECONDS
say "build $dir/ with $jobs jobs${targets[*]:+ (only ${targets[*]})}"
if [[ -f "$ROOT/$dir/build.ninja" ]]; then
  ninja -C "$ROOT/$dir" -j "$jobs" --quiet "${targets[@]}"
else
  target_args=()
  ((${#targets[@]} == 0)) || target_args=(--target "${targets[@]}")
  cmake --build "$ROOT/$dir" -j "$jobs" "${target_args[@]}"
fi
say "build $dir/ done in $((SECONDS - start)) s"
