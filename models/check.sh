#!/usr/bin/env bash
# Checks the hand-off model (models/handoff.pml, docs/handoff-model.md) with spin:
#   1. the protocol as built (tickets): an exhaustive search must find no error;
#   2. two negative controls that must each FAIL, so the checker is shown able to fail:
#      STALE_GRANT_BUG (a waiter trusting any "granted" message, the protocol before tickets) and
#      ARRIVALS_EXPIRE (tickets from a counter that expires, so a ticket can come back).
# Exit status 0 only if all three come out as expected and the search of 1 was complete.
# Environment: SPIN_MAXT (clock bound, default 3), SPIN_MEMLIM (MB, default 3000).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
maxt=${SPIN_MAXT:-3}
memlim=${SPIN_MEMLIM:-3000}
work=$(mktemp -d /tmp/dlock-spin.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$here/handoff.pml" "$work/"
cd "$work"

for tool in spin gcc; do
  command -v "$tool" >/dev/null || { echo "check.sh: $tool not found (scripts/setup.sh installs it)"; exit 2; }
done

# run NAME DEFINES...: generate, compile and run pan; the output goes to NAME.out.
run() {
  local name=$1
  shift
  spin "$@" -DMAXT="$maxt" -a handoff.pml >"$name.spin" 2>&1 || { cat "$name.spin"; return 2; }
  gcc -w -O2 -DSAFETY -DCOLLAPSE -DMEMLIM="$memlim" -o "pan_$name" pan.c
  local start=$SECONDS
  "./pan_$name" -m1000000 >"$name.out" 2>&1 || true
  echo "[$name] $(grep -E 'errors:' "$name.out" | sed 's/^ *//'); $(grep -E 'states, stored' "$name.out" | sed 's/^ *//'); $((SECONDS - start)) s"
}

# summary NAME DEFINES...: the trail of NAME's error, as the model's own event lines.
summary() {
  local name=$1
  shift
  spin "$@" -DMAXT="$maxt" -t handoff.pml 2>&1 | grep -E 't=|violated' | uniq |
    sed 's/^ */    /' | head -30
}

rc=0
run fixed
if ! grep -q 'errors: 0' fixed.out; then
  echo "FAIL: the protocol with tickets has an error:"
  grep -E 'violated|invalid end' fixed.out || true
  summary fixed
  rc=1
elif grep -qE 'max search depth too small|reached -DMEMLIM|Search not completed|out of memory' fixed.out; then
  echo "FAIL: the search was not complete:"
  grep -E 'too small|MEMLIM|not completed|memory' fixed.out
  rc=1
else
  echo "ok: no error in the protocol with tickets (exhaustive, clock 0..$maxt)"
  grep -E 'State-vector|depth reached|states, stored|transitions|elapsed' fixed.out | sed 's/^/    /'
fi

for bug in STALE_GRANT_BUG ARRIVALS_EXPIRE; do
  run "$bug" "-D$bug"
  if grep -qE 'errors: [1-9]' "$bug.out"; then
    echo "ok: negative control $bug fails as it must:"
    grep -E 'violated' "$bug.out" | head -1 | cut -c1-120 | sed 's/^/    /'
    summary "$bug" "-D$bug"
  else
    echo "FAIL: negative control $bug found no error: the model cannot see the stale grant"
    rc=1
  fi
done
exit $rc
