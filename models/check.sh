#!/usr/bin/env bash
# Checks the protocol models with spin (docs/handoff-model.md). First the hand-off model
# (models/handoff.pml):
#   1. the protocol as built (tickets; the queue keys, the arrival counter among them, expire 2 x
#      liveness after the last refresh; a new entry's ticket lies above the waiter's ticket floor,
#      ARGV[8]): an exhaustive search must find no error;
#   2. FLOOR_WITNESS must fail: the search of 1 reaches a counter that expired under a waiter that
#      had a ticket, where only the floor keeps the ticket new (so 1 is not a vacuous pass);
#   3. two negative controls that must each FAIL, so the checker is shown able to fail:
#      STALE_GRANT_BUG (a waiter trusting any "granted" message, the protocol before tickets) and
#      ARRIVALS_EXPIRE (the expiring counter without the floor, so a ticket can come back).
# Then the model of registered mutex waiters on Redlock before each server handed its key to its
# head (models/redlock_wake.pml: woken heads attempted, bargers could pass them), re-check off:
#   4. as it was built (one acquire_until call per waiter; REDLOCK_FULL=1: two, 10 M states): exhaustive,
#      no error, complete; SPLIT_WITNESS must fail (a registered attempt ends in a split vote);
#      NO_RELEASE_LEAVE (a holder's release without its waiter id, what spin found) and
#      NO_SPLIT_RETRY (no quick retry after a split vote) must each strand a waiter.
# Then Redlock's grant from each server (models/redlock_grant.pml), re-check off:
#   5. as built (two waiters, two acquire_until calls each; REDLOCK_GRANT_FULL=1: three waiters,
#      one call each, 50 M states, about 3 minutes): a quorum of grant messages is the hold, some
#      grants short of one lead to an attempt on every server: exhaustive, no error, complete.
#      With ATTEMPT_AFTER_GRANT (every grant message followed by an attempt, the way a waiter
#      whose messages were lost gets the lock; REDLOCK_GRANT_FULL=1: 74 M states, about 4
#      minutes): no error either, and LEAVE_KEEPS with it must strand a key.
#      GRANT_SPLIT_WITNESS must fail (the servers grant to different waiters); STALE_GRANT (a grant
#      of an undone registration accepted: no ticket rule) must break the holder's count,
#      LEAVE_KEEPS (a waiter gives up without handing on a grant made to it) must strand a key,
#      and NO_PARTIAL_ATTEMPT (a waiter with some grants only waits for more) must strand three
#      waiters that each hold one server.
# Then the same model with one server (-DNS=1 -DQUORUM=1): dlock::mutex on one Redis server, whose
# release hands the key to the live head of its registered waiters and tells it:
#   6. as built (three waiters, two acquire_until calls each): the grant message is the hold, and
#      with ATTEMPT_AFTER_GRANT the head's own attempt takes up the key handed to it: exhaustive,
#      no error, complete. Negative controls: LEAVE_KEEPS, as built and with ATTEMPT_AFTER_GRANT,
#      must strand the key (owner[0]==NONE violated at quiescence), and STALE_GRANT (two calls per
#      waiter: a grant made to an earlier call accepted) must break the holder's count (a holder
#      that does not own the key). A split, or some grants short of a quorum, cannot happen on one
#      server: GRANT_SPLIT_WITNESS and NO_PARTIAL_ATTEMPT are not run there.
# Then the ZooKeeper lock recipe's wait (models/zk_queue.pml: a waiter further back watches the
# node before its predecessor and looks again when it goes; docs/zookeeper.md, steps 4 and 5):
#   7. as built, three sessions, up to two waits ending by giving up (ZK_FULL=1 also: four
#       sessions, none giving up, 65 M states, about 1.5 minutes): exhaustive, no error (one
#       holder at a time, no waiter left waiting), complete; LOOKAGAIN_WITNESS must fail (a grant by the predecessor's deletion
#       after a look again found it last: the new path is reached); ALSO_GRANTS (the going of the
#       node looked again on taken as the grant), ANY_DELETE_GRANTS (the predecessor's deletion
#       grants though it was not the last one ahead) and STALE_LAST (four sessions, two give-ups:
#       a look again that does not check the listing) must each break mutual exclusion.
# Then one name, one lock kind with registered mutex waiters (models/kind_guard.pml: a free key
# handed to the head of the mutex waiters while shared_mutex readers may hold the name;
# docs/lock-family.md, "One name, one lock kind"):
#   8. as built: exhaustive, no error (never a mutex holder beside a reader), complete;
#      LEAVE_NO_GUARD (mutex_leave.lua without the kind guard's read, the code before the fix)
#      must grant a mutex beside a reader.
# Exit status 0 only if all of these come out as expected and every search that must pass was
# complete.
# The searches are independent: they run SPIN_JOBS at a time (default: the number of cores), each
# in a directory of its own, and their results are read in the order above.
# Environment: SPIN_JOBS, SPIN_MAXT (clock bound, default 3), SPIN_FLAGS (more spin -D options, e.g.
# "-DLIVE=2 -DLEASE=3" with SPIN_MAXT=4 for the longer durations), SPIN_MEMLIM (MB, default 3000)
# for handoff.pml; REDLOCK_FULL, REDLOCK_GRANT_FULL and ZK_FULL as above.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
maxt=${SPIN_MAXT:-3}
memlim=${SPIN_MEMLIM:-3000}
read -r -a flags <<<"${SPIN_FLAGS:-}"
work=$(mktemp -d /tmp/dlock-spin.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$here/handoff.pml" "$here/redlock_wake.pml" "$here/redlock_grant.pml" "$here/zk_queue.pml" \
  "$here/kind_guard.pml" "$work/"
cd "$work"

for tool in spin gcc; do
  command -v "$tool" >/dev/null || { echo "check.sh: $tool not found (scripts/setup.sh installs it)"; exit 2; }
done

# pan_start NAME MODEL SPIN_OPTIONS...: generates MODEL's verifier in NAME/, compiles and runs it
# in the background (at most SPIN_JOBS at once); the output goes to NAME.out. pan_result NAME
# waits for it and prints its line. Every search goes through them.
jobs_max=${SPIN_JOBS:-$(nproc)}
declare -A pan_pid=()
pan_start() {
  local name=$1 model=$2
  shift 2
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
  (
    mkdir -p "$name" && cd "$name" && cp "../$model" .
    spin "$@" -a "$model" >"../$name.spin" 2>&1 || exit 2
    gcc -w -O2 -DSAFETY -DCOLLAPSE -DMEMLIM="$memlim" -o pan pan.c
    start=$SECONDS
    ./pan -m1000000 >"../$name.out" 2>&1 || true
    echo $((SECONDS - start)) >"../$name.secs"
  ) &
  pan_pid[$name]=$!
}
pan_result() {
  local name=$1
  # Its status may have been collected by pan_start's `wait -n`: the .secs file says it ran.
  wait "${pan_pid[$name]}" 2>/dev/null || true
  [[ -f $name.secs ]] || { echo "check.sh: the search $name did not run:"; cat "$name.spin"; exit 2; }
  echo "[$name] $(grep -E 'errors:' "$name.out" | sed 's/^ *//'); $(grep -E 'states, stored' "$name.out" | sed 's/^ *//'); $(cat "$name.secs") s"
}

# hstart NAME DEFINES...: pan_start for handoff.pml, with SPIN_FLAGS and the clock bound.
hstart() {
  local name=$1
  shift
  pan_start "$name" handoff.pml "$@" ${flags[@]+"${flags[@]}"} -DMAXT="$maxt"
}
# rstart NAME DEFINES...: for redlock_wake.pml (REDLOCK_FULL=1: two acquire_until calls per
# waiter).
rwake=(-DSESSIONS=1)
[[ ${REDLOCK_FULL:-0} == 1 ]] && rwake=()
rstart() {
  local name=$1
  shift
  pan_start "$name" redlock_wake.pml ${rwake[@]+"${rwake[@]}"} "$@"
}

# gstart NAME DEFINES...: for redlock_grant.pml (REDLOCK_GRANT_FULL=1: three waiters).
gwaiters=(-DSESSIONS=2)
[[ ${REDLOCK_GRANT_FULL:-0} == 1 ]] && gwaiters=(-DNW=3)
gstart() {
  local name=$1
  shift
  pan_start "$name" redlock_grant.pml "$@"
}
# The same model with one server: dlock::mutex on one Redis server.
one=(-DNS=1 -DQUORUM=1)

# Every search, the longest first (they are read below in the order of the header).
gstart redlock_grant_attempt -DATTEMPT_AFTER_GRANT "${gwaiters[@]}"
hstart fixed
gstart redlock_grant "${gwaiters[@]}"
rstart redlock_wake
gstart mutex_one_attempt "${one[@]}" -DATTEMPT_AFTER_GRANT -DNW=3 -DSESSIONS=2
gstart mutex_one "${one[@]}" -DNW=3 -DSESSIONS=2
hstart FLOOR_WITNESS -DFLOOR_WITNESS
hstart STALE_GRANT_BUG -DSTALE_GRANT_BUG
hstart ARRIVALS_EXPIRE -DARRIVALS_EXPIRE
rstart SPLIT_WITNESS -DSPLIT_WITNESS
rstart NO_RELEASE_LEAVE -DNO_RELEASE_LEAVE
rstart NO_SPLIT_RETRY -DNO_SPLIT_RETRY
gstart LEAVE_KEEPS_ATTEMPT -DATTEMPT_AFTER_GRANT -DLEAVE_KEEPS
gstart GRANT_SPLIT_WITNESS -DSPLIT_WITNESS
gstart STALE_GRANT -DSTALE_GRANT
gstart LEAVE_KEEPS -DLEAVE_KEEPS
gstart NO_PARTIAL_ATTEMPT -DNW=3 -DNO_PARTIAL_ATTEMPT
gstart LEAVE_KEEPS_ONE "${one[@]}" -DLEAVE_KEEPS
gstart LEAVE_KEEPS_ATTEMPT_ONE "${one[@]}" -DATTEMPT_AFTER_GRANT -DLEAVE_KEEPS
gstart STALE_GRANT_ONE "${one[@]}" -DSTALE_GRANT -DSESSIONS=2
zstart() {
  local name=$1
  shift
  pan_start "$name" zk_queue.pml "$@"
}
zstart zk_queue -DLEAVES=2
if [[ ${ZK_FULL:-0} == 1 ]]; then
  zstart zk_queue_NW4 -DNW=4 -DLEAVES=0
fi
zstart LOOKAGAIN_WITNESS -DLOOKAGAIN_WITNESS
zstart ALSO_GRANTS -DALSO_GRANTS
zstart ANY_DELETE_GRANTS -DANY_DELETE_GRANTS
zstart STALE_LAST -DSTALE_LAST -DNW=4 -DLEAVES=2
pan_start kind_guard kind_guard.pml
pan_start LEAVE_NO_GUARD kind_guard.pml -DLEAVE_NO_GUARD

# summary NAME DEFINES...: the trail of NAME's error, as the model's own event lines.
summary() {
  local name=$1
  shift
  (cd "$name" && spin "$@" ${flags[@]+"${flags[@]}"} -DMAXT="$maxt" -t handoff.pml 2>&1) |
    grep -E 't=|violated' | sed 's/^ */    /' | uniq | head -40
}

rc=0
pan_result fixed
if ! grep -q 'errors: 0' fixed.out; then
  echo "FAIL: the protocol as built has an error:"
  grep -E 'violated|invalid end' fixed.out || true
  summary fixed
  rc=1
elif grep -qE 'max search depth too small|reached -DMEMLIM|Search not completed|out of memory' fixed.out; then
  echo "FAIL: the search was not complete:"
  grep -E 'too small|MEMLIM|not completed|memory' fixed.out
  rc=1
else
  echo "ok: no error in the protocol as built (exhaustive, clock 0..$maxt${flags[*]+, ${flags[*]}})"
  grep -E 'State-vector|depth reached|states, stored|transitions|elapsed' fixed.out | sed 's/^/    /'
fi

pan_result FLOOR_WITNESS
if grep -qE 'errors: [1-9]' FLOOR_WITNESS.out; then
  echo "ok: the search reaches a ticket raised by the floor (an expired counter matters)"
else
  echo "FAIL: no state where the ticket floor matters: the clock bound is too short for the" \
    "queue keys to expire under a waiter (raise SPIN_MAXT or shorten LIVE)"
  rc=1
fi

for bug in STALE_GRANT_BUG ARRIVALS_EXPIRE; do
  pan_result "$bug"
  if grep -qE 'errors: [1-9]' "$bug.out"; then
    echo "ok: negative control $bug fails as it must:"
    grep -E 'violated' "$bug.out" | head -1 | cut -c1-120 | sed 's/^/    /'
    summary "$bug" "-D$bug"
  else
    echo "FAIL: negative control $bug found no error: the model cannot see the stale grant"
    rc=1
  fi
done
# The models that print their events with "@". wpass and wfail show a failing search's trail
# with wsummary NAME DEFINES..., which each model's checks below define: the trail of NAME's error
# as the model's event lines.

# wpass NAME WHAT DEFINES...: an exhaustive search that must find no error and be complete.
wpass() {
  local name=$1 what=$2
  shift 2
  pan_result "$name"
  if ! grep -q 'errors: 0' "$name.out"; then
    echo "FAIL: $what has an error:"
    grep -E 'violated|invalid end' "$name.out" || true
    wsummary "$name" "$@"
    rc=1
  elif grep -qE 'max search depth too small|reached -DMEMLIM|Search not completed|out of memory' \
    "$name.out"; then
    echo "FAIL: the search of $what was not complete:"
    grep -E 'too small|MEMLIM|not completed|memory' "$name.out"
    rc=1
  else
    echo "ok: no error in $what (exhaustive)"
    grep -E 'State-vector|depth reached|states, stored|transitions|elapsed' "$name.out" |
      sed 's/^/    /'
  fi
}

# wfail NAME WHY DEFINES...: a search that must find an error; its trail is printed. With
# WFAIL_ASSERT set, the violated assertion must contain that text.
wfail() {
  local name=$1 why=$2
  shift 2
  pan_result "$name"
  if grep -qE 'errors: [1-9]' "$name.out" &&
    { [[ -z ${WFAIL_ASSERT:-} ]] || grep -E 'violated' "$name.out" | grep -qF "$WFAIL_ASSERT"; }; then
    echo "ok: $name fails as it must:"
    grep -E 'violated' "$name.out" | head -1 | cut -c1-120 | sed 's/^/    /'
    wsummary "$name" "$@"
  else
    echo "FAIL: $name found no error: $why"
    rc=1
  fi
}

# The Redlock model: the same checks, over redlock_wake.pml.
wsummary() {
  local name=$1
  shift
  (cd "$name" && spin ${rwake[@]+"${rwake[@]}"} "$@" -t redlock_wake.pml 2>&1) |
    grep -E '@ |violated' | sed 's/^ *@ /    /; s/^ *spin: /    spin: /' | head -40
}
wpass redlock_wake "registered waiters on Redlock as they were before the grant from each server${rwake[*]+ (${rwake[*]})}"
wfail SPLIT_WITNESS "no registered attempt ends in a split vote: the model is too small" \
  -DSPLIT_WITNESS
wfail NO_RELEASE_LEAVE "the model cannot see a holder's stale waiter id" \
  -DNO_RELEASE_LEAVE
wfail NO_SPLIT_RETRY "the model cannot see a waiter a split vote took off the queue" \
  -DNO_SPLIT_RETRY

# The design of Redlock's grant from each server: the same checks, over redlock_grant.pml.
wsummary() {
  local name=$1
  shift
  # Its trails can be long (the search is depth-first): their end shows what went wrong.
  (cd "$name" && spin "$@" -t redlock_grant.pml 2>&1) |
    grep -E '@ |violated' | sed 's/^ *@ /    /; s/^ *spin: /    spin: /' | tail -24
}
wpass redlock_grant_attempt "Redlock's grant from each server, every grant message followed by an attempt, as lost messages leave it (${gwaiters[*]})" \
  -DATTEMPT_AFTER_GRANT "${gwaiters[@]}"
wfail LEAVE_KEEPS_ATTEMPT "the model with an attempt after each grant cannot see a grant kept by a waiter that gave up" \
  -DATTEMPT_AFTER_GRANT -DLEAVE_KEEPS
wpass redlock_grant "Redlock's grant from each server as built: a quorum of grant messages holds (${gwaiters[*]})" "${gwaiters[@]}"
wfail GRANT_SPLIT_WITNESS "no servers grant to different waiters: the model is too small" \
  -DSPLIT_WITNESS
wfail STALE_GRANT "the model cannot see a grant of an undone registration" -DSTALE_GRANT
wfail LEAVE_KEEPS "the model cannot see a grant kept by a waiter that gave up" -DLEAVE_KEEPS
wfail NO_PARTIAL_ATTEMPT "the model cannot see waiters that each hold one server" \
  -DNW=3 -DNO_PARTIAL_ATTEMPT

# dlock::mutex on one Redis server: redlock_grant.pml with one server.
wpass mutex_one "dlock::mutex on one server as built: the grant message holds (${one[*]} -DNW=3 -DSESSIONS=2)" \
  "${one[@]}" -DNW=3 -DSESSIONS=2
wpass mutex_one_attempt "dlock::mutex on one server, every grant message followed by an attempt, as lost messages leave it (${one[*]} -DNW=3 -DSESSIONS=2)" \
  "${one[@]}" -DATTEMPT_AFTER_GRANT -DNW=3 -DSESSIONS=2
WFAIL_ASSERT='owner[0]==255'
wfail LEAVE_KEEPS_ONE "the model of one server cannot see a key kept by a waiter that gave up" \
  "${one[@]}" -DLEAVE_KEEPS
wfail LEAVE_KEEPS_ATTEMPT_ONE "the model of one server with an attempt after each grant cannot see a key kept by a waiter that gave up" \
  "${one[@]}" -DATTEMPT_AFTER_GRANT -DLEAVE_KEEPS
WFAIL_ASSERT='owner[0]==me'
wfail STALE_GRANT_ONE "the model of one server cannot see a grant made to an earlier call accepted" \
  "${one[@]}" -DSTALE_GRANT -DSESSIONS=2
unset WFAIL_ASSERT

# The ZooKeeper line: the same checks, over zk_queue.pml.
wsummary() {
  local name=$1
  shift
  (cd "$name" && spin "$@" -t zk_queue.pml 2>&1) |
    grep -E '@ |violated' | sed 's/^ *@ /    /; s/^ *spin: /    spin: /' | tail -24
}
wpass zk_queue "the ZooKeeper recipe's wait as built (three sessions, two give-ups)" -DLEAVES=2
if [[ ${ZK_FULL:-0} == 1 ]]; then
  wpass zk_queue_NW4 "the ZooKeeper recipe's wait as built (four sessions)" -DNW=4 -DLEAVES=0
fi
wfail LOOKAGAIN_WITNESS "no grant follows a look again: the model is too small" -DLOOKAGAIN_WITNESS
WFAIL_ASSERT='holders==1'
wfail ALSO_GRANTS "the model cannot see a look-again wake taken as the grant" -DALSO_GRANTS
wfail ANY_DELETE_GRANTS "the model cannot see a deletion that was no grant" -DANY_DELETE_GRANTS
wfail STALE_LAST "the model cannot see a look again that ignores the listing" \
  -DSTALE_LAST -DNW=4 -DLEAVES=2
unset WFAIL_ASSERT

# One name, one lock kind: the same checks, over kind_guard.pml.
wsummary() {
  local name=$1
  shift
  (cd "$name" && spin "$@" -t kind_guard.pml 2>&1) |
    grep -E '@ |violated' | sed 's/^ *@ /    /; s/^ *spin: /    spin: /' | tail -24
}
wpass kind_guard "one name, one lock kind with registered mutex waiters as built"
WFAIL_ASSERT='mstate[0]!=2'
wfail LEAVE_NO_GUARD "the model cannot see a free key handed to a mutex waiter beside a reader" \
  -DLEAVE_NO_GUARD
unset WFAIL_ASSERT
exit $rc
