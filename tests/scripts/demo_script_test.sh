#!/usr/bin/env bash
# scripts/demo.sh builds only what the demo runs: the CLI (target dlock_cli) and the libraries it
# links, never the tests and benchmarks that `scripts/setup.sh` builds for scripts/test.sh.
#
#   tests/scripts/demo_script_test.sh SOURCE_DIR
#
# Runs SOURCE_DIR's scripts/demo.sh (with its scripts/setup.sh) in an empty copy of the tree, as
# on a fresh clone, with dpkg-query, apt-get, cmake and ninja replaced by stubs that record their
# arguments, then again with the CLI built (demo.sh's incremental path). Checks that both runs
# build exactly the target dlock_cli and then run `dlock demo` with the demo's arguments.
# No network, no compiler; exit status 0 passed, 1 failed, 2 bad arguments.
set -euo pipefail

if (($# != 1)) || [[ ! -f $1/scripts/demo.sh ]]; then echo "usage: $0 SOURCE_DIR" >&2; exit 2; fi
src=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { printf 'demo_script_test: FAIL: %s\n' "$*" >&2; exit 1; }

mkdir -p "$tmp/clone/scripts" "$tmp/bin"
cp "$src/scripts/demo.sh" "$src/scripts/setup.sh" "$tmp/clone/scripts/"
export DEMO_TEST_LOG=$tmp/calls.log  # the stubs append their calls here
log=$DEMO_TEST_LOG

# Every package is installed; apt-get must not run.
cat >"$tmp/bin/dpkg-query" <<'STUB'
#!/usr/bin/env bash
printf 'ii '
STUB
cat >"$tmp/bin/apt-get" <<'STUB'
#!/usr/bin/env bash
echo "apt-get $*" >>"$DEMO_TEST_LOG"
exit 1
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

# run_demo WHAT: runs demo.sh with the stubs first on PATH; checks what it built and ran.
run_demo() {
  local what=$1 out built
  : >"$log"
  out=$(PATH=$tmp/bin:$PATH bash "$tmp/clone/scripts/demo.sh" --workers 3 --stock 7 2>&1) ||
    fail "$what: scripts/demo.sh exited $?: $out"
  ! grep -q '^apt-get' "$log" || fail "$what: apt-get ran although every package is installed"
  built=$(sed -n 's/^ninja targets: //p' "$log")
  [[ $built == dlock_cli ]] ||
    fail "$what: scripts/demo.sh built '${built//$'\n'/' + '}', expected only dlock_cli (the CLI)"
  [[ $out == *"dlock demo --workers 3 --stock 7"* ]] ||
    fail "$what: scripts/demo.sh did not run 'dlock demo --workers 3 --stock 7': $out"
  echo "demo_script_test: $what: built only dlock_cli, then ran dlock demo"
}

run_demo "fresh clone"
run_demo "CLI already built"
echo "demo_script_test: PASS"
