#!/usr/bin/python3
"""dlock torture harness: many worker processes x lock kinds x backends under seeded faults.

    torture.py [--seed N] [--minutes M] [--client BIN] [--workdir DIR] [--keep]
               [--phases redis,redlock3,redlock5,sentinel,zk,etcd]

Each phase starts its servers (Redis single with AOF; Redlock on 3 and on 5 masters; a ZooKeeper
3-node ensemble whose server 1 runs in its own network namespace; a 3-member etcd cluster), a
separate never-faulted Redis for the fenced resource, and several groups of dlock-torture-client
processes (one lock name per group, one lock kind per process). A fault scheduler driven by --seed
injects faults at random times; the end of a phase heals everything, waits for a quiet window in
which every lock name must be granted again, stops the workers and checks their logs. See
docs/torture.md.

Exit status: 0 when every check passed, 1 on any violation, 2 when the harness itself failed.
Standard library only; run as root for the ZooKeeper partition (network namespaces + iptables).
"""

import argparse
import collections
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import heapq
import select
import tempfile
import threading
import time
import urllib.request

ZK_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
HANDOFF_LEASE_S = 2.0  # the Redis hand-off lease (fair, write, mutex) and waiter liveness


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def log(msg):
    print(f"[torture {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timeout waiting for {what}")


class Harness:
    """Owns every process, namespace and file it creates; cleanup() undoes all of it."""

    def __init__(self, args):
        self.args = args
        self.scale = float(os.environ.get("DLOCK_TEST_TIME_SCALE", "1") or 1)
        self.rng = random.Random(args.seed)
        self.dir = args.workdir or tempfile.mkdtemp(prefix="dlock-torture.")
        os.makedirs(self.dir, exist_ok=True)
        self.procs = []  # every Popen we started, for cleanup
        self.netns = []  # namespaces we created
        self.faults = collections.Counter()
        self.fault_log = open(os.path.join(self.dir, "faults.log"), "a")
        self.tag = f"{os.getpid() % 100000}"

    # ---- processes -------------------------------------------------------------------------

    def spawn(self, argv, logfile, netns=None):
        if netns:
            argv = ["ip", "netns", "exec", netns] + argv
        out = open(logfile, "ab")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()
        self.procs.append(p)
        return p

    def stop_proc(self, p, sig=signal.SIGTERM, grace=5.0):
        if p.poll() is not None:
            return True
        try:
            p.send_signal(signal.SIGCONT)
            p.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=grace)
            return True
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return False

    def fault(self, kind, detail):
        self.faults[kind] += 1
        self.fault_log.write(f"{mono_ns()} {kind} {detail}\n")
        self.fault_log.flush()

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except ProcessLookupError:
                    pass
                p.wait()
        for ns in self.netns:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        self.netns = []
        self.fault_log.close()


# ---- Redis ------------------------------------------------------------------------------------


def resp(port, *cmd, host="127.0.0.1", netns=None, timeout=1.0):
    """One command through redis-cli (works inside a namespace too); None on failure."""
    argv = ["redis-cli", "-h", host, "-p", str(port), "--raw"] + [str(c) for c in cmd]
    if netns:
        argv = ["ip", "netns", "exec", netns] + argv
    try:
        r = subprocess.run(argv, capture_output=True, timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        return None
    return r.stdout if r.returncode == 0 else None


class RedisServer:
    def __init__(self, h, name, aof, bind="127.0.0.1", netns=None, port=None, extra=()):
        self.h, self.name, self.aof, self.bind, self.netns = h, name, aof, bind, netns
        self.extra = list(extra)  # appended to the command line (Sentinel: replication)
        self.port = port or free_ports(1)[0]
        self.dir = os.path.join(h.dir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None
        self.down_since = None

    def url(self, host="127.0.0.1"):
        return f"redis://{host}:{self.port}"

    def start(self):
        argv = ["redis-server", "--port", str(self.port), "--bind"] + self.bind.split() + [
                "--dir", self.dir,
                "--save", "", "--protected-mode", "no", "--logfile", "redis.log"]
        argv += (["--appendonly", "yes", "--appendfsync", "always"] if self.aof
                 else ["--appendonly", "no"])
        argv += self.extra
        self.proc = self.h.spawn(argv, os.path.join(self.dir, "stdout.log"), self.netns)
        wait_until(lambda: (resp(self.port, "PING", netns=self.netns) or "").strip() == "PONG",
                   30, f"redis {self.name}")
        self.down_since = None

    def kill(self):
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait()
        self.down_since = time.monotonic()
        if not self.aof:  # a restart without persistence starts empty
            for f in os.listdir(self.dir):
                if f.endswith(".rdb"):
                    os.unlink(os.path.join(self.dir, f))


class Proxy(threading.Thread):
    """A TCP proxy in front of one server, for slow and lost replies. Modes: "pass"; "delay"
    (every reply chunk is held back `delay` seconds); "drop" (the next reply on a connection is
    discarded and the connection closed: the request reached the server, its answer never comes
    back); "blackhole" (replies are swallowed, connections stay open)."""

    def __init__(self, target_port):
        super().__init__(daemon=True)
        self.target = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.mode, self.delay = "pass", 0.0
        self.peer = {}  # socket -> its partner
        self.upstream = set()  # the server-side sockets
        self.later = []  # (due, seq, socket, data) delayed replies
        self.seq = 0
        self.last_due = 0.0
        self.done = False

    def set_mode(self, mode, delay=0.0):
        self.mode, self.delay = mode, delay

    def close_pair(self, sock):
        other = self.peer.pop(sock, None)
        for x in (sock, other):
            if x is not None:
                self.peer.pop(x, None)
                self.upstream.discard(x)
                try:
                    x.close()
                except OSError:
                    pass

    def run(self):
        while not self.done:
            timeout = 0.05
            if self.later:
                timeout = max(0.0, min(timeout, self.later[0][0] - time.monotonic()))
            try:
                ready, _, _ = select.select([self.listener] + list(self.peer), [], [], timeout)
            except (OSError, ValueError):
                ready = []
            now = time.monotonic()
            while self.later and self.later[0][0] <= now:
                _, _, dst, data = heapq.heappop(self.later)
                if dst in self.peer:
                    try:
                        dst.sendall(data)
                    except OSError:
                        self.close_pair(dst)
            for sock in ready:
                if sock is self.listener:
                    try:
                        c, _ = self.listener.accept()
                        u = socket.create_connection(("127.0.0.1", self.target), timeout=1)
                    except OSError:
                        continue
                    self.peer[c], self.peer[u] = u, c
                    self.upstream.add(u)
                    continue
                if sock not in self.peer:
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self.close_pair(sock)
                    continue
                dst = self.peer[sock]
                if sock in self.upstream:  # a reply
                    if self.mode == "drop":
                        self.close_pair(sock)
                        continue
                    if self.mode == "blackhole":
                        continue
                    if self.mode == "delay":
                        self.seq += 1
                        self.last_due = max(self.last_due, now + self.delay)
                        heapq.heappush(self.later, (self.last_due, self.seq, dst, data))
                        continue
                    if self.later:  # keep the order behind replies still held back
                        self.seq += 1
                        heapq.heappush(self.later, (self.last_due, self.seq, dst, data))
                        continue
                try:
                    dst.sendall(data)
                except OSError:
                    self.close_pair(sock)

    def stop(self):
        self.done = True
        self.join(timeout=2)
        for sock in list(self.peer):
            self.close_pair(sock)
        self.listener.close()


# ---- ZooKeeper --------------------------------------------------------------------------------


class ZkEnsemble:
    """Three servers. Server 1 runs in namespace B, servers 2 and 3 in namespace A; A and B are
    joined by a veth pair, so iptables in B can cut server 1 (and the clients in B) off from the
    leader while they still talk to each other."""

    A_ADDR, B_ADDR = "169.254.91.1", "169.254.91.2"

    def __init__(self, h, tick_ms=250):
        self.h = h
        self.tick = tick_ms
        self.ns_a, self.ns_b = f"dlkA{h.tag}", f"dlkB{h.tag}"
        self.veth_a, self.veth_b = f"dlva{h.tag}", f"dlvb{h.tag}"
        self.cut = False
        # One draw for every port of the phase: a port bound inside a namespace does not show
        # as taken to a later draw in the root namespace.
        ports = free_ports(10)
        self.ports = [ports[3 * i:3 * i + 3] for i in range(3)]  # client, quorum, election
        self.spare_port = ports[9]  # the fenced resource's
        self.procs = [None, None, None]
        self.dirs = [os.path.join(h.dir, f"zk{i + 1}") for i in range(3)]

    def ns_of(self, i):
        return self.ns_b if i == 0 else self.ns_a

    def addr_of(self, i):
        return self.B_ADDR if i == 0 else self.A_ADDR

    def setup_net(self):
        sh = lambda *a: subprocess.run(list(a), check=True)
        for ns in (self.ns_a, self.ns_b):
            sh("ip", "netns", "add", ns)
            self.h.netns.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", self.veth_a, "type", "veth", "peer", "name", self.veth_b)
        sh("ip", "link", "set", self.veth_a, "netns", self.ns_a)
        sh("ip", "link", "set", self.veth_b, "netns", self.ns_b)
        sh("ip", "-n", self.ns_a, "addr", "add", f"{self.A_ADDR}/24", "dev", self.veth_a)
        sh("ip", "-n", self.ns_b, "addr", "add", f"{self.B_ADDR}/24", "dev", self.veth_b)
        sh("ip", "-n", self.ns_a, "link", "set", self.veth_a, "up")
        sh("ip", "-n", self.ns_b, "link", "set", self.veth_b, "up")

    def partition(self, on):
        """Black-hole every packet between namespace B and the rest (no reset, no ICMP)."""
        op = "-A" if on else "-D"
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            subprocess.run(["ip", "netns", "exec", self.ns_b, "iptables", op, chain, flag,
                            self.veth_b, "-j", "DROP"], check=True)
        self.cut = on

    def write_config(self, i):
        d = self.dirs[i]
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
        with open(os.path.join(d, "data", "myid"), "w") as f:
            f.write(f"{i + 1}\n")
        with open(os.path.join(d, "zoo.cfg"), "w") as f:
            f.write(f"tickTime={self.tick}\ninitLimit=10\nsyncLimit=5\ndataDir={d}/data\n"
                    f"clientPort={self.ports[i][0]}\nadmin.enableServer=false\n"
                    "4lw.commands.whitelist=*\nforceSync=no\n")
            for j in range(3):
                f.write(f"server.{j + 1}={self.addr_of(j)}:{self.ports[j][1]}:{self.ports[j][2]}\n")

    def start(self, i):
        argv = ["java", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
                ZK_CLASSPATH, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-Dzookeeper.admin.enableServer=false",
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                os.path.join(self.dirs[i], "zoo.cfg")]
        self.procs[i] = self.h.spawn(argv, os.path.join(self.dirs[i], "zk.log"), self.ns_of(i))

    def mode(self, i):
        code = ("import socket,sys\ntry:\n s=socket.create_connection(('127.0.0.1',%d),timeout=1)"
                "\n s.sendall(b'srvr'); b=b''\n while True:\n  c=s.recv(4096)\n  if not c: break\n"
                "  b+=c\n print(b.decode())\nexcept Exception: pass\n" % self.ports[i][0])
        try:
            r = subprocess.run(["ip", "netns", "exec", self.ns_of(i), "/usr/bin/python3", "-c",
                                code], capture_output=True, text=True, timeout=3)
        except subprocess.TimeoutExpired:
            return None
        for line in r.stdout.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def start_all(self):
        self.setup_net()
        for i in range(3):
            self.write_config(i)
            self.start(i)
        self.wait_ready(90)

    def wait_ready(self, timeout):
        wait_until(lambda: all(self.mode(i) in ("leader", "follower") for i in range(3)),
                   timeout * self.h.scale, "ZooKeeper ensemble")

    def url(self, i_list):
        return "zk://" + ",".join(f"127.0.0.1:{self.ports[i][0]}" for i in i_list) + "/torture"


# ---- client groups ----------------------------------------------------------------------------


class Client:
    def __init__(self, h, phase, cid, kind, name, backend, url, fence_url, extra, netns=None):
        self.h, self.phase, self.cid, self.kind, self.name = h, phase, cid, kind, name
        self.backend, self.url, self.fence_url, self.extra, self.netns = (
            backend, url, fence_url, extra, netns)
        self.incarnation = 0
        self.proc = None
        self.stopped = False

    def logfile(self):
        return os.path.join(self.h.dir, f"{self.phase}.{self.cid}.{self.incarnation}.jsonl")

    def start(self):
        self.incarnation += 1
        argv = [self.h.args.client, "--backend", self.backend, "--url", self.url, "--fence",
                self.fence_url, "--kind", self.kind, "--name", self.name, "--id",
                f"{self.cid}.{self.incarnation}", "--out", self.logfile(), "--seed",
                str(self.h.rng.randrange(1 << 62))]
        for k, v in self.extra.items():
            argv += [f"--{k}", str(v)]
        self.proc = self.h.spawn(argv, os.path.join(self.h.dir, f"{self.phase}.{self.cid}.err"),
                                 self.netns)
        self.stopped = False

    def just_confirmed(self, within_ms):
        """True when the current log ends inside a hold whose promised end moved forward (an
        answered heartbeat) in a check logged at most `within_ms` ago."""
        try:
            with open(self.logfile(), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 1000))
                lines = f.read().splitlines()[1:]
            events = [json.loads(x) for x in lines[-2:]]
        except (OSError, ValueError):
            return False
        if len(events) < 2 or any(e.get("ev") != "check" for e in events):
            return False
        a, b = events
        return b["end"] > a["end"] + 20e6 and mono_ns() - b["t"] < within_ms * 1e6

    def holding(self, within_ms=None):
        """True when the current log ends inside a hold (granted at most `within_ms` ago)."""
        try:
            with open(self.logfile(), "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - 4000))
                lines = f.read().splitlines()[1:] or []
            events = [json.loads(x) for x in lines[-40:]]
        except (OSError, ValueError):
            return False
        if not events or events[-1].get("ev") not in ("grant", "check", "fence"):
            return False
        if within_ms is None:
            return True
        grants = [e for e in events if e.get("ev") == "grant"]
        return bool(grants) and mono_ns() - grants[-1]["t"] < within_ms * 1e6


# ---- phases -----------------------------------------------------------------------------------


class Phase:
    def __init__(self, h, name, seconds):
        self.h, self.name, self.seconds = h, name, seconds
        self.rng = random.Random(f"{h.args.seed}/{name}")
        self.clients = []
        self.groups = {}  # lock name -> description
        self.killed = []  # (client id with incarnation, monotonic ns)
        self.crashes = []  # workers that died without being killed by a fault

    def add_group(self, lock, kinds, backend, url, fence, extra, netns=None, per_kind=None):
        self.groups[lock] = kinds
        for n, kind in enumerate(kinds):
            e = dict(extra)
            e.update((per_kind or {}).get(kind, {}))
            cid = f"{lock}-{kind}{n}"
            self.clients.append(Client(self.h, self.name, cid, kind, lock, backend, url, fence, e,
                                       netns))

    def kill_client(self, c, restart_after):
        c.proc.send_signal(signal.SIGKILL)
        c.proc.wait()
        self.killed.append((f"{c.cid}.{c.incarnation}", mono_ns()))
        self.h.fault("client_kill", c.cid)
        return restart_after

    def run(self):
        """Start, fault, heal, quiet window, drain. Returns the quiet window (ns)."""
        h = self.h
        for c in self.clients:
            c.start()
        self.t_start = time.monotonic()
        t_end = self.t_start + self.seconds
        self.pending = pending = []  # (when, callable): undo actions and delayed faults
        next_fault = time.monotonic() + self.rng.uniform(0.5, 1.5)
        while time.monotonic() < t_end or pending:
            now = time.monotonic()
            for item in [p for p in pending if p[0] <= now]:
                pending.remove(item)
                item[1]()
            if now >= next_fault and now < t_end:
                undo = self.inject()
                if undo:
                    pending.append(undo)
                next_fault = now + self.rng.expovariate(1.0 / self.mean_gap())
            for c in self.clients:  # a client that died on its own is restarted too
                if c.proc.poll() is not None and not c.stopped:
                    self.crashes.append(f"{c.cid}.{c.incarnation} exited with status "
                                        f"{c.proc.returncode}; see {self.name}.{c.cid}.err")
                    h.fault("client_exit_restart", f"{c.cid} rc={c.proc.returncode}")
                    c.start()
            time.sleep(0.02)
        self.heal()
        quiet0 = mono_ns()
        time.sleep(self.quiet_seconds())
        quiet1 = mono_ns()
        wedged = []
        for c in self.clients:
            c.stopped = True
            c.proc.send_signal(signal.SIGCONT)
            c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15 * h.scale
        for c in self.clients:
            try:
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                wedged.append(f"{c.cid}.{c.incarnation}")
                c.proc.kill()
                c.proc.wait()
        return quiet0, quiet1, wedged

    def mean_gap(self):
        return 1.2

    def quiet_seconds(self):
        return 6.0 * self.h.scale

    # client faults shared by every phase
    def client_fault(self, victims=None):
        c = self.rng.choice(victims or self.clients)
        if c.proc.poll() is not None or c.stopped:
            return None
        if self.rng.random() < 0.35:
            self.kill_client(c, 0)
            c.stopped = True  # restarted by the undo action, not by the liveness loop
            return (time.monotonic() + self.rng.uniform(0.05, 1.0), c.start)
        # SIGSTOP past the lease (and past the hand-off lease), then SIGCONT.
        return self.stop_client(c, self.rng.uniform(1.2, 4.5), "client_stop")

    def stop_client(self, c, pause, kind):
        c.proc.send_signal(signal.SIGSTOP)
        c.stopped = True
        self.h.fault(kind, f"{c.cid} {pause:.2f}s")

        def cont():
            c.stopped = False
            c.proc.send_signal(signal.SIGCONT)
        return (time.monotonic() + pause, cont)


def fence_dump(h, server, netns=None):
    """Accepted/refused counts from the fenced resource's own log, and whether it ever accepted a
    write below one it had accepted before."""
    keys = (resp(server.port, "KEYS", "fencelog:*", netns=netns, timeout=10) or "").split()
    accepted = refused = 0
    bad = []
    for k in keys:
        out = resp(server.port, "LRANGE", k, 0, -1, netns=netns, timeout=30) or ""
        top = 0
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 5:
                continue
            mode, tok, ok = parts[0], int(parts[1]), parts[2] == "1"
            if not ok:
                refused += 1
                continue
            if mode == "w":
                accepted += 1
                if tok < top:
                    bad.append(f"{k}: accepted write {tok} after {top}")
                top = max(top, tok)
    return accepted, refused, bad


class RedisPhase(Phase):
    """Single Redis with AOF (appendfsync always): every kind, a mixed-kind name, faults."""

    def __init__(self, h, seconds):
        super().__init__(h, "redis", seconds)
        self.server = RedisServer(h, "redis-lock", aof=True)
        self.fence = RedisServer(h, "redis-fence", aof=False)
        self.server_busy = False
        self.proxy = None
        self.proxy_busy = False

    def setup(self):
        self.fence.start()
        self.server.start()
        self.proxy = Proxy(self.server.port)
        self.proxy.start()
        url, fence = self.server.url(), self.fence.url()
        # A short idle expiry: a name's fence counter goes whenever the name has had no grant for
        # a lease (a paused server, killed holders), and TOKEN checks that tokens still rise.
        base = {"lease-ms": 1000, "hold-min-ms": 5, "hold-max-ms": 150, "wait-max-ms": 6000,
                "idle-expiry-ms": 200}
        # Waiters of the hand-off kinds wait long, so that a pause does not end their wait.
        handoff = dict(base, **{"wait-max-ms": 20000})
        self.add_group("fair", ["fair"] * 4, "redis", url, fence, handoff)
        self.add_group("fair2", ["fair"] * 3, "redis", url, fence, handoff)
        self.add_group("rw", ["write", "write", "write", "read", "read"], "redis", url, fence,
                       handoff)
        self.add_group("rw2", ["write"] * 3, "redis", url, fence, handoff)
        self.add_group("mutex", ["mutex"] * 3, "redis", url, fence, dict(base, renew=0))
        self.add_group("recursive", ["recursive"] * 3, "redis", url, fence, base)
        self.add_group("sem", ["semaphore"] * 4, "redis", url, fence, dict(base, permits=2))
        self.add_group("sem1", ["semaphore"] * 2, "redis", url, fence, dict(base, permits=1))
        # Two kinds on one name: readers and plain mutexes must still exclude each other (or
        # be refused), never both be granted.
        self.add_group("mixed", ["read", "read", "mutex", "mutex"], "redis", url, fence,
                       dict(base, **{"hold-max-ms": 400}))
        # The first client of every name talks to the server through the proxy.
        seen = set()
        for c in self.clients:
            if c.name not in seen:
                seen.add(c.name)
                c.url = f"redis://127.0.0.1:{self.proxy.port}"

    def inject(self):
        # First half: client faults only, half of them pauses of waiters, on a healthy server
        # (a server fault in the middle would wipe out the hand-off being tested). Second half:
        # every fault.
        first_half = time.monotonic() < self.t_start + self.seconds / 2
        r = self.rng.random() * (0.55 if first_half else 1.0)
        if r < 0.3 and first_half:
            # A waiter of a hand-off kind paused past the hand-off lease: the lock is handed to
            # it while it sleeps, the hand-off expires, another client takes the lock, and the
            # sleeper wakes up to an old grant message.
            waiters = [c for c in self.clients if c.kind in ("fair", "write", "mutex")
                       and not c.stopped and c.proc.poll() is None and not c.holding()]
            if not waiters:
                return None
            c = self.rng.choice(waiters)
            pause = self.rng.uniform(HANDOFF_LEASE_S + 1.5, HANDOFF_LEASE_S + 4.0)
            return self.stop_client(c, pause, "client_stop_waiter")
        if r < 0.55:
            return self.client_fault()
        if r < 0.68:
            if self.proxy_busy:
                return None
            self.proxy_busy = True
            mode = self.rng.choice(["delay", "drop", "blackhole"])
            delay = self.rng.uniform(0.05, 0.8)
            length = self.rng.uniform(0.3, 2.0)
            self.proxy.set_mode(mode, delay)
            self.h.fault(f"proxy_{mode}", f"{length:.2f}s" + (f" +{delay:.2f}s" if mode ==
                                                               "delay" else ""))

            def back():
                self.proxy.set_mode("pass")
                self.proxy_busy = False
            return (time.monotonic() + length, back)
        if self.server_busy:
            return None
        self.server_busy = True
        s = self.server
        if r < 0.78:
            ms = self.rng.randint(100, 1500)
            resp(s.port, "CLIENT", "PAUSE", ms, "ALL")
            self.h.fault("client_pause", f"{ms}ms")
            return (time.monotonic() + ms / 1000.0, self.free)
        if r < 0.9:
            pause = self.rng.uniform(0.2, 2.0)
            s.proc.send_signal(signal.SIGSTOP)
            self.h.fault("server_stop", f"{s.name} {pause:.2f}s")

            def cont():
                s.proc.send_signal(signal.SIGCONT)
                self.free()
            return (time.monotonic() + pause, cont)
        s.kill()
        self.h.fault("server_kill_restart_aof", s.name)

        def restart():
            s.start()
            self.free()
        return (time.monotonic() + self.rng.uniform(0.1, 1.5), restart)

    def free(self):
        self.server_busy = False

    def heal(self):
        self.server.proc.send_signal(signal.SIGCONT)
        self.proxy.set_mode("pass")

    def teardown(self):
        self.proxy.stop()


class RedlockPhase(Phase):
    """N independent masters: some with AOF, some without (restarted only after the longest
    lease, as Redlock requires); one server faulted at a time."""

    def __init__(self, h, n, seconds):
        super().__init__(h, f"redlock{n}", seconds)
        self.servers = [RedisServer(h, f"redlock{n}-{i}", aof=(i % 2 == 0)) for i in range(n)]
        self.fence = RedisServer(h, f"redlock{n}-fence", aof=False)
        self.busy = False
        self.lease_ms = 1000

    def setup(self):
        self.fence.start()
        for s in self.servers:
            s.start()
        url = ",".join(s.url() for s in self.servers)
        base = {"lease-ms": self.lease_ms, "hold-min-ms": 5, "hold-max-ms": 150,
                "wait-max-ms": 3000, "idle-expiry-ms": 200}
        self.add_group("mutex", ["mutex"] * 4, "redlock", url, self.fence.url(), base)
        self.add_group("fixed", ["mutex"] * 3, "redlock", url, self.fence.url(),
                       dict(base, renew=0))

    def inject(self):
        if self.rng.random() < 0.5 or self.busy:
            return self.client_fault()
        self.busy = True
        s = self.rng.choice(self.servers)
        r = self.rng.random()
        if r < 0.35:
            pause = self.rng.uniform(0.2, 2.0)
            s.proc.send_signal(signal.SIGSTOP)
            self.h.fault("server_stop", f"{s.name} {pause:.2f}s")

            def cont():
                s.proc.send_signal(signal.SIGCONT)
                self.busy = False
            return (time.monotonic() + pause, cont)
        if r < 0.55:
            ms = self.rng.randint(100, 1500)
            resp(s.port, "CLIENT", "PAUSE", ms, "ALL")
            self.h.fault("client_pause", f"{s.name} {ms}ms")
            return (time.monotonic() + ms / 1000.0, self.free)
        s.kill()
        # Without persistence a server may serve again only once every lease it granted ran out.
        delay = self.rng.uniform(0.1, 1.0) + (0 if s.aof else self.lease_ms / 1000.0 + 0.5)
        self.h.fault("server_kill_restart_" + ("aof" if s.aof else "noaof"), s.name)

        def restart():
            s.start()
            self.busy = False
        return (time.monotonic() + delay, restart)

    def free(self):
        self.busy = False

    def heal(self):
        for s in self.servers:
            s.proc.send_signal(signal.SIGCONT)


class SentinelPhase(Phase):
    """Redis Sentinel: a master, two replicas and three sentinels (down-after 1 s). Faults:
    failovers (the master SIGKILLed, or demoted by SENTINEL FAILOVER), the killed node back as a
    replica; client stop/kill. Clients follow the master through a redis-sentinel:// URL with the
    WAIT safeguard (DLOCK_TORTURE_SENTINEL_WAIT replicas, default 2, every replica; 0 turns it off and shows the
    hazard of asynchronous replication: docs/guarantees.md)."""

    NAME = "mymaster"

    def quiet_seconds(self):
        # With WAIT for every replica, nothing is granted until a killed master is back as a
        # replica and resynchronised (docs/sentinel.md): longer than the other phases' window.
        return 15.0 * self.h.scale

    def __init__(self, h, seconds):
        super().__init__(h, "sentinel", seconds)
        self.nodes = []
        self.sentinels = []
        self.fence = RedisServer(h, "sentinel-fence", aof=False)
        self.busy = False
        self.wait = int(os.environ.get("DLOCK_TORTURE_SENTINEL_WAIT", "2"))

    def master_port(self):
        for p, _ in self.sentinels:
            out = resp(p, "SENTINEL", "get-master-addr-by-name", self.NAME)
            if out and len(out.split()) == 2:
                return int(out.split()[1])
        return None

    def node_at(self, port):
        return next((n for n in self.nodes if n.port == port), None)

    def healthy(self):
        port = self.master_port()
        m = self.node_at(port) if port else None
        if not m or m.proc is None or m.proc.poll() is not None:
            return False
        info = resp(port, "INFO", "replication") or ""
        return "connected_slaves:2" in info and (resp(port, "ROLE") or "").startswith("master")

    def setup(self):
        self.fence.start()
        master = RedisServer(self.h, "sentinel-node0", aof=False,
                             extra=["--repl-diskless-sync-delay", "0"])
        master.start()
        self.nodes.append(master)
        for i in (1, 2):
            n = RedisServer(self.h, f"sentinel-node{i}", aof=False,
                            extra=["--repl-diskless-sync-delay", "0",
                                   "--replicaof", "127.0.0.1", str(master.port)])
            n.start()
            self.nodes.append(n)
        wait_until(lambda: "connected_slaves:2" in (resp(master.port, "INFO", "replication")
                                                    or ""), 30, "replicas")
        for i, port in enumerate(free_ports(3)):
            d = os.path.join(self.h.dir, f"sentinel-{i}")
            os.makedirs(d, exist_ok=True)
            conf = os.path.join(d, "sentinel.conf")
            with open(conf, "w") as f:
                f.write(f"sentinel monitor {self.NAME} 127.0.0.1 {master.port} 2\n"
                        f"sentinel down-after-milliseconds {self.NAME} 1000\n"
                        f"sentinel failover-timeout {self.NAME} 2000\n")
            proc = self.h.spawn(["redis-server", conf, "--sentinel", "--port", str(port),
                                 "--bind", "127.0.0.1", "--dir", d, "--logfile", "sentinel.log"],
                                os.path.join(d, "stdout.log"), None)
            self.sentinels.append((port, proc))
        for p, _ in self.sentinels:
            wait_until(lambda p=p: "num-other-sentinels\n2" in (
                resp(p, "SENTINEL", "master", self.NAME) or ""), 30, "sentinels")
        hosts = ",".join(f"127.0.0.1:{p}" for p, _ in self.sentinels)
        query = f"?wait_replicas={self.wait}&wait_timeout=300ms" if self.wait else ""
        url = f"redis-sentinel://{hosts}/{self.NAME}{query}"
        base = {"lease-ms": 1500, "hold-min-ms": 5, "hold-max-ms": 150, "wait-max-ms": 8000,
                "idle-expiry-ms": 200}
        self.add_group("mutex", ["mutex"] * 4, "redis", url, self.fence.url(), base)
        self.add_group("fair", ["fair"] * 3, "redis", url, self.fence.url(),
                       dict(base, **{"wait-max-ms": 20000}))
        self.add_group("sem", ["semaphore"] * 3, "redis", url, self.fence.url(),
                       dict(base, permits=2))
        self.add_group("rw", ["write", "write", "read", "read"], "redis", url, self.fence.url(),
                       dict(base, **{"wait-max-ms": 20000}))

    def inject(self):
        if self.rng.random() < 0.5 or self.busy or not self.healthy():
            return self.client_fault()
        self.busy = True
        port = self.master_port()
        old = self.node_at(port)
        if self.rng.random() < 0.6:
            old.kill()
            self.h.fault("master_kill_failover", old.name)
        else:
            resp(self.sentinels[0][0], "SENTINEL", "FAILOVER", self.NAME)
            self.h.fault("sentinel_failover", old.name)

        give_up = time.monotonic() + 30 * self.h.scale

        def rejoin():
            new = self.master_port()
            if (new is None or new == port) and time.monotonic() < give_up:
                self.pending.append((time.monotonic() + 0.5, rejoin))  # failover not done yet
                return
            if old.proc.poll() is not None:  # killed: back as a replica of the new master
                old.extra = ["--repl-diskless-sync-delay", "0"] + (
                    ["--replicaof", "127.0.0.1", str(new)] if new and new != port else [])
                old.start()
            self.busy = False
        return (time.monotonic() + 2.0, rejoin)

    def heal(self):
        for n in self.nodes:
            if n.proc is not None and n.proc.poll() is not None:
                n.start()


class ZkPhase(Phase):
    """ZooKeeper 3-node ensemble (tickTime 500 ms, sessions of 1 s). Namespace B holds server 1
    and the clients that know only server 1; A holds servers 2 and 3 and the other clients.
    Faults: partition of B (targeted at a moment its client holds), server stop/kill/restart,
    client stop/kill."""

    def __init__(self, h, seconds):
        super().__init__(h, "zk", seconds)
        self.zk = ZkEnsemble(h, tick_ms=int(os.environ.get("DLOCK_TORTURE_ZK_TICK", "500")))
        self.fence = None
        self.busy = False

    def setup(self):
        self.zk.start_all()
        # The fenced resource lives in A and listens on the veth address too, for B's clients.
        self.fence = RedisServer(self.h, "zk-fence", aof=False,
                                 bind=f"127.0.0.1 {ZkEnsemble.A_ADDR}", netns=self.zk.ns_a,
                                 port=self.zk.spare_port)
        self.fence.start()
        fa, fb = self.fence.url(), self.fence.url(ZkEnsemble.A_ADDR)
        ua, ub = self.zk.url([1, 2]), self.zk.url([0])
        base = {"session-ms": 1000, "hold-min-ms": 5, "hold-max-ms": 150, "wait-max-ms": 4000}
        long_hold = dict(base, **{"hold-min-ms": 3000, "hold-max-ms": 5000})
        na = self.zk.ns_a
        # The partition targets: on each of these names one client in B, which holds 3-5 s
        # (longer than its session), against clients in A. Each B client has its own session,
        # so one cut gives several chances to catch a holder that outlives its session.
        for lock, a_kinds, b_kind in (("part", ["mutex", "mutex"], "mutex"),
                                      ("partrw", ["write", "read"], "write"),
                                      ("partfair", ["fair", "fair"], "fair"),
                                      ("partrec", ["recursive"], "recursive")):
            self.add_group(lock, a_kinds, "zk", ua, fa, base, na)
            self.add_group(lock, [b_kind], "zk", ub, fb, long_hold, self.zk.ns_b)
            self.clients[-1].cid = f"{lock}-{b_kind}B"
            self.groups[lock] = a_kinds + [b_kind]
        self.add_group("sem", ["semaphore"] * 3, "zk", ua, fa, dict(base, permits=2), na)

    def mean_gap(self):
        return 1.5

    def inject(self):
        r = self.rng.random()
        if r < 0.3 or self.busy:
            a_clients = [c for c in self.clients if c.netns == self.zk.ns_a]
            return self.client_fault(a_clients)
        self.busy = True
        if r < 0.8:
            # Cut B off while one of its clients holds a grant at most 1.2 s old (it holds 3-5 s,
            # so it holds on past its session), or after 6 s of waiting for such a moment.
            b = [c for c in self.clients if c.netns == self.zk.ns_b]
            deadline = time.monotonic() + 6.0
            cut = self.rng.uniform(1.8, 3.0)

            def try_cut():
                # Best: just after a holder's heartbeat was answered, before the follower could
                # report that touch to the leader (it does so every tickTime/2).
                fresh = [c.cid for c in b if c.holding(within_ms=1500)
                         and c.just_confirmed(within_ms=40)]
                if not fresh and time.monotonic() < deadline:
                    self.pending.append((time.monotonic() + 0.01, try_cut))
                    return
                self.zk.partition(True)
                self.h.fault("zk_partition_follower", f"{cut:.2f}s holding={fresh}")

                def heal():
                    self.zk.partition(False)
                    self.busy = False
                self.pending.append((time.monotonic() + cut, heal))
            return (time.monotonic(), try_cut)
        i = self.rng.randrange(3)
        if self.rng.random() < 0.5:
            # Often the leader: a new leader term also moves the phase between the followers'
            # session touches and the leader's expiry ticks.
            i = next((j for j in range(3) if self.zk.mode(j) == "leader"), i)
        p = self.zk.procs[i]
        if r < 0.88:
            pause = self.rng.uniform(0.3, 2.5)
            p.send_signal(signal.SIGSTOP)
            self.h.fault("server_stop", f"zk{i + 1} {pause:.2f}s")

            def cont():
                p.send_signal(signal.SIGCONT)
                self.busy = False
            return (time.monotonic() + pause, cont)
        p.kill()
        p.wait()
        self.h.fault("server_kill_restart", f"zk{i + 1}")

        def restart():
            self.zk.start(i)
            self.busy = False
        return (time.monotonic() + self.rng.uniform(0.3, 2.0), restart)

    def quiet_seconds(self):
        return 8.0 * self.h.scale

    def heal(self):
        if self.zk.cut:
            self.zk.partition(False)
        for i, p in enumerate(self.zk.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
            else:
                self.zk.start(i)
        self.zk.wait_ready(60)


# ---- etcd -------------------------------------------------------------------------------------

ETCD_TTL_S = 2  # the workers' etcd lease (session) TTL: the smallest the client accepts

# The lock names of the etcd phase: (name, the kind of each worker, extra worker options). One
# line per lock kind the etcd client supports; a kind added to the client gets its line here (the
# checker knows every kind: "recursive", "write"/"read", "semaphore" with "permits").
ETCD_GROUPS = [
    ("mutex", ["mutex"] * 3, {}),
    ("fair", ["fair"] * 3, {}),
    ("mixed", ["mutex", "mutex", "fair"], {}),  # two kinds on one name exclude each other
    ("rw", ["write", "write", "read", "read"], {}),
    ("recursive", ["recursive"] * 2, {}),
    ("sem", ["semaphore"] * 3, {"permits": 2}),
]


class EtcdCluster:
    """Three etcd members on loopback ports (elections within about a second), as children of
    the harness."""

    def __init__(self, h, n=3):
        self.h = h
        ports = free_ports(2 * n)
        self.client_ports, self.peer_ports = ports[:n], ports[n:]
        self.dirs = [os.path.join(h.dir, f"etcd{i + 1}") for i in range(n)]
        self.procs = [None] * n
        self.started = [False] * n
        self.token = f"dlock-torture-{h.tag}"

    def start(self, i):
        cluster = ",".join(f"m{j + 1}=http://127.0.0.1:{p}" for j, p in enumerate(self.peer_ports))
        client = f"http://127.0.0.1:{self.client_ports[i]}"
        peer = f"http://127.0.0.1:{self.peer_ports[i]}"
        os.makedirs(self.dirs[i], exist_ok=True)
        argv = ["etcd", f"--name=m{i + 1}", f"--data-dir={self.dirs[i]}/data",
                f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={cluster}", f"--initial-cluster-token={self.token}",
                "--initial-cluster-state=" + ("existing" if self.started[i] else "new"),
                "--heartbeat-interval=50", "--election-timeout=500", "--logger=zap",
                "--log-level=warn"]
        self.procs[i] = self.h.spawn(argv, os.path.join(self.dirs[i], "etcd.log"))
        self.started[i] = True

    def http(self, i, path, body=None, timeout=0.5):
        try:
            data = None if body is None else body.encode()
            with urllib.request.urlopen(f"http://127.0.0.1:{self.client_ports[i]}{path}", data,
                                        timeout=timeout) as r:
                return r.read().decode()
        except Exception:  # noqa: BLE001 - down, paused or electing: no answer
            return ""

    def healthy(self, i):
        return '"health":"true"' in self.http(i, "/health")

    def leader(self):
        """The index of the member that says it leads, or None."""
        for i, p in enumerate(self.procs):
            if p is None or p.poll() is not None:
                continue
            try:
                st = json.loads(self.http(i, "/v3/maintenance/status", "{}") or "{}")
            except ValueError:
                continue
            if st.get("leader") and st.get("leader") == st.get("header", {}).get("member_id"):
                return i
        return None

    def start_all(self):
        for i in range(len(self.procs)):
            self.start(i)
        self.wait_ready(60)

    def wait_ready(self, timeout):
        wait_until(lambda: all(self.healthy(i) for i in range(len(self.procs))),
                   timeout * self.h.scale, "etcd cluster")

    def url(self, first):
        """Every member, starting with member `first` (a client asks that one first)."""
        n = len(self.client_ports)
        return "etcd://" + ",".join(f"127.0.0.1:{self.client_ports[(first + k) % n]}"
                                    for k in range(n))


class EtcdPhase(Phase):
    """etcd: a 3-member cluster on loopback, every lock kind of the etcd client (ETCD_GROUPS),
    sessions of ETCD_TTL_S. Faults: a member (the leader half of the time) SIGSTOPped or
    SIGKILLed and restarted, the whole cluster SIGSTOPped past the TTL, workers SIGSTOPped past
    their session's TTL or killed.

    A member that is or may be the leader is paused for at most 1 s, less than the TTL minus the
    keep-alive interval: etcd 3.4.23 (Debian's) has a server bug where a leader paused past the
    TTL, replaced meanwhile, revokes on resuming every lease it saw no keep-alive for, and its
    revocations, forwarded to the new leader, are committed, although the clients kept them
    alive there (fixed upstream after 3.4.23: an old leader's revocations are ignored).
    DLOCK_TORTURE_ETCD_LEADER_PAUSE=long pauses the leader past the TTL and shows it (OVERLAP
    violations: docs/torture.md, docs/guarantees.md)."""

    def __init__(self, h, seconds):
        super().__init__(h, "etcd", seconds)
        self.etcd = EtcdCluster(h)
        self.fence = RedisServer(h, "etcd-fence", aof=False)
        self.busy = False
        self.long_leader_pause = os.environ.get("DLOCK_TORTURE_ETCD_LEADER_PAUSE", "") == "long"

    def setup(self):
        self.fence.start()
        self.etcd.start_all()
        base = {"session-ms": ETCD_TTL_S * 1000, "command-timeout-ms": 500,
                "hold-min-ms": 5, "hold-max-ms": 150, "wait-max-ms": 4000}
        n = 0
        for lock, kinds, extra in ETCD_GROUPS:
            # One worker per kind entry; their first member rotates, so a member fault hits the
            # workers that talk to it first and not the others.
            for kind in kinds:
                self.add_group(lock, [kind], "etcd", self.etcd.url(n % 3), self.fence.url(),
                               dict(base, **extra))
                self.clients[-1].cid = f"{lock}-{kind}{n}"
                n += 1
            self.groups[lock] = kinds

    def inject(self):
        r = self.rng.random()
        if r < 0.45 or self.busy:
            c = self.rng.choice(self.clients)
            if c.proc.poll() is not None or c.stopped:
                return None
            if self.rng.random() < 0.35:
                self.kill_client(c, 0)
                c.stopped = True
                return (time.monotonic() + self.rng.uniform(0.05, 1.0), c.start)
            # Past its session's TTL: the server expires its lease while it sleeps.
            return self.stop_client(c, self.rng.uniform(ETCD_TTL_S + 0.3, ETCD_TTL_S + 2.5),
                                    "client_stop")
        self.busy = True
        procs = self.etcd.procs
        if r < 0.52:
            pause = self.rng.uniform(ETCD_TTL_S + 0.3, ETCD_TTL_S + 1.5)
            for p in procs:
                p.send_signal(signal.SIGSTOP)
            self.h.fault("cluster_stop", f"{pause:.2f}s")

            def cont_all():
                for p in procs:
                    p.send_signal(signal.SIGCONT)
                self.busy = False
            return (time.monotonic() + pause, cont_all)
        i = self.rng.randrange(len(procs))
        leader = self.etcd.leader()
        if leader is not None and self.rng.random() < 0.5:
            i = leader
        who = f"etcd{i + 1}" + (" (leader)" if i == leader else "")
        p = procs[i]
        if r < 0.8:
            # A follower for up to 2.5 s; the leader (or a member not known to follow) for at
            # most 1 s, unless the etcd bug above is to be shown.
            follower = leader is not None and i != leader
            longest = 2.5 if follower or self.long_leader_pause else 1.0
            pause = self.rng.uniform(0.3, longest)
            if i == leader and self.long_leader_pause:
                pause = self.rng.uniform(ETCD_TTL_S + 0.3, ETCD_TTL_S + 1.5)
            p.send_signal(signal.SIGSTOP)
            self.h.fault("server_stop", f"{who} {pause:.2f}s")

            def cont():
                p.send_signal(signal.SIGCONT)
                self.busy = False
            return (time.monotonic() + pause, cont)
        p.kill()
        p.wait()
        self.h.fault("server_kill_restart", who)

        def restart():
            self.etcd.start(i)
            self.busy = False
        return (time.monotonic() + self.rng.uniform(0.3, 2.0), restart)

    def heal(self):
        for i, p in enumerate(self.etcd.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
            else:
                self.etcd.start(i)
        self.etcd.wait_ready(60)


# ---- checker ----------------------------------------------------------------------------------


def load(run_dir, phase):
    """Grants of one phase: dict (id, g) -> grant record, plus per-process exits."""
    grants = {}
    exits = set()
    starts = {}
    errors = 0
    for fn in sorted(os.listdir(run_dir)):
        if not (fn.startswith(phase + ".") and fn.endswith(".jsonl")):
            continue
        with open(os.path.join(run_dir, fn)) as f:
            for raw in f:
                try:
                    e = json.loads(raw)
                except ValueError:
                    continue  # a line cut by SIGKILL
                ev, cid = e["ev"], e["id"]
                if ev == "start":
                    starts[cid] = e
                    continue
                if ev == "exit":
                    exits.add(cid)
                    continue
                if ev == "error":
                    errors += 1
                    continue
                key = (cid, e["g"])
                if ev == "grant":
                    s = starts[cid]
                    grants[key] = {"id": cid, "g": e["g"], "kind": s["kind"], "name": s["name"],
                                   "permits": s["permits"], "tok": e["tok"], "t_req": e["t_req"],
                                   "t": e["t"], "end": e["end"], "r0": None, "done": False,
                                   "lost": None, "fence": []}
                    continue
                g = grants.get(key)
                if g is None:
                    continue
                if ev in ("check", "fence") and e["end"]:
                    g["end"] = max(g["end"], e["end"]) if g["end"] else 0
                if ev == "fence":
                    g["fence"].append(e)
                elif ev == "lost":
                    g["lost"] = e["t"]
                elif ev == "release":
                    g["r0"] = e["t"]
                elif ev == "released":
                    g["done"] = True
    return grants, exits, starts, errors


def exclusive(g):
    if g["kind"] == "read":
        return False
    if g["kind"] == "semaphore" and g["permits"] > 1:
        return False
    return True


def conflict(a, b):
    if a["kind"] == "semaphore" and a["permits"] > 1:
        return False  # counted by the permit sweep
    if b["kind"] == "semaphore" and b["permits"] > 1:
        return False
    return exclusive(a) or exclusive(b)


def fmt(g):
    return f"{g['id']}#{g['g']} {g['kind']} token={g['tok']}"


def check_phase(run_dir, phase, killed, quiet, wedged):
    """Returns (grants checked, violations list)."""
    grants, exits, _, errors = load(run_dir, phase)
    violations = []
    killed_ids = {k for k, _ in killed}
    by_name = collections.defaultdict(list)
    for g in grants.values():
        # The claim: from the grant to the release's start, never past the last promised end.
        if g["end"] and g["end"] > g["t"]:
            stop = g["end"] if g["r0"] is None else min(g["end"], g["r0"])
            g["claim"] = (g["t"], stop) if stop > g["t"] else None
        else:
            g["claim"] = None
        by_name[g["name"]].append(g)
    ms = lambda ns: ns / 1e6
    faults = []
    try:
        with open(os.path.join(run_dir, "faults.log")) as f:
            for line in f:
                t, kind, detail = (line.rstrip("\n").split(" ", 2) + [""])[:3]
                faults.append((int(t), kind, detail.split(" holding=")[0]))
    except OSError:
        pass

    def cause(t, *grants):
        """The faults that explain a violation: the last one injected on a process involved and
        the last one on a server or the network, each within 10 s before `t`."""
        ids = {g["id"].rsplit(".", 1)[0] for g in grants}
        recent = [f for f in faults if 0 <= t - f[0] < 10e9]
        mine = [f for f in recent if f[2].split(" ")[0] in ids]
        server = [f for f in recent if not f[1].startswith("client_")]
        parts = []
        if mine:
            parts.append(f"on that client {ms(t - mine[-1][0]):.0f} ms before: "
                         f"{mine[-1][1]} {mine[-1][2]}")
        if server:
            parts.append(f"on the servers {ms(t - server[-1][0]):.0f} ms before: "
                         f"{server[-1][1]} {server[-1][2]}")
        return "  [" + ("; ".join(parts) or "no fault on these clients or the servers in the "
                        "10 s before") + "]"

    for name, gs in sorted(by_name.items()):
        live = sorted((g for g in gs if g["claim"]), key=lambda g: g["claim"][0])
        # 1. overlapping claims of kinds that exclude each other
        n_over = 0
        for i, a in enumerate(live):
            for b in live[i + 1:]:
                if b["claim"][0] >= a["claim"][1]:
                    break
                if conflict(a, b):
                    n_over += 1
                    if n_over <= 3:
                        ov = min(a["claim"][1], b["claim"][1]) - b["claim"][0]
                        violations.append(
                            f"OVERLAP {phase}/{name}: {fmt(a)} claimed until "
                            f"+{ms(a['claim'][1] - a['claim'][0]):.0f} ms after its grant, "
                            f"{fmt(b)} granted inside that claim: both held for {ms(ov):.0f} ms"
                            + cause(b["claim"][0], a, b))
        if n_over > 3:
            violations.append(f"OVERLAP {phase}/{name}: {n_over - 3} more overlapping pairs")
        # 1b. at most `permits` holders of a counting semaphore at once
        sem = [g for g in live if g["kind"] == "semaphore" and g["permits"] > 1]
        if sem:
            limit = sem[0]["permits"]
            points = sorted([(g["claim"][0], 1, g) for g in sem] + [(g["claim"][1], -1, g)
                                                                   for g in sem],
                            key=lambda p: (p[0], p[1]))
            held, reported = set(), 0
            for t, d, g in points:
                if d == 1:
                    held.add(id(g))
                    if len(held) > limit and reported < 3:
                        reported += 1
                        violations.append(f"PERMITS {phase}/{name}: {len(held)} holders of "
                                          f"{limit} permits at once (last granted: {fmt(g)})"
                                          + cause(t))
                else:
                    held.discard(id(g))
        # 2. tokens strictly increase in grant order (between kinds that exclude each other)
        order = sorted(live, key=lambda g: g["t"])
        top_ex = top_read = None
        n_tok = 0
        for b in order:
            if not (b["kind"] == "semaphore" and b["permits"] > 1):
                prev = top_ex if not exclusive(b) else max(
                    [x for x in (top_ex, top_read) if x], key=lambda g: g["tok"], default=None)
                if prev is not None and b["tok"] <= prev["tok"]:
                    n_tok += 1
                    if n_tok <= 3:
                        violations.append(
                            f"TOKEN {phase}/{name}: {fmt(b)} granted "
                            f"{ms(b['t'] - prev['t']):.0f} ms after {fmt(prev)}: token not above"
                            + cause(b["t"], b, prev))
                if exclusive(b):
                    if top_ex is None or b["tok"] > top_ex["tok"]:
                        top_ex = b
                elif top_read is None or b["tok"] > top_read["tok"]:
                    top_read = b
        if n_tok > 3:
            violations.append(f"TOKEN {phase}/{name}: {n_tok - 3} more")
        # 3. the fenced resource refused a holder that was still valid when the answer came
        n_f = 0
        for g in gs:
            for f in g["fence"]:
                if f["ok"] == 0 and f["t_reply"] < f["end"]:
                    n_f += 1
                    if n_f <= 3:
                        violations.append(
                            f"FENCE {phase}/{name}: {fmt(g)} was refused by the fenced resource "
                            f"(a write with token {f['seen']} came first) while its lease had "
                            f"{ms(f['end'] - f['t_reply']):.0f} ms left" + cause(f["t"], g))
        if n_f > 3:
            violations.append(f"FENCE {phase}/{name}: {n_f - 3} more")
        # 4. nothing wedged: the name was granted again in the quiet window after healing
        if quiet and not any(quiet[0] <= g["t"] <= quiet[1] for g in gs):
            violations.append(f"WEDGED {phase}/{name}: no grant in the {ms(quiet[1] - quiet[0]):.0f}"
                              " ms quiet window after every fault was healed")
    # 4b. every grant ended: released, lost or expired (its process killed by a fault)
    for g in grants.values():
        if g["done"] or g["lost"] is not None or g["id"] in killed_ids:
            continue
        if g["id"] in exits:
            violations.append(f"UNENDED {phase}: {fmt(g)} on {g['name']} never ended")
    for w in wedged:
        violations.append(f"WEDGED {phase}: client {w} did not stop within the drain bound")
    return len(grants), errors, violations


# ---- main ---------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--minutes", type=float, default=3.0, help="fault time over all phases")
    ap.add_argument("--client", default=None, help="dlock-torture-client binary")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    ap.add_argument("--phases", default="redis,redlock3,redlock5,sentinel,zk,etcd")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time() * 1000) % 1_000_000_007
    if args.client is None:
        here = os.path.dirname(os.path.abspath(__file__))
        args.client = os.path.join(here, "..", "..", "build", "tests", "torture",
                                   "dlock-torture-client")
    args.client = os.path.abspath(args.client)
    phases = [p for p in args.phases.split(",") if p]
    if "zk" in phases and os.geteuid() != 0:
        log("SKIPPED phase zk: it needs root (network namespaces and iptables for the partition)")
        phases.remove("zk")
    if "etcd" in phases:
        why = None
        if not shutil.which("etcd"):
            why = "no etcd binary (Debian package etcd-server)"
        else:
            try:
                r = subprocess.run([args.client, "--backends", "list"], capture_output=True,
                                   text=True, timeout=10)
                if "etcd" not in r.stdout.split():
                    why = "the client was built without etcd (DLOCK_WITH_ETCD=OFF)"
            except (OSError, subprocess.TimeoutExpired):
                pass  # no client binary: reported below
        if why:
            log(f"SKIPPED phase etcd: {why}")
            phases.remove("etcd")
    if not phases:
        log("no phase to run")
        return 2
    weights = {"redis": 0.4, "redlock3": 0.1, "redlock5": 0.1, "zk": 0.4, "sentinel": 0.2,
               "etcd": 0.1}
    total_w = sum(weights[p] for p in phases)
    log(f"seed {args.seed} (replay: {sys.argv[0]} --seed {args.seed} --minutes {args.minutes} "
        f"--phases {args.phases})")
    if not os.access(args.client, os.X_OK):
        log(f"no client binary at {args.client} (build target dlock-torture-client)")
        return 2
    h = Harness(args)
    log(f"run directory {h.dir}")
    total_grants = total_errors = 0
    all_violations = []
    processes = 0
    t0 = time.monotonic()

    def on_signal(signum, _):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        for name in phases:
            secs = max(10.0, args.minutes * 60 * weights[name] / total_w)
            if name == "redis":
                ph = RedisPhase(h, secs)
            elif name.startswith("redlock"):
                ph = RedlockPhase(h, int(name[len("redlock"):]), secs)
            elif name == "zk":
                ph = ZkPhase(h, secs)
            elif name == "sentinel":
                ph = SentinelPhase(h, secs)
            elif name == "etcd":
                ph = EtcdPhase(h, secs)
            else:
                log(f"unknown phase {name}")
                return 2
            before = sum(h.faults.values())
            ph.setup()
            log(f"phase {name}: {len(ph.clients)} clients on {len(ph.groups)} names, "
                f"{secs:.0f} s of faults")
            quiet0, quiet1, wedged = ph.run()
            fence = getattr(ph, "fence", None)
            acc, ref, bad = fence_dump(h, fence, fence.netns)
            grants, errors, violations = check_phase(h.dir, name, ph.killed, (quiet0, quiet1),
                                                     wedged)
            violations += [f"FENCE-STORE {name}: {b}" for b in bad]
            violations += [f"CRASH {name}: worker {c}" for c in ph.crashes]
            processes += sum(c.incarnation for c in ph.clients)
            total_grants += grants
            total_errors += errors
            all_violations += violations
            log(f"phase {name}: {grants} grants checked, {errors} acquire errors, "
                f"{sum(h.faults.values()) - before} faults, fenced writes {acc} accepted / "
                f"{ref} refused, {len(violations)} violations")
            for v in violations:
                print("  VIOLATION " + v, flush=True)
            if hasattr(ph, "teardown"):
                ph.teardown()
            for p in list(h.procs):  # this phase's servers and clients
                h.stop_proc(p, signal.SIGKILL, 5)
            for ns in list(h.netns):
                subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
                h.netns.remove(ns)
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); cleaning up")
        h.cleanup()
        return 2
    except Exception as e:  # noqa: BLE001 - the harness failed, not the library
        log(f"harness error: {e!r}")
        h.cleanup()
        return 2
    h.cleanup()
    print("==== torture report ====")
    print(f"seed: {args.seed}")
    print(f"duration: {time.monotonic() - t0:.0f} s  (phases: {','.join(phases)})")
    print(f"client processes: {processes}")
    print("faults injected: " + (", ".join(f"{k} {v}" for k, v in sorted(h.faults.items()))
                                 or "none") + f"  (total {sum(h.faults.values())})")
    print(f"grants checked: {total_grants}  (acquire errors: {total_errors})")
    print(f"violations: {len(all_violations)}")
    for v in all_violations:
        print("  " + v)
    if all_violations:
        print(f"replay: tests/torture/torture.py --seed {args.seed} --minutes {args.minutes} "
              f"--phases {args.phases}")
    if not args.keep and not all_violations:
        shutil.rmtree(h.dir, ignore_errors=True)
    else:
        print(f"logs kept in {h.dir}")
    return 1 if all_violations else 0


if __name__ == "__main__":
    sys.exit(main())
