/*
 * The ZooKeeper lock recipe's wait, for spin (docs/zookeeper.md, "The recipe", steps 1-5, and
 * docs/handoff-model.md, "The ZooKeeper line"; models/check.sh runs it). A waiter's labels are
 * the steps of engine::acquire_until / attempt / wait_turn / wait_for (src/zk/engine.cpp) for a
 * write node; the server is ZooKeeper's order: one atomic step per request, and per session one
 * FIFO stream that carries the replies and the watch events in the server's order.
 *
 * Modelled: NW sessions, each making ROUNDS acquire calls one after the other (a new sequential
 * node each); a node's sequence number is the server's counter; getChildren answers the live
 * nodes at the instant the server serves it; exists(watch) sets a one-shot watch when the node
 * is there and answers NONODE otherwise; a delete fires the watches on the node into each
 * watching session's stream. A waiter counts the events on the nodes it has begun to watch
 * (session::watch_begin / on_event's `fired`) and may read them at any pace: the client's
 * completion thread and the waiting thread run apart. A waiter may give up while it waits
 * (deadline or cancel: deletes its node). Not modelled: lost connections, expiry and creates in
 * doubt (every one of them ends a wait with a full pass of step 1, the path checked here anyway),
 * read nodes and semaphores.
 *
 * Properties: at most one holder at any time (assert in `hold`); no waiter is left waiting once
 * every other process is done (an end state with a waiter blocked is an invalid end state).
 *
 * Negative controls (spin -D...), each must fail:
 *   ALSO_GRANTS       the going of the node looked again on is taken as the grant
 *   ANY_DELETE_GRANTS the predecessor's deletion grants even when it was not the last one ahead
 *   STALE_LAST        after looking again, the waiter takes its predecessor as the last one ahead
 *                     without checking the listing
 *   LOOKAGAIN_WITNESS fails where a waiter is granted by its predecessor's deletion after a look
 *                     again found that predecessor the last one ahead (the path is reached)
 *   NW, ROUNDS        processes and acquire calls per process
 *   LEAVES            how many waits in all may end by giving up (a bound, so that a waiter
 *                     left waiting is an invalid end state rather than one that could leave)
 */

#ifndef NW
#define NW 3
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif
#ifndef LEAVES
#define LEAVES 1
#endif
#define NODES (NW * ROUNDS + 1)
#define NONE 255

byte next_seq = 0;       /* the parent's sequence counter */
bool alive[NODES];       /* node n exists */
byte watchers[NODES];    /* bit s: session s has a watch on node n */
byte holders = 0;
byte done = 0;
byte leaves = LEAVES;

/* A session's stream: an event (EVT, node) or a reply (LIST, bitmask of live nodes) /
 * (EXISTS, 1 = there). */
mtype = { EVT, LIST, EXISTS };
chan stream[NW] = [NODES + 2] of { mtype, byte };

/* The server deletes node n: every watch on it fires, into each watcher's stream. */
inline server_delete(n) {
    alive[n] = false;
    s = 0;
    do
    :: s < NW ->
        if
        :: watchers[n] & (1 << s) -> stream[s] ! EVT, n
        :: else -> skip
        fi;
        s++
    :: else -> break
    od;
    watchers[n] = 0
}

proctype waiter(byte me) {
    byte round = 0;
    byte ours, pred, refresh, k, s, i;
    byte listing, v;
    bool last, ok, looked;
    byte fired[NODES];    /* events read on each node */
    bool begun[NODES];    /* watch_begin'd: its events are counted */
    byte seen_p, seen_r;
    mtype m;

next_round:
    if
    :: round == ROUNDS -> goto finish
    :: else -> skip
    fi;
    round++;
    /* create (EPHEMERAL_SEQUENTIAL); its listing goes out right behind it */
    atomic { ours = next_seq; next_seq++; alive[ours] = true };

step1:
    /* getChildren: served now, answered in order behind what the stream carries */
    atomic {
        listing = 0;
        i = 0;
        do
        :: i < NODES -> if :: alive[i] -> listing = listing | (1 << i) :: else fi; i++
        :: else -> break
        od;
        stream[me] ! LIST, listing
    };
    /* read up to the reply, counting the events on begun watches */
    do
    :: stream[me] ? m, v ->
        if
        :: m == EVT -> if :: begun[v] -> fired[v]++ :: else fi
        :: m == LIST -> listing = v; break
        :: else -> assert(false)
        fi
    od;
    /* locate: the nearest live node before ours, and the one before that */
    pred = NONE; refresh = NONE;
    k = ours;
    do
    :: k > 0 -> k--;
        if
        :: (listing & (1 << k)) && pred == NONE -> pred = k
        :: (listing & (1 << k)) && pred != NONE && refresh == NONE -> refresh = k
        :: else -> skip
        fi
    :: else -> break
    od;
    if
    :: pred == NONE -> goto hold
    :: else -> skip
    fi;
    last = (refresh == NONE);
    looked = false;

    /* wait_turn: begin the watch on the predecessor, then exists(watch) */
    begun[pred] = true; seen_p = fired[pred];
    atomic {
        if
        :: alive[pred] -> watchers[pred] = watchers[pred] | (1 << me); stream[me] ! EXISTS, 1
        :: else -> stream[me] ! EXISTS, 0
        fi
    };
    do
    :: stream[me] ? m, v ->
        if
        :: m == EVT -> if :: begun[v] -> fired[v]++ :: else fi
        :: m == EXISTS -> ok = v; break
        :: else -> assert(false)
        fi
    od;
    if
    :: !ok -> begun[pred] = false; goto step1   /* ZNONODE: look again at once */
    :: else -> skip
    fi;

wait_for:
    /* the node to look again on, watched too: exists(watch) sent without waiting for its answer
     * (session::watch_probe); an answer other than ZOK fires the watch, as an event would */
    if
    :: refresh != NONE ->
        begun[refresh] = true; seen_r = fired[refresh];
        atomic {
            if
            :: alive[refresh] -> watchers[refresh] = watchers[refresh] | (1 << me)
            :: else -> stream[me] ! EVT, refresh
            fi
        }
    :: else -> skip
    fi;
    /* watch_wait: read events at any pace; decide once a counted one fired, or give up */
    do
    :: nempty(stream[me]) ->
        stream[me] ? m, v; assert(m == EVT); if :: begun[v] -> fired[v]++ :: else fi
    :: fired[pred] != seen_p -> break
    :: refresh != NONE && fired[refresh] != seen_r -> break
    :: atomic { leaves > 0 -> leaves-- }; goto give_up   /* deadline or cancel */
    od;
    if :: refresh != NONE -> begun[refresh] = false :: else fi;
    /* the predecessor first (session::watch_wait) */
    if
    :: fired[pred] != seen_p ->
        begun[pred] = false;
#ifdef ANY_DELETE_GRANTS
        goto hold;
#endif
#ifdef LOOKAGAIN_WITNESS
        assert(!(last && looked));
#endif
        if
        :: last -> goto hold   /* step 4: the last node ahead went */
        :: else -> goto step1
        fi
    :: else -> skip
    fi;
#ifdef ALSO_GRANTS
    begun[pred] = false; goto hold;
#endif
    /* look again: getChildren while the predecessor is (most likely) still there */
    atomic {
        listing = 0;
        i = 0;
        do
        :: i < NODES -> if :: alive[i] -> listing = listing | (1 << i) :: else fi; i++
        :: else -> break
        od;
        stream[me] ! LIST, listing
    };
    do
    :: stream[me] ? m, v ->
        if
        :: m == EVT -> if :: begun[v] -> fired[v]++ :: else fi
        :: m == LIST -> listing = v; break
        :: else -> assert(false)
        fi
    od;
    k = ours; i = NONE; s = NONE;
    do
    :: k > 0 -> k--;
        if
        :: (listing & (1 << k)) && i == NONE -> i = k
        :: (listing & (1 << k)) && i != NONE && s == NONE -> s = k
        :: else -> skip
        fi
    :: else -> break
    od;
    if
    :: i == NONE -> begun[pred] = false; goto hold   /* ours is first */
    :: i != pred -> begun[pred] = false; goto step1
    :: else -> skip
    fi;
#ifdef STALE_LAST
    last = true;
#else
    last = (s == NONE);
#endif
    looked = true;
    refresh = s;
    goto wait_for;

hold:
    atomic { holders++; assert(holders == 1) };
    atomic { holders--; server_delete(ours) };
    goto next_round;

give_up:
    begun[pred] = false;
    if :: refresh != NONE -> begun[refresh] = false :: else fi;
    atomic { server_delete(ours) };
    goto next_round;

finish:
    /* drain what is left (events of watches that outlived their waits) */
    atomic { done++ };
    do
    :: stream[me] ? m, v
    :: done == NW && empty(stream[me]) -> break
    od
}

init {
    byte p = 0;
    atomic {
        do
        :: p < NW -> run waiter(p); p++
        :: else -> break
        od
    }
}
