/*
 * One name, one lock kind, on one Redis server, where dlock::mutex waiters register and a free key
 * is handed to their head (docs/lock-family.md, "One name, one lock kind"; docs/redis-lock.md,
 * "Waking one waiter"), for spin (models/check.sh runs it).
 *
 * Registered mutex waiters hold nothing and do not keep other kinds out: once the mutex key is
 * gone (here: handed to a waiter that never came, and run out), shared_mutex readers may take the
 * name while mutex waiters stay registered. The scripts that hand a free key to the head must then
 * see the readers: acquire.lua does (its kind guard runs first); mutex_leave.lua must too. The
 * property (the monitor): a mutex holder and a reader never hold the name at once; every process
 * ends (no invalid end state).
 *
 * Compile-time switches (spin -D...):
 *   LEAVE_NO_GUARD   mutex_leave.lua hands a free key on without the kind guard's read (the code
 *                    before the fix): spin must find a mutex granted beside a reader
 *
 * Abstractions:
 * - Each script runs atomically (atomic blocks). Time is not modelled: a key handed to a waiter
 *   may run out at any moment before that waiter takes it up, and then the grant message it was
 *   sent is stale (its validity is bounded by the same hand-off lease): the expiry drops both.
 * - The key starts handed to GHOST, a waiter that never comes (a crashed process; the torture
 *   run's case after a server restart).
 * - A mutex waiter whose attempt meets another kind gets WRONGTYPE: its lock() fails, and it
 *   leaves with mutex_leave.lua. A waiter may also give up at any time (deadline, cancel).
 * - The grant message is the hold (mutex_waiter::woke); the ticket rule is not modelled (one
 *   acquire_until call per client: no stale grant of an earlier call).
 */

#define NM 2 /* mutex clients: ids 0 .. NM-1 */
#define GHOST NM
#define NONE 255

/* client states */
#define IDLE 0
#define WAITING 1
#define HELD 2
#define DONE 3

/* ---- server state ---- */
byte key = GHOST;       /* the lock key: the id it holds, NONE when absent */
bool registered[NM];    /* :mutex_waiters (with :mutex_alive; FIFO order by id, a simplification) */
byte readers = 0;       /* live members of :readers */

/* ---- the clients' view ---- */
byte mstate[NM];
bool grant_msg[NM];     /* a "granted" message on its way to mutex client i */
bool reading = false;   /* the reader holds */

byte hi;                /* scratch of the scripts */

/* dlock_hand_mutex_head: the key (free) goes to the first registered waiter, which is told. */
inline hand_head() {
  hi = 0;
  do
  :: hi < NM && !registered[hi] -> hi++
  :: hi < NM && registered[hi] ->
     registered[hi] = false; key = hi; grant_msg[hi] = true;
     printf("@ the key is handed to mutex %d\n", hi); break
  :: hi >= NM -> break
  od;
  hi = 0
}

/* The kind guard's read: another kind (readers) on the name. */
#define OTHER_KIND (readers > 0)

proctype mutex_client(byte me) {
  bool gave_up = false;
attempt:
  /* acquire.lua, as a registered waiter: kind guard first; a key holding our id is taken up; a
     free key goes to the head (which may be us: first come, first served among the registered);
     else we register and wait. */
  atomic {
    if
    :: OTHER_KIND -> gave_up = true; printf("@ mutex %d: WRONGTYPE (readers), gives up\n", me)
    :: !OTHER_KIND && key == me ->
       mstate[me] = HELD; registered[me] = false; grant_msg[me] = false;
       printf("@ mutex %d: takes up the key handed to it\n", me)
    :: !OTHER_KIND && key != me && key != NONE ->
       registered[me] = true; mstate[me] = WAITING; printf("@ mutex %d: registers\n", me)
    :: !OTHER_KIND && key == NONE ->
       registered[me] = true;
       hand_head();
       if
       :: key == me -> mstate[me] = HELD; grant_msg[me] = false
       :: else -> mstate[me] = WAITING
       fi
    fi
  }
  if
  :: gave_up -> goto leave
  :: mstate[me] == HELD -> goto holding
  :: else
  fi;
wait:
  do
  :: atomic {
       grant_msg[me] -> grant_msg[me] = false; mstate[me] = HELD;
       printf("@ mutex %d: holds by the grant message\n", me)
     };
     goto holding
  :: goto attempt       /* the periodic re-check */
  :: goto leave         /* gives up: deadline, cancel */
  od;
leave:
  /* mutex_leave.lua */
  atomic {
    printf("@ mutex %d: leaves (mutex_leave.lua)\n", me);
    registered[me] = false;
    grant_msg[me] = false;
    if
    :: key == me -> key = NONE
    :: else
    fi;
    if
#ifdef LEAVE_NO_GUARD
    :: key == NONE -> hand_head()
#else
    :: key == NONE && !OTHER_KIND -> hand_head()
#endif
    :: else
    fi;
    mstate[me] = DONE
  }
  goto end;
holding:
  /* release.lua: compare-and-delete, then hand to the live head */
  atomic {
    assert(key == me);
    key = NONE;
    hand_head();
    mstate[me] = DONE
  };
end:
  skip
}

proctype reader() {
  /* rw_read_acquire.lua, twice at most: the kind guard refuses a name a mutex key holds;
     registered mutex waiters do not count. Then rw_read_release.lua. */
  byte tries = 0;
  do
  :: tries < 2 ->
     tries++;
     atomic {
       if
       :: key == NONE -> readers++; reading = true; printf("@ a reader holds\n")
       :: else
       fi
     };
     if
     :: reading -> atomic { readers--; reading = false }
     :: else
     fi
  :: break
  od
}

/* The key handed to a waiter that has not taken it up runs out with the hand-off lease; the
   grant message still on its way to it is stale by then. */
active proctype expiry() {
end:
  do
  :: atomic { key == GHOST -> key = NONE; printf("@ the key handed to a waiter that never came runs out\n") }
  :: atomic { key != NONE && key != GHOST && grant_msg[key] && mstate[key] == WAITING ->
              grant_msg[key] = false; key = NONE }
  :: mstate[0] == DONE && mstate[1] == DONE -> break
  od
}

init {
  atomic {
    run mutex_client(0);
    run mutex_client(1);
    run reader()
  }
}

/* Never a mutex holder beside a reader. */
active proctype monitor() {
end:
  atomic {
    reading && (mstate[0] == HELD || mstate[1] == HELD) ->
    assert(!reading || (mstate[0] != HELD && mstate[1] != HELD))
  }
}
