#!/usr/bin/python3
"""Before/after of the server's cost of uncontended lock/unlock pairs (docs/benchmarks.md, "A/B of
two builds"). Standard library only.

  bench/ab_pairs.py NAME=WORKER[@MODE][,NAME=WORKER[@MODE]...] MODES ROUNDS SECONDS
  e.g. bench/ab_pairs.py before=/tmp/old/dlock-bench-worker,after=build/bench/dlock-bench-worker \
       mutex,fair 4 3
  (a peer's driver with another mode name: rpp=/tmp/peers-build/rpp_driver@redlock-poll1ms)

Starts one private redis-server on loopback and, ROUNDS times, runs every build for every mode
on W1 (1 worker, 1 key) and W2 (8 workers, 8 keys: nothing contends), the builds alternating on
the same server, so machine load hits every build alike. Per run, from INFO around the workers'
common start and end: the server's CPU (used_cpu_sys + used_cpu_user) per pair, the commands per
pair (INFO commandstats: those scripts run included; INFO itself left out), the FCALL, EVALSHA and
SET time per pair (commandstats usec: a script's time includes the commands it runs), and the
acquire p50 (the workers' wait_ns); then the medians per mode, workload and build.
"""
import itertools, json, os, shutil, socket, statistics, subprocess, sys, tempfile, time
import private_redis
if len(sys.argv) < 5:
    sys.exit(__doc__)
builds = dict(b.split("=", 1) for b in sys.argv[1].split(","))  # name=path[@mode]
modes = sys.argv[2].split(","); rounds = int(sys.argv[3]); dur = float(sys.argv[4])
tmp = tempfile.mkdtemp(prefix="dlock-ab-pairs.")
srv, port = private_redis.start(tmp)
def cmd(*args):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args)).encode())
    buf = b""
    while True:
        buf += s.recv(65536)
        if buf.startswith(b"$"):
            n = int(buf[1:buf.index(b"\r\n")]); hdr = buf.index(b"\r\n") + 2
            if len(buf) >= hdr + n + 2: s.close(); return buf[hdr:hdr + n].decode()
        elif buf.endswith(b"\r\n"): s.close(); return buf.decode()
for _ in range(200):
    try: cmd("PING"); break
    except OSError: time.sleep(0.05)
def info():
    cpu = 0.0; calls = 0; top = 0
    for line in cmd("INFO", "all").splitlines():
        if line.startswith("used_cpu_sys:") or line.startswith("used_cpu_user:"):
            if "children" not in line and "main_thread" not in line: cpu += float(line.split(":")[1])
        if line.startswith("cmdstat_") and not line.startswith("cmdstat_info"):
            calls += int(line.split("calls=")[1].split(",")[0])
            if line.split(":")[0] in ("cmdstat_evalsha", "cmdstat_fcall", "cmdstat_set"):
                top += int(line.split("usec=")[1].split(",")[0])
    return cpu, calls, top
res = {}; n = 0
try:
    for r in range(rounds):
        for mode, wl, (bname, bpath) in itertools.product(modes, ("W1", "W2"), builds.items()):
            n += 1; nw = 1 if wl == "W1" else 8
            if "@" in bpath: bpath, m = bpath.split("@")
            else: m = mode
            start = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + int(0.7e9)
            procs = []
            for w in range(nw):
                out = os.path.join(tmp, f"{n}.{w}.jsonl")
                procs.append((subprocess.Popen([bpath, "--mode", m, "--key", f"k{n}.{w}", "--duration-s", str(dur),
                    "--worker-id", str(w), "--out", out, "--servers", f"127.0.0.1:{port}", "--cs-us", "0",
                    "--ttl-ms", "10000", "--start-at-ns", str(start)], stdout=subprocess.DEVNULL), out))
            while time.clock_gettime_ns(time.CLOCK_MONOTONIC) < start - int(0.1e9): time.sleep(0.02)
            c0, k0, t0 = info()
            for p, _ in procs:
                if p.wait() != 0: sys.exit(f"worker failed {bname} {mode}")
            c1, k1, t1 = info()
            pairs = 0; acq = []
            for _, out in procs:
                for line in open(out):
                    d = json.loads(line)
                    if "acq" in d: pairs += 1; acq.append(d["wait_ns"])

            e = res.setdefault((mode, wl, bname), {"cpu_us": [], "cmds": [], "p50": [], "usec": []})
            e["cpu_us"].append((c1 - c0) * 1e6 / pairs); e["cmds"].append((k1 - k0) / pairs); e["usec"].append((t1 - t0) / pairs)
            e["p50"].append(statistics.median(acq) / 1e3 if acq else 0)
            print(mode, wl, bname, f"pairs={pairs} cpu/pair={e['cpu_us'][-1]:.1f}us cmds/pair={e['cmds'][-1]:.2f} acq_p50={e['p50'][-1]:.1f}us script+set_usec/pair={e['usec'][-1]:.1f}", flush=True)
    print("medians:")
    for (mode, wl, bname), e in sorted(res.items()):
        print(mode, wl, bname, f"cpu/pair={statistics.median(e['cpu_us']):.1f}us cmds/pair={statistics.median(e['cmds']):.2f} acq_p50={statistics.median(e['p50']):.1f}us script+set_usec/pair={statistics.median(e['usec']):.1f}")
finally:
    srv.terminate(); srv.wait()
    shutil.rmtree(tmp, ignore_errors=True)
