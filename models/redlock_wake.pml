/*
 * The protocol before each Redlock server handed its free key to its own head
 * (models/redlock_grant.pml is the one built now; this one stays for its controls, whose rules
 * the new one keeps: a holder's release takes its waiter id off every server, a split vote
 * retries at once).
 * Registered dlock::mutex waiters on Redlock (three independent servers, quorum two), for spin
 * (docs/handoff-model.md, "Registered waiters on Redlock"; models/check.sh runs it). Each server
 * runs the single-server scripts of that time: acquire.lua registers a waiter id or refreshes it
 * when the lock is held there, a grant there takes the id off that server's waiters, release.lua
 * and mutex_leave.lua wake that server's live head ("wake <head>"; the head stays queued until
 * its own attempt takes the key). An attempt, an undo, a release and a leave run on every server,
 * each server's script atomic, the servers in any interleaving with other clients' scripts
 * (engine::attempt, release_everywhere, engine::release, engine::leave_queue). Every client's
 * subscriber listens on server 0 (its one pub/sub connection): the wake-ups the other servers
 * publish are lost.
 *
 * The periodic re-check is OFF (a waiter attempts again only when a wake-up
 * reaches it), with one exception that the code has and this model keeps: after a split vote
 * (some servers granted, fewer than a quorum; the grants were undone) the waiter attempts again
 * within 2 x node_timeout (acquire_rules.cpp, retry_at with found.granting > 0). A grant on
 * server 0 took its id off server 0's waiters; that retry registers it again.
 *
 * Properties:
 *   (take) never two clients holding a quorum (SET NX on each server; sanity of the model)
 *   (monitor) at quiescence, after which nobody gives up any more, no waiter is still waiting
 *   and every server's lock key is free.
 *
 * A holder granted by a quorum may still be queued on a server that answered "held" (its
 * attempt reached that server before the previous holder's release did); its release takes its
 * waiter id off every server and wakes the next head where the key is gone (release.lua,
 * ARGV[6]).
 *
 * Compile-time switches (spin -D...):
 *   negative controls, must fail:
 *   NO_RELEASE_LEAVE the release without the waiter id (the first version): the holder's id
 *                    stays at the head of server 0's waiters, and its release there, which
 *                    finds no key of its own, wakes nobody
 *   NO_SPLIT_RETRY   after a split vote the waiter waits for a wake-up like any other contended
 *                    attempt: its id is gone from server 0, so nobody wakes it
 *   witness, must fail (the search reaches it):
 *   SPLIT_WITNESS    a registered waiter's attempt ends in a split vote
 *   NW, SESSIONS, BARGES   waiters (at most 3), acquire_until calls of each, try_locks of the
 *                    barger
 */

#ifndef NW
#define NW 2
#endif
#ifndef SESSIONS
#define SESSIONS 2
#endif
#ifndef BARGES
#define BARGES 1
#endif

#define NS 3      /* servers */
#define QUORUM 2
#define NONE 255

#define IDLE 0
#define WAITING 1
#define HELD 2
#define GONE 3

#define AT(s, c) ((s) * NW + (c))

byte h, j;  /* scratch of the server scripts (zero outside them) */

/* ---- each server's keys of one lock name ---- */
byte owner[NS];          /* <p>:{n}: the holder's id on that server (NONE: free) */
bool inq[NS * NW];       /* <p>:{n}:mutex_waiters membership ... */
byte arr[NS * NW];       /* ... and its place (the order of :mutex_arrivals numbers) */

/* ---- pub/sub from server 0, the client's subscriber ---- */
bool inflight[NW];       /* "wake <id>" published by server 0, not yet dispatched */
bool news[NW];           /* registration::generation() moved since the waiter read `seen` */

/* ---- the clients ---- */
byte ws[NW];
byte holders = 0;        /* clients that hold a quorum */
bool frozen = false;

/* The arrival numbers are kept as ranks 1..n (the order is all the scripts read): a global
 * counter would make every re-registration a new state. */
inline dequeue(s, c) {
    if
    :: inq[AT(s, c)] ->
        j = 0;
        do
        :: j < NW ->
            if
            :: inq[AT(s, j)] && arr[AT(s, j)] > arr[AT(s, c)] -> arr[AT(s, j)]--
            :: else -> skip
            fi;
            j++
        :: else -> break
        od;
        j = 0
    :: else -> skip
    fi;
    inq[AT(s, c)] = false;
    arr[AT(s, c)] = 0
}

/* dlock_wake_mutex_head as it was then: PUBLISH "wake <head>" on the head's
 * hand-off channel of server s; only server 0's reach a subscriber. */
inline wake_mutex_head(s) {
    h = NONE;
    j = 0;
    do
    :: j < NW ->
        if
        :: inq[AT(s, j)] && (h == NONE || arr[AT(s, j)] < arr[AT(s, h)]) -> h = j
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    if
    :: h != NONE && s == 0 -> inflight[h] = true; printf("@ server %d: PUBLISH wake %d\n", s, h)
    :: h != NONE && s != 0 -> printf("@ server %d: PUBLISH wake %d: not listened to\n", s, h)
    :: else -> skip
    fi;
    h = 0;
    j = 0
}

/* acquire.lua on server s for client c (NW: the barger); reg: it carries its waiter id. */
inline acquire(s, c, reg, g) {
    if
    :: owner[s] == NONE ->
        owner[s] = c;
        g++;
        if
        :: reg -> dequeue(s, c)
        :: else -> skip
        fi;
        printf("@ server %d: %d takes it\n", s, c)
    :: else ->
        if
        :: reg && !inq[AT(s, c)] ->  /* joins last */
            h = 1;
            j = 0;
            do
            :: j < NW ->
                if
                :: inq[AT(s, j)] -> h++
                :: else -> skip
                fi;
                j++
            :: else -> break
            od;
            j = 0;
            inq[AT(s, c)] = true;
            arr[AT(s, c)] = h;
            h = 0;
            printf("@ server %d: %d registers\n", s, c)
        :: else -> skip
        fi
    fi
}

/* release.lua on server s: compare-and-delete, then wake that server's head. */
inline release(s, c) {
    if
    :: owner[s] == c -> owner[s] = NONE; printf("@ server %d: %d releases\n", s, c);
                        wake_mutex_head(s)
    :: else -> skip
    fi
}

/* mutex_leave.lua on server s: the id goes; if the lock is free there, wake the next head. */
inline mutex_leave(s, c) {
    dequeue(s, c);
    if
    :: owner[s] == NONE -> wake_mutex_head(s)
    :: else -> skip
    fi
}

/* engine::attempt: the acquire script on every server, then the verdict; a failed verdict
 * undoes its grants on every server (release_everywhere). */
inline attempt_all(c, reg, g) {
    g = 0;
    atomic { acquire(0, c, reg, g) };
    atomic { acquire(1, c, reg, g) };
    atomic { acquire(2, c, reg, g) };
    if
    :: g >= QUORUM ->
        atomic { holders++; assert(holders == 1) }
    :: else ->
        atomic { release(0, c) };
        atomic { release(1, c) };
        atomic { release(2, c) }
    fi
}

/* release.lua of a holder that registered while it waited (ARGV[6], its waiter id): the id goes
 * on every server (a server that answered "held" to its granting attempt still queues it), and
 * where the key is already gone (the grant missed that server) the next live head is woken. */
inline holder_release(s, c) {
#ifndef NO_RELEASE_LEAVE
    if
    :: owner[s] == c -> owner[s] = NONE; dequeue(s, c); printf("@ server %d: %d releases\n", s, c);
                        wake_mutex_head(s)
    :: owner[s] == NONE -> dequeue(s, c); printf("@ server %d: %d was not granted here\n", s, c);
                           wake_mutex_head(s)
    :: else -> dequeue(s, c)
    fi
#else
    release(s, c)
#endif
}

inline release_all(c) {
    atomic { holders-- };
    atomic { holder_release(0, c) };
    atomic { holder_release(1, c) };
    atomic { holder_release(2, c) }
}

proctype waiter(byte me) {
    byte g;
    byte session = 0;

acquire_until:
    attempt_all(me, false, g);  /* the first attempt: no waiter id */
    if
    :: g >= QUORUM -> goto held
    :: else -> ws[me] = WAITING  /* subscribed (the SUBSCRIBE confirmed) from here on */
    fi;

attempt:  /* seen = generation(), then the acquire script with the id */
    news[me] = false;
    attempt_all(me, true, g);
    if
    :: g >= QUORUM -> goto held
    :: g > 0 && g < QUORUM ->
#ifdef SPLIT_WITNESS
        assert(false);
#endif
#ifndef NO_SPLIT_RETRY
        printf("@ %d: split vote, attempts again\n", me);
        goto attempt  /* retry_at: within 2 x node_timeout, no wake-up needed */
#else
        skip
#endif
    :: else -> skip
    fi;

end_wait:
    do
    :: news[me] -> printf("@ %d: woken\n", me); goto attempt
    :: !frozen -> goto leave
    od;

leave:  /* the leave guard: engine::leave_queue on every server */
    atomic { mutex_leave(0, me) };
    atomic { mutex_leave(1, me) };
    atomic { mutex_leave(2, me) };
    ws[me] = GONE;
    goto next;

held:
    ws[me] = HELD;
    release_all(me);
    ws[me] = GONE;
next:
    atomic {
        news[me] = false;
        inflight[me] = false;  /* a "wake" for the old id is dropped */
        session++;
        if
        :: session < SESSIONS -> ws[me] = IDLE; goto acquire_until
        :: else -> skip
        fi
    }
}

/* try_lock(): unregistered attempts. */
proctype barger() {
    byte n = 0;
    byte g;
    do
    :: n < BARGES ->
        n++;
        attempt_all(NW, false, g);
        if
        :: g >= QUORUM ->  /* it never registered: a plain release */
            atomic { holders-- };
            atomic { release(0, NW) };
            atomic { release(1, NW) };
            atomic { release(2, NW) }
        :: else -> skip
        fi
    :: else -> break
    od
}

inline deliver(i) {
    atomic {
        inflight[i] ->
        inflight[i] = false;
        if
        :: ws[i] == WAITING -> news[i] = true
        :: else -> skip
        fi
    }
}

active proctype subscriber() {
end_sub:
    do
    :: deliver(0)
    :: deliver(1)
#if NW > 2
    :: deliver(2)
#endif
    od
}

init {
    byte i = 0;
    atomic {
        owner[0] = NONE; owner[1] = NONE; owner[2] = NONE;
        do
        :: i < NW -> run waiter(i); i++
        :: else -> break
        od;
        run barger()
    }
}

#define STRANDED (ws[0] == WAITING || ws[1] == WAITING || (NW > 2 && ws[2] == WAITING))

active proctype monitor() {
    frozen = true;
    atomic {
        timeout ->
        assert(owner[0] == NONE && owner[1] == NONE && owner[2] == NONE);
        assert(!STRANDED)
    }
}
