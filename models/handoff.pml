/*
 * The Redis queued hand-off protocol of dlock::fair_mutex and the writer side of
 * dlock::shared_mutex, for spin (docs/handoff-model.md says what is modelled, what is assumed, and
 * which code each part stands for; models/check.sh runs it). Names follow the code: the inlines
 * fair_acquire / fair_release / renew are the Lua scripts of those names (with their rw_write_*
 * twins folded in), the client's labels are the steps of engine::acquire_until.
 *
 * Compile-time switches (spin -D...):
 *   STALE_GRANT_BUG   the protocol before tickets: a waiter takes any "granted <fence>" message
 *                     that reaches it, valid from its latest "not yet" refresh (spin finds the
 *                     stale grant: a holder with an old token next to the rightful one)
 *   ARRIVALS_EXPIRE   the arrival counter expires with the queue keys as built, but the script
 *                     ignores the waiter's ticket floor (ARGV[8]): a re-queued waiter can draw a
 *                     ticket it had before (spin finds the same stale grant through it)
 *   FLOOR_WITNESS     fails where the floor raises a ticket: shows the search reaches an expired
 *                     counter with a waiter that had a ticket before (not a vacuous pass)
 *   NCLIENTS, SESSIONS, MAXT, LEASE, HANDOFF, LIVE   bounds and durations (defaults below)
 *
 * Time is a global clock `now` (0..MAXT) that one process advances. A process that does not run
 * while the clock advances is paused (SIGSTOP, a VM freeze, a slow network in either direction);
 * every step of every process may be delayed that way. Each Redis script runs atomically at the
 * time it runs (atomic blocks); an attempt may run later than it was sent, and its reply may be
 * lost; a release or leave may be lost. Published messages may be lost, and wait in the
 * subscriber for any time (a later one replaces the kept one).
 */

#ifndef NCLIENTS
#define NCLIENTS 2 /* client processes */
#endif
#ifndef SESSIONS
#define SESSIONS 2 /* acquire_until calls per client, one after the other, each with a new token */
#endif
#define NTOKENS (NCLIENTS * SESSIONS)
#ifndef MAXT
#define MAXT 3
#endif
#ifndef LIVE
#define LIVE 1 /* a waiter's liveness after each refresh (waiter_liveness) */
#endif
#ifndef HANDOFF
#define HANDOFF LIVE /* the hand-off lease: PX of a grant made by a release (handoff_lease) */
#endif
#ifndef LEASE
#define LEASE 2 /* the holder's own lease (lock_options.lease) */
#endif
#define QUEUE_TTL (2 * LIVE) /* the queue keys' PEXPIRE after a join or refresh */

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
byte owner = NONE;   /* <p>:{n}: the owner's token */
byte owner_exp = 0;  /* ... and the server time its PX runs out */
byte fence = 0;      /* <p>:{n}:fence: INCR per grant, never expires */
byte arrivals = 0;   /* <p>:{n}:arrivals: INCR per new queue entry, the source of tickets */
byte queue_exp = 0;  /* when :queue, :alive and :arrivals expire (0: no keys) */
bool inq[NTOKENS];      /* <p>:{n}:queue membership */
byte qticket[NTOKENS];  /* ... and the entry's ticket (its score) */
byte alive[NTOKENS];    /* <p>:{n}:alive: liveness deadline, server time */

/* PUBLISH <channel>:<client> "granted <fence> <ticket> <token>" (dlock_publish_grant): the
 * client's subscriber hands each message to the waiter whose token it names and keeps that
 * waiter's latest one (a later one overwrites it; one naming a token nobody waits with is
 * dropped); reading it does not remove it. Per token, exactly a channel of its own. */
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

/* ZREM :queue + ZREM :alive (the fields are zeroed so that equal queues are equal states). */
inline dequeue(c) {
    inq[c] = false;
    qticket[c] = 0;
    alive[c] = 0
}

/* Redis never returns a key past its PX. The queue keys all get the same PEXPIRE in the same
 * script, and a ZSET emptied and re-created is re-armed there too, so :queue and :alive never
 * outlive :arrivals: when the counter expires, the queue is gone as well (every entry in it was
 * dead a liveness earlier). */
inline expire_keys() {
    if
    :: owner != NONE && now >= owner_exp -> owner = NONE; owner_exp = 0
    :: else -> skip
    fi;
    if
    :: queue_exp != 0 && now >= queue_exp ->
        arrivals = 0;
        queue_exp = 0;
        j = 0;
        do
        :: j < NTOKENS -> dequeue(j); j++
        :: else -> break
        od
    :: else -> skip
    fi
}

/* ZRANGE :queue 0 0: the entry with the smallest ticket, or NONE. */
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
       printf("t=%d server: PUBLISH to token %d: granted %d %d\n", now, c, f, k)
    :: true -> printf("t=%d server: PUBLISH to token %d lost\n", now, c)
    fi
}

/* The head is live after purge_dead(): grant it with lease px and tell it. */
inline hand_to_head(px) {
    queue_head(h);
    if
    :: h != NONE ->
        kt = qticket[h];
        grant_to(h, px);
        publish(h, fence, kt)
    :: else -> skip
    fi
}

/* fair_acquire.lua / rw_write_acquire.lua (ARGV[8] = floor, the highest ticket this waiter was
 * told): take, or join / refresh our queue entry.
 * Out: rg (1: we own it, with fence rf), else rk = our entry's ticket. */
inline fair_acquire(c, floor, rg, rf, rk) {
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
        if
        :: owner == NONE ->
            queue_head(h);
            if
            :: h == NONE || h == c ->
                grant_to(c, LEASE);
                rg = 1;
                rf = fence
            :: else ->
                if
                :: hand_to_head(LIVE)  /* fair: free, but an earlier live waiter is first */
                :: skip  /* rw_write_acquire.lua: the head takes it at its own refresh */
                fi
            fi
        :: else -> skip
        fi;
        if
        :: rg == 0 ->
            if
            :: !inq[c] ->  /* join once: a new entry's ticket */
                arrivals++;
#ifndef ARRIVALS_EXPIRE
                if
                :: arrivals <= floor ->  /* the counter expired since: SET :arrivals floor+1 */
#ifdef FLOOR_WITNESS
                    assert(false);  /* check.sh: the search does reach a raised ticket */
#endif
                    arrivals = floor + 1
                :: else -> skip
                fi;
#endif
                inq[c] = true;
                qticket[c] = arrivals
            :: else -> skip
            fi;
            alive[c] = now + LIVE;
            if
            :: queue_exp < now + QUEUE_TTL -> queue_exp = now + QUEUE_TTL
            :: else -> skip
            fi;
            rk = qticket[c]
        :: else -> skip
        fi
    fi;
    h = 0;
    j = 0;
    kt = 0
}

/* fair_release.lua / rw_write_release.lua: release (hand-off to the next live waiter), and the
 * leave of a waiter that gives up (which releases with hand-off a grant whose reply it never
 * saw). rw_write_release.lua (and rw_read_release.lua, the last reader share going) also hand a
 * free lock to the head when the caller did not own it: the second branch. */
inline fair_release(c) {
    dequeue(c);
    expire_keys();
    purge_dead();
    if
    :: owner == c ->
        owner = NONE;
        owner_exp = 0;
        hand_to_head(HANDOFF)
    :: owner == NONE -> hand_to_head(HANDOFF)
    :: owner != c -> skip
    fi;
    h = 0;
    j = 0;
    kt = 0
}

/* renew.lua: PEXPIRE our lease if the key still names us. */
inline renew(c, ok) {
    ok = 0;
    expire_keys();
    if
    :: owner == c -> owner_exp = now + LEASE; ok = 1
    :: else -> ok = 0
    fi
}

/* engine::grant: the client begins to hold with token f, believed until v. Fencing, part 2: a
 * grant a client starts to trust is the server's latest (no newer grant exists), so tokens are
 * trusted in strictly increasing order and never below one the server has handed to anyone
 * else. */
inline grant(f, v) {
    vu[c] = v;
    cstate[c] = HELD;
    printf("t=%d token %d: holds with fence %d, valid until %d\n", now, me, f, v);
    assert(now >= v || f == fence)
}

proctype client(byte c) {
    /* engine::acquire_until's locals: sent (this attempt's send time), refreshed_at and ticket
     * (send time and ticket of the latest "not yet"), highest_ticket (ARGV[8] of each attempt) */
    byte sent, refreshed_at, ticket, highest_ticket, f, k, v, rg, rf, rk, ok;
    byte me = c * SESSIONS;  /* this acquire_until's token (its queue entry and channel) */

acquire_until:
    cstate[c] = WAITING;
attempt:  /* engine::attempt: the first one, and every refresh */
    sent = now;  /* the request runs on the server at any later time, or never */
    if
    :: atomic {
           fair_acquire(me, highest_ticket, rg, rf, rk);
           /* the reply (a reply read late only shortens the belief: see docs) */
           if
           :: rg == 1 -> grant(rf, sent + LEASE)
           :: else -> refreshed_at = sent; ticket = rk;
              if
              :: highest_ticket < rk -> highest_ticket = rk
              :: else -> skip
              fi;
              printf("t=%d token %d: attempt sent at %d: not yet, ticket %d\n", now, me, sent, rk)
           fi
       }
    :: atomic { fair_acquire(me, highest_ticket, rg, rf, rk); rg = 2 }  /* reply lost: give_up */
    fi;
    if
    :: rg == 1 -> rg = 0; rf = 0; rk = 0; sent = 0; goto held
    :: rg == 2 -> rg = 0; rf = 0; rk = 0; sent = 0; goto leave_queue
    :: else -> rg = 0; rf = 0; rk = 0; sent = 0
    fi;

    /* waiting->wait(...): refresh on the liveness timer (any time: timers run late under
     * pauses), look at the subscriber's last message, or give up (timeout, cancel) */
    do
    :: goto attempt
    :: atomic {
           mhas[me] -> f = mfence[me]; k = mticket[me];
           /* parse_handoff(waiting->last_message()) */
#ifdef STALE_GRANT_BUG
           /* before tickets: the latest message, valid from refreshed_at */
           printf("t=%d token %d: reads granted %d\n", now, me, f);
           grant(f, refreshed_at + HANDOFF);
           rg = 1;
#else
           v = refreshed_at + MIN(HANDOFF, LEASE);
           if
           :: k == ticket && now < v ->
              printf("t=%d token %d: reads granted %d %d\n", now, me, f, k);
              grant(f, v); rg = 1
           :: k == ticket && now >= v -> rg = 3  /* validity passed: attempt again */
           :: k != ticket -> rg = 0  /* another entry's grant: ignored */
           fi;
#endif
           f = 0;
           k = 0;
           v = 0
       };
       if
       :: rg == 1 -> rg = 0; goto held
       :: rg == 3 -> rg = 0; goto attempt
       :: else -> skip
       fi
    :: goto leave_queue
    od;

held:
    do
    :: atomic {  /* the watchdog renews (see docs: send and run at once, replies not lost) */
           renew(me, ok);
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

leave_queue:  /* give_up() and the leave guard: engine::leave_queue */
    cstate[c] = DONE;
release:  /* engine::release */
    atomic {  /* acquire_until's locals and the registration end */
        vu[c] = 0; refreshed_at = 0; ticket = 0; highest_ticket = 0;
        mhas[me] = false; mfence[me] = 0; mticket[me] = 0
    };
    if
    :: atomic { fair_release(me); printf("t=%d token %d: release/leave ran\n", now, me) }
    :: skip  /* lost: the key and the entry expire */
    fi;
    atomic {
        if
        :: me + 1 < (c + 1) * SESSIONS -> me++; cstate[c] = IDLE; goto acquire_until
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
 * same instant. (The fencing assertions are in grant_to and grant.) */
active proctype monitor() {
end_monitor:  /* waiting here forever is a valid end */
    atomic { TWO_HOLD -> assert(!TWO_HOLD) }
}
