/*
 * The wake-one protocol of dlock::mutex on one Redis server, for spin (docs/handoff-model.md,
 * "Waking one mutex waiter", says what is modelled, what is abstracted and which code each part
 * stands for; models/check.sh runs it). The inlines acquire / release / mutex_leave are the Lua
 * scripts of those names (src/redis/lua/), wake_mutex_head and purge_dead the functions
 * dlock_wake_mutex_head and dlock_purge_dead of lib/queue.lua; a waiter's labels are the steps of
 * engine::acquire_until for lock_kind::exclusive; the subscriber process is the client's
 * subscriber (src/redis/subscriber.cpp) together with Redis's pub/sub delivery.
 *
 * The periodic re-check is switched OFF: a waiter attempts again only when a wake-up reaches it
 * (the keyed generation moved, registration::wait). Its liveness refresh is kept (a waiter that
 * has not crashed never loses its place), its chance to find the lock free is what is removed.
 * So the model shows what the notification path does alone. Holders always release (a holder
 * that crashes, or a lost release, is what the holder's PTTL bound is for: not modelled).
 *
 * The turn (docs/redis-lock.md, "Waking one waiter"): a release that wakes the same head as the
 * previous wake-up (the woken mark, <p>:{n}:mutex_woken) reserves the free lock for it
 * (<p>:{n}:mutex_turn): acquire refuses everyone else until the head takes it, leaves, or the
 * turn's window runs out; the live waiter next in line is woken too (in the code it then
 * re-checks when the turn runs out: a timer, not modelled; here its wake-up only adds attempts).
 * The window runs out here only for a crashed head (the head responds within it: a live head
 * needs a millisecond, the window is 100 ms); SLOW_TURN lets it run out at any time.
 *
 * Properties:
 *   (monitor) at quiescence, after which nobody gives up or crashes any more, no waiter that has
 *   not given up is still waiting (the lock is then free and nothing is in flight). With CRASH,
 *   the one allowed exception: the last wake-up went to a crashed waiter whose liveness had not
 *   run out yet (the others' re-check takes the free lock; see docs).
 *   (bound, in take) a head that was woken gets the lock before anyone else is granted it twice,
 *   unless it gives up or crashes: at most one barged hold (not checked with SLOW_TURN).
 *
 * Compile-time switches (spin -D...):
 *   CRASH                      a waiter may crash (or lose its leave, or have an attempt land
 *                              after its leave) at any point of its wait: its entry stays until
 *                              its liveness runs out
 *   RECONNECT                  the subscriber connection drops once and reconnects (as built)
 *   REGISTER_BEFORE_SUBSCRIBE  a waiter's registering attempt may run before its SUBSCRIBE (the
 *                              code does so when wait_subscribed gives up at command_timeout)
 *   negative controls, each must fail:
 *   OLD_NO_CONFIRM_WAKE        (with RECONNECT or REGISTER_BEFORE_SUBSCRIBE) the code before the
 *                              fix: a SUBSCRIBE confirmation does not move the waiter's
 *                              generation (see docs, "What spin found")
 *   LEAVE_NO_WAKE              mutex_leave.lua does not wake the next head when the lock is free
 *   NO_PURGE                   (with CRASH) a release or leave does not purge dead waiters
 *   NO_TURN                    the protocol before the turn: a woken head may be barged past
 *                              again and again (violates the bound)
 *   SLOW_TURN                  a turn may run out before its (live) head comes: the monitor's
 *                              property must still hold; the bound is not checked
 *   WITNESS                    fails where a woken head finds the lock taken by a barger and
 *                              keeps its place: shows the search reaches that (not vacuous)
 *   TURN_WITNESS               fails where a free lock is refused because of another's turn
 *   CRASH_TURN_WITNESS         (with CRASH) fails where a crashed head's turn runs out unused
 *   NW, SESSIONS, BARGES       waiters, acquire_until calls of each, try_locks of the barger
 */

#ifndef NW
#define NW 3 /* waiter processes (at most 3) (one acquire_until each; ids 0..NW-1) */
#endif
#ifndef SESSIONS
#define SESSIONS 2 /* acquire_until calls per waiter, one after the other, each with a new id */
#endif
#ifndef BARGES
#define BARGES 2 /* try_lock() calls of the barger (id NW) */
#endif

#define NONE 255

/* waiter states */
#define IDLE 0     /* not yet past its first attempt */
#define WAITING 1  /* subscribed (or subscribing) and registering or registered: it waits */
#define HELD 2
#define GONE 3     /* gave up (left), or released: its registration is gone */
#define CRASHED 4

byte h, j, k;  /* scratch of the server scripts (zero outside them) */

/* ---- server state: the Redis keys of one lock name ---- */
byte owner = NONE;   /* <p>:{n}: the holder (acquire.lua's SET NX) */
byte arrivals = 0;   /* <p>:{n}:mutex_arrivals */
bool inq[NW];        /* <p>:{n}:mutex_waiters membership ... */
byte arr[NW];        /* ... and its score, the arrival number */
bool dead[NW];       /* <p>:{n}:mutex_alive: the entry's liveness deadline has passed */
byte turn = NONE;    /* <p>:{n}:mutex_turn: the free lock is reserved for this waiter */
byte wokenm = NONE;  /* <p>:{n}:mutex_woken: the head the previous wake-up went to */
bool sub[NW];        /* the waiter's hand-off channel <p>:{n}:released:mutex:<client> is
                        subscribed on the server: a PUBLISH reaches its client */

/* ---- pub/sub and the client's subscriber ---- */
bool inflight[NW];   /* "wake <id>" published, not yet dispatched by the client's subscriber */
bool news[NW];       /* registration::generation() moved since the waiter read `seen` */
#ifdef RECONNECT
bool dropped = false;  /* the subscriber connection is down (once) */
bool reconnected = false;
#endif

/* ---- the clients, and what the checker records ---- */
byte ws[NW];         /* waiter states */
byte holders = 0;    /* clients that hold (safety sanity) */
bool frozen = false; /* from now on nobody gives up or crashes (set once, at any time) */
byte last_woken = NONE;  /* the head the latest "wake <id>" was published to */
bool woke_dead = false;  /* ... whose liveness had already run out then (NO_PURGE) */
bool gw[NW];         /* the bound: woken as the head since it registered, still waiting */
byte passed[NW];     /* ... and how many grants went to others since */

/* ---- server scripts (inline: the caller wraps them in atomic) ---- */

/* SET NX PX succeeded: the caller holds; a registered id leaves the queue (acquire.lua). */
inline take(c) {
    owner = c;
    holders++;
    assert(holders == 1);  /* safety: SET NX decides, never two holders */
#ifndef SLOW_TURN
    if
    :: c < NW -> gw[c] = false; passed[c] = 0
    :: else -> skip  /* the barger */
    fi;
    j = 0;
    do
    :: j < NW ->
        if
        :: j != c && gw[j] && ws[j] == WAITING ->
            passed[j]++;
            assert(passed[j] <= 1)  /* the bound: one barged hold at most */
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    j = 0;
#endif
    printf("@ server: %d takes the lock\n", c)
}

/* ZREM :mutex_waiters + ZREM :mutex_alive (fields zeroed so that equal queues are equal states) */
inline dequeue(c) {
    inq[c] = false;
    arr[c] = 0
}

/* dlock_purge_dead (lib/queue.lua): entries whose liveness deadline passed lose their place. */
inline purge_dead() {
    j = 0;
    do
    :: j < NW ->
        if
        :: inq[j] && dead[j] -> dequeue(j); printf("@ server: purges dead %d\n", j)
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    j = 0
}

/* dlock_wake_mutex_head (lib/queue.lua): purge, then PUBLISH "wake <head>" on the head's client
 * hand-off channel. The head stays queued. Delivered if that channel is subscribed, else lost. */
inline wake_mutex_head() {
#ifndef NO_PURGE
    purge_dead();
#endif
    h = NONE;
    j = 0;
    do
    :: j < NW ->
        if
        :: inq[j] && (h == NONE || arr[j] < arr[h]) -> h = j
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    if
    :: h != NONE ->
#ifndef NO_TURN
        if
        :: wokenm == h ->
            turn = h;
            printf("@ server: the turn is %d's\n", h);
            /* the live waiter next in line is woken too (it re-checks when the turn runs out) */
            k = NONE;
            j = 0;
            do
            :: j < NW ->
                if
                :: inq[j] && j != h && !dead[j] && (k == NONE || arr[j] < arr[k]) -> k = j
                :: else -> skip
                fi;
                j++
            :: else -> break
            od;
            if
            :: k != NONE && sub[k] -> inflight[k] = true; printf("@ server: PUBLISH wake %d\n", k)
            :: else -> skip
            fi;
            k = 0;
            j = 0
        :: else -> wokenm = h
        fi;
#endif
#ifndef SLOW_TURN
        if
        :: ws[h] == WAITING -> gw[h] = true
        :: else -> skip
        fi;
#endif
        last_woken = h;
        woke_dead = dead[h];
        if
        :: sub[h] -> inflight[h] = true; printf("@ server: PUBLISH wake %d\n", h)
        :: else -> printf("@ server: PUBLISH wake %d: nobody subscribed, lost\n", h)
        fi
    :: else -> skip
    fi;
    h = 0;
    j = 0
}

/* acquire.lua; reg: ARGV[9] carries the waiter id. Out: got = 1 when granted. A pending turn
 * counts as held for everyone but its waiter; a grant ends the grantee's turn and woken mark. */
inline acquire(c, reg, got) {
    if
    :: owner == NONE && (turn == NONE || (reg && turn == c)) ->
        take(c);
        got = 1;
        if
        :: reg ->
            dequeue(c);
            if
            :: turn == c -> turn = NONE
            :: else -> skip
            fi;
            if
            :: wokenm == c -> wokenm = NONE
            :: else -> skip
            fi
        :: else -> skip
        fi
    :: else ->
        got = 0;
#ifdef TURN_WITNESS
        assert(owner != NONE);  /* check.sh: refused by another's turn */
#endif
        if
        :: reg && !inq[c] ->  /* dlock_join_queue: join once, ordered by arrival */
            arrivals++;
            inq[c] = true;
            arr[c] = arrivals;
            printf("@ server: %d registers, arrival %d\n", c, arrivals)
        :: reg && inq[c] ->  /* a refresh: the liveness deadline moves (kept, see above) */
            printf("@ server: %d refreshes: held\n", c)
        :: else -> skip
        fi
    fi
}

/* release.lua: compare-and-delete, PUBLISH released (no mutex waiter listens there), wake. */
inline release(c) {
    assert(owner == c);
    owner = NONE;
    holders--;
    printf("@ server: %d releases\n", c);
    wake_mutex_head()
}

/* mutex_leave.lua: ZREM our id, our turn and woken mark go; if the lock is free (no holder, no
 * turn), wake the next live head. */
inline mutex_leave(c) {
    dequeue(c);
    if
    :: turn == c -> turn = NONE
    :: else -> skip
    fi;
    if
    :: wokenm == c -> wokenm = NONE
    :: else -> skip
    fi;
    printf("@ server: %d leaves\n", c);
#ifndef LEAVE_NO_WAKE
    if
    :: owner == NONE && turn == NONE -> wake_mutex_head()
    :: else -> skip
    fi
#endif
}

/* ---- clients ---- */

/* engine::acquire_until(lock_kind::exclusive) on one server, with a wait bound (lock() or
 * try_lock_for). */
proctype waiter(byte me) {
    bit got, woken;
    byte session = 0;

acquire_until:
    /* engine::attempt, first: acquire.lua without a waiter id (ARGV[9] empty) */
    atomic {
        acquire(me, false, got);
        if
        :: got -> ws[me] = HELD
        :: else -> ws[me] = WAITING
        fi
    }
    if
    :: got -> got = 0; goto held
    :: else -> skip
    fi;

    /* action::subscribe: waiter = "mutex:<client>.<random>", registration on the client's
     * hand-off channel keyed by that id, SUBSCRIBE, waiting->wait_subscribed(). It returns when
     * the server confirmed the SUBSCRIBE (it processed it: every later PUBLISH is delivered). */
#if defined(RECONNECT) && !defined(REGISTER_BEFORE_SUBSCRIBE)
    atomic {  /* with the connection down it returns at command_timeout, unconfirmed */
        if
        :: !dropped -> sub[me] = true
        :: else -> skip
        fi
    };
#elif !defined(REGISTER_BEFORE_SUBSCRIBE)
    sub[me] = true;
#endif
    /* (with REGISTER_BEFORE_SUBSCRIBE it returns at command_timeout: the subscriber process
     * lands the SUBSCRIBE at any time, before or after the attempts below) */

attempt:  /* action::attempt: seen = waiting->generation(), then acquire.lua with the id */
    news[me] = false;
    atomic {
        acquire(me, true, got);  /* from here on the leave guard is armed */
        if
        :: got -> ws[me] = HELD
        :: else -> skip
        fi
    }
    if
    :: got -> got = 0; woken = 0; goto held
    :: else ->
#ifdef WITNESS
        assert(!woken);  /* check.sh: a woken head found a barger's lock and waits again */
#endif
        woken = 0
    fi;

    /* waiting->wait(seen, ...): until a wake-up moved the generation. The re-check timer is
     * off. The waiter may give up (deadline, cancel, error: the leave guard runs mutex_leave)
     * or crash at any point until the monitor freezes that. */
end_wait:
    do
    :: news[me] -> woken = 1; printf("@ %d: woken, attempts\n", me); goto attempt  /* woke() */
    :: !frozen -> goto leave
#ifdef CRASH
    :: !frozen -> goto crash
#endif
    od;

leave:  /* the leave guard: engine::leave_queue -> mutex_leave.lua, then the registration goes */
    atomic { mutex_leave(me); ws[me] = GONE; news[me] = false; woken = 0; gw[me] = false;
             passed[me] = 0 };
    goto next;

#ifdef CRASH
crash:  /* the process dies (or its leave is lost): its entry stays until its liveness runs out;
         * its connections close, so its channel is no longer subscribed */
    atomic {
        ws[me] = CRASHED;
        gw[me] = false;
        passed[me] = 0;
        sub[me] = false;
        inflight[me] = false;
        news[me] = false;
        printf("@ %d crashes\n", me)
    };
    goto end_done;
#endif

held:  /* the holder; unlock() -> engine::release -> release.lua (never lost here) */
    atomic { release(me); ws[me] = GONE; news[me] = false };
next:  /* the registration is gone: a "wake" for this id is dropped; the next call, a new id */
    atomic {
        inflight[me] = false;
        sub[me] = false;  /* (the channel may linger; a new registration subscribes again) */
        session++;
        if
        :: session < SESSIONS -> ws[me] = IDLE; goto acquire_until
        :: else -> skip
        fi
    };
end_done:
    skip
}

/* A caller that never registers: try_lock() (or the first attempt of another waiter). */
proctype barger() {
    byte n = 0;
    bit got;
    do
    :: n < BARGES ->
        atomic {
            acquire(NW, false, got);
            n++
        };
        if
        :: got -> atomic { release(NW); got = 0 }
        :: else -> skip
        fi
    :: else -> break
    od
}

/* The client's subscriber (background thread, subscriber::dispatch) and Redis's pub/sub: a
 * message on a subscribed connection arrives, in order, at any later time; "wake <id>" goes to
 * the keyed registration of that id only (dropped if it is gone). Also the passage of time for
 * a crashed waiter's liveness, the late SUBSCRIBE, and a reconnect. */
inline deliver(i) {
    atomic {
        inflight[i] ->
        inflight[i] = false;
        if
        :: ws[i] == WAITING -> news[i] = true; printf("@ %d: wake delivered\n", i)
        :: else -> skip  /* no registration with that id any more: dropped */
        fi
    }
}

#ifdef CRASH
/* time passes: a crashed waiter's liveness deadline (server time + 2 s at its last attempt) */
inline expire(i) {
    atomic { ws[i] == CRASHED && inq[i] && !dead[i] ->
             dead[i] = true; printf("@ %d: liveness runs out\n", i) }
}
#endif

/* time passes: a turn's window (PX 100 ms) runs out before its head came: only a crashed head
 * is that late here (SLOW_TURN: any head); the woken mark (PX: the head's liveness, extended by
 * its refreshes) runs out only once its head no longer refreshes */
inline expire_turn() {
#ifdef SLOW_TURN
    atomic { turn != NONE -> turn = NONE; printf("@ server: the turn runs out\n") }
#else
    atomic { turn != NONE && ws[turn] == CRASHED ->
#ifdef CRASH_TURN_WITNESS
             assert(false);  /* check.sh: a crashed head's turn runs out unused */
#endif
             turn = NONE;
             printf("@ server: the crashed head's turn runs out\n") }
#endif
}
inline expire_woken() {
    atomic { wokenm != NONE && ws[wokenm] == CRASHED -> wokenm = NONE }
}

#ifdef RECONNECT
#define CONNECTED (!dropped)
#else
#define CONNECTED true
#endif

/* the SUBSCRIBE (sent when the waiter registered, or again after a reconnect) is processed by
 * the server and confirmed: subscriber::dispatch("subscribe"), which moves the channel's
 * generation (a waiter whose wait_subscribed() saw the confirmation reads `seen` after it, at
 * label attempt, so only a waiter already past that is woken) */
inline confirm(i) {
    atomic { ws[i] == WAITING && !sub[i] && CONNECTED -> sub[i] = true;
#ifndef OLD_NO_CONFIRM_WAKE
             news[i] = true;
#endif
             printf("@ %d: SUBSCRIBE confirmed\n", i) }
}

#if NW == 1
#define EACH(step) :: step(0)
#elif NW == 2
#define EACH(step) :: step(0) :: step(1)
#else
#define EACH(step) :: step(0) :: step(1) :: step(2)
#endif

active proctype subscriber() {
end_sub:
    do
    EACH(deliver)
#ifdef CRASH
    EACH(expire)
    :: expire_woken()
#endif
#if defined(CRASH) || defined(SLOW_TURN)
    :: expire_turn()
#endif
#if defined(REGISTER_BEFORE_SUBSCRIBE) || defined(RECONNECT)
    EACH(confirm)
#endif
#ifdef RECONNECT
    /* subscriber::reset_connection: messages in flight are lost; ... */
    :: atomic { !dropped && !reconnected ->
                dropped = true;
                j = 0;
                do
                :: j < NW -> sub[j] = false; inflight[j] = false; j++
                :: else -> break
                od;
                j = 0;
                printf("@ subscriber connection drops\n") }
    /* ... service() reconnects: every channel's generation moves (every waiter retries), then
     * the SUBSCRIBEs are sent again (confirmed by the step above, later) */
    :: atomic { dropped ->
                dropped = false;
                reconnected = true;
                j = 0;
                do
                :: j < NW ->
                    if
                    :: ws[j] == WAITING -> news[j] = true
                    :: else -> skip
                    fi;
                    j++
                :: else -> break
                od;
                j = 0;
                printf("@ subscriber reconnects: every waiter is woken\n") }
#endif
    od
}

init {
    byte i = 0;
    atomic {
        do
        :: i < NW -> run waiter(i); i++
        :: else -> break
        od;
        run barger()
    }
}

/* At some point nobody gives up or crashes any more; once nothing can move, no waiter that has
 * not given up may still wait. */
#define STRANDED (ws[0] == WAITING || (NW > 1 && ws[1] == WAITING) || (NW > 2 && ws[2] == WAITING))

active proctype monitor() {
    frozen = true;
    atomic {
        timeout ->
        assert(owner == NONE);
#ifdef CRASH
        /* the bound: only a crashed waiter that was woken while still live can be the reason */
        assert(!STRANDED || (last_woken != NONE && ws[last_woken] == CRASHED && !woke_dead))
#else
        assert(!STRANDED)
#endif
    }
}
