#!/usr/bin/python3
"""Before/after comparison of dlock-bench-worker builds on one hot key (docs/benchmarks.md, "A/B of
two builds"). Standard library only.

  bench/ab.py NAME=WORKER[,NAME=WORKER...] MODES ROUNDS SECONDS [WORKERS]
  e.g. bench/ab.py before=/tmp/old/dlock-bench-worker,after=build/bench/dlock-bench-worker \
       fair,redlock 3 3

Starts four private redis-servers on loopback (one for the single-server modes, three for
`redlock`; and for `zk`, a standalone ZooKeeper server as bench/run's, tickTime 2 s, forceSync on,
through build/tests/support/dlock-test-server or $DLOCK_TEST_SERVER) and, ROUNDS times, runs WORKERS (default 8) workers of every build for every mode on
one key (W3: empty critical section; CS_US in the environment sets one), the builds alternating
on the same servers, so machine load hits every build alike. Per run: the hand-off to another
worker p50 (next acq - previous rel), the share of hand-offs that went to another worker, grants
per second, and voluntary (wake-ups) and all context switches per grant from the workers'
rusage; then the medians per mode and build. Mutual-exclusion overlaps and worker errors are
counted; not a replacement for bench/run's report. QUANTILES=1 in the environment also prints
each run's hand-off to another worker at p10/p25/p50/p75/p90 and the p50 of a release followed by
the same worker's next grant.
"""
import itertools, json, os, shutil, statistics, subprocess, sys, tempfile, time
import private_redis
if len(sys.argv) < 5:
    sys.exit(__doc__)
builds = dict(b.split("=", 1) for b in sys.argv[1].split(","))   # name=path,...
modes = sys.argv[2].split(",")          # e.g. fair,redlock,mutex
rounds = int(sys.argv[3]); dur = float(sys.argv[4]); nworkers = int(sys.argv[5]) if len(sys.argv) > 5 else 8
cs_us = int(os.environ.get("CS_US", "0"))
tmp = tempfile.mkdtemp(prefix="dlock-ab.")
servers = []
ports = []
for i in range(4):
    proc, port = private_redis.start(os.path.join(tmp, f"redis{i}"))
    servers.append(proc); ports.append(port)
zk = None
if "zk" in modes:  # the fixture prints {"port": ...} once the server serves; its stdin closing stops it
    fixture = os.environ.get("DLOCK_TEST_SERVER") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "tests", "support", "dlock-test-server")
    zk = subprocess.Popen([fixture, "zk", "--tick-ms", "2000", "--force-sync", "yes"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    zk_port = json.loads(zk.stdout.readline())["port"]
res = {}
n = 0
try:
    for r in range(rounds):
        for mode, (bname, bpath) in itertools.product(modes, builds.items()):
            n += 1
            key = f"ab{n}"
            srv = ",".join(f"127.0.0.1:{p}" for p in (ports[1:] if mode == "redlock" else ports[:1]))
            if mode == "zk":
                srv = f"127.0.0.1:{zk_port}"
            start = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + int(1.0e9)
            procs = []
            for w in range(nworkers):
                out = os.path.join(tmp, f"{key}.{w}.jsonl")
                procs.append((subprocess.Popen([bpath, "--mode", mode, "--key", key, "--duration-s", str(dur),
                    "--worker-id", str(w), "--out", out, "--servers", srv, "--cs-us", str(cs_us),
                    "--ttl-ms", "10000", "--start-at-ns", str(start)], stdout=subprocess.DEVNULL), out))
            nv = niv = 0
            for p, _ in procs:
                _, st, ru = os.wait4(p.pid, 0); p.returncode = st
                if st != 0:
                    sys.exit(f"ab.py: a {bname} worker ({mode}) failed with status {st}")
                nv += ru.ru_nvcsw; niv += ru.ru_nivcsw
            iv = []; cycles = 0; errors = 0
            for _, out in procs:
                for line in open(out):
                    o = json.loads(line)
                    if "acq" in o: iv.append((o["acq"], o["rel"], o["w"]))
                    if o.get("event") == "done": cycles += o["cycles"]; errors += o["errors"]
            iv.sort()
            ho = [b[0] - a[1] for a, b in zip(iv, iv[1:]) if a[2] != b[2]]
            viol = sum(1 for a, b in zip(iv, iv[1:]) if b[0] < a[1])
            inwin = sum(1 for a in iv if start <= a[0] < start + dur * 1e9)
            row = dict(handoff_p50_us=statistics.median(ho) / 1e3 if ho else None,
                       other_frac=len(ho) / max(1, len(iv) - 1), tput=inwin / dur,
                       wake_per_grant=nv / max(1, cycles), ctx_per_grant=(nv + niv) / max(1, cycles),
                       viol=viol, errors=errors)
            res.setdefault((mode, bname), []).append(row)
            if os.environ.get("QUANTILES") and len(ho) >= 10:
                q = statistics.quantiles(ho, n=20)
                hs = sorted(b[0] - a[1] for a, b in zip(iv, iv[1:]) if a[2] == b[2])
                print(f"  {mode} {bname} hand-off to another p10/p25/p50/p75/p90 (us): " +
                      "/".join(f"{q[i] / 1e3:.0f}" for i in (1, 4, 9, 14, 17)) +
                      (f"; back to itself p50 {hs[len(hs) // 2] / 1e3:.0f}" if hs else ""), flush=True)
            print(r, mode, bname, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
finally:
    for s in servers: s.terminate(); s.wait()
    if zk is not None:
        zk.stdin.close(); zk.wait()
    shutil.rmtree(tmp, ignore_errors=True)
print("== medians over", rounds, "rounds,", dur, "s each,", nworkers, "workers")
for (mode, bname), rows in sorted(res.items()):
    med = {k: statistics.median(v) if (v := [x[k] for x in rows if x[k] is not None]) else None
           for k in rows[0] if k not in ("viol", "errors")}
    handoff = "     -  " if med["handoff_p50_us"] is None else f"{med['handoff_p50_us']:8.1f}"  # 1 worker: none
    print(f"{mode:8} {bname:7} handoff p50 {handoff} us  to-other {med['other_frac']:.2f}  "
          f"grants/s {med['tput']:8.0f}  wakeups/grant {med['wake_per_grant']:.2f}  ctx/grant {med['ctx_per_grant']:.2f}  "
          f"viol {sum(x['viol'] for x in rows)} errors {sum(x['errors'] for x in rows)}")
