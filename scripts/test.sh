#!/usr/bin/env bash
# dlock's test command: builds and runs every test stage, then prints a summary.
#
#   scripts/test.sh           plain build (all labels), the bounded torture run (plain build),
#                             ASan+UBSan build (all labels), TSan build (labels unit and integration)
#   scripts/test.sh --quick   plain build only
#
# Every stage runs even if an earlier one failed; the exit status is non-zero if any failed.
# Build trees (build/, build-asan/, build-tsan/) are kept and rebuilt incrementally.
# Environment: DLOCK_TEST_TIME_SCALE scales test durations (default 1; the sanitizer stages
# default to 2 (ASan) and 3 (TSan) when it is unset); DLOCK_CTEST_JOBS (default 2);
# DLOCK_TORTURE_SEED (default: the time, printed) and DLOCK_TORTURE_MINUTES (default 2.5) for
# the torture run (docs/torture.md).
# shellcheck disable=SC2317  # the stage functions are called through run_stage
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

quick=0
while (($#)); do
  case "$1" in
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
ctest_jobs=${DLOCK_CTEST_JOBS:-2}

results=()
failed=0

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
stage_plain() {
  bash scripts/setup.sh || return
  ctest --test-dir build --output-on-failure -j "$ctest_jobs"
}

stage_asan() {
  bash scripts/setup.sh --sanitize address || return
  local scale=${DLOCK_TEST_TIME_SCALE:-2}
  echo "DLOCK_TEST_TIME_SCALE=$scale"
  # tests/lsan.supp: allocations Debian's libzookeeper_mt itself does not free (see the file).
  DLOCK_TEST_TIME_SCALE=$scale \
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    ctest --test-dir build-asan --output-on-failure -j "$ctest_jobs"
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
  bash scripts/setup.sh --sanitize thread || return
  find_tsan_prefix || return
  local scale=${DLOCK_TEST_TIME_SCALE:-3}
  echo "DLOCK_TEST_TIME_SCALE=$scale"
  # tests/tsan.supp: one race inside Debian's uninstrumented libzookeeper_mt (see the file).
  DLOCK_TEST_TIME_SCALE=$scale \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
    "${tsan_prefix[@]}" ctest --test-dir build-tsan --output-on-failure -j "$ctest_jobs" \
      -L 'unit|integration'
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

total0=$SECONDS
run_stage "packages (scripts/setup.sh --deps-only)" bash scripts/setup.sh --deps-only
run_stage "format (clang-format)" bash scripts/check-format.sh
run_stage "plain build: all tests" stage_plain
if ((!quick)); then
  run_stage "torture: seeded faults, every backend and kind (plain build)" stage_torture
  run_stage "ASan+UBSan build: all tests" stage_asan
  run_stage "TSan build: unit + integration tests" stage_tsan
fi

printf '\n======== summary (%d s) ========\n' "$((SECONDS - total0))"
printf '%s\n' "${results[@]}"
exit "$failed"
