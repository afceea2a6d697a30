#!/usr/bin/python3
"""Where a hot-key hand-off's time goes, step by step (docs/benchmarks.md, "A hand-off's steps,
client included"). Standard library and Debian's `linux-perf`; run as root (tracepoints).

  bench/handoff_trace.py [WORKER] [MODE] [CS_US] [SECONDS] [WORKERS]
  e.g. bench/handoff_trace.py build/bench/dlock-bench-worker fair 1000 3 8

Starts a private redis-server on a loopback port, and WORKERS (default 8) dlock-bench-worker
processes of MODE (default fair) on one key with a busy critical section of CS_US (default 1000:
W4) for SECONDS (default 3), all under `perf record -a -k CLOCK_MONOTONIC` of the scheduler's
wake-ups and switches and the workers' sendto/recvfrom/poll system calls. The workers stamp their
cycles with CLOCK_MONOTONIC too, so each hand-off (a release followed by another worker's grant)
is split at the events between the releaser's last stamp and the next holder's first:

  1 releaser's critical section ends -> its release is written (sendto entered): client work
  2 release written -> redis-server on a CPU: the server's wake-up
  3 redis-server on a CPU -> next holder woken: the server's pass (request read, script, writes)
  4 next holder woken -> on a CPU: its wake-up
  5 next holder on a CPU -> its grant message read (recvfrom returned)
  6 grant read -> lock() returned: client work

Prints p10/p50/p90 of each step and of the whole hand-off (the worker's own stamps), over the
hand-offs in which every step was found in order (the rest, e.g. a next holder that was already
running, are counted and left out).
"""
import bisect, collections, json, os, re, shutil, statistics, subprocess, sys, tempfile, time
import private_redis

args = sys.argv[1:]
worker = args[0] if len(args) > 0 else "build/bench/dlock-bench-worker"
mode = args[1] if len(args) > 1 else "fair"
cs_us = int(args[2]) if len(args) > 2 else 1000
dur = float(args[3]) if len(args) > 3 else 3.0
nworkers = int(args[4]) if len(args) > 4 else 8
if not os.access(worker, os.X_OK):
    sys.exit(__doc__)


tmp = tempfile.mkdtemp(prefix="dlock-trace.")
server, port = private_redis.start(tmp)
perf = None
try:
    data = os.path.join(tmp, "perf.data")
    events = ("sched:sched_wakeup,sched:sched_switch,syscalls:sys_enter_sendto,"
              "syscalls:sys_exit_recvfrom,syscalls:sys_exit_poll")
    perf = subprocess.Popen(["perf", "record", "-a", "-k", "CLOCK_MONOTONIC", "-e", events, "-o", data,
                             "--", "sleep", str(dur + 2.5)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    start = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + int(1.0e9)
    procs = []
    for w in range(nworkers):
        out = os.path.join(tmp, f"w.{w}.jsonl")
        procs.append(subprocess.Popen([worker, "--mode", mode, "--key", "trace", "--duration-s", str(dur),
                                       "--worker-id", str(w), "--out", out, "--servers", f"127.0.0.1:{port}",
                                       "--cs-us", str(cs_us), "--ttl-ms", "10000", "--start-at-ns", str(start)],
                                      stdout=subprocess.DEVNULL))
    for p in procs:
        if p.wait() != 0:
            sys.exit(f"handoff_trace.py: a worker failed with status {p.returncode}")
    if perf.wait() != 0:
        sys.exit("handoff_trace.py: perf record failed (root, and Debian's linux-perf, are needed)")
    script = subprocess.run(["perf", "script", "-i", data, "--ns", "-F", "tid,time,event,trace"],
                            capture_output=True, text=True).stdout

    # tid -> [(ns, event, fields)]
    by_tid = collections.defaultdict(list)
    wakeups = []  # (ns, waker tid, woken tid)
    on_cpu = collections.defaultdict(list)  # tid -> times it was switched in
    off_cpu = collections.defaultdict(list)  # tid -> times it was switched out
    line_re = re.compile(r"\s*(\d+)\s+(\d+\.\d+):\s+(\S+):(\w+):\s*(.*)")
    for line in script.splitlines():
        m = line_re.match(line)
        if not m:
            continue
        tid, t, name, fields = int(m.group(1)), int(round(float(m.group(2)) * 1e9)), m.group(4), m.group(5)
        if name == "sched_wakeup":
            pid = re.search(r"pid=(\d+)", fields)
            if pid:
                wakeups.append((t, tid, int(pid.group(1))))
        elif name == "sched_switch":
            prev, nxt = re.search(r"prev_pid=(\d+)", fields), re.search(r"next_pid=(\d+)", fields)
            if prev:
                off_cpu[int(prev.group(1))].append(t)
            if nxt:
                on_cpu[int(nxt.group(1))].append(t)
        else:
            by_tid[tid].append((t, name))
    server_tid = server.pid  # redis-server's main thread serves every command
    wake_times = collections.defaultdict(list)  # woken tid -> [ns]: the waker may be any task (a
    for t, _, woken in wakeups:                  # loopback write's softirq runs where it lands)
        wake_times[woken].append(t)

    cycles = collections.defaultdict(list)
    for w in range(nworkers):
        for line in open(os.path.join(tmp, f"w.{w}.jsonl")):
            o = json.loads(line)
            if "acq" in o:
                cycles[w].append((o["acq"], o["rel"]))
    # Each worker's main thread: the one whose sendto follows its releases.
    tids = {}
    for w, cs in cycles.items():
        best = (-1, None)
        for tid, evs in by_tid.items():
            sends = [t for t, n in evs if n == "sys_enter_sendto"]
            hits = sum(1 for _, rel in cs[:50]
                       if (i := bisect.bisect_left(sends, rel)) < len(sends) and sends[i] - rel < 1_000_000)
            if hits > best[0]:
                best = (hits, tid)
        tids[w] = best[1]

    def first_after(times, t):
        i = bisect.bisect_left(times, t)
        return times[i] if i < len(times) else None

    def last_before(times, t):
        i = bisect.bisect_right(times, t) - 1
        return times[i] if i >= 0 else None

    def running_at(tid, t):  # on a CPU at t: switched in last, not out since
        i, o = last_before(on_cpu[tid], t), last_before(off_cpu[tid], t)
        return i is not None and (o is None or o < i)

    def on_cpu_from(tid, t):  # when `tid` ran from t on: t itself if it was running then
        return t if running_at(tid, t) else first_after(on_cpu[tid], t)

    steps = collections.defaultdict(list)
    skipped = 0
    flat = sorted((acq, rel, w) for w, cs in cycles.items() for acq, rel in cs)
    sends = {w: [t for t, n in by_tid[tids[w]] if n == "sys_enter_sendto"] for w in tids}
    recvs = {w: [t for t, n in by_tid[tids[w]] if n == "sys_exit_recvfrom"] for w in tids}
    for (_, rel, h), (acq, _, w) in zip(flat, flat[1:]):
        if h == w:
            continue
        sent = first_after(sends[h], rel)
        s_on = on_cpu_from(server_tid, sent) if sent else None
        woke = [t for t in wake_times[tids[w]] if s_on and s_on <= t <= acq]
        w_woken = woke[0] if woke else None
        w_on = first_after(on_cpu[tids[w]], w_woken) if w_woken else None
        got = last_before(recvs[w], acq)
        if None in (sent, s_on, w_woken, w_on, got) or not (rel <= sent <= s_on <= w_woken <= w_on <= got <= acq):
            skipped += 1

            continue
        for name, a, b in (("1 releaser: critical section end -> release written", rel, sent),
                           ("2 release written -> server on a CPU", sent, s_on),
                           ("3 server on a CPU -> next holder woken", s_on, w_woken),
                           ("4 next holder woken -> on a CPU", w_woken, w_on),
                           ("5 next holder on a CPU -> grant read", w_on, got),
                           ("6 grant read -> lock() returned", got, acq),
                           ("  the hand-off (worker stamps)", rel, acq)):
            steps[name].append((b - a) / 1e3)
    n = len(steps["  the hand-off (worker stamps)"])
    print(f"{mode}, {nworkers} workers, critical section {cs_us} us, {dur} s: "
          f"{n} hand-offs traced, {skipped} left out (a step not found in order)")
    for name, v in steps.items():
        if len(v) >= 10:
            q = statistics.quantiles(v, n=10)
            print(f"{name:56} p10 {q[0]:7.1f}  p50 {q[4]:7.1f}  p90 {q[8]:7.1f} us")
finally:
    if perf and perf.poll() is None:
        perf.terminate(); perf.wait()
    server.terminate(); server.wait()
    shutil.rmtree(tmp, ignore_errors=True)
