/*
 * The Redis queued hand-off protocol of dlock::fair_mutex and the writer side of
 * dlock::shared_mutex, for spin (docs/handoff-model.md says what is modelled, what is assumed, and
 * which code each part stands for; models/check.sh runs it).
 *
 * Compile-time switches (spin -D...):
 *   STALE_GRANT_BUG   the protocol before tickets: a waiter takes any "granted <fence>" message
 *                     that reaches it, valid from its latest "not yet" refresh (spin finds the
 *                     stale grant: a holder with an old token next to the rightful one)
 *   ARRIVALS_EXPIRE   the arrival counter (source of tickets) expires like the queue keys, so a
 *                     ticket can be handed out twice (spin finds the same stale grant through it)
 *   NCLIENTS, SESSIONS, MAXT, LEASE, HANDOFF, LIVE   bounds and durations (defaults below)
 *
 * Time is a global clock `now` (0..MAXT) that one process advances. A process that does not run
 * while the clock advances is paused (SIGSTOP, a VM freeze, a slow network in either direction);
 * every step of every process may be delayed that way. Each Redis script runs atomically at the
 * time it runs (atomic blocks); an acquire/refresh request may run later than it was sent, and
 * its reply may be lost; a release or leave may be lost. Published messages may be lost, and wait
 * in the subscriber for any time (a later one replaces an unread one).
 */

#ifndef NCLIENTS
#define NCLIENTS 2 /* client processes */
#endif
#ifndef SESSIONS
#define SESSIONS 2 /* acquisitions per client, one after the other, each with a new token */
#endif
#define NTOKENS (NCLIENTS * SESSIONS)
#ifndef MAXT
#define MAXT 3
#endif
#ifndef LEASE
#define LEASE 3 /* the holder's own lease (lock_options.lease) */
#endif
#ifndef HANDOFF
#define HANDOFF 2 /* the hand-off lease: PX of a grant made by a release (handoff_lease) */
#endif
#ifndef LIVE
#define LIVE 2 /* a waiter's liveness after each refresh (waiter_liveness) */
#endif

#define NONE 255
#define MIN(a, b) ((a) < (b) -> (a) : (b))

/* client states */
#define IDLE 0
#define WAITING 1
#define HELD 2
#define DONE 3

byte now = 0;
byte h, j, kt;  /* scratch of the server scripts (zero outside them) */

/* ---- server state: the Redis keys of one lock name ---- */
byte owner = NONE;   /* <p>:{n}: the owner's token (here: client id) */
byte owner_exp = 0;  /* ... and the server time its PX runs out */
byte fence = 0;      /* <p>:{n}:fence: INCR per grant, never expires */
byte arrivals = 0;   /* <p>:{n}:arrivals: INCR per queue entry; the ticket */
byte arrivals_exp = 0;
bool inq[NTOKENS];      /* <p>:{n}:queue membership */
byte qticket[NTOKENS];  /* ... and the entry's arrival number (ticket) */
byte alive[NTOKENS];    /* <p>:{n}:alive: liveness deadline, server time */

/* PUBLISH <channel>:<token> "granted <fence> <ticket>": the subscriber keeps the latest message
 * of each waiter's channel (a later one overwrites it) until the waiter reads it */
bool mhas[NTOKENS];
byte mfence[NTOKENS];
byte mticket[NTOKENS];

/* ---- what the clients believe, and what the checker records ---- */
byte cstate[NCLIENTS];
byte vu[NCLIENTS];  /* it believes it holds while now < vu */

#define believes(i) (cstate[i] == HELD && now < vu[i])
#if NCLIENTS == 2
#define ANY_BELIEVES (believes(0) || believes(1))
#define TWO_HOLD (believes(0) && believes(1))
#else
#define ANY_BELIEVES (believes(0) || believes(1) || believes(2))
#define TWO_HOLD ((believes(0) && believes(1)) || (believes(0) && believes(2)) || \
                  (believes(1) && believes(2)))
#endif

/* ---- server scripts (inline: the caller wraps them in atomic) ---- */

/* Redis never returns a key past its PX. */
inline expire_keys() {
    if
    :: owner != NONE && now >= owner_exp -> owner = NONE
    :: else -> skip
    fi;
#ifdef ARRIVALS_EXPIRE
    if
    :: now >= arrivals_exp -> arrivals = 0
    :: else -> skip
    fi
#endif
}

/* The live queue entry with the smallest arrival number, or NONE. */
inline queue_head(h) {
    h = NONE;
    j = 0;
    do
    :: j < NTOKENS ->
        if
        :: inq[j] && (h == NONE || qticket[j] < qticket[h]) -> h = j
        :: else -> skip
        fi;
        j++
    :: else -> break
    od
}

/* Dead waiters (liveness passed) lose their place. */
inline purge_dead() {
    j = 0;
    do
    :: j < NTOKENS ->
        if
        :: inq[j] && alive[j] < now -> dequeue(j)
        :: else -> skip
        fi;
        j++
    :: else -> break
    od
}

/* ZREM + HDEL: out of the queue (the fields are zeroed so that equal queues are equal states). */
inline dequeue(c) {
    inq[c] = false;
    qticket[c] = 0;
    alive[c] = 0
}

/* INCR fence; SET owner <c> PX px; out of the queue. Fencing, part 1: the server never grants
 * while any client believes it holds (so every later grant has a larger token than any token a
 * client still trusts). */
inline grant_to(c, px) {
    assert(!ANY_BELIEVES);
    fence++;
    owner = c;
    owner_exp = now + px;
    dequeue(c);
    printf("t=%d server: owner := token %d, fence %d, PX until %d\n", now, c, fence, owner_exp)
}

/* PUBLISH to c's channel: delivered into its subscriber's buffer, or lost. */
inline publish(c, f, k) {
    if
    :: mhas[c] = true; mfence[c] = f; mticket[c] = k;
       printf("t=%d server: PUBLISH to token %d: granted %d (ticket %d)\n", now, c, f, k)
    :: true -> printf("t=%d server: PUBLISH to token %d lost\n", now, c)
    fi
}

/* fair_acquire.lua / rw_write_acquire.lua: take, or join / refresh our queue entry.
 * Out: rg (1: we own it, with fence rf), else rk = our entry's ticket. */
inline acquire_script(c, rg, rf, rk) {
    rg = 0;
    expire_keys();
    if
    :: owner == c ->  /* handed to us while we waited: PEXPIRE our own lease */
        owner_exp = now + LEASE;
        dequeue(c);
        rg = 1;
        rf = fence
    :: else ->
        purge_dead();
        rg = 0;
        if
        :: owner == NONE ->
            queue_head(h);
            if
            :: h == NONE || h == c ->
                grant_to(c, LEASE);
                rg = 1;
                rf = fence
            :: else ->  /* free, but an earlier live waiter is first: hand it over now */
                kt = qticket[h];
                grant_to(h, LIVE);
                publish(h, fence, kt)
            fi
        :: else -> skip
        fi;
        if
        :: rg == 0 ->
            if
            :: !inq[c] ->
                arrivals++;
                inq[c] = true;
                qticket[c] = arrivals
            :: else -> skip
            fi;
            alive[c] = now + LIVE;
#ifdef ARRIVALS_EXPIRE
            arrivals_exp = now + LIVE;
#endif
            rk = qticket[c]
        :: else -> skip
        fi
    fi;
    h = 0;
    j = 0;
    kt = 0
}

/* fair_release.lua / rw_write_release.lua: release (hand-off to the next live waiter), also the
 * leave of a waiter that gives up (it releases with hand-off if the grant reached it). */
inline release_script(c) {
    dequeue(c);
    expire_keys();
    if
    :: owner == c ->
        do
        :: queue_head(h);
           if
           :: h == NONE -> owner = NONE; break
           :: else ->
               if
               :: alive[h] >= now ->
                   kt = qticket[h];
                   grant_to(h, HANDOFF);
                   publish(h, fence, kt);
                   break
               :: else -> dequeue(h)  /* a dead waiter: skip it */
               fi
           fi
        od
    :: else -> skip
    fi;
    h = 0;
    j = 0;
    kt = 0
}

/* renew.lua: PEXPIRE our lease if the key still names us. */
inline renew_script(c, ok) {
    ok = 0;
    expire_keys();
    if
    :: owner == c -> owner_exp = now + LEASE; ok = 1
    :: else -> ok = 0
    fi
}

/* The client begins to hold with token f, believed until v. Fencing, part 2: a grant a client
 * starts to trust is the server's latest (no newer grant exists), so tokens are trusted in
 * strictly increasing order and never below one the server has handed to anyone else. */
inline accept(f, v) {
    vu[c] = v;
    cstate[c] = HELD;
    printf("t=%d token %d: holds with fence %d, valid until %d\n", now, me, f, v);
    assert(now >= v || f == fence)
}

proctype client(byte c) {
    byte sent, ny_sent, my_ticket, f, k, v, rg, rf, rk, ok;
    byte me = c * SESSIONS;  /* this acquisition's token (its queue entry and channel) */

session:
    /* engine::acquire_until: the first attempt (and every refresh) */
    cstate[c] = WAITING;
refresh:
    sent = now;  /* the request runs on the server at any later time, or never */
    if
    :: atomic {
           acquire_script(me, rg, rf, rk);
           /* the reply (a reply read late only shortens the belief: see docs) */
           if
           :: rg == 1 -> accept(rf, sent + LEASE)
           :: else -> ny_sent = sent; my_ticket = rk;
              printf("t=%d token %d: refresh sent at %d: not yet, ticket %d\n", now, me, sent, rk)
           fi
       }
    :: atomic { acquire_script(me, rg, rf, rk); rg = 2 }  /* reply lost: give up */
    fi;
    if
    :: rg == 1 -> rg = 0; rf = 0; rk = 0; sent = 0; goto held
    :: rg == 2 -> rg = 0; rf = 0; rk = 0; sent = 0; goto leave
    :: else -> rg = 0; rf = 0; rk = 0; sent = 0
    fi;

    /* waiting: refresh on the liveness timer (any time: timers run late under pauses), take a
     * hand-off message from the subscriber, or give up (timeout, cancel) */
    do
    :: goto refresh
    :: atomic {
           mhas[me] -> f = mfence[me]; k = mticket[me]; mhas[me] = false;
           printf("t=%d token %d: reads granted %d (ticket %d)\n", now, me, f, k);
#ifdef STALE_GRANT_BUG
           /* engine.cpp before tickets: the latest message, valid from refreshed_at */
           accept(f, ny_sent + HANDOFF);
           rg = 1;
#else
           v = ny_sent + MIN(HANDOFF, LEASE);
           if
           :: k == my_ticket && now < v -> accept(f, v); rg = 1
           :: k == my_ticket && now >= v -> rg = 3  /* too late to trust: ask the server */
           :: k != my_ticket -> rg = 0  /* another entry's grant: stale */
           fi;
#endif
           f = 0;
           k = 0;
           v = 0
       };
       if
       :: rg == 1 -> rg = 0; goto held
       :: rg == 3 -> rg = 0; goto refresh
       :: else -> skip
       fi
    :: goto leave
    od;

held:
    do
    :: atomic {  /* the watchdog renews (see docs: send and run at once, replies not lost) */
           renew_script(me, ok);
           if
           :: ok == 1 -> vu[c] = now + LEASE
           :: else -> cstate[c] = DONE;  /* lost */
              printf("t=%d token %d: renewal says lost\n", now, me)
           fi;
           ok = 0
       };
       if
       :: cstate[c] == DONE -> goto release
       :: else -> skip
       fi
    :: cstate[c] = DONE; goto release  /* unlock(): stops believing before it sends */
    od;

leave:
    cstate[c] = DONE;
release:
    atomic { vu[c] = 0; ny_sent = 0; my_ticket = 0 };
    if
    :: atomic { release_script(me); printf("t=%d token %d: release/leave ran\n", now, me) }
    :: skip  /* lost: the key and the entry expire */
    fi;
    atomic {
        if
        :: me + 1 < (c + 1) * SESSIONS -> me++; cstate[c] = IDLE; goto session
        :: else -> skip
        fi
    }
}

/* The clock: a tick may come between any two steps of any process. */
active proctype clock() {
    do
    :: now < MAXT -> now++
    :: else -> break
    od
}

init {
    byte i = 0;
    atomic {
        do
        :: i < NCLIENTS -> run client(i); i++
        :: else -> break
        od
    }
}

/* Mutual exclusion, checked in every reachable state: no two clients believe they hold at the
 * same instant. (The fencing assertions are in grant_to and accept.) */
active proctype monitor() {
end_monitor:  /* waiting here forever is a valid end */
    atomic { TWO_HOLD -> assert(!TWO_HOLD) }
}
