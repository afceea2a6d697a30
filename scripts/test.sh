#!/usr/bin/env bash
# dlock's test command: builds and runs every test stage, then prints a summary.
#
#   scripts/test.sh           plain build (all labels), the bounded torture run (plain build),
#                             ASan+UBSan build (all labels), TSan build (labels unit and integration),
#                             Release build (shared libraries; all but the tests it does not
#                             run; unit tests), install and
#                             packages (tests/consumer/run.sh on the Release and plain trees),
#                             ZooKeeper- and etcd-less build (library, unit tests, connect and CLI
#                             tests),
#                             clang -Wthread-safety build of the library, clang-tidy over src/
#                             (spin, the clang build and clang-tidy in the idle lane, below)
#   scripts/test.sh --quick   plain build and spin only
#
# Every stage runs even if an earlier one failed; the exit status is non-zero if any failed.
# Build trees (build/, build-asan/, build-tsan/, build-release/, build-nozk/, build-clang/) are
# kept and rebuilt incrementally. Budget: the whole run within 45 minutes on two cores from a
# clean clone (CONTRIBUTING.md lists each stage's share), hence: the sanitizer trees build only
# the targets of the tests they run, at -O1 -g1 (scripts/setup.sh); the test code compiles at
# -O0 in every tree but Release (DLOCK_TEST_CXX_FLAGS, tests/CMakeLists.txt); the ZooKeeper-less
# and clang trees build only what they check, without debug information; under a sanitizer the
# striped conformance kinds run only on memory and Redis (tests/conformance/CMakeLists.txt);
# etcd's generated gRPC stubs are compiled once, in build/, and linked from there by the other
# trees (cmake/etcd_proto.cmake); the sanitizer trees precompile the tests' common headers.
# Environment: DLOCK_TEST_TIME_SCALE scales test durations (default 1; the sanitizer stages
# default to 2 when it is unset); DLOCK_CTEST_JOBS, tests run at once (default 6; in the
# sanitizer stages 4);
# DLOCK_TORTURE_SEED (default: the time, printed) and DLOCK_TORTURE_MINUTES (default 2.5) for
# the torture run (docs/torture.md).
# shellcheck disable=SC2317  # the stage functions are called through run_stage
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

quick=0
lane=""
while (($#)); do
  case "$1" in
    --quick) quick=1; shift ;;
    --lane) lane=$2; shift 2 ;;  # internal: the idle lane (lane_start below)
    -h|--help) sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
# Tests run several at once: they mostly wait (on servers, leases, timeouts), so at two at a time
# the plain stage's tests kept a fifth of the two cores busy. The sanitizer stages' tests take
# several times the CPU each, so fewer run together there (at six, ASan kept both cores busy and
# a CLI test ran out its timeout); their timeouts are doubled (tests/support/dlock_test.cmake).
ctest_jobs=${DLOCK_CTEST_JOBS:-6}
sanitizer_jobs=${DLOCK_CTEST_JOBS:-4}

results=()
failed=0
failed_trees=()

# run_ctest DIR CTEST_ARGS...: ctest in DIR; a tree whose tests failed is remembered, and the
# summary ends with what its failed tests printed (the assertion, the sanitizer's report) so a
# log cut to its tail still names them. ctest runs under the array ctest_prefix if a caller set it
# (the TSan stage: setarch).
ctest_prefix=()
run_ctest() {
  local dir=$1; shift
  "${ctest_prefix[@]}" ctest --test-dir "$dir" --output-on-failure "$@" && return
  local rc=$?
  failed_trees+=("$dir")
  return "$rc"
}

# failure_digest DIR: the failed tests of DIR's last ctest run and, from their output, each
# failed assertion and sanitizer report with a few lines after it (at most 80 lines).
failure_digest() {
  local dir=$1 tmp=$1/Testing/Temporary
  printf -- '--- %s: failed: %s\n' "$dir" "$(tr '\n' ' ' < "$tmp/LastTestsFailed.log" 2>/dev/null)"
  grep -E -A6 ': Failure$|WARNING: ThreadSanitizer|ERROR: (Address|Leak)Sanitizer|runtime error:|^\[  FAILED  \]|\*\*\*Timeout' \
    "$tmp/LastTest.log" 2>/dev/null | cut -c1-300 | head -80
}

# run_stage NAME COMMAND...: header, command, duration; records PASS/FAIL.
run_stage() {
  local name=$1; shift
  local t0 t1 rc=0
  printf '\n======== %s ========\n' "$name"
  t0=$(date +%s.%N)
  "$@" || rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if ((rc == 0)); then
    results+=("PASS  $name  (${secs} s)")
  else
    results+=("FAIL  $name  (${secs} s, exit $rc)")
    failed=1
  fi
  printf -- '-------- %s: %s in %s s --------\n' "$name" "$([[ $rc == 0 ]] && echo passed || echo FAILED)" "$secs"
}

# Stages run inside `run_stage ... || rc=$?`, where bash ignores `set -e`, so each step
# checks its own status.
# The plain tree is RelWithDebInfo at -O2 with line tables only (-g1: about 30% less compile
# time for a test file than -g; backtraces and reports keep file:line).
stage_plain_build() {
  bash scripts/setup.sh "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
}
stage_plain_tests() {
  run_ctest build -j "$ctest_jobs"
}

# build_tested DIR CTEST_ARGS...: builds (in a configured tree) only what the tests ctest selects
# with CTEST_ARGS run: each test's target (dlock_add_test: target name == test name, or the test
# name without its ".<n>" for a shard) and every file of the tree a test's command names (a script
# test's program). Benchmarks, examples and tools no selected test runs are not built.
build_tested() {
  local dir=$1; shift
  local targets
  targets=$(ctest --test-dir "$dir" --show-only=json-v1 "$@" |
    /usr/bin/python3 -c '
import json, re, subprocess, sys
d = sys.argv[1]
phony = {l.split(":")[0] for l in subprocess.run(["ninja", "-C", d, "-t", "targets", "all"],
         capture_output=True, text=True, check=True).stdout.splitlines()}
out = set()
for t in json.load(sys.stdin)["tests"]:
    command = t.get("command") or []
    target = re.sub(r"\.[0-9]+$", "", t["name"])  # a shard runs its binary
    if target in phony:
        out.add(target)
        command = command[1:]  # the binary of that target, once built
    for a in command:
        if a.startswith(d + "/"):
            out.add(a[len(d) + 1:])
print("\n".join(sorted(out)))' "$PWD/$dir") || return
  [[ -n $targets ]] || { echo "build_tested: no tests selected in $dir" >&2; return 1; }
  echo "build $dir/: $(wc -l <<<"$targets") test targets"
  # shellcheck disable=SC2086  # one target per word
  ninja -C "$dir" -j "$(nproc)" --quiet $targets
}

# find_etcd_stubs: sets the array etcd_stubs to the cmake argument with which a tree uses the plain
# tree's etcd stubs (cmake/etcd_proto.cmake: generated and compiled once, without sanitizer or
# debug flags, the same objects in every tree) instead of generating and compiling its own, and
# builds them there first (nothing to do after stage_plain). Empty when the plain tree has no
# etcd backend.
etcd_stubs=()
find_etcd_stubs() {
  etcd_stubs=()
  [[ -f build/build.ninja ]] && grep -q '^build dlock_etcd_stubs:' build/build.ninja || return 0
  ninja -C build --quiet dlock_etcd_stubs || return
  etcd_stubs=("-DDLOCK_ETCD_STUBS_FROM=$ROOT/build")
}

# The sanitizer trees compile the tests with a precompiled header (DLOCK_TEST_PCH,
# tests/CMakeLists.txt); ccache caches such compiles only with this sloppiness.
pch_sloppiness=${CCACHE_SLOPPINESS:+$CCACHE_SLOPPINESS,}pch_defines,time_macros

stage_asan() {
  find_etcd_stubs || return
  bash scripts/setup.sh --sanitize address --configure-only "${etcd_stubs[@]}" || return
  CCACHE_SLOPPINESS=$pch_sloppiness build_tested build-asan || return
  local scale=${DLOCK_TEST_TIME_SCALE:-2}
  echo "DLOCK_TEST_TIME_SCALE=$scale"
  # tests/lsan.supp: allocations Debian's libzookeeper_mt itself does not free (see the file);
  # the etcd tests (gRPC and protobuf, uninstrumented) need no suppression.
  DLOCK_TEST_TIME_SCALE=$scale \
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    run_ctest build-asan -j "$sanitizer_jobs"
}

# gcc 12's TSan aborts with "unexpected memory mapping" when the kernel randomizes mmap with
# more bits than it supports (vm.mmap_rnd_bits > 28 on x86-64); running without ASLR
# (setarch -R) avoids it. Probe with a real TSan test binary, else decide by the sysctl.
# Sets the array tsan_prefix (empty when not needed).
tsan_prefix=()
find_tsan_prefix() {
  tsan_prefix=()
  local probe="" out
  if [[ -f build-tsan/dlock_tests.txt ]]; then
    probe=$(awk 'NR == 1 { print $3 }' build-tsan/dlock_tests.txt)
  fi
  if [[ -n $probe && -x $probe ]]; then
    out=$("$probe" --gtest_list_tests 2>&1 >/dev/null) && return 0
    grep -q 'unexpected memory mapping' <<<"$out" || return 0
  elif (($(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28) <= 28)); then
    return 0
  fi
  if ! setarch "$(uname -m)" -R true 2>/dev/null; then
    echo "test.sh: TSan needs ASLR off, but 'setarch -R' does not work here" >&2
    return 1
  fi
  tsan_prefix=(setarch "$(uname -m)" -R)
  echo "TSan runs under: ${tsan_prefix[*]}"
}

stage_tsan() {
  find_etcd_stubs || return
  bash scripts/setup.sh --sanitize thread --configure-only "${etcd_stubs[@]}" || return
  # etcd_tls_test is left out: gRPC's TLS credentials are made on the caller's thread and freed on
  # gRPC's own uninstrumented threads, which TSan reports as races in std::shared_ptr's release;
  # etcds:// runs in the plain and ASan+UBSan stages (the CLI's etcds:// test skips itself here).
  # cli_input_test is left out too: it feeds the CLI bad input, hundreds of short processes with
  # no thread of the library doing anything cli_test's runs do not (a question for ASan+UBSan and
  # the plain build, which run it), and under TSan it cost about 180 s of the stage's test time.
  local skip='^(etcd_tls_test|cli_input_test\.[0-9]+)$'
  CCACHE_SLOPPINESS=$pch_sloppiness build_tested build-tsan -L 'unit|integration' -E "$skip" || return
  find_tsan_prefix || return
  local scale=${DLOCK_TEST_TIME_SCALE:-2}
  echo "DLOCK_TEST_TIME_SCALE=$scale"
  # tests/tsan.supp: one race inside Debian's uninstrumented libzookeeper_mt, and gRPC, Abseil,
  # protobuf and OpenSSL (uninstrumented, their own synchronization invisible to TSan) ignored as
  # callers, plus gRPC's inline templates and etcd's generated messages (see the file).
  local -a ctest_prefix=("${tsan_prefix[@]}")
  DLOCK_TEST_TIME_SCALE=$scale \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
    run_ctest build-tsan -j "$sanitizer_jobs" \
      -L 'unit|integration' -E "$skip"
}

# The torture harness (docs/torture.md): every backend and lock kind under seeded faults, a few
# minutes in all. The seed changes with every run and is printed, so a failure can be replayed.
stage_torture() {
  local seed=${DLOCK_TORTURE_SEED:-$(date +%s)}
  local minutes=${DLOCK_TORTURE_MINUTES:-2.5}
  echo "torture: seed $seed, $minutes minutes of faults"
  ninja -C build dlock-torture-client >/dev/null || return
  /usr/bin/python3 tests/torture/torture.py --seed "$seed" --minutes "$minutes" \
    --client build/tests/torture/dlock-torture-client
}

# configure_tree DIR CMAKE_ARGS...: a Ninja tree with warnings as errors (ccache when installed).
configure_tree() {
  local dir=$1; shift
  local args=(-DDLOCK_WERROR=ON "$@")
  [[ -f $dir/CMakeCache.txt ]] || args+=(-G Ninja)
  if command -v ccache >/dev/null; then
    args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  mkdir -p "$dir"
  cmake -S . -B "$dir" "${args[@]}" >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; return 1; }
}

# Release (-O3, NDEBUG: other inlining, other warnings), shared libraries (as packaged): the
# libraries, the CLI, the examples and the benchmarks build, and the unit tests build and run. The
# test binaries this stage does not run are not built (about half the tree's compile time; the
# plain tree compiles them with the same warnings at -O2), so `install`, and cpack's
# `preinstall`, must not build `all` here: CMAKE_SKIP_INSTALL_ALL_DEPENDENCY, in this tree only.
# The .debs install to the multiarch libdir (cmake/packaging.cmake): a new tree defaults to it,
# and a tree configured before that default is switched here.
stage_release() {
  find_etcd_stubs || return
  configure_tree build-release -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON \
    "-DCMAKE_INSTALL_LIBDIR=lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)" "${etcd_stubs[@]}" || return
  ninja -C build-release -j "$(nproc)" --quiet src/all tools/dlock/all examples/all bench/all ||
    return
  build_tested build-release -L unit || return
  run_ctest build-release -j "$ctest_jobs" -L unit
}

# dlock installed like a library (tests/consumer/run.sh, docs/install.md): the Release tree
# installed to a prefix and, as root, packaged with cpack -G DEB and installed with apt-get (then
# purged); out-of-tree programs built with find_package(dlock) and with pkg-config lock against a
# private redis-server; the .debs' contents are checked and lintian must find no error or warning.
# The plain tree (static libraries) is installed and used the same way.
# Reuses both trees (run after stage_plain and stage_release); builds nothing of dlock.
stage_install() {
  bash tests/consumer/run.sh build-release build
}

# Without the ZooKeeper and etcd components: configures without libzookeeper-mt and gRPC, links
# nothing of them, and the unit, connect() and CLI tests pass (their tests are compiled out); nor
# does this tree compile etcd's generated stubs.
stage_nozk() {
  # -O2 like the plain tree (the same optimizer warnings), without debug information (nobody
  # debugs in this tree; about 20% less compile time).
  configure_tree build-nozk -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG" \
    -DDLOCK_WITH_ZOOKEEPER=OFF -DDLOCK_WITH_ETCD=OFF || return
  if grep -q zookeeper_mt build-nozk/build.ninja; then
    echo "build-nozk links libzookeeper_mt although DLOCK_WITH_ZOOKEEPER=OFF" >&2
    return 1
  fi
  if grep -q 'grpc++' build-nozk/build.ninja; then
    echo "build-nozk links gRPC although DLOCK_WITH_ETCD=OFF" >&2
    return 1
  fi
  ninja -C build-nozk unit_tests connect_test cli_test || return
  run_ctest build-nozk -j "$ctest_jobs" \
    -R '^(unit_tests|connect_test|cli_test(\.[0-9]+)?)$'
}

# clang with -Wthread-safety over the library: state annotated DLOCK_GUARDED_BY a mutex
# (include/dlock/detail/thread_safety.hpp) is never touched without it.
# Runs in the idle lane: the plain tree's etcd stubs come from the caller (find_etcd_stubs there;
# no second ninja in build/ at the same time).
stage_clang() {
  read -r -a etcd_stubs <<<"${DLOCK_LANE_ETCD_STUBS:-}"
  CC=clang CXX=clang++ configure_tree build-clang "${etcd_stubs[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG" -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_BENCH=OFF "-DCMAKE_CXX_FLAGS=-Wthread-safety" || return
  ninja -C build-clang dlock
}

# clang-tidy with the repo's .clang-tidy over every source under src/ (compile commands of
# build-clang, so run after stage_clang); any finding fails the stage.
stage_tidy() {
  [[ -f build-clang/compile_commands.json ]] || stage_clang || return
  # run-clang-tidy (Debian 12) has no -warnings-as-errors: a finding is a "file:line:col:
  # warning:" line of its output, and any such line fails the stage.
  run-clang-tidy -p build-clang -quiet "$ROOT/src/" >build-clang/tidy.log 2>&1 || {
    cat build-clang/tidy.log; return 1
  }
  local findings
  findings=$(sed 's/\x1b\[[0-9;]*m//g' build-clang/tidy.log | grep -E '^/[^ ]+:[0-9]+:[0-9]+: (warning|error):' | sort -u)
  if [[ -n $findings ]]; then
    printf '%s\n' "$findings"
    echo "clang-tidy: $(wc -l <<<"$findings") finding(s); fix them or tune .clang-tidy (with the reason)" >&2
    return 1
  fi
  echo "clang-tidy: no findings"
}

# The idle lane: the stages that only compute (spin's searches, the clang build, clang-tidy) run
# one after another in a background process at SCHED_IDLE priority (nice 19 where chrt cannot),
# from the end of the plain build on. They take only CPU time the other stages leave idle (the
# tests and the torture run mostly wait), so they do not slow those, and their results are
# reported at the end. Each item's output, status and duration go to files in the lane directory.
lane_item() {
  local name=$1; shift
  local t0=$SECONDS rc=0
  "$@" >"$lane/$name.log" 2>&1 || rc=$?
  echo $((SECONDS - t0)) >"$lane/$name.secs"
  echo "$rc" >"$lane/$name.rc"
}
if [[ -n $lane ]]; then
  # Its own session is its own autogroup where the kernel groups by session
  # (kernel.sched_autogroup_enabled): the CPU is then shared between the groups first, whatever
  # the priorities inside them, and this lane took half of the two cores from the ASan build
  # beside it (measured: that build took 888 s instead of 516). Nice 19 for the group too.
  if [[ -w /proc/self/autogroup ]]; then echo 19 >/proc/self/autogroup 2>/dev/null || true; fi
  lane_item spin bash models/check.sh
  if ((!quick)); then
    lane_item clang stage_clang
    lane_item tidy stage_tidy
  fi
  exit 0
fi

lane=$(mktemp -d /tmp/dlock-test-lane.XXXXXX)
lane_pid=""
# Its own session, so that an interrupted run stops it, search processes and all.
trap '[[ -n $lane_pid ]] && kill -- -"$lane_pid" 2>/dev/null; rm -rf "$lane"' EXIT
lane_start() {
  local idle=(nice -n 19)
  chrt --idle 0 true 2>/dev/null && idle=(chrt --idle 0 nice -n 19)
  local args=(--lane "$lane")
  ((quick)) && args+=(--quick)
  if ((!quick)); then
    find_etcd_stubs || true
  fi
  DLOCK_LANE_ETCD_STUBS="${etcd_stubs[*]}" setsid -w "${idle[@]}" bash "$ROOT/scripts/test.sh" \
    "${args[@]}" </dev/null &
  lane_pid=$!
  echo "idle lane started (pid $lane_pid): spin$( ((quick)) || echo ', clang build, clang-tidy')"
}
# lane_result NAME: waits for the lane, prints NAME's output and duration, returns its status.
lane_result() {
  local name=$1
  if [[ -n $lane_pid ]]; then
    wait "$lane_pid" || true
    lane_pid=""
  fi
  [[ -f $lane/$name.rc ]] || { echo "the idle lane did not run $name"; return 1; }
  cat "$lane/$name.log"
  echo "(ran in the idle lane: $(cat "$lane/$name.secs") s from its start there)"
  return "$(cat "$lane/$name.rc")"
}

total0=$SECONDS
run_stage "packages (scripts/setup.sh --deps-only)" bash scripts/setup.sh --deps-only
run_stage "format (clang-format)" bash scripts/check-format.sh
run_stage "plain build" stage_plain_build
lane_start
run_stage "plain: all tests" stage_plain_tests
if ((!quick)); then
  run_stage "torture: seeded faults, every backend and kind (plain build)" stage_torture
  run_stage "ASan+UBSan build: all tests" stage_asan
  run_stage "TSan build: unit + integration tests" stage_tsan
  run_stage "Release build: library, CLI, examples, benchmarks, unit tests" stage_release
  run_stage "install: CMake package, pkg-config, .debs (Release + plain trees)" stage_install
  run_stage "ZooKeeper-less build: library, unit, connect and CLI tests" stage_nozk
fi
run_stage "spin: the hand-off model (models/check.sh)" lane_result spin
if ((!quick)); then
  run_stage "clang -Wthread-safety build: library" lane_result clang
  run_stage "clang-tidy: src/" lane_result tidy
fi

printf '\n======== summary (%d s) ========\n' "$((SECONDS - total0))"
printf '%s\n' "${results[@]}"
if ((${#failed_trees[@]})); then
  printf '\n======== what the failed tests printed ========\n'
  for dir in "${failed_trees[@]}"; do failure_digest "$dir"; done
fi
exit "$failed"
