#!/usr/bin/env bash
# scripts/demo.sh builds only what the demo runs: the CLI (target dlock_cli) and the libraries it
# links, never the tests and benchmarks that `scripts/setup.sh` builds for scripts/test.sh.
#
#   tests/scripts/demo_script_test.sh SOURCE_DIR
#
# Runs SOURCE_DIR's scripts/demo.sh (with its scripts/setup.sh) in an empty copy of the tree, as
# on a fresh clone, with dpkg-query, apt-get, sudo, cmake and ninja replaced by stubs that record
# their arguments: on a machine without any package, then with all installed, then again with
# the CLI built (demo.sh's incremental path). Checks that the first run installs only what the
# demo needs (not the test stages' tools), and that every run builds exactly the target dlock_cli
# and then runs `dlock demo` with the demo's arguments.
# No network, no compiler; exit status 0 passed, 1 failed, 2 bad arguments.
set -euo pipefail

if (($# != 1)) || [[ ! -f $1/scripts/demo.sh ]]; then echo "usage: $0 SOURCE_DIR" >&2; exit 2; fi
src=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { printf 'demo_script_test: FAIL: %s\n' "$*" >&2; exit 1; }

mkdir -p "$tmp/clone/scripts" "$tmp/bin"
cp "$src/scripts/demo.sh" "$src/scripts/setup.sh" "$src/scripts/fetch-etcd-proto.sh" "$tmp/clone/scripts/"
export DEMO_TEST_LOG=$tmp/calls.log  # the stubs append their calls here
log=$DEMO_TEST_LOG

# Packages: none is installed while $DEMO_TEST_FRESH is 1 (a fresh machine), every one after
# that; apt-get records what it was asked to install.
cat >"$tmp/bin/dpkg-query" <<'STUB'
#!/usr/bin/env bash
[[ $DEMO_TEST_FRESH == 1 ]] || printf 'ii '
STUB
cat >"$tmp/bin/apt-get" <<'STUB'
#!/usr/bin/env bash
echo "apt-get $*" >>"$DEMO_TEST_LOG"
STUB
printf '#!/usr/bin/env bash\nexec "$@"\n' >"$tmp/bin/sudo"
# dpkg: unpacks nothing (scripts/fetch-etcd-proto.sh's `dpkg -x` of the .debs `apt-get download`
# fetched for etcd's .proto files, which a fresh clone does on every machine).
cat >"$tmp/bin/dpkg" <<'STUB'
#!/usr/bin/env bash
echo "dpkg $*" >>"$DEMO_TEST_LOG"
STUB
# cmake: a configure leaves a Ninja tree behind; a --build is recorded like ninja.
cat >"$tmp/bin/cmake" <<'STUB'
#!/usr/bin/env bash
echo "cmake $*" >>"$DEMO_TEST_LOG"
while (($#)); do
  if [[ $1 == -B ]]; then mkdir -p "$2"; touch "$2/CMakeCache.txt" "$2/build.ninja"; fi
  shift
done
STUB
# ninja: records the targets it was asked for (none = everything) and leaves a dlock that prints
# how it was called.
cat >"$tmp/bin/ninja" <<'STUB'
#!/usr/bin/env bash
dir=.
targets=()
while (($#)); do
  case $1 in
    -C) dir=$2; shift 2 ;;
    -j) shift 2 ;;
    -*) shift ;;
    *) targets+=("$1"); shift ;;
  esac
done
echo "ninja targets: ${targets[*]:-(everything)}" >>"$DEMO_TEST_LOG"
mkdir -p "$dir/tools/dlock"
printf '#!/usr/bin/env bash\necho "dlock $*"\n' >"$dir/tools/dlock/dlock"
chmod +x "$dir/tools/dlock/dlock"
STUB
printf '#!/usr/bin/env bash\nexit 0\n' >"$tmp/bin/redis-server"
chmod +x "$tmp/bin/"*

# run_demo WHAT FRESH: runs demo.sh with the stubs first on PATH, on a machine without any
# package (FRESH=1) or with all; checks what it installed, built and ran.
run_demo() {
  local what=$1 out built installed p
  : >"$log"
  out=$(DEMO_TEST_FRESH=$2 PATH=$tmp/bin:$PATH bash "$tmp/clone/scripts/demo.sh" --workers 3 \
    --stock 7 2>&1) || fail "$what: scripts/demo.sh exited $?: $out"
  installed=" $(sed -n 's/^apt-get .* install --no-install-recommends //p' "$log" | tr '\n' ' ')"
  if (($2)); then
    # What the demo needs: a compiler, CMake, the libraries the CLI links, redis-server; not the
    # tools only the test stages use (a JDK for ZooKeeper, clang, spin, lintian...).
    for p in build-essential cmake libhiredis-dev libcli11-dev redis-server; do
      [[ $installed == *" $p "* ]] || fail "$what: scripts/demo.sh did not install $p:$installed"
    done
    for p in zookeeper clang clang-tidy clang-format spin lintian gnuplot-nox tmux zsh; do
      [[ $installed != *" $p "* ]] ||
        fail "$what: scripts/demo.sh installed $p, which only the tests use:$installed"
    done
  else
    ! grep -q '^apt-get .*install' "$log" ||
      fail "$what: apt-get installed packages although every package is installed"
  fi
  built=$(sed -n 's/^ninja targets: //p' "$log")
  [[ $built == dlock_cli ]] ||
    fail "$what: scripts/demo.sh built '${built//$'\n'/' + '}', expected only dlock_cli (the CLI)"
  [[ $out == *"dlock demo --workers 3 --stock 7"* ]] ||
    fail "$what: scripts/demo.sh did not run 'dlock demo --workers 3 --stock 7': $out"
  [[ -n ${installed// /} ]] || installed=" nothing"
  echo "demo_script_test: $what: installed$installed; built only dlock_cli, then ran dlock demo"
}

run_demo "fresh machine, fresh clone" 1
rm -rf "$tmp/clone/build"
run_demo "packages installed, fresh clone" 0
run_demo "CLI already built" 0
echo "demo_script_test: PASS"
