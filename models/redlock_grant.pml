/*
 * Redlock with the grant delivered by each server (docs/handoff-model.md, "Redlock: the grant from
 * each server"), for spin (models/check.sh runs it): NS independent servers (default three),
 * quorum QUORUM (default a majority, NS / 2 + 1).
 * As built: each server's release hands its key to its own head, whose id becomes the key's
 * owner token (lib/queue.lua, dlock_hand_mutex_head), and tells it; a quorum of such grant
 * messages is itself the hold, with no round trip after the notification. With
 * -DATTEMPT_AFTER_GRANT every grant message only wakes its waiter, which attempts on every server
 * and holds by that attempt's votes (a server whose key holds its id answers "granted"): the way
 * a waiter whose messages were lost still gets the lock (and the protocol before the grant by
 * message).
 *
 * With -DNS=1 -DQUORUM=1 it is also the model of dlock::mutex on one Redis server
 * (docs/handoff-model.md, "The single-server dlock::mutex"), which runs the same scripts with one
 * node: a release hands the key to the live head of the registered waiters and publishes
 * "granted" to it, and that one message is the hold; a lost message (or the WAIT safeguard) falls
 * back to the head's own attempt, which finds the key holding its id and takes it up; a free key
 * with a live waiter goes to the head whoever attempts (acquire.lua: nobody barges past a live
 * registered waiter); a waiter that gives up (mutex_leave.lua) passes a key handed to it on to
 * the next head. One server never grants short of a quorum, so the partial-grant and split
 * branches below are never taken there, and SPLIT_WITNESS and NO_PARTIAL_ATTEMPT cannot fail.
 *
 * Each server keeps its own FIFO of registered waiter ids. A release there (compare-and-delete)
 * makes that server's live head the owner of the key at once and publishes "granted" to it, as a
 * fair_mutex release does on one server (lib/queue.lua, dlock_hand_off). A waiter subscribes on
 * every server and holds once grants from a quorum reached it: one notification per server, no
 * round trip after it. The servers' queues can disagree (two attempts reach the servers in
 * different orders), so a release may grant server 0 to one waiter and server 1 to another:
 *   - a waiter that heard some grants but not a quorum (within node_timeout, in the code) attempts
 *     on every server; a server that already made it the owner answers "granted";
 *   - an attempt that ends with some grants but fewer than a quorum (a split) undoes them: the
 *     release on every server takes its id off and hands each server it owned to that server's
 *     next head; the waiter attempts again (within 2 x node_timeout), which registers it again;
 *   - a waiter that gives up, and a holder's release, run the same release on every server: a
 *     grant made to it meanwhile goes on to the next head.
 * A grant message answers one registration: undone or left, that registration's grants still in
 * flight are never accepted (the code's ticket rule, one ticket per server; here the messages are
 * dropped at the undo, the leave and the end of the call).
 *
 * Every script on a server is atomic; the servers interleave with each other and with every
 * client in any order. The periodic re-check is off, as in redlock_wake.pml: a waiter moves only
 * on a message, its own split retry or its partial-grant attempt.
 *
 * Properties:
 *   (held) a waiter that holds owns the key on every server it counts, and they are a quorum;
 *          never two holders at once
 *   (monitor) at quiescence, after which nobody gives up any more, no waiter is still waiting
 *          and every server's key is free (no grant stranded on a client that is not waiting)
 *
 * Compile-time switches (spin -D...):
 *   negative controls, must fail:
 *   STALE_GRANT      a grant message of an undone registration is still accepted (no ticket
 *                    rule): a waiter counts a server that went on to someone else (with NS=1
 *                    the registration of an earlier acquire_until call: it takes SESSIONS=2)
 *   LEAVE_KEEPS      a waiter that gives up only takes its id off; a grant made to it meanwhile
 *                    stays with it (the key is stranded)
 *   NO_PARTIAL_ATTEMPT  a waiter that heard some grants only waits for more
 *   witness, must fail (the search reaches it):
 *   SPLIT_WITNESS    the servers granted to different waiters (a waiter holds a grant that is
 *                    not a quorum)
 *   the fallback alone (lost messages):
 *   ATTEMPT_AFTER_GRANT  a grant message only wakes its waiter, which attempts on every server
 *                    (and counts only that attempt's votes)
 *   NW, SESSIONS, BARGES   waiters (2 or 3), acquire_until calls of each, try_locks of the barger
 *   NS, QUORUM       servers (1 to 3) and the quorum (default NS / 2 + 1)
 */

#ifndef NW
#define NW 2
#endif
#ifndef SESSIONS
#define SESSIONS 1
#endif
#ifndef BARGES
#define BARGES 1
#endif

#ifndef NS
#define NS 3
#endif
#if NS < 1 || NS > 3
#error "NS: one to three servers (each server's steps are written out below)"
#endif
#ifndef QUORUM
#define QUORUM (NS / 2 + 1)
#endif
#define NONE 255

#define IDLE 0
#define WAITING 1
#define HELD 2
#define GONE 3

#define AT(s, c) ((s) * NW + (c))

byte h, j;  /* scratch of the server scripts (zero outside them) */

/* ---- each server's keys of one lock name ---- */
byte owner[NS];          /* the lock key: its owner (NONE: free) */
bool inq[NS * NW];       /* the waiters' queue: membership ... */
byte arr[NS * NW];       /* ... and place (ranks 1..n: the order is all the scripts read) */

/* ---- pub/sub: a subscriber per server, every client on every server ---- */
bool msg[NS * NW];       /* "granted" published by server s to waiter c, not yet delivered */

/* ---- the clients ---- */
bool got[NS * NW];       /* waiter c counts server s as granted to it */
#ifdef ATTEMPT_AFTER_GRANT
bool woken[NW];          /* a grant message reached waiter c since its last attempt */
#endif
byte ws[NW];
byte holders = 0;
bool frozen = false;

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

inline enqueue(s, c) {
    if
    :: !inq[AT(s, c)] ->
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
}

/* h := the head of server s's queue (NONE: empty). */
inline head(s) {
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
    j = 0
}

/* The hand-off on server s, its key free: the head becomes the owner and is told. */
inline grant_head(s) {
    head(s);
    if
    :: h != NONE ->
        owner[s] = h;
        dequeue(s, h);
        msg[AT(s, h)] = true;
        printf("@ server %d: granted to %d\n", s, h)
    :: else -> skip
    fi;
    h = 0
}

/* The acquire script on server s for client c (NW: the barger); reg: it carries its id. */
inline acquire(s, c, reg) {
    if
    :: owner[s] == c && c < NW -> got[AT(s, c)] = true  /* made the owner already (our grant) */
    :: owner[s] == NONE ->
        head(s);
        if
        :: h == NONE || h == c ->
            h = 0;
            owner[s] = c;
            if
            :: reg -> dequeue(s, c); got[AT(s, c)] = true
            :: else -> skip
            fi;
            printf("@ server %d: %d takes it\n", s, c)
        :: else ->  /* free, but a waiter is first: hand it over, then queue */
            h = 0;
            grant_head(s);
            if
            :: reg -> enqueue(s, c)
            :: else -> skip
            fi
        fi
    :: else ->
        if
        :: reg -> enqueue(s, c)
        :: else -> skip
        fi
    fi
}

/* The release on server s of client c (a holder's, an undo, a leave): its id goes; where it
 * owns the key, the key goes on to the next head; its grant message from s, if any is still in
 * flight, will not be accepted (the ticket rule). */
inline release(s, c) {
    if
    :: c < NW ->
        dequeue(s, c);
#ifndef STALE_GRANT
        msg[AT(s, c)] = false;
#endif
        got[AT(s, c)] = false
    :: else -> skip
    fi;
    if
    :: owner[s] == c -> owner[s] = NONE; printf("@ server %d: %d releases\n", s, c); grant_head(s)
    :: else -> skip
    fi
}

/* The servers waiter c counts as granted to it. */
#if NS == 1
#define GOT(c) (got[AT(0, c)])
#elif NS == 2
#define GOT(c) (got[AT(0, c)] + got[AT(1, c)])
#else
#define GOT(c) (got[AT(0, c)] + got[AT(1, c)] + got[AT(2, c)])
#endif

inline count_got(c, g) {
    g = GOT(c)
}

/* A waiter holds: every server it counts is its own, and they are a quorum. */
inline hold(c, g) {
    atomic {
        count_got(c, g);
        assert(g >= QUORUM);
        assert(!got[AT(0, c)] || owner[0] == c);
#if NS > 1
        assert(!got[AT(1, c)] || owner[1] == c);
#endif
#if NS > 2
        assert(!got[AT(2, c)] || owner[2] == c);
#endif
        holders++;
        assert(holders == 1);
        ws[c] = HELD;
        printf("@ %d holds\n", c)
    }
}

inline attempt_all(c, reg, g) {
    atomic { acquire(0, c, reg) };
#if NS > 1
    atomic { acquire(1, c, reg) };
#endif
#if NS > 2
    atomic { acquire(2, c, reg) };
#endif
    count_got(c, g)
}

inline release_all(c) {
    atomic { release(0, c) };
#if NS > 1
    atomic { release(1, c) };
#endif
#if NS > 2
    atomic { release(2, c) };
#endif
}

/* A waiter's first attempt on server s: unregistered. */
inline first_attempt(s, c) {
    atomic { acquire(s, c, false); if :: owner[s] == c -> got[AT(s, c)] = true :: else -> skip fi }
}

/* Waiter c stops counting server s. */
#define FORGET(s, c) got[AT(s, c)] = false

proctype waiter(byte me) {
    byte g;
    byte session = 0;

acquire_until:
    /* The first attempt: no id, so nothing queues it. */
    first_attempt(0, me);
#if NS > 1
    first_attempt(1, me);
#endif
#if NS > 2
    first_attempt(2, me);
#endif
    count_got(me, g);
    if
    :: g >= QUORUM -> goto held
    :: else -> release_all(me); ws[me] = WAITING  /* subscribed on every server from here on */
    fi;

attempt:
#ifdef ATTEMPT_AFTER_GRANT
    atomic {
        woken[me] = false;
        FORGET(0, me);
#if NS > 1
        FORGET(1, me);
#endif
#if NS > 2
        FORGET(2, me);
#endif
    };
#endif
    attempt_all(me, true, g);
    if
    :: g >= QUORUM -> goto held
    :: g > 0 && g < QUORUM ->  /* a split: undo, attempt again (within 2 x node_timeout) */
        printf("@ %d: split, undoes\n", me);
        release_all(me);
        goto attempt
    :: else -> skip
    fi;

end_wait:
    do
#ifdef ATTEMPT_AFTER_GRANT
    :: woken[me] -> goto attempt
#else
    :: GOT(me) >= QUORUM -> goto held
#endif
#ifndef NO_PARTIAL_ATTEMPT
    :: GOT(me) > 0 && GOT(me) < QUORUM ->
        printf("@ %d: some grants, not a quorum: attempts\n", me);
        goto attempt
#endif
    :: !frozen -> goto leave
    od;

leave:  /* gives up: the release on every server */
    atomic { ws[me] = GONE; printf("@ %d gives up\n", me) };
#ifndef LEAVE_KEEPS
    release_all(me);
#else
    atomic { dequeue(0, me); msg[AT(0, me)] = false; got[AT(0, me)] = false };
#if NS > 1
    atomic { dequeue(1, me); msg[AT(1, me)] = false; got[AT(1, me)] = false };
#endif
#if NS > 2
    atomic { dequeue(2, me); msg[AT(2, me)] = false; got[AT(2, me)] = false };
#endif
#endif
    goto next;

held:
    hold(me, g);
    atomic { holders-- };
    ws[me] = GONE;
    release_all(me);
next:
    atomic {
        FORGET(0, me);
#if NS > 1
        FORGET(1, me);
#endif
#if NS > 2
        FORGET(2, me);
#endif
#ifdef ATTEMPT_AFTER_GRANT
        woken[me] = false;
#endif
        session++;
        if
        :: session < SESSIONS -> ws[me] = IDLE; goto acquire_until
        :: else -> skip
        fi
    }
}

/* try_lock(): unregistered attempts; an attempt short of a quorum is undone at once. */
inline barge(s, g) {
    atomic { acquire(s, NW, false); if :: owner[s] == NW -> g++ :: else -> skip fi }
}

proctype barger() {
    byte n = 0;
    byte g;
    do
    :: n < BARGES ->
        n++;
        g = 0;
        barge(0, g);
#if NS > 1
        barge(1, g);
#endif
#if NS > 2
        barge(2, g);
#endif
        if
        :: g >= QUORUM -> atomic { holders++; assert(holders == 1) }; atomic { holders-- }
        :: else -> skip
        fi;
        release_all(NW)
    :: else -> break
    od
}

/* Each server's subscriber connection of client i: a grant reaches a waiting client, which
 * counts it; one for a client that does not wait any more is dropped (its release or leave on
 * that server hands the key on). */
#define OTHERS(s, i) (owner[s] < NW && owner[s] != i)  /* server s granted to another waiter */

inline deliver(s, i) {
    atomic {
        msg[AT(s, i)] ->
        msg[AT(s, i)] = false;
        if
        :: ws[i] == WAITING ->
#ifdef ATTEMPT_AFTER_GRANT
            woken[i] = true;
#else
            got[AT(s, i)] = true;
#endif
#ifdef SPLIT_WITNESS
            assert(!(GOT(i) > 0 && GOT(i) < QUORUM && (OTHERS(0, i)
#if NS > 1
                                                       || OTHERS(1, i)
#endif
#if NS > 2
                                                       || OTHERS(2, i)
#endif
                                                       )));
#endif
            skip
        :: else -> skip
        fi
    }
}

/* The options of the subscribers' loop for client i: a message from each server. */
#if NS == 1
#define DELIVER(i) :: deliver(0, i)
#elif NS == 2
#define DELIVER(i) :: deliver(0, i) :: deliver(1, i)
#else
#define DELIVER(i) :: deliver(0, i) :: deliver(1, i) :: deliver(2, i)
#endif

active proctype subscribers() {
end_sub:
    do
    DELIVER(0)
    DELIVER(1)
#if NW > 2
    DELIVER(2)
#endif
    od
}

init {
    byte i = 0;
    atomic {
        owner[0] = NONE;
#if NS > 1
        owner[1] = NONE;
#endif
#if NS > 2
        owner[2] = NONE;
#endif
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
        assert(owner[0] == NONE);
#if NS > 1
        assert(owner[1] == NONE);
#endif
#if NS > 2
        assert(owner[2] == NONE);
#endif
        assert(!STRANDED)
    }
}
