#!/usr/bin/env bash
# dlock installed like a library, tested from outside the tree (docs/install.md):
#
#   tests/consumer/run.sh BUILD_TREE [STATIC_TREE]
#
# BUILD_TREE is a fully built tree configured with -DBUILD_SHARED_LIBS=ON (the packages carry
# shared libraries). The script
#   1. installs it to a temporary prefix (cmake --install) and checks the layout;
#   2. builds two programs outside the tree against that prefix, one with
#      find_package(dlock CONFIG REQUIRED COMPONENTS redis etcd) (tests/consumer/cmake), one with
#      a plain compiler line from `pkg-config --cflags --libs dlock-redis dlock-etcd`
#      (tests/consumer/pkgconfig), and runs both against a private redis-server and a private
#      etcd member on free 127.0.0.1 ports: each locks and unlocks a dlock::mutex on each and
#      fails unless it got a fencing token > 0 from both;
#   3. with STATIC_TREE (a fully built tree with BUILD_SHARED_LIBS=OFF): the same for its static
#      libraries;
#   4. builds the .debs with `cpack -G DEB` in BUILD_TREE, checks their contents (libraries,
#      CMake package and pkg-config files in /usr/lib/<multiarch triplet>; a copyright file and a
#      changelog in every package) and runs lintian over them: any error or warning fails;
#   5. as root: installs the .debs with apt-get, runs `dlock --version` and both programs against
#      the system installation (pkg-config's libdir checked), and purges the packages again
#      (apt-get purge), leaving the machine as it was. Not root: this part is skipped with a
#      message (exit status 0 if everything else passed).
# Its files go to BUILD_TREE/consumer-test/ (emptied first). Exit status: 0 passed (or skipped as
# said), 1 a check failed, 2 bad arguments.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { sed -n '4p' "${BASH_SOURCE[0]}" | sed 's/^# *//'; }
if (($# < 1 || $# > 2)); then
  echo "run.sh: expected BUILD_TREE [STATIC_TREE]" >&2
  usage >&2
  exit 2
fi

say() { printf '[consumer] %s\n' "$*"; }
fail() {
  printf '[consumer] FAIL: %s\n' "$*" >&2
  exit 1
}

# cache_value TREE NAME: the value of NAME in TREE's CMakeCache.txt (empty when unset).
cache_value() { sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" | head -n1; }

# check_tree TREE WANT_SHARED(ON|OFF): a configured, built tree of the wanted kind.
check_tree() {
  local tree=$1 want=$2 shared
  [[ -f $tree/CMakeCache.txt ]] || { echo "run.sh: $tree is not a configured build tree" >&2; exit 2; }
  shared=$(cache_value "$tree" BUILD_SHARED_LIBS)
  case "${shared^^}" in ON | 1 | TRUE | YES) shared=ON ;; *) shared=OFF ;; esac
  if [[ $shared != "$want" ]]; then
    if [[ $want == ON ]]; then
      echo "run.sh: $tree builds static libraries; BUILD_TREE must be configured with" \
        "-DBUILD_SHARED_LIBS=ON (the packages carry shared libraries)" >&2
    else
      echo "run.sh: $tree builds shared libraries; STATIC_TREE must have BUILD_SHARED_LIBS=OFF" >&2
    fi
    exit 2
  fi
  [[ -x $tree/tools/dlock/dlock ]] || { echo "run.sh: $tree is not built (no tools/dlock/dlock)" >&2; exit 2; }
}

tree=$(cd "$1" && pwd)
check_tree "$tree" ON
static_tree=""
if (($# == 2)); then
  static_tree=$(cd "$2" && pwd)
  check_tree "$static_tree" OFF
fi
for tool in cmake make pkg-config redis-server redis-cli etcd ldd; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/setup.sh installs it)"
done

work=$tree/consumer-test
rm -rf "$work"
mkdir -p "$work"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
cxx=(g++)
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cxx=(ccache g++)
fi

redis_pid=""
etcd_pid=""
lint_pid=""
installed_debs=0
packages=(dlock-tools libdlock-dev libdlock0)
apt=(apt-get -o DPkg::Lock::Timeout=300 -qq -y)
cleanup() {
  local rc=$?
  if [[ -n $redis_pid ]]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  if [[ -n $etcd_pid ]]; then
    kill "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
  fi
  if [[ -n $lint_pid ]]; then
    kill "$lint_pid" 2>/dev/null || true
    wait "$lint_pid" 2>/dev/null || true
  fi
  if ((installed_debs)); then
    say "purging the packages after a failure"
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" purge "${packages[@]}" >/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# start_redis: a private redis-server on a free 127.0.0.1 port (another free one if the port was
# taken meanwhile); sets redis_url. Stopped by cleanup.
start_redis() {
  local attempt port deadline
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
      --logfile "$work/redis-$port.log" &
    redis_pid=$!
    deadline=$((SECONDS + 10))
    while ((SECONDS < deadline)); do
      if [[ $(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null) == PONG ]]; then
        redis_url="redis://127.0.0.1:$port"
        say "redis-server $redis_url (pid $redis_pid)"
        return 0
      fi
      kill -0 "$redis_pid" 2>/dev/null || break  # exited: the port was taken
      sleep 0.05
    done
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
    say "redis-server did not start on port $port (attempt $attempt)"
  done
  fail "could not start a redis-server"
}

# start_etcd: a private single-member etcd on free 127.0.0.1 ports (others if one was taken
# meanwhile); sets etcd_url. Stopped by cleanup.
start_etcd() {
  local attempt port peer deadline
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    peer=$((port + 1))
    rm -rf "$work/etcd-data"
    etcd --name consumer --data-dir "$work/etcd-data" \
      --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "consumer=http://127.0.0.1:$peer" --log-level warn \
      >"$work/etcd-$port.log" 2>&1 &
    etcd_pid=$!
    deadline=$((SECONDS + 15))
    while ((SECONDS < deadline)); do
      if ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$port" --dial-timeout 1s endpoint health \
        >/dev/null 2>&1; then
        etcd_url="etcd://127.0.0.1:$port"
        say "etcd $etcd_url (pid $etcd_pid)"
        return 0
      fi
      kill -0 "$etcd_pid" 2>/dev/null || break  # exited: a port was taken
      sleep 0.1
    done
    kill "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
    etcd_pid=""
    say "etcd did not start on port $port (attempt $attempt)"
  done
  fail "could not start an etcd member"
}

# build_cmake_consumer NAME EXPECTED_DLOCK_DIR [CMAKE_ARGS...]: builds tests/consumer/cmake in
# $work/NAME and checks that it found dlock's package in EXPECTED_DLOCK_DIR.
build_cmake_consumer() {
  local name=$1 expected=$2 found
  shift 2
  if ! cmake -S "$HERE/cmake" -B "$work/$name" "${generator[@]}" "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=Release "$@" >"$work/$name.log" 2>&1 ||
    ! cmake --build "$work/$name" >>"$work/$name.log" 2>&1; then
    cat "$work/$name.log" >&2
    fail "$name: the find_package(dlock) consumer did not build"
  fi
  found=$(cache_value "$work/$name" dlock_DIR)
  [[ $found -ef $expected ]] || fail "$name: found dlock in '$found', expected '$expected'"
  say "$name: find_package(dlock CONFIG REQUIRED COMPONENTS redis etcd) -> $found"
}

# build_pc_consumer NAME: builds tests/consumer/pkgconfig to $work/NAME/lock_once with the
# PKG_CONFIG_PATH of the caller.
build_pc_consumer() {
  local name=$1
  mkdir -p "$work/$name"
  if ! make -s -C "$HERE/pkgconfig" "CXX=${cxx[*]}" "OUT=$work/$name/lock_once" \
    >"$work/$name.log" 2>&1; then
    cat "$work/$name.log" >&2
    fail "$name: the pkg-config consumer did not build"
  fi
  say "$name: built with \`pkg-config --cflags --libs dlock-redis dlock-etcd\`: $(pkg-config --libs dlock-redis dlock-etcd)"
}

# run_consumer NAME PROGRAM: runs it against the private redis-server and etcd member.
run_consumer() {
  local out
  out=$("$2" "$redis_url" "$etcd_url" 2>&1) || fail "$1: $out"
  say "$1: $out"
}

# links_dlock_from PROGRAM DIR: PROGRAM loads libdlock_redis and libdlock_etcd from DIR ("" = not
# at all).
links_dlock_from() {
  local line path lib
  line=$(ldd "$1" | grep 'libdlock' || true)
  if [[ -z $2 ]]; then
    [[ -z $line ]] || fail "$1 loads a shared dlock library although linked statically: $line"
    return
  fi
  for lib in libdlock_redis libdlock_etcd; do
    path=$(ldd "$1" | sed -n "s/^[[:space:]]*$lib\\.so[^ ]* => \\([^ ]*\\) .*/\\1/p")
    [[ -n $path && $(dirname "$(readlink -f "$path")") -ef $2 ]] ||
      fail "$1 does not load $lib from $2: ${line:-(no libdlock)}"
  done
}

# check_layout PREFIX LIBDIR SHARED(1|0): the files an installation must have (LIBDIR relative
# to PREFIX), and nothing of the tests, benchmarks or examples.
check_layout() {
  local prefix=$1 libdir=$2 shared=$3 f extra
  for f in bin/dlock share/man/man1/dlock.1.gz share/bash-completion/completions/dlock \
    share/zsh/vendor-completions/_dlock include/dlock/dlock.hpp include/dlock/config.hpp \
    include/dlock/version.hpp include/dlock/redis/client.hpp include/dlock/zk/client.hpp \
    include/dlock/connect.hpp "$libdir/cmake/dlock/dlockConfig.cmake" \
    "$libdir/cmake/dlock/dlockConfigVersion.cmake" "$libdir/pkgconfig/dlock.pc" \
    "$libdir/pkgconfig/dlock-core.pc" "$libdir/pkgconfig/dlock-redis.pc" \
    "$libdir/pkgconfig/dlock-zookeeper.pc" include/dlock/etcd/client.hpp \
    "$libdir/pkgconfig/dlock-etcd.pc"; do
    [[ -e $prefix/$f ]] || fail "not installed: $f"
  done
  if ((shared)); then
    for f in libdlock_core libdlock_redis libdlock_zk libdlock_etcd libdlock; do
      [[ -f $(readlink -f "$prefix/$libdir/$f.so.0") ]] || fail "not installed: $libdir/$f.so.0"
      [[ -L $prefix/$libdir/$f.so ]] || fail "not installed: $libdir/$f.so (link)"
    done
  else
    for f in libdlock_core libdlock_redis libdlock_zk libdlock_etcd libdlock; do
      [[ -f $prefix/$libdir/$f.a ]] || fail "not installed: $libdir/$f.a"
    done
  fi
  extra=$(find "$prefix/bin" -mindepth 1 ! -name dlock)
  [[ -z $extra ]] || fail "installed besides bin/dlock: $extra"
  extra=$(cd "$prefix" && find . \( -path '*test*' -o -path '*bench*' -o -path '*example*' \) -print)
  [[ -z $extra ]] || fail "tests, benchmarks or examples installed: $extra"
  bash -n "$prefix/share/bash-completion/completions/dlock" || fail "the bash completion does not parse"
}

# check_debs: what Debian's policy asks of the .debs' contents: the shared libraries, their
# links, the CMake package and the pkg-config files in the multiarch directory /usr/lib/<triplet>
# (none directly in /usr/lib), and in every package /usr/share/doc/<package>/copyright and
# changelog.gz.
check_debs() {
  local p contents f
  contents=$(dpkg-deb -c "$debs/libdlock0_"*.deb)
  for f in libdlock_core libdlock_redis libdlock_zk libdlock_etcd libdlock; do
    grep -q " ./usr/lib/$multiarch/$f\.so\.0" <<<"$contents" ||
      fail "libdlock0 lacks /usr/lib/$multiarch/$f.so.0: $(grep -o ' ./usr/lib/[^ ]*' <<<"$contents" | tr '\n' ' ')"
  done
  contents=$(dpkg-deb -c "$debs/libdlock-dev_"*.deb)
  for f in libdlock_redis.so cmake/dlock/dlockConfig.cmake pkgconfig/dlock-redis.pc; do
    grep -q " ./usr/lib/$multiarch/$f\b" <<<"$contents" || fail "libdlock-dev lacks /usr/lib/$multiarch/$f"
  done
  for p in "${packages[@]}"; do
    contents=$(dpkg-deb -c "$debs/${p}_"*.deb)
    ! grep -E -q ' ./usr/lib/[^/ ]+$| ./usr/lib/(cmake|pkgconfig)/' <<<"$contents" ||
      fail "$p installs to /usr/lib instead of /usr/lib/$multiarch: $(grep -E -o ' ./usr/lib/[^/ ]+$| ./usr/lib/(cmake|pkgconfig)/[^ ]*' <<<"$contents" | tr '\n' ' ')"
    for f in copyright changelog.gz; do
      grep -q " ./usr/share/doc/$p/$f\$" <<<"$contents" || fail "$p lacks /usr/share/doc/$p/$f"
    done
  done
  say "deb: libraries, CMake package and pkg-config files in /usr/lib/$multiarch; copyright and changelog.gz in every package"
}

# lint_start / lint_finish: lintian over the .debs, in the background meanwhile (it takes about
# 10 s); any error or warning fails (information tags pass). Overrides, each with its reason, are
# in cmake/debian/ (docs/install.md).
lint_start() {
  lintian --fail-on error,warning "$debs"/*.deb >"$work/lintian.log" 2>&1 &
  lint_pid=$!
}
lint_finish() {
  local out rc=0
  wait "$lint_pid" || rc=$?
  lint_pid=""
  out=$(grep -v '^running with root privileges is not recommended' "$work/lintian.log" || true)
  [[ -z $out ]] || printf '%s\n' "$out" | sed 's/^/[consumer] lintian: /'
  ((rc == 0)) || fail "lintian found errors or warnings in the .debs (above; exit status $rc)"
  say "deb: lintian $(lintian --print-version): no errors or warnings"
}

t_start=$SECONDS
expected_version=$("$tree/tools/dlock/dlock" --version)
say "build tree: $tree ($expected_version)"
start_redis
start_etcd

# --- 1, 2: the shared build installed to a prefix ------------------------------------------------
prefix=$work/prefix
cmake --install "$tree" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log" >&2; fail "cmake --install"; }
libdir=$prefix/$(cache_value "$tree" CMAKE_INSTALL_LIBDIR)
check_layout "$prefix" "$(cache_value "$tree" CMAKE_INSTALL_LIBDIR)" 1
say "prefix: installed and laid out as documented: $prefix"
got=$("$prefix/bin/dlock" --version) || fail "the installed dlock does not run: $got"
[[ $got == "$expected_version" ]] || fail "installed dlock --version: '$got', expected '$expected_version'"
say "prefix: $prefix/bin/dlock --version: $got"

build_cmake_consumer cmake-prefix "$libdir/cmake/dlock" "-DCMAKE_PREFIX_PATH=$prefix"
links_dlock_from "$work/cmake-prefix/lock_once" "$libdir"
run_consumer cmake-prefix "$work/cmake-prefix/lock_once"

PKG_CONFIG_PATH=$libdir/pkgconfig build_pc_consumer pc-prefix
LD_LIBRARY_PATH=$libdir links_dlock_from "$work/pc-prefix/lock_once" "$libdir"
LD_LIBRARY_PATH=$libdir run_consumer pc-prefix "$work/pc-prefix/lock_once"

# A component dlock does not have fails a REQUIRED find_package with a message naming it.
if cmake -S "$HERE/cmake" -B "$work/cmake-consul" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
  -DDLOCK_CONSUMER_COMPONENTS="redis;consul" >"$work/cmake-consul.log" 2>&1; then
  fail "find_package(dlock REQUIRED COMPONENTS redis consul) succeeded"
fi
grep -q "dlock: unknown component 'consul'" "$work/cmake-consul.log" ||
  { cat "$work/cmake-consul.log" >&2; fail "find_package(... consul) failed without naming the component"; }
say "prefix: find_package(dlock REQUIRED COMPONENTS redis consul) fails, naming consul"

# --- 3: a static build --------------------------------------------------------------------------
if [[ -n $static_tree ]]; then
  sprefix=$work/static-prefix
  cmake --install "$static_tree" --prefix "$sprefix" >"$work/static-install.log" ||
    { cat "$work/static-install.log" >&2; fail "cmake --install (static)"; }
  slibdir=$sprefix/$(cache_value "$static_tree" CMAKE_INSTALL_LIBDIR)
  check_layout "$sprefix" "$(cache_value "$static_tree" CMAKE_INSTALL_LIBDIR)" 0
  say "static: installed and laid out as documented: $sprefix"
  build_cmake_consumer cmake-static "$slibdir/cmake/dlock" "-DCMAKE_PREFIX_PATH=$sprefix"
  links_dlock_from "$work/cmake-static/lock_once" ""
  run_consumer cmake-static "$work/cmake-static/lock_once"
  PKG_CONFIG_PATH=$slibdir/pkgconfig build_pc_consumer pc-static
  links_dlock_from "$work/pc-static/lock_once" ""
  run_consumer pc-static "$work/pc-static/lock_once"
else
  say "static: skipped (no STATIC_TREE given)"
fi

# --- 4: the Debian packages: built, checked (contents, lintian), as root installed ----------------
for tool in cpack dpkg-deb dpkg-architecture lintian; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/setup.sh installs it)"
done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
debs=$work/debs
mkdir -p "$debs"
(cd "$tree" && cpack -G DEB -B "$debs" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }
rm -rf "$debs/_CPack_Packages"
for p in "${packages[@]}"; do
  ls "$debs/${p}_"*.deb >/dev/null 2>&1 || fail "cpack made no ${p}_*.deb: $(ls "$debs")"
  say "deb: $(basename "$debs/${p}_"*.deb): Depends: $(dpkg-deb -f "$debs/${p}_"*.deb Depends)"
done
lint_start
check_debs
if [[ $(id -u) != 0 ]]; then
  lint_finish
  say "SKIPPED installing the .debs: apt-get needs root (CI runs as root)"
  say "PASS (without installing the .debs) in $((SECONDS - t_start)) s"
  exit 0
fi
for p in "${packages[@]}"; do
  if dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^.i'; then
    fail "$p is installed on this machine already; not replacing it (apt-get purge ${packages[*]})"
  fi
done
installed_debs=1
DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "$debs"/*.deb >"$work/apt-install.log" 2>&1 ||
  { cat "$work/apt-install.log" >&2; fail "apt-get install ./*.deb"; }
say "deb: installed ${packages[*]}"
got=$(/usr/bin/dlock --version) || fail "/usr/bin/dlock does not run: $got"
[[ $got == "$expected_version" ]] || fail "/usr/bin/dlock --version: '$got', expected '$expected_version'"
say "deb: /usr/bin/dlock --version: $got"
for f in /usr/share/man/man1/dlock.1.gz /usr/share/bash-completion/completions/dlock \
  /usr/share/zsh/vendor-completions/_dlock; do
  [[ -f $f ]] || fail "dlock-tools lacks $f"
done
sys_libdir=/usr/$(cache_value "$tree" CMAKE_INSTALL_LIBDIR)
[[ $sys_libdir == "/usr/lib/$multiarch" ]] || fail "the packaged tree's libdir is $sys_libdir, not /usr/lib/$multiarch"
got=$(pkg-config --variable=libdir dlock-redis) || fail "pkg-config does not find dlock-redis"
[[ $(readlink -f "$got") == "$sys_libdir" ]] || fail "dlock-redis.pc: libdir=$got, expected $sys_libdir"
say "deb: dlock-redis.pc: libdir=$got (= $sys_libdir)"
build_cmake_consumer cmake-system "$sys_libdir/cmake/dlock"
links_dlock_from "$work/cmake-system/lock_once" "$sys_libdir"
run_consumer cmake-system "$work/cmake-system/lock_once"
build_pc_consumer pc-system
links_dlock_from "$work/pc-system/lock_once" "$sys_libdir"
run_consumer pc-system "$work/pc-system/lock_once"

DEBIAN_FRONTEND=noninteractive "${apt[@]}" purge "${packages[@]}" >"$work/apt-purge.log" 2>&1 ||
  { cat "$work/apt-purge.log" >&2; fail "apt-get purge ${packages[*]}"; }
installed_debs=0
# Purged, not just removed: libdlock0's ldconfig postrm would leave it in state "rc".
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [[ -z $status || $status == u* || $status == p* ]] ||
    fail "$p is still known to dpkg after apt-get purge: $status"
done
[[ ! -e /usr/bin/dlock && ! -e $sys_libdir/cmake/dlock ]] || fail "files left after apt-get purge"
say "deb: purged ${packages[*]} again"
lint_finish
say "PASS in $((SECONDS - t_start)) s"
