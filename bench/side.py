"""Side by side: dlock and the lock clients people use instead, in one run, on the same servers.

bench/run --peers DIR runs, next to dlock's own worker, every peer worker found in DIR (workers of
other lock clients speaking the same worker protocol, docs/benchmarks.md) on the same workloads,
interleaved (each repetition rotates the order), against the same servers. This module holds the
peer catalogue, the plan of side-by-side runs, and their analysis (the "Side by side" section of
REPORT.md and its plots). Standard library only; bench/analyse.py does the per-run figures.

The peer directory is not part of this repository: it is given on the command line (--peers) or
in DLOCK_BENCH_PEERS. bench/setup-peers.sh installs what the peers need (Debian packages, the npm
modules of the node peer into a cache directory outside the work tree).
"""

import json
import math
import os
import shutil
import subprocess

import analyse

# Where bench/setup-peers.sh puts the node peer's npm modules (NODE_PATH for the node workers).
NODE_MODULES = os.environ.get("DLOCK_BENCH_PEERS_NODE_MODULES") or os.path.join(
    os.path.expanduser("~"), ".cache", "dlock-bench-peers", "node", "node_modules")

# The redis-plus-plus peer's compiled driver (bench/setup-peers.sh builds it there).
RPP_DRIVER = os.environ.get("DLOCK_BENCH_RPP_DRIVER") or os.path.join(
    os.path.expanduser("~"), ".cache", "dlock-bench-peers", "rpp", "rpp_driver")

# The tuned mode of each Redis peer (its fastest polling): the one run in the scale curves.
TUNED_MODES = ["sleep1ms", "tuned", "redlock-poll1ms"]

# backend -> the dlock worker modes compared on it, with what the report calls them.
DLOCK_VARIANTS = {
    "redis": [("mutex", "dlock mutex"), ("fair", "dlock fair_mutex")],
    "redlock": [("redlock", "dlock mutex over Redlock")],
    "zk": [("zk", "dlock mutex over ZooKeeper")],
    "etcd": [("etcd", "dlock mutex over etcd")],
}


def peer_catalogue(peers_dir):
    """The peer workers of `peers_dir`: list of dicts {name, backend, argv, modes, env, missing}.
    `missing` says why a peer cannot run here (then it is skipped with that message)."""
    # Debian's python3: the peers' modules are Debian packages (another python3 first on PATH,
    # e.g. a pyenv shim, would not see them).
    py = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else (shutil.which("python3") or "python3")
    node = shutil.which("node")

    def py_has(module):
        return subprocess.run([py, "-c", f"import {module}"], capture_output=True).returncode == 0

    out = []
    d = os.path.join(peers_dir, "drivers")
    for name, script, module, backend, modes in (
            ("redis-py", "redispy_driver.py", "redis", "redis", ["default", "sleep1ms"]),
            ("kazoo", "kazoo_driver.py", "kazoo", "zk", ["default"]),
            ("python-etcd3", "etcd3py_driver.py", "etcd3", "etcd", ["default"])):
        path = os.path.join(d, script)
        missing = None
        if not os.path.exists(path):
            missing = f"{path} not found"
        elif not py_has(module):
            missing = f"python module {module} missing (bench/setup-peers.sh)"
        out.append({"name": name, "backend": backend, "argv": [py, path], "modes": modes, "env": {},
                    "missing": missing})
    path = os.path.join(peers_dir, "node", "redlock_driver.js")
    missing = None
    if not os.path.exists(path):
        missing = f"{path} not found"
    elif not node:
        missing = "node not found (bench/setup-peers.sh)"
    elif not os.path.isdir(os.path.join(NODE_MODULES, "redlock")):
        missing = f"npm modules not installed in {NODE_MODULES} (bench/setup-peers.sh)"
    peer = {"name": "node-redlock", "backend": "redis", "argv": [node or "node", path],
            "modes": ["default", "tuned"], "env": {"NODE_PATH": NODE_MODULES}, "missing": missing}
    out.append(peer)
    # The same worker on 3 masters is node-redlock's Redlock.
    out.append(dict(peer, backend="redlock"))
    # redis-plus-plus (C++ over hiredis): a compiled driver. Its source and the library stay
    # outside this repository; bench/setup-peers.sh compiles DIR/rpp's driver into RPP_DRIVER.
    source = os.path.join(peers_dir, "rpp", "rpp_driver.cpp")
    missing = None
    if not os.path.exists(source):
        missing = f"{source} not found"
    elif not os.access(RPP_DRIVER, os.X_OK):
        missing = (f"{RPP_DRIVER} not built (bench/setup-peers.sh with RPP_PREFIX set to an installed "
                   "redis-plus-plus)")
    peer = {"name": "redis-plus-plus", "backend": "redis", "argv": [RPP_DRIVER],
            "modes": ["redlock-poll1ms", "redmutex"], "env": {}, "missing": missing}
    out.append(peer)
    # One --servers entry is a single master, 3 are its RedLock quorum.
    out.append(dict(peer, backend="redlock"))
    return out


def plan(a, peers, have_zk, have_etcd=False):
    """The side-by-side runs: list of groups {id, backend, workload, workers, cs_us, servers,
    variants: [{label, kind, mode, argv, env}]}; run in this order, each repetition rotating the
    order of the variants within a group."""
    groups = []

    def variants(backend, peer_modes=None):
        v = [{"label": label, "kind": "dlock", "mode": mode, "argv": None, "env": {}}
             for mode, label in DLOCK_VARIANTS[backend]]
        for p in peers:
            if p["backend"] != backend or p["missing"]:
                continue
            for m in p["modes"]:
                if peer_modes is not None and m not in peer_modes:
                    continue
                v.append({"label": f"{p['name']} {m}", "kind": "peer", "mode": m, "argv": p["argv"],
                          "env": p["env"]})
        return v

    for wl, workers, cs in (("W1", 1, 0), ("W3", 8, 0), ("W4", 8, 1000)):
        groups.append({"id": f"{wl}-redis", "backend": "redis", "workload": wl, "workers": workers,
                       "cs_us": cs, "servers": 1, "variants": variants("redis")})
    # W2, 8 workers on 8 keys: uncontended lock/unlock pairs under load, for the server's commands
    # and CPU per pair (INFO commandstats and the server's CPU time around the run).
    groups.append({"id": "W2-redis", "backend": "redis", "workload": "W2", "workers": 8, "cs_us": 0,
                   "servers": 1, "keys": "per-worker", "variants": variants("redis")})
    for wl, workers, cs, nodes in (("W1", 1, 0, 3), ("W1", 1, 0, 5), ("W3", 8, 0, 3)):
        groups.append({"id": f"{wl}-redlock{nodes}", "backend": "redlock", "workload": wl, "workers": workers,
                       "cs_us": cs, "servers": nodes, "variants": variants("redlock")})
    if have_zk:
        for wl, workers, cs in (("W1", 1, 0), ("W3", 8, 0), ("W4", 8, 1000)):
            groups.append({"id": f"{wl}-zk", "backend": "zk", "workload": wl, "workers": workers, "cs_us": cs,
                           "servers": 1, "variants": variants("zk")})
    if have_etcd:
        for wl, workers, cs in (("W1", 1, 0), ("W3", 8, 0), ("W4", 8, 1000)):
            groups.append({"id": f"{wl}-etcd", "backend": "etcd", "workload": wl, "workers": workers, "cs_us": cs,
                           "servers": 1, "variants": variants("etcd")})
    for n in a.scale:
        groups.append({"id": f"S{n}-redis", "backend": "redis", "workload": f"S{n}", "workers": n, "cs_us": 0,
                       "servers": 1, "variants": variants("redis", TUNED_MODES)})
    return groups


def slug(label):
    return "".join(c if c.isalnum() else "_" for c in label)


# --- analysis -----------------------------------------------------------------------------------


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def etcd_floor_records(run_dir):
    """{what: summary record} of W0's etcd floor (bench/floor_etcd.cpp) in this run; {} if absent."""
    return analyse.floor_records(os.path.join(run_dir, "floor_etcd.jsonl"))


def analyse_side(run_dir, side):
    """{group id: {label: {figure: median over repetitions, 'reps': [...], '_raw': pooled}}}"""
    out = {}
    problems = []
    notes = side.setdefault("peer_notes", [])
    for g in side["groups"]:
        res = out.setdefault(g["id"], {})
        for v in g["variants"]:
            reps = []
            raw_other, raw_acq = [], []
            for d in v.get("dirs", []):
                wdir = os.path.join(run_dir, d)
                if not os.path.exists(os.path.join(wdir, "meta.json")):
                    continue
                r = analyse.analyse_workload(wdir)
                # A probe that failed is a problem of the run, a peer's workload or dlock's alike.
                problems.extend(f"side {d}: {p}" for p in r["probe_problems"])
                if not r["ok"]:
                    if v["kind"] == "peer":  # listed under the section's peer failures
                        notes.extend(f"{v['label']}, {d}: {p}" for p in r["problems"] if "violation" not in p)
                        problems.extend(f"side {d}: {p}" for p in r["problems"] if "violation" in p)
                    else:
                        problems.extend(f"side {d}: {p}" for p in r["problems"])
                if r.get("late_max_ns", 0) > 0.1 * r["meta"]["duration_s"] * 1e9:
                    problems.append(f"side {d}: a worker started {r['late_max_ns'] / 1e9:.1f} s late "
                                    "(raise --start-margin-s)")
                meta = r["meta"]
                # The probe's round trip counts when it went to the server this group locks on (etcd's
                # `Put`, ZooKeeper's delete, Redis' PING); runs from before the etcd and ZooKeeper
                # probes timed a PING of the idle Redis server there instead: no figure then.
                probe = r.get("probe") or {}
                own_probe = probe.get("kind") == analyse.probe_kind(g["backend"])
                window_cycles = r["cycles_in_window"] or 0
                mean_cycle = (meta["duration_s"] * 1e9 * r["workers"] / window_cycles) if window_cycles else None
                reps.append({
                    "acquire_p50": get(r, "acquire", "p50"),
                    "acquire_max": get(r, "acquire", "max"),
                    "handoff_other_p50": get(r, "handoff_other", "p50"),
                    "handoff_other_p99": get(r, "handoff_other", "p99"),
                    "handoff_other_n": get(r, "handoff_other", "n"),
                    "held": r.get("held_fraction"),
                    "throughput": r.get("throughput"),
                    "barging": r.get("barging"),
                    "mean_cycle": mean_cycle,
                    "violations": r.get("violations"),
                    "errors": r.get("errors"),
                    "server_cpu_per_grant_us": (meta.get("server_cpu_pct", 0) / 100 * meta["duration_s"] * 1e6
                                                / window_cycles) if window_cycles else None,
                    "backend_cpu_per_grant_us": (meta["backend_cpu_pct"] / 100 * meta["duration_s"] * 1e6
                                                 / window_cycles) if window_cycles and "backend_cpu_pct" in meta else None,
                    "floor_idle": median([meta.get("floor_before_p50"), meta.get("floor_after_p50")]),
                    "floor_load": probe.get("p50") if own_probe else None,
                    "probe_read": probe.get("read_p50"),
                    "probe_gap_ms": probe.get("gap_ms"),
                    "handoff_vs_load": r.get("handoff_other_vs_probe") if own_probe else None,
                    "client_cpu_per_grant_us": r.get("worker_cpu_us_per_cycle"),
                    "ctx_per_grant": r.get("ctx_switches_per_cycle"),
                    "wakeups_per_grant": r.get("wakeups_per_cycle"),
                    "scripts_per_grant": r.get("scripts_per_cycle"),
                    "commands_per_grant": (sum(c.get("calls", 0) for c in (r.get("server_commands") or {}).values())
                                           / r["cycles_total"]) if r.get("cycles_total") else None,
                })
                reps[-1].update(command_time(r.get("server_commands") or {}, window_cycles))
                raw_other.extend(r["_raw"]["handoff_other"])
                raw_acq.extend(r["_raw"]["acquire"])
            if not reps:
                continue
            fig = {k: median([r[k] for r in reps]) for k in reps[0]}
            fig["violations"] = sum(r["violations"] or 0 for r in reps)
            fig["reps"] = len(reps)
            fig["_raw"] = {"handoff_other": raw_other, "acquire": raw_acq}
            fig["kind"] = v["kind"]
            res[v["label"]] = fig
    return out, problems


SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
# Commands of the runner (INFO), the probe (PING) and connection set-up: not the lock's.
OTHER_COMMANDS = ("ping", "info", "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "hello", "auth",
                  "select")


def command_time(cmds, cycles):
    """The server's time inside commands per grant, from INFO commandstats deltas ("usec"): the
    lock's scripts plus every other lock command (at least the time inside commands: a script's
    time includes the commands it runs, counted again on their own), and the lock commands that
    are not scripts (all of dlock's run inside its scripts). The commands the safety rules need
    are timed in W0 instead, in bare scripts (bench/floor.cpp's server-cost op)."""
    if not cycles or not cmds:
        return {"command_us_per_grant": None, "nested_us_per_grant": None}
    own = {c: v for c, v in cmds.items() if c not in OTHER_COMMANDS and "|" not in c}
    scripts = sum(v.get("usec", 0) for c, v in own.items() if c in SCRIPT_COMMANDS)
    nested = sum(v.get("usec", 0) for c, v in own.items() if c not in SCRIPT_COMMANDS)
    return {"command_us_per_grant": (scripts + nested) / cycles, "nested_us_per_grant": nested / cycles}


def probe_gap(res):
    """How often the probes of these results timed a round trip ("5 ms"), from their meta.json."""
    gaps = sorted({f["probe_gap_ms"] for r in res.values() for f in r.values() if f.get("probe_gap_ms")})
    return " / ".join(f"{g:g} ms" for g in gaps) or "few ms"


def get(r, *path):
    for p in path:
        if r is None:
            return None
        r = r.get(p)
    return r


def us(ns):
    return "—" if ns is None else f"{ns / 1000:,.1f} µs"


def best_peer(res, key, higher_better=False):
    """(label, value) of the best peer in `res` for figure `key`."""
    cands = [(lab, f[key]) for lab, f in res.items() if f["kind"] == "peer" and f.get(key) is not None]
    if not cands:
        return None, None
    return (max if higher_better else min)(cands, key=lambda x: x[1])


def ratio_text(v, best, higher_better=False):
    if v is None or not best:
        return "—"
    return f"{v / best:.2f}×"


def section(run_dir, run, plots_dir):
    """Markdown lines of the side-by-side section, the target rows, plots made, problems."""
    side = run["side"]
    res, problems = analyse_side(run_dir, side)
    L = ["## Side by side: dlock and the peers, same run, same servers", ""]
    L.append(f"Peer workers from the directory given with `--peers` ({', '.join(side['peers_run']) or 'none'}); "
             f"{side['reps']} repetitions, the order of the variants rotated each time; every figure is the "
             "median over the repetitions. **Ratios are to the best peer of the same backend in this run** "
             "(lower is better for latencies, higher for the held share). Two floors are given: "
             "*idle* = Redis PING p50 measured just before and after the workload from a quiet client "
             "(the machine between workloads), *under load* = the round trip p50 of **the probe**, a separate "
             f"process started with every variant's workers that times one operation every {probe_gap(res)} "
             "over the whole window, WHILE the workload runs: on Redis a PING (`dlock-bench-floor --gap-ms`, "
             "hiredis sync, one connection) to the server the workers lock on; on ZooKeeper (W3, W4) a create "
             "of an ephemeral sequential node of its own (`/dlock-floor-zk-probe-<pid>-<seq>`, outside every "
             "lock's path), a `zoo_exists(\"/\")` and the delete of that node in turn, by "
             "`dlock-bench-floor-zk --gap-ms` (libzookeeper_mt sync, one session) to the same server; the "
             "delete, a hand-off's release, is the figure; on etcd "
             "(W3, W4) a `Put` of a 32-byte value and a linearizable `Range` alternately, on a key of its own "
             "outside every lock's keys (`dlock-floor-etcd/probe/<pid>`), by `dlock-bench-floor-etcd --gap-ms` "
             "(gRPC C++ sync, one channel) to the same member; the `Put` is the figure. Hand-off tables add "
             "the hand-off to another p50 divided by that round trip, for every variant alike.")
    L.append("")
    for miss in side.get("peers_missing", []):
        L.append(f"- skipped: {miss}")
    for fail in side.get("peer_failures", []):
        L.append(f"- peer did not finish: {fail}")
    for note in sorted(set(side.get("peer_notes", [])))[:20]:
        L.append(f"- {note}")
    if side.get("peers_missing") or side.get("peer_failures") or side.get("peer_notes"):
        L.append("")
    rows = []  # target rows: (target, measured, limit, verdict)

    def table(gid, title, cols):
        r = res.get(gid)
        if not r:
            return
        load = ("etcd `Put` under load" if gid.endswith("-etcd") else "ZooKeeper delete under load"
                if gid.endswith("-zk") else "PING under load")
        handoffs = any(c[1] == "handoff_other_p50" for c in cols)
        L.append(f"### {title}")
        L.append("")
        L.append("| variant | " + " | ".join(c[0] for c in cols) + f" | PING idle / {load} (the probe)"
                 + (" = hand-off to another ×" if handoffs else "") + " | reps |")
        L.append("|---|" + "---|" * (len(cols) + 2))
        for lab, f in r.items():
            cells = []
            for i, (name, key, hb, fmt) in enumerate(cols):
                v = f.get(key)
                blab, bv = best_peer(r, key, hb)
                cell = fmt(v)
                # The ratio to the best peer for the figures a target is set on.
                if f["kind"] == "dlock" and bv and (i == 0 or name == "longest wait"):
                    cell += f" ({ratio_text(v, bv)} best peer)"
                cells.append(cell)
            q = f.get("handoff_vs_load")
            L.append(f"| {'**' + lab + '**' if f['kind'] == 'dlock' else lab} | " + " | ".join(cells) +
                     f" | {us(f['floor_idle'])} / {us(f['floor_load'])}"
                     + (f" = {q:.2f}×" if handoffs and q else "") + f" | {f['reps']} |")
        # The best peer of each column, named: the ratios above are to it.
        best = []
        for name, key, hb, fmt in cols:
            blab, bv = best_peer(r, key, hb)
            best.append("—" if blab is None else f"{blab}: {fmt(bv)}")
        L.append("| *best peer* | " + " | ".join(best) + " | | |")
        L.append("")

    pct = lambda x: "—" if x is None else f"{100 * x:.1f} %"  # noqa: E731
    table("W1-redis", "W1: uncontended acquire, single Redis",
          [("acquire p50", "acquire_p50", False, us), ("throughput", "throughput", True,
                                                         lambda x: "—" if x is None else f"{x:,.0f}/s")])
    table("W3-redis", "W3: hot key, 8 workers, empty critical section, single Redis",
          [("hand-off to another worker p50", "handoff_other_p50", False, us),
           ("p99", "handoff_other_p99", False, us), ("hand-offs to another", "handoff_other_n", True,
                                                      lambda x: "—" if x is None else f"{x:,.0f}"),
           ("barging", "barging", False, pct)])
    table("W4-redis", "W4: hot key, 8 workers, 1 ms critical section, single Redis",
          [("lock held", "held", True, pct), ("longest wait", "acquire_max", False, us),
           ("mean cycle", "mean_cycle", False, us), ("hand-off to another p50", "handoff_other_p50", False, us)])
    num2 = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
    cpu_us = lambda x: "—" if x is None else f"{x:.1f} µs"  # noqa: E731
    table("W2-redis", "W2: 8 workers, 8 keys (uncontended lock/unlock pairs under load), single Redis: "
          "server cost per pair",
          [("Redis CPU per pair", "server_cpu_per_grant_us", False, cpu_us),
           ("server commands per pair", "commands_per_grant", False, num2),
           ("acquire p50", "acquire_p50", False, us),
           ("wake-ups per pair", "wakeups_per_grant", False, num2)])
    table("W1-redlock3", "W5: Redlock, 3 masters, uncontended acquire",
          [("acquire p50", "acquire_p50", False, us)])
    table("W1-redlock5", "W5: Redlock, 5 masters, uncontended acquire",
          [("acquire p50", "acquire_p50", False, us)])
    table("W3-redlock3", "W5: Redlock, 3 masters, hot key, 8 workers",
          [("hand-off to another worker p50", "handoff_other_p50", False, us),
           ("hand-offs to another", "handoff_other_n", True, lambda x: "—" if x is None else f"{x:,.0f}")])
    table("W1-zk", "ZooKeeper: uncontended acquire", [("acquire p50", "acquire_p50", False, us)])
    table("W3-zk", "ZooKeeper: hot key, 8 workers, empty critical section",
          [("hand-off to another worker p50", "handoff_other_p50", False, us)])
    table("W4-zk", "ZooKeeper: hot key, 8 workers, 1 ms critical section",
          [("lock held", "held", True, pct), ("longest wait", "acquire_max", False, us)])
    table("W1-etcd", "etcd: uncontended acquire, one member",
          [("acquire p50", "acquire_p50", False, us), ("throughput", "throughput", True,
                                                         lambda x: "—" if x is None else f"{x:,.0f}/s")])
    table("W3-etcd", "etcd: hot key, 8 workers, empty critical section, one member",
          [("hand-off to another worker p50", "handoff_other_p50", False, us),
           ("p99", "handoff_other_p99", False, us), ("hand-offs to another", "handoff_other_n", True,
                                                      lambda x: "—" if x is None else f"{x:,.0f}"),
           ("barging", "barging", False, pct)])
    table("W4-etcd", "etcd: hot key, 8 workers, 1 ms critical section, one member",
          [("lock held", "held", True, pct), ("longest wait", "acquire_max", False, us),
           ("mean cycle", "mean_cycle", False, us), ("hand-off to another p50", "handoff_other_p50", False, us)])
    # The etcd figures against W0's etcd floor of this run: a hand-off is at least the holder's
    # release (a write) reaching the member and the watch event reaching the next waiter.
    ef = etcd_floor_records(run_dir)
    put = (ef.get("etcd_put") or {}).get("p50_ns")
    if any(res.get(f"{w}-etcd") for w in ("W1", "W3", "W4")) and put:
        L.append(f"etcd against W0's etcd floor of this run (gRPC C++ to the same member, quiet): `Range` p50 "
                 f"{us((ef.get('etcd_range') or {}).get('p50_ns'))}, `Put` p50 {us(put)} (a write: Raft commit and "
                 f"WAL fsync), `Put` + `DeleteRange` p50 {us((ef.get('etcd_put_delete') or {}).get('p50_ns'))}; "
                 "and against the probe's `Put` under the same load (the same client, a separate process, while "
                 "that variant's workers ran: every write then waits for the same WAL fsyncs as theirs), "
                 "`Range` under load beside it.")
        L.append("")
        L.append("| variant | W1 acquire p50 / quiet Put p50 | W3 hand-off to another p50 / quiet Put p50 | "
                 "W3 / Put under the same load (Range) | W4 hand-off to another p50 / quiet Put p50 | "
                 "W4 / Put under the same load (Range) |")
        L.append("|---|---|---|---|---|---|")
        labels = []
        for w in ("W1", "W3", "W4"):
            labels += [lab for lab in res.get(f"{w}-etcd", {}) if lab not in labels]
        for lab in labels:
            cells = []
            for w, key in (("W1", "acquire_p50"), ("W3", "handoff_other_p50"), ("W4", "handoff_other_p50")):
                f = (res.get(f"{w}-etcd") or {}).get(lab) or {}
                v = f.get(key)
                cells.append("—" if v is None else f"{us(v)} = {v / put:.2f}×")
                if w != "W1":
                    ld = f.get("floor_load")
                    cells.append("—" if v is None or not ld else
                                 f"{us(ld)}: {v / ld:.2f}× ({us(f.get('probe_read'))})")
            L.append(f"| {lab} | " + " | ".join(cells) + " |")
        L.append("")

    # Scale: one name, N waiting processes.
    # Only the scale groups that ran (--side may leave them out, e.g. bench/run --only etcd).
    scale = [n for n in side.get("scale", []) if res.get(f"S{n}-redis")]
    if scale:
        L.append("### Scale: one name, N workers waiting on it (empty critical section)")
        L.append("")
        L.append("| variant | " + " | ".join(f"{n} workers: hand-off p50 / Redis CPU per grant" for n in scale)
                 + " |")
        L.append("|---|" + "---|" * len(scale))
        labels = []
        for n in scale:
            for lab in res.get(f"S{n}-redis", {}):
                if lab not in labels:
                    labels.append(lab)
        for lab in labels:
            cells = []
            for n in scale:
                f = res.get(f"S{n}-redis", {}).get(lab)
                cells.append("—" if not f else f"{us(f['handoff_other_p50'])} / "
                             f"{us(f['server_cpu_per_grant_us'] * 1000 if f['server_cpu_per_grant_us'] else None)}")
            L.append(f"| {lab} | " + " | ".join(cells) + " |")
        L.append("")

    # Where the time and CPU go, per grant: the profile the bounds below are read from.
    prof = [("W1-redis", "W1 Redis"), ("W2-redis", "W2 Redis"), ("W3-redis", "W3 Redis"),
            ("W4-redis", "W4 Redis"), ("W3-redlock3", "W3 Redlock 3"),
            ("W3-zk", "W3 ZooKeeper"), ("W3-etcd", "W3 etcd")] + [(f"S{n}-redis", f"scale {n}") for n in scale]
    if any(res.get(g) for g, _ in prof):
        L.append("### Profile per grant (same runs)")
        L.append("")
        L.append("Whole worker processes (start-up included, so interpreted peers carry their interpreter's "
                 "start): CPU and context switches (voluntary + involuntary, `getrusage` of each worker) "
                 "divided by the grants they made, and of those the wake-ups (voluntary switches: a thread "
                 "slept and was woken); server side from `INFO commandstats` (commands a script "
                 "runs are counted too) and the server process's CPU time (etcd: the member's CPU time, no command "
                 "counts; ZooKeeper: the server's CPU time, since the ZooKeeper probe). A grant is one lock/unlock pair.")
        L.append("")
        L.append("| workload | variant | client CPU | context switches | wake-ups | server commands (scripts) "
                 "| server CPU |")
        L.append("|---|---|---|---|---|---|---|")
        num = lambda x, f="{:.1f}": "—" if x is None else f.format(x)  # noqa: E731
        for gid, title in prof:
            for lab, f in (res.get(gid) or {}).items():
                if not gid.endswith(("-redis", "-redlock3")):
                    # The server columns count the Redis server, idle in ZooKeeper and etcd
                    # workloads: not that backend's server. The etcd member's and the ZooKeeper
                    # server's own CPU is measured instead.
                    f = dict(f, commands_per_grant=None, scripts_per_grant=None,
                             server_cpu_per_grant_us=f.get("backend_cpu_per_grant_us"))
                L.append(f"| {title} | {lab} | {us(f['client_cpu_per_grant_us'] * 1000 if f.get('client_cpu_per_grant_us') else None)} | "
                         f"{num(f.get('ctx_per_grant'))} | {num(f.get('wakeups_per_grant'))} | "
                         f"{num(f.get('commands_per_grant'))} "
                         f"({num(f.get('scripts_per_grant'))}) | "
                         f"{us(f['server_cpu_per_grant_us'] * 1000 if f.get('server_cpu_per_grant_us') else None)} |")
        L.append("")

    def target(desc, v, limit, verdict_ok, shown):
        rows.append((desc, shown, limit, "met" if verdict_ok else "**missed**"))

    planned = {g["id"] for g in side["groups"]}

    def vs_best(gid, label, key, limit, desc, higher_better=False):
        if gid not in planned:  # left out of this run (--side, bench/run --only etcd)
            return
        r = res.get(gid) or {}
        f = r.get(label)
        blab, bv = best_peer(r, key, higher_better)
        if not f or f.get(key) is None or bv is None:
            rows.append((desc, "not measured", f"<= {limit:g}× best peer", "—"))
            return
        q = f[key] / bv
        rows.append((desc, f"{us(f[key])} vs {blab} {us(bv)}: {q:.2f}×", f"<= {limit:g}× best peer",
                     "met" if q <= limit else "**missed**"))

    vs_best("W3-redis", "dlock fair_mutex", "handoff_other_p50", 0.6, "W3 fair_mutex hand-off to another p50")
    vs_best("W3-redis", "dlock mutex", "handoff_other_p50", 0.8, "W3 mutex hand-off to another p50")
    f = (res.get("W3-redis") or {}).get("dlock fair_mutex")
    if f and f.get("handoff_other_p50") and f.get("floor_load"):
        q = f["handoff_other_p50"] / f["floor_load"]
        rows.append(("W3 fair_mutex hand-off to another p50 vs PING under the same load",
                     f"{us(f['handoff_other_p50'])} vs {us(f['floor_load'])}: {q:.2f}×", "<= 1.5× PING",
                     "met" if q <= 1.5 else "**missed**"))
    vs_best("W1-redis", "dlock mutex", "acquire_p50", 1.0, "W1 mutex acquire p50")
    for lab in ("dlock mutex", "dlock fair_mutex"):
        r = res.get("W2-redis") or {}
        f = r.get(lab)
        blab, bv = best_peer(r, "server_cpu_per_grant_us")
        if f and f.get("server_cpu_per_grant_us") and bv:
            q = f["server_cpu_per_grant_us"] / bv
            cmds = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
            rows.append((f"W2 {lab.split()[-1]} Redis CPU per lock/unlock pair",
                         f"{f['server_cpu_per_grant_us']:.1f} µs in {cmds(f.get('commands_per_grant'))} commands "
                         f"vs {blab} {bv:.1f} µs in {cmds(r[blab].get('commands_per_grant'))}: {q:.2f}×",
                         "<= 1× best peer", "met" if q <= 1.0 else "**missed**"))
    for lab, lim in (("dlock fair_mutex", 0.90), ("dlock mutex", 0.85)):
        f = (res.get("W4-redis") or {}).get(lab)
        if f and f.get("held") is not None:
            blab, bv = best_peer(res["W4-redis"], "held", True)
            rows.append((f"W4 {lab.split()[-1]} lock held", f"{100 * f['held']:.1f} % (best peer {blab}: "
                         f"{100 * bv:.1f} %)" if bv else f"{100 * f['held']:.1f} %", f">= {100 * lim:.0f} %",
                         "met" if f["held"] >= lim else "**missed**"))
    # Both are FIFO among registered waiters (docs/redis-lock.md, "Waking one waiter"): the
    # longest wait is bounded by the waiters ahead, one cycle each.
    for kind in ("fair_mutex", "mutex"):
        f = (res.get("W4-redis") or {}).get(f"dlock {kind}")
        if f and f.get("acquire_max") and f.get("mean_cycle"):
            q = f["acquire_max"] / f["mean_cycle"]
            rows.append((f"W4 {kind} longest wait", f"{us(f['acquire_max'])} = {q:.1f}× mean cycle "
                         f"({us(f['mean_cycle'])})", "<= 10× mean cycle", "met" if q <= 10 else "**missed**"))
    single = get(res.get("W1-redis"), "dlock mutex", "acquire_p50")
    for nodes in (3, 5):
        v = get(res.get(f"W1-redlock{nodes}"), "dlock mutex over Redlock", "acquire_p50")
        if v and single:
            rows.append((f"W5 Redlock {nodes} nodes acquire p50 vs own single-node", f"{us(v)} vs {us(single)}: "
                         f"{v / single:.2f}×", "<= 1.3×", "met" if v / single <= 1.3 else "**missed**"))
    v = get(res.get("W3-redlock3"), "dlock mutex over Redlock", "handoff_other_p50")
    fair = get(res.get("W3-redis"), "dlock fair_mutex", "handoff_other_p50")
    if v and fair:
        rows.append(("W5 Redlock hot-key hand-off vs single-node fair hand-off", f"{us(v)} vs {us(fair)}: "
                     f"{v / fair:.2f}×", "<= 2×", "met" if v / fair <= 2 else "**missed**"))
    vs_best("W3-zk", "dlock mutex over ZooKeeper", "handoff_other_p50", 0.6, "ZooKeeper hand-off to another p50")
    f = (res.get("W4-zk") or {}).get("dlock mutex over ZooKeeper")
    if f and f.get("held") is not None:
        rows.append(("ZooKeeper W4 lock held", f"{100 * f['held']:.1f} %", ">= 60 %",
                     "met" if f["held"] >= 0.6 else "**missed**"))
    vs_best("W3-etcd", "dlock mutex over etcd", "handoff_other_p50", 1.0, "etcd hand-off to another p50")
    f = (res.get("W3-etcd") or {}).get("dlock mutex over etcd")
    put = (etcd_floor_records(run_dir).get("etcd_put") or {}).get("p50_ns")
    if f and f.get("handoff_other_p50") is not None:
        # The goal: within two write round trips under the same load (the probe's Put while this
        # workload ran); the quiet W0 Put beside it, reported.
        ld = f.get("floor_load")
        desc = "etcd hand-off to another p50 vs a `Put` round trip under the same load (the probe)"
        if ld:
            q = f["handoff_other_p50"] / ld
            rows.append((desc, f"{us(f['handoff_other_p50'])} vs {us(ld)}: {q:.2f}×", "<= 2× Put under load",
                         "met" if q <= 2 else "**missed**"))
        else:
            rows.append((desc, "the probe did not run or failed", "<= 2× Put under load", "—"))
        desc = "etcd hand-off to another p50 vs a quiet `Put` round trip (W0)"
        if put:
            q = f["handoff_other_p50"] / put
            rows.append((desc, f"{us(f['handoff_other_p50'])} vs {us(put)}: {q:.2f}×", "reported", "—"))
        else:
            rows.append((desc, "W0's etcd floor not measured in this run", "reported", "—"))
    f = (res.get("W4-etcd") or {}).get("dlock mutex over etcd")
    if f and f.get("held") is not None:
        blab, bv = best_peer(res["W4-etcd"], "held", True)
        rows.append(("etcd W4 lock held", f"{100 * f['held']:.1f} %" + (f" (best peer {blab}: {100 * bv:.1f} %)"
                                                                        if bv is not None else ""),
                     ">= best peer", "—" if bv is None else ("met" if f["held"] >= bv else "**missed**")))
    if scale and len(scale) > 1:
        for lab, lim in (("dlock fair_mutex", 1.5), ("dlock mutex", 2.0)):
            base = get(res.get(f"S{scale[0]}-redis"), lab, "handoff_other_p50")
            for n in scale[1:]:
                v = get(res.get(f"S{n}-redis"), lab, "handoff_other_p50")
                if base and v:
                    rows.append((f"scale: {lab} hand-off p50, {n} vs {scale[0]} workers",
                                 f"{us(v)} vs {us(base)}: {v / base:.2f}×", f"<= {lim:g}×",
                                 "met" if v / base <= lim else "**missed**"))
            cbase = get(res.get(f"S{scale[0]}-redis"), lab, "server_cpu_per_grant_us")
            for n in scale[1:]:
                c = get(res.get(f"S{n}-redis"), lab, "server_cpu_per_grant_us")
                if cbase and c:
                    rows.append((f"scale: {lab} Redis CPU per grant, {n} vs {scale[0]} workers",
                                 f"{us(c * 1000)} vs {us(cbase * 1000)}: {c / cbase:.2f}×", "flat (<= 1.5×)",
                                 "met" if c / cbase <= 1.5 else "**missed**"))
    L.append("### Targets (each against the best peer measured in this run)")
    bounds = bound_notes(res, run, scale, run_dir)
    # Each target with its floor in this run (docs/benchmarks.md, "Floors").
    floors = floor_notes(res, side, run_dir)
    run["side_counts"] = count_summary(res)
    rows = [t + (floors.get(t[0], "—"),) for t in rows]
    L.append("")
    L.append("Floor: what the run measured that no client can go under (the probe's round trip under the "
             "same load, W0's script and fan-out references, the server's time per command), and whether the "
             "goal lies under it; **below the (physical) floor** and, for a held share, **above the physical "
             "bound** mark a goal out of reach on this machine (docs/benchmarks.md, \"Floors\").")
    L.append("")
    L.append("| target | measured | limit | | floor in this run / why |")
    L.append("|---|---|---|---|---|")
    for t in rows:
        L.append("| " + " | ".join(t) + " |")
    L.append("")
    if bounds:
        L.append("### What bounds the figures (from this run's own measurements)")
        L.append("")
        L.extend(f"- {b}" for b in bounds)
        L.append("")
    pngs, pprob = plots(run_dir, res, plots_dir, scale)
    problems.extend(pprob)
    for p in pngs:
        L.append(f"![{p}]({p})")
        L.append("")
    return L, rows, pngs, problems


def count_summary(res):
    """One sentence for the README's table: wake-ups and context switches per W3 grant and server
    commands per W2 pair, of dlock and the best peer of that row (None when neither ran)."""
    num = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
    parts = []
    w3 = res.get("W3-redis") or {}
    blab, _ = best_peer(w3, "handoff_other_p50")
    labs = [lab for lab in ("dlock fair_mutex", "dlock mutex", blab) if lab in w3]
    if labs:
        parts.append("wake-ups / context switches per W3 grant (the workers' voluntary / all switches): " + ", ".join(
            f"{lab} {num(w3[lab].get('wakeups_per_grant'))} / {num(w3[lab].get('ctx_per_grant'))}" for lab in labs))
    w2 = res.get("W2-redis") or {}
    blab, _ = best_peer(w2, "server_cpu_per_grant_us")
    labs = [lab for lab in ("dlock mutex", "dlock fair_mutex", blab) if lab in w2]
    if labs:
        parts.append("server commands (scripts) per W2 lock/unlock pair: " + ", ".join(
            f"{lab} {num(w2[lab].get('commands_per_grant'))} ({num(w2[lab].get('scripts_per_grant'))})"
            for lab in labs))
    return "; ".join(parts) or None


NO_FLOOR = "no floor measured in this run"


def floor_verdict(floor, goal, asks):
    """The opening of a floor note: the goal (`goal` ns, `asks` says of what) below the `floor`
    measured, or the floor under it."""
    if floor > goal:
        return f"**below the physical floor**: the goal asks for {us(goal)} ({asks}); "
    return f"floor {us(floor)}, under the goal ({us(goal)}): "


def w2_floor_text(lab, f, blab, peer, bare, own_w0=None):
    """The floor of "W2 <lock type> Redis CPU per lock/unlock pair" and why (docs/benchmarks.md,
    "Floors"): `f` and `peer` are W2's figures of `lab` and of the best peer `blab`, `bare` and
    `own_w0` the server-cost records of W0's bare scripts and of dlock's own (mutex) scripts."""
    bv, cpu = peer["server_cpu_per_grant_us"], f["server_cpu_per_grant_us"]
    # The peer's time inside commands counts its compare-and-delete script's own commands twice
    # (in EVALSHA's time and on their own), so this term errs low: the floor stays a floor.
    outside = bv - peer["command_us_per_grant"]
    script = bare["evalsha_us_per_pair"]
    fl = outside + script
    what = (f"{blab}'s server CPU outside its commands in W2 ({outside:.1f} µs per pair: its requests read, parsed "
            f"and answered; INFO cpu less commandstats) + the 8 commands the safety rules need (acquire: `EXISTS` "
            f"kind guard, `TIME`, `SET ... GET` fence, `SET` lock; release: `GET`, `DEL`, `PUBLISH`, `EXISTS`) "
            f"run in the thinnest two scripts with dlock's KEYS/ARGV counts, W0's bare scripts on the quiet "
            f"server ({script:.1f} µs of `EVALSHA` time per pair, their quietest series: running a script at all, "
            f"KEYS/ARGV made into Lua strings, each `redis.call`'s bridge, and "
            f"{bare['command_us_per_pair']:.1f} µs in the commands themselves)")
    verdict = (f"**below the floor**: the goal asks for {bv:.1f} µs ({blab}); floor {fl:.1f} µs = {what}: the goal "
               f"is physically out of reach for a protocol that needs those 8 commands in scripts (the floor is "
               f"{fl / bv:.2f}× the goal)" if bv < fl else
               f"floor {fl:.1f} µs = {what}, under the goal ({bv:.1f} µs, {blab}): the commands in scripts alone do "
               "not put it out of reach")
    nested = f.get("nested_us_per_grant") or 0
    scripts = f["command_us_per_grant"] - nested
    split = (f"; dlock's {cpu:.1f} µs in W2: {scripts:.1f} µs of script time ({nested:.1f} µs of it in the commands "
             f"its scripts ran), {cpu - scripts:.1f} µs outside the commands")
    if own_w0 and own_w0.get("evalsha_us_per_pair_median") and bare.get("evalsha_us_per_pair_median"):
        o, b = own_w0["evalsha_us_per_pair_median"], bare["evalsha_us_per_pair_median"]
        split += (f"; in W0's op (medians of the alternated series) dlock's own scripts took {o:.1f} µs per pair vs "
                  f"the bare scripts' {b:.1f} µs: "
                  + (f"{o - b:.1f} µs is what its scripts could still save" if o > b else
                     "no measurable gap: its scripts cost what the 8 commands in scripts cost"))
    else:
        split += (f" (W0 times the mutex's scripts only; W2's load is not W0's quiet server: vs the bare scripts' "
                  f"{script:.1f} µs)")
    return verdict + split


def floor_notes(res, side, run_dir):
    """{target description: the floor of that target in this run and why its goal can or cannot be
    met}, computed from this run's own records only (docs/benchmarks.md, "Floors"); a target whose
    floor the run did not measure says so. Targets without a floor are not in the dict."""
    out = {}
    ref = analyse.floor_records(os.path.join(run_dir, "floor.jsonl"))  # W0: PING and the references
    ref50 = lambda what: (ref.get(what) or {}).get("p50_ns")  # noqa: E731
    ping = ref50("redis_ping")
    cs_us = {g["id"]: g.get("cs_us", 0) for g in side["groups"]}
    ms = lambda x: f"{x / 1000:g} ms"  # noqa: E731
    pct = lambda x: f"{100 * x:.1f} %"  # noqa: E731

    def own(r, lab, key, floor_key="floor_load"):
        """ ("the best peer ... its own") for the hand-off floors: `lab`'s figure over its own floor."""
        f = (r or {}).get(lab) or {}
        return (f" ({lab} {f[key] / f[floor_key]:.2f}× its own, the probe under its load)"
                if f.get(key) and f.get(floor_key) else "")

    # W0's scripted relays (bench/floor.cpp --relay-scripts): the same bare threads and W3's round
    # trips with the least scripts a fenced FIFO hand-off needs, and with dlock's own.
    least, together = ref50("relay_handoff_min_scripts"), ref50("relay_handoff_min_pipelined")
    own_scripts = ref50("relay_handoff_fair_scripts")
    # The least scripts' relay again with a process per member (--relay-procs), as W3's workers
    # are: when W0 ran it, the fenced hand-off's floor is that one.
    least_procs = ref50("relay_handoff_min_scripts_procs")
    fenced_floor, fenced_from = ((least_procs, f"from 8 bare processes, one per member as W3's workers are (from "
                                               f"threads of one process: {us(least)})")
                                 if least_procs else (least, "from bare threads (below)"))
    # Hand-offs between processes: the release reaching the server and the grant (or the
    # notification) reaching the next holder is one round trip, measured under the same load by the
    # probe (a PING on Redis, a `Put` on etcd).
    for gid, lab, lim, desc, op in (
            ("W3-redis", "dlock fair_mutex", 0.6, "W3 fair_mutex hand-off to another p50", "PING"),
            ("W3-redis", "dlock mutex", 0.8, "W3 mutex hand-off to another p50", "PING"),
            ("W3-etcd", "dlock mutex over etcd", 1.0, "etcd hand-off to another p50", "`Put`")):
        r = res.get(gid) or {}
        f = r.get(lab) or {}
        blab, bv = best_peer(r, "handoff_other_p50")
        h, ld = f.get("handoff_other_p50"), f.get("floor_load")
        if not (h and ld and bv):
            out[desc] = NO_FLOOR + (" (no round trip under this load: the probe did not run)" if h and bv else "")
            continue
        goal = lim * bv
        relay = ref50("relay_handoff_1of1") if gid == "W3-redis" else None
        # Every dlock hand-off on Redis is fenced (the server hands the next holder a higher token)
        # and goes to the next in line: a script on the server, which the polling peers do not run.
        # The least scripts' relay above the goal puts the goal out of reach for a fenced lock; the
        # floor a goal under it would be measured against follows, "without a lock's scripts".
        fenced = (f"**below the floor of a fenced hand-off**: the goal asks for {us(goal)} ({lim:g}× {blab}'s "
                  f"{us(bv)}); the least scripts a fenced hand-off to the next in line runs, {fenced_from}, took "
                  f"{us(fenced_floor)}; dlock is {h / fenced_floor:.2f}× that; without a lock's scripts, "
                  if gid == "W3-redis" and least and together and fenced_floor > goal else "")
        if h < ld and relay:
            # The probe's round trip carries its own client's wake-up, as a hand-off carries the
            # waiter's, and is above the hand-off here: W0's relay is the floor then (bare threads
            # passing a turn by PUBLISH on one server: the release reaching Redis, Redis' message
            # reaching the next one, its wake-up; on a quiet server, without a lock's scripts).
            out[desc] = ((fenced or floor_verdict(relay, goal, f"{lim:g}× {blab}'s {us(bv)}"))
                         + f"8 bare hiredis threads passing a turn by PUBLISH on one server (W0's relay, empty "
                           f"critical section, a quiet server) took {us(relay)} per hand-off p50 (the probe's {op} "
                           f"p50 under this load, {us(ld)}, is above dlock's hand-off: its own wake-up is part of "
                           f"its round trip); dlock is {h / relay:.2f}× that floor, {blab} {bv / relay:.2f}×")
            continue
        if h < ld:
            out[desc] = (f"{NO_FLOOR} under dlock's hand-off: the probe's {op} p50 under this load ({us(ld)}) is above "
                         f"it ({us(h)}); the probe's own wake-up is part of its round trip")
            continue
        gap = f.get("probe_gap_ms")
        what = (f"one round trip under this load (the probe's {op} p50, a separate process timing one "
                f"{'every %g ms' % gap if gap else 'every few ms'} while {lab}'s {gid.split('-')[0]} workers ran)")
        peer_ld = get(r, blab, "floor_load")
        if goal < ld and peer_ld and peer_ld <= goal:
            # Under the peer's lighter load the round trip was short enough: the floor is dlock's own load.
            out[desc] = (f"below the floor under dlock's own load, not under the peer's: the goal asks for {us(goal)} "
                         f"({lim:g}× {blab}'s {us(bv)}); {what} is {us(ld)}; under {blab}'s load it was "
                         f"{us(peer_ld)}, "
                         "not above the goal: dlock's own load raises it (fewer wake-ups per grant would lower it); "
                         f"dlock is {h / ld:.2f}× its floor" + own(r, blab, "handoff_other_p50"))
        elif goal < ld:
            out[desc] = (f"**below the physical floor**: the goal asks for {us(goal)} ({lim:g}× {blab}'s {us(bv)}); "
                         f"{what} is {us(ld)}"
                         + (f" (under {blab}'s own load {us(peer_ld)}, also above the goal)" if peer_ld else "")
                         + f"; dlock is {h / ld:.2f}× that floor" + own(r, blab, "handoff_other_p50"))
        else:
            out[desc] = ((f"{fenced}the floor is {us(ld)} = {what}" if fenced
                          else f"floor {us(ld)} = {what}, under the goal ({us(goal)})")
                         + f"; dlock is {h / ld:.2f}× that floor" + own(r, blab, "handoff_other_p50"))
    # Where a W3 hand-off's time goes: the scripted relays, beside the floor.
    for lab, desc in (("dlock fair_mutex", "W3 fair_mutex hand-off to another p50"),
                      ("dlock mutex", "W3 mutex hand-off to another p50")):
        h = get(res.get("W3-redis"), lab, "handoff_other_p50")
        if not (h and least and together and desc in out) or out[desc].startswith(NO_FLOOR):
            continue
        out[desc] += (f"; W0's scripted relays (the same threads, W3's round trips: the release, then the releaser's "
                      f"next attempt, each awaited): the least scripts a fenced FIFO hand-off needs (compare, fence, "
                      f"next owner, `PUBLISH`; then `TIME`, `ZADD`, `PTTL` to queue again) {us(least)} p50, "
                      f"{us(together)} with both written at once"
                      + (f", {us(least_procs)} from a process per member (as W3's workers are; dlock is "
                         f"{h / least_procs:.2f}× that)" if least_procs else ""))
        if lab == "dlock fair_mutex" and own_scripts:
            out[desc] += (f"; dlock's own fair_mutex scripts from those threads {us(own_scripts)} (W0 ran on a quiet "
                          "server at another moment than W3; on this kind of VM these relays move by up to a third "
                          "from one run to the next: docs/benchmarks.md)")
    for gid, lab, desc, op in (("W3-redis", "dlock fair_mutex",
                                "W3 fair_mutex hand-off to another p50 vs PING under the same load", "PING"),
                               ("W3-etcd", "dlock mutex over etcd",
                                "etcd hand-off to another p50 vs a `Put` round trip under the same load (the probe)",
                                "`Put`")):
        ld = get(res.get(gid), lab, "floor_load")
        out[desc] = (f"the floor is that round trip itself ({us(ld)}, the probe's {op} p50): 1.0× at best"
                     if ld else NO_FLOOR)
    # The uncontended acquire: dlock's acquire is one FCALL of its acquire script (it hands out a
    # fencing token); what the server's side of that costs, from a bare hiredis client, is W0's reference.
    r = res.get("W1-redis") or {}
    v = get(r, "dlock mutex", "acquire_p50")
    blab, bv = best_peer(r, "acquire_p50")
    acq, snx = ref50("acquire_script"), ref50("set_nx_px")
    idle = get(r, "dlock mutex", "floor_idle")
    if v and bv:
        if not (acq and snx and ping and idle):
            out["W1 mutex acquire p50"] = NO_FLOOR + " (W0's references did not run)"
        else:
            # W0 ran at another time than W1: its references are taken as ratios to W0's own PING and
            # scaled by the PING measured around this workload.
            fl = acq / ping * idle
            peer_fl = snx / ping * (get(r, blab, "floor_idle") or idle)
            what = (f"one `FCALL` of dlock's acquire script (kind guard, fencing token, lock) from a bare hiredis "
                    f"client took {acq / ping:.2f}× a PING in W0 ({us(acq)} vs {us(ping)} p50), the `SET NX PX` of "
                    f"the peers {snx / ping:.2f}× ({us(snx)}): the server's side of dlock's acquire is "
                    f"{acq / snx:.2f}× a `SET NX PX`; with the PING around this workload ({us(idle)}) the script's "
                    f"floor here is {us(fl)}")
            tail = f"; dlock is {v / fl:.2f}× that floor, {blab} {bv / peer_fl:.2f}× its `SET NX PX` scaled alike"
            if v < fl:
                out["W1 mutex acquire p50"] = (f"{NO_FLOOR}: W0's script reference scaled to this workload ({us(fl)}) "
                                               "is above dlock's measured acquire, so W0 ran under other load")
            else:
                out["W1 mutex acquire p50"] = (
                    (f"**below the floor**: the goal asks for {us(bv)} ({blab}); {what}" if bv < fl else
                     f"floor {us(fl)}: {what}, under the goal ({us(bv)})") + tail)
    # Redis CPU per uncontended pair: the peer's cost of reading, parsing and answering its requests
    # (its server CPU outside the commands) plus what the 8 commands the safety rules need cost when
    # they run in two scripts, the thinnest there can be: W0's bare scripts (bench/floor.cpp, the
    # server-cost op), whose script time includes the commands' own.
    r = res.get("W2-redis") or {}
    blab, bv = best_peer(r, "server_cpu_per_grant_us")
    bare, own_w0 = ref.get("bare_scripts"), ref.get("dlock_scripts")
    for lab in ("dlock mutex", "dlock fair_mutex"):
        desc = f"W2 {lab.split()[-1]} Redis CPU per lock/unlock pair"
        f = r.get(lab) or {}
        cpu = f.get("server_cpu_per_grant_us")
        if not (cpu and bv):
            continue
        if not bare:
            out[desc] = NO_FLOOR + " (W0's server-cost op did not run: no bare scripts' time)"
            continue
        if r[blab].get("command_us_per_grant") is None or f.get("command_us_per_grant") is None:
            out[desc] = NO_FLOOR + " (INFO commandstats lack a time of the peer's or of dlock's commands)"
            continue
        w2_scripts = f["command_us_per_grant"] - (f.get("nested_us_per_grant") or 0)
        if bare["evalsha_us_per_pair"] > w2_scripts:
            out[desc] = (f"{NO_FLOOR}: W0's bare scripts ({bare['evalsha_us_per_pair']:.1f} µs per pair) took more "
                         f"than {lab}'s own scripts in W2 ({w2_scripts:.1f} µs), so W0 ran under other load")
            continue
        out[desc] = w2_floor_text(lab, f, blab, r[blab], bare, own_w0 if lab == "dlock mutex" else None)
    # The held share: a holder keeps the lock for the critical section, then the next one gets it
    # no sooner than one round trip later.
    for gid, lab, lim, desc, op in (("W4-redis", "dlock fair_mutex", 0.90, "W4 fair_mutex lock held", "PING"),
                                    ("W4-redis", "dlock mutex", 0.85, "W4 mutex lock held", "PING"),
                                    ("W4-etcd", "dlock mutex over etcd", None, "etcd W4 lock held", "`Put`")):
        f = (res.get(gid) or {}).get(lab) or {}
        if f.get("held") is None:
            continue
        ld, cs = f.get("floor_load"), cs_us.get(gid, 0) * 1000
        if not (ld and cs):
            out[desc] = NO_FLOOR
            continue
        bound = cs / (cs + ld)
        what = (f"with a {ms(cs / 1000)} critical section and one round trip per hand-off at the probe's {op} p50 "
                f"under this load ({us(ld)}) the held share is at most {ms(cs / 1000)} / ({ms(cs / 1000)} + "
                f"{us(ld)}) = {pct(bound)}")
        relayed = analyse.relay_floor(ref, cs) if gid == "W4-redis" else None
        if relayed:
            bound = min(bound, relayed[0])
            what += "; " + relayed[1]
        h = f.get("handoff_other_p50")
        tail = f"; dlock's hand-off to another p50 {us(h)} = {h / ld:.2f}× that round trip" if h else ""
        out[desc] = ((f"**above the physical bound**: {what}, the goal asks for {pct(lim)}" if lim and bound < lim
                      else f"bound {pct(bound)}: {what}") + tail)
    # Redlock: the acquire goes to every server; W0 timed a PING, and dlock's acquire script, written
    # to all of them at once.
    single = get(res.get("W1-redis"), "dlock mutex", "acquire_p50")
    for nodes in (3, 5):
        desc = f"W5 Redlock {nodes} nodes acquire p50 vs own single-node"
        v = get(res.get(f"W1-redlock{nodes}"), "dlock mutex over Redlock", "acquire_p50")
        if not (v and single):
            continue
        fan = ref50(f"fanout_ping_{nodes}")
        if not (fan and ping):
            out[desc] = NO_FLOOR + f" (no W0 fan-out to {nodes} servers)"
            continue
        # The fan-out's extra time over one server (a PING, and dlock's acquire script, written to
        # all N at once before any reply is read, W0 on quiet servers), added to dlock's own
        # single-node acquire: what the N-node acquire costs if nothing but the servers' side grows.
        # The ratio of the bare fan-outs themselves would charge the floor none of dlock's own
        # client time, which the N-node acquire pays once, as the single-node one does.
        extra = fan - ping
        sfan, sone = ref50(f"fanout_acquire_{nodes}"), ref50("acquire_script")
        script_what, counted = "", "the extra time"
        if sfan and sone:
            script_what = (f"; dlock's acquire script written to all {nodes} at once took {us(sfan)}, "
                           f"{sfan / sone:.2f}× the script on one server ({us(sone)})")
            if v / single >= 1 + (sfan - sone) / single:
                extra, counted = max(extra, sfan - sone), "the larger extra time"
            else:
                # W0 ran at another time than W1 and W5: a floor above the measured ratio is no floor.
                # The PING fan-out, the smaller of the two, may still be under it.
                script_what += (f" (its extra time would put the floor at {1 + (sfan - sone) / single:.2f}×, above "
                                "the measured ratio: W0's scripts ran under other load, so the PING fan-out is "
                                "the floor here)")
        q = 1 + extra / single
        if v / single < q:
            out[desc] = (f"{NO_FLOOR}: dlock's single-node acquire plus W0's fan-out overhead ({q:.2f}×) is above "
                         "the measured ratio, so W0 ran under other load")
            continue
        peers = []
        for lab, f in (res.get(f"W1-redlock{nodes}") or {}).items():
            s1 = get(res.get("W1-redis"), lab, "acquire_p50")
            if f["kind"] == "peer" and f.get("acquire_p50") and s1:
                peers.append((f["acquire_p50"] / s1, lab))
        what = (f"a PING written to all {nodes} servers before any reply is read took {us(fan)} p50 in W0, "
                f"{fan / ping:.2f}× one PING ({us(ping)}; quiet servers, which share the machine's cores)"
                + script_what + f"; {counted} ({us(extra)}) added to dlock's single-node acquire "
                f"({us(single)}) is {us(single + extra)}, {q:.2f}× it")
        tail = (f"; dlock's {v / single:.2f}× is {v / single / q:.2f}× that floor"
                + (f" (the best peer, {min(peers)[1]}, {min(peers)[0]:.2f}× its own single-node acquire)"
                   if peers else ""))
        out[desc] = ((f"**below the physical floor**: the goal asks for 1.3× the single-node acquire; {what}"
                      if q > 1.3 else f"floor {q:.2f}×: {what}") + tail)
    desc = "W5 Redlock hot-key hand-off vs single-node fair hand-off"
    v = get(res.get("W3-redlock3"), "dlock mutex over Redlock", "handoff_other_p50")
    ld = get(res.get("W3-redlock3"), "dlock mutex over Redlock", "floor_load")
    fair = get(res.get("W3-redis"), "dlock fair_mutex", "handoff_other_p50")
    if v and fair:
        # W0's relays (bench/floor.cpp --relay-quorum): 8 bare threads pass a turn by PUBLISH, on
        # one server and on 3 with the turn taken at 2 of 3 messages; the latter is what no
        # notified Redlock hand-off goes below (the release reaching a quorum, the quorum's
        # notifications reaching the waiter), the former the same for one server.
        q3, q1 = ref50("relay_handoff_2of3"), ref50("relay_handoff_1of1")
        # The same threads running the least fenced hand-off's scripts on all 3 (bench/floor.cpp
        # --relay-scripts with --relay-quorum): a fenced Redlock hand-off's floor.
        s3, s1 = ref50("relay_handoff_min_scripts_2of3"), ref50("relay_handoff_min_scripts")
        # Those relays with a process per member (--relay-procs), as the workers are: the floors then.
        s3p, s1p = ref50("relay_handoff_min_scripts_2of3_procs"), ref50("relay_handoff_min_scripts_procs")
        procs = bool(s3 and s3p and s1p)
        threads = (f" (from threads of one process: {us(s3)} on 3 servers, {us(s1)} on one)" if procs else "")
        if procs:
            s3, s1 = s3p, s1p
        if q3 and q1 and s3:
            what = (f"the least scripts a fenced hand-off to the next in line runs (compare, fence, next owner, "
                    f"`PUBLISH`; then `TIME`, `ZADD`, `PTTL` to queue again), each written to all 3 servers before any "
                    f"reply is read, from 8 bare hiredis {'processes' if procs else 'threads'} taking the turn at 2 of "
                    f"3 messages, took {us(s3)} per hand-off p50 in W0{threads}; without scripts (a bare `PUBLISH` "
                    f"relay between threads) {us(q3)} on 3 servers and {us(q1)} on one")
            out[desc] = ((f"**below the floor of a fenced hand-off**: the goal asks for {us(2 * fair)} (2× fair's "
                          f"{us(fair)}); " if s3 > 2 * fair else floor_verdict(s3, 2 * fair, "")) + what
                         + f"; dlock is {v / s3:.2f}× that floor"
                         + (f", its fair hand-off {fair / s1:.2f}× the same scripts' relay on one server ({us(s1)})"
                            if s1 else "")
                         # The goal is a ratio to dlock's own hand-off: at the floors the ratio is s3 / s1.
                         + (f"; the goal's 2× is under the {s3 / s1:.2f}× a fenced quorum hand-off costs over a "
                            f"one-server one at the floor, so it is met only if the Redlock hand-off comes nearer its "
                            f"floor than fair does to its own" if s1 and s3 / s1 > 2 and s3 <= 2 * fair else ""))
        elif q3 and q1:
            what = (f"8 bare hiredis threads passing a turn by PUBLISH on all 3 servers, each taking it at 2 of 3 "
                    f"messages, took {us(q3)} per hand-off p50 in W0 (the same relay on one server {us(q1)}: a "
                    f"quorum hand-off costs {q3 / q1:.2f}× a single-server one at the floor; dlock's fair "
                    f"{fair / q1:.2f}× the one-server relay)")
            out[desc] = (floor_verdict(q3, 2 * fair, f"2× fair's {us(fair)}")
                         + what + f"; dlock is {v / q3:.2f}× that floor"
                         # The goal is a ratio to dlock's own hand-off: at the floors the ratio is q3 / q1.
                         + (f"; the goal's 2× is under the {q3 / q1:.2f}× a quorum costs at the floor, so it is "
                            f"met only if the Redlock hand-off comes nearer its floor than fair does to its own "
                            f"(fair {fair / q1:.2f}×, Redlock {v / q3:.2f}×)" if q3 / q1 > 2 else ""))
        elif not ld:
            out[desc] = NO_FLOOR + " (the probe did not run under this load)"
        else:
            # At least one round trip to a server under this load (the release reaching a master,
            # the notification reaching the waiter); the majority's round trips come on top.
            fan = ref50("fanout_ping_3")
            what = (f"a Redlock hand-off needs at least one round trip to a master, and one to the first of the 3 "
                    f"under this load (the probe's PING p50, a separate process) took {us(ld)}"
                    + (f" (a PING written to all 3 at once took {fan / ping:.2f}× one PING in W0, quiet)"
                       if fan and ping else ""))
            out[desc] = (floor_verdict(ld, 2 * fair, f"2× fair's {us(fair)}")
                         + what + f"; dlock is {v / ld:.2f}× that round trip")
    # ZooKeeper: a hand-off is at least the holder's delete (a write the server logs before it
    # answers and fires the watch); the waiter next in line knows it holds from the watch alone. The
    # delete under the same load is the probe's; runs from before the ZooKeeper probe have only W0's,
    # on a quiet server.
    zk = analyse.floor_records(os.path.join(run_dir, "floor_zk.jsonl"))
    lab = "dlock mutex over ZooKeeper"

    def zk_delete(f):
        """(p50 of one delete, what it was) for dlock's figures `f` of a ZooKeeper workload."""
        if f.get("floor_load"):
            return f["floor_load"], (f"one under this load (the probe's delete p50, a separate process timing "
                                     f"one every {f.get('probe_gap_ms') or '?'} ms while {lab}'s workers ran)")
        return (zk.get("zk_delete") or {}).get("p50_ns"), "W0's on a quiet server (no probe under this load)"

    r = res.get("W3-zk") or {}
    f = r.get(lab) or {}
    v = f.get("handoff_other_p50")
    blab, bv = best_peer(r, "handoff_other_p50")
    zf, which = zk_delete(f)
    desc = "ZooKeeper hand-off to another p50"
    if v and bv and not zf:
        out[desc] = NO_FLOOR + " (no ZooKeeper delete timed in this run)"
    elif v and bv:
        out[desc] = (floor_verdict(zf, 0.6 * bv, f"0.6× {blab}'s {us(bv)}")
                     + "a ZooKeeper hand-off is at least the holder's delete (a write; the waiter next in line "
                     f"needs no re-read), and {which} took {us(zf)}; dlock is {v / zf:.2f}× that floor"
                     + (" (under 1: the probe's own wake-ups are part of its round trip)" if v < zf else "")
                     + (own(r, blab, "handoff_other_p50") if f.get("floor_load") else f", {blab} {bv / zf:.2f}×"))
    f = (res.get("W4-zk") or {}).get(lab) or {}
    if f.get("held") is not None:
        cs = cs_us.get("W4-zk", 0) * 1000
        zf, which = zk_delete(f)
        out["ZooKeeper W4 lock held"] = (analyse.held_by_delete(cs, 0.60, zf, which, f.get("handoff_other_p50"))
                                         if zf and cs else NO_FLOOR + " (no ZooKeeper delete timed in this run)")
    # The scale curves (bench/floor.cpp --relay-scale): the least scripts of a fenced hand-off passed
    # around as many bare processes as each scale group has workers. The goal is a ratio of dlock's
    # hand-offs, so the floor is the same ratio of the relays: what more waiting processes cost on
    # these cores when no lock client runs.
    scale = [n for n in side.get("scale", []) if res.get(f"S{n}-redis")]
    b = ref50(f"relay_handoff_min_scripts_procs_{scale[0]}") if scale else None
    for lab, lim in (("dlock fair_mutex", 1.5), ("dlock mutex", 2.0)):
        base = get(res.get(f"S{scale[0]}-redis"), lab, "handoff_other_p50") if scale else None
        for n in scale[1:]:
            v = get(res.get(f"S{n}-redis"), lab, "handoff_other_p50")
            f = ref50(f"relay_handoff_min_scripts_procs_{n}")
            if not (base and v):
                continue
            desc = f"scale: {lab} hand-off p50, {n} vs {scale[0]} workers"
            if not (b and f):
                out[desc] = NO_FLOOR + f" (W0 ran no relay between {n} processes)"
                continue
            q = f / b
            what = (f"the least scripts of a fenced hand-off on one server, passed around {n} bare hiredis processes, "
                    f"took {us(f)} per hand-off p50 in W0, {q:.2f}× the same between {scale[0]} ({us(b)}): what "
                    f"{n} waiting processes cost over {scale[0]} on these cores with no lock client; dlock's "
                    f"{v / base:.2f}× is {v / base / q:.2f}× that")
            out[desc] = ((f"the goal's {lim:g}× is under the {q:.2f}× of the floor: {what}; it is met only if dlock "
                          f"comes nearer its floor with {n} workers than with {scale[0]}") if q > lim
                         else f"floor {q:.2f}×, under the goal ({lim:g}×): {what}")
    return out


def bound_notes(res, run, scale, run_dir=""):
    """Sentences stating what bounds each figure, computed from this run's measurements only."""
    out = []
    g = lambda gid, lab, key: get(res.get(gid), lab, key)  # noqa: E731
    fair_w3 = res.get("W3-redis", {}).get("dlock fair_mutex")
    if fair_w3 and fair_w3.get("floor_load"):
        out.append(f"Redis hand-off (W3): a grant needs the releaser's script on the server, the `PUBLISH` reaching "
                   f"the waiter's process and that process's waiting thread running: at least one round trip plus "
                   f"two scheduler wake-ups. The PING from a separate process while this workload ran took "
                   f"{us(fair_w3['floor_load'])} (p50), the fair_mutex hand-off {us(fair_w3['handoff_other_p50'])} "
                   f"with {fair_w3.get('ctx_per_grant') or 0:.1f} context switches and "
                   f"{us((fair_w3.get('client_cpu_per_grant_us') or 0) * 1000)} of client CPU per grant (profile "
                   f"above); on 2 cores shared by 8 workers and the server every wake-up waits in the run queue.")
    # The hand-off targets against the round trip measured under the same load: a hand-off between
    # processes needs at least one (the release reaching the server, the grant reaching the waiter).
    w3 = res.get("W3-redis", {})
    for lab, lim in (("dlock fair_mutex", 0.6), ("dlock mutex", 0.8)):
        f = w3.get(lab)
        blab, bv = best_peer(w3, "handoff_other_p50")
        if f and bv and f.get("floor_load") and f.get("handoff_other_p50"):
            goal = lim * bv
            out.append(f"W3 {lab} target: {lim:g}× {blab}'s {us(bv)} = {us(goal)}, "
                       + ("below" if goal < f["floor_load"] else "above")
                       + f" the PING p50 measured from a separate process under the same load ({us(f['floor_load'])}); "
                       f"measured {us(f['handoff_other_p50'])} = {f['handoff_other_p50'] / f['floor_load']:.2f}× that PING.")
    # W3 keeps the lock busy all the time, so grants follow each other as fast as the two cores can
    # do the work of one grant: the CPU per grant (client processes + server) bounds the interval.
    for lab in ("dlock fair_mutex", "dlock mutex", "redis-py sleep1ms", "redis-plus-plus redlock-poll1ms"):
        f = w3.get(lab)
        if f and f.get("client_cpu_per_grant_us") and f.get("server_cpu_per_grant_us"):
            tot = f["client_cpu_per_grant_us"] + f["server_cpu_per_grant_us"]
            out.append(f"W3 CPU per grant, {lab}: {f['client_cpu_per_grant_us']:.1f} µs in the workers + "
                       f"{f['server_cpu_per_grant_us']:.1f} µs in redis-server ({f.get('commands_per_grant') or 0:.1f} "
                       f"commands, {f.get('scripts_per_grant') or 0:.1f} scripts) = {tot:.1f} µs; with 2 cores the "
                       f"grants of an always-contended key can follow each other no faster than every {tot / 2:.1f} µs "
                       f"on average (hand-off p50 measured: {us(f.get('handoff_other_p50'))}).")
    for gid, lab in (("W4-redis", "dlock fair_mutex"), ("W4-redis", "dlock mutex")):
        f = res.get(gid, {}).get(lab)
        if f and f.get("held") is not None and f.get("mean_cycle"):
            gap_for_90 = 1000.0 * (1 / 0.9 - 1)  # µs of gap per 1 ms critical section for 90 % held
            out.append(f"W4 {lab}: {100 * f['held']:.1f} % held; 90 % with a 1 ms critical section needs a gap of at "
                       f"most {gap_for_90:.0f} µs between holders, while the PING under this load was "
                       f"{us(f.get('floor_load'))} and the hand-off p50 {us(f.get('handoff_other_p50'))}.")
    single = g("W1-redis", "dlock mutex", "acquire_p50")
    w0 = (run.get("floor") or {})
    for nodes in (3, 5):
        v = g(f"W1-redlock{nodes}", "dlock mutex over Redlock", "acquire_p50")
        fan = w0.get(f"fanout{nodes}_ratio")
        if v and single:
            out.append(f"Redlock, {nodes} masters: acquire p50 {us(v)} = {v / single:.2f}× the single-node acquire; "
                       + (f"a PING written to all {nodes} servers before reading any reply took {fan:.2f}× a single "
                          f"PING (W0 of this run): " if fan else "")
                       + f"the {nodes} servers and the client share 2 cores, so the servers cannot answer in "
                       "parallel and the fan-out costs several single-node round trips.")
    z = res.get("W3-zk", {})
    if z:
        zf = z.get("dlock mutex over ZooKeeper")
        kz = z.get("kazoo default")
        if zf and kz:
            out.append(f"ZooKeeper hand-off: dlock {us(zf['handoff_other_p50'])}, kazoo {us(kz['handoff_other_p50'])}. "
                       "Both watch the node ahead; a hand-off is the holder's `delete` (a write the leader "
                       "logs with fsync before answering) and the watch event, so both are bound by the server's "
                       "write latency"
                       + (f": the probe's delete under the same load took {us(zf['floor_load'])} beside dlock's "
                          f"workers and {us(kz['floor_load'])} beside kazoo's (p50)"
                          if zf.get("floor_load") and kz.get("floor_load")
                          else " (W0 `zk_delete` in this run's floor table, quiet)") + ", not by the client.")
    e = res.get("W3-etcd", {})
    ef = e.get("dlock mutex over etcd")
    put = (etcd_floor_records(run_dir).get("etcd_put") or {}).get("p50_ns")
    if ef and ef.get("handoff_other_p50"):
        peer = e.get("python-etcd3 default")
        out.append(f"etcd hand-off: dlock {us(ef['handoff_other_p50'])}"
                   + (f", python-etcd3 {us(peer['handoff_other_p50'])}" if peer and peer.get("handoff_other_p50")
                      else "")
                   + ". A hand-off is the holder's release (a delete: a Raft commit with WAL fsync before the "
                   "member answers) and the watch event that wakes the next waiter"
                   + (f"; so one write round trip bounds it from below: the probe's `Put` under the same load "
                      f"took {us(ef['floor_load'])} (p50)" if ef.get("floor_load") else "")
                   + (f"; W0's `Put` on the quiet member {us(put)}" if put else "") + "."
                   + "".join(f" {lab}: {f['backend_cpu_per_grant_us']:.0f} µs of the etcd member's CPU and "
                             f"{f['client_cpu_per_grant_us']:.0f} µs in the workers per grant."
                             for lab, f in e.items()
                             if f.get("backend_cpu_per_grant_us") and f.get("client_cpu_per_grant_us")))
    if scale and len(scale) > 1:
        for lab in ("dlock mutex", "dlock fair_mutex"):
            pts = [(n, get(res.get(f"S{n}-redis"), lab, "handoff_other_p50"),
                    get(res.get(f"S{n}-redis"), lab, "server_cpu_per_grant_us"),
                    get(res.get(f"S{n}-redis"), lab, "scripts_per_grant")) for n in scale]
            pts = [p for p in pts if p[1]]
            if len(pts) > 1:
                out.append(f"Scale, {lab}: " + "; ".join(
                    f"{n} workers {us(h)} hand-off, {us((c or 0) * 1000)} Redis CPU and "
                    f"{(sc or 0):.1f} scripts per grant" for n, h, c, sc in pts) + ".")
    return out


def plots(run_dir, res, plots_dir, scale=()):
    data_dir = os.path.join(run_dir, "plot-data")
    os.makedirs(data_dir, exist_ok=True)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    made, problems = [], []

    def render(name, script):
        """Keeps the gnuplot script beside its data and draws plots_dir/name."""
        with open(os.path.join(data_dir, name.replace(".png", ".gp")), "w", encoding="utf-8") as f:
            f.write(script)
        err = analyse.gnuplot(script, data_dir)
        if err:
            problems.append(f"{name}: {err}")
        else:
            made.append(name)

    common = ("set terminal pngcairo noenhanced size 1300,560 font 'DejaVu Sans,11'\n"
              "set logscale x\nset xlabel 'microseconds (log scale)'\nset ylabel 'fraction of samples <= x'\n"
              "set yrange [0:1]\nset grid xtics ytics mxtics\nset key right bottom box opaque font ',9' samplen 2\n"
              "set format x '%g'\nset tmargin 4\n")
    for name, panels, header in (
            ("side_handoff_cdf.png", [("W3-redis", "Redis: W3 hand-off to another worker"),
                                      ("W3-zk", "ZooKeeper: W3 hand-off to another worker")],
             "Hand-off CDF, dlock and peers, same run"),
            ("side_w4_handoff_cdf.png", [("W4-redis", "Redis: W4 (1 ms cs) hand-off to another worker"),
                                         ("W3-redlock3", "Redlock 3 masters: W3 hand-off to another worker")],
             "Hand-off CDF, dlock and peers, same run"),
            ("side_etcd_handoff_cdf.png", [("W3-etcd", "etcd: W3 hand-off to another worker"),
                                           ("W4-etcd", "etcd: W4 (1 ms cs) hand-off to another worker")],
             "Hand-off CDF, dlock and python-etcd3, same run")):
        script = common + f"set output '{os.path.abspath(os.path.join(plots_dir, name))}'\n"
        script += f"set multiplot layout 1,2 title '{header}' font ',13'\n"
        any_panel = False
        for gid, title in panels:
            lines = []
            for i, (lab, f) in enumerate((res.get(gid) or {}).items()):
                dat = f"side-{gid}-{slug(lab)}.dat"
                if not analyse.write_cdf(os.path.join(data_dir, dat), f["_raw"]["handoff_other"]):
                    continue
                lw = 3 if f["kind"] == "dlock" else 1.5
                lines.append(f"'{dat}' using 1:2 with lines lw {lw} lc rgb '{colors[i % len(colors)]}' "
                             f"title '{lab}'")
            if lines:
                any_panel = True
                script += f"set title \"{title}\"\nplot " + ", \\\n     ".join(lines) + "\n"
            else:
                script += "set multiplot next\n"
        script += "unset multiplot\n"
        if not any_panel:
            continue
        render(name, script)
    # The scale curves: hand-off p50 and Redis CPU per grant against the number of waiting workers.
    if scale and len(scale) > 1:
        labels = []
        for n in scale:
            for lab in res.get(f"S{n}-redis", {}):
                if lab not in labels:
                    labels.append(lab)
        dat_lines = {}
        for lab in labels:
            rows = []
            for n in scale:
                f = res.get(f"S{n}-redis", {}).get(lab)
                if f and f.get("handoff_other_p50"):
                    rows.append(f"{n} {f['handoff_other_p50'] / 1000:.3f} "
                                f"{(f.get('server_cpu_per_grant_us') or float('nan')):.3f}")
            if rows:
                dat = f"side-scale-{slug(lab)}.dat"
                with open(os.path.join(data_dir, dat), "w", encoding="utf-8") as fh:
                    fh.write("\n".join(rows) + "\n")
                dat_lines[lab] = dat
        if dat_lines:
            name = "side_scale.png"
            script = ("set terminal pngcairo noenhanced size 1300,560 font 'DejaVu Sans,11'\n"
                      f"set output '{os.path.abspath(os.path.join(plots_dir, name))}'\n"
                      "set logscale xy\nset xlabel 'workers waiting on one name (log scale)'\n"
                      "set grid xtics ytics mxtics mytics\nset key left top box opaque font ',9' samplen 2\n"
                      f"set xtics ({', '.join(str(n) for n in scale)})\nset format y '%g'\nset tmargin 4\n"
                      "set multiplot layout 1,2 title 'Scale: one name, N waiting workers, same run' font ',13'\n")
            for col, title, ylab in ((2, "hand-off to another worker p50", "microseconds (log scale)"),
                                     (3, "Redis CPU per grant", "microseconds of server CPU (log scale)")):
                lines = []
                for i, (lab, dat) in enumerate(dat_lines.items()):
                    lw = 3 if lab.startswith("dlock") else 1.5
                    lines.append(f"'{dat}' using 1:{col} with linespoints lw {lw} pt 7 "
                                 f"lc rgb '{colors[i % len(colors)]}' title '{lab}'")
                script += f"set title \"{title}\"\nset ylabel '{ylab}'\nplot " + ", \\\n     ".join(lines) + "\n"
            script += "unset multiplot\n"
            render(name, script)
    return made, problems


def isfinite(x):
    return x is not None and math.isfinite(x)
