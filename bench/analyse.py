#!/usr/bin/python3
"""Analyser for dlock's benchmark runs (docs/benchmarks.md; the Figures section of docs/benchmarks.md).

Reads a run directory written by bench/run:

    RUN/run.json              machine, date, command, workloads, modes, pending items
    RUN/floor.jsonl           W0: {"rtt_ns":N} per PING, then a "done" summary
    RUN/floor_zk.jsonl        W0, ZooKeeper: per-operation samples, "summary" records, "done" (read)
    RUN/floor_etcd.jsonl      W0, etcd: the same records (bench/floor_etcd.cpp)
    RUN/<W>-<mode>/meta.json  start_at_ns, duration_s, key of every worker, cs_us, ...
    RUN/<W>-<mode>/w<I>.jsonl the workers' files (docs/benchmarks.md, "The worker")
    RUN/<W>-<mode>/probe.jsonl the probe: round trips under the workload's load (a floor file)
    RUN/W6-<mode>/hold_many.json, RUN/micro.json

and writes RUN/summary.json, the markdown report and the gnuplot PNGs. Every latency figure is
also given as a ratio to the W0 PING p50 measured in the same run; throughput as a fraction of
the PING rate (1 / PING p50). Standard library only.

    bench/analyse.py RUN [--report FILE] [--plots DIR]
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys

# --- statistics --------------------------------------------------------------------------------



def median_of(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else 0.0

def nearest_rank(sorted_values, p):
    """Nearest-rank percentile (the Figures section of docs/benchmarks.md) of an ascending list; None if empty."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), math.ceil(p / 100.0 * len(sorted_values))))
    return sorted_values[rank - 1]


def dist(values):
    """p50/p90/p99/max/n of a list of nanosecond values (unsorted)."""
    s = sorted(values)
    return {
        "n": len(s),
        "p50": nearest_rank(s, 50),
        "p90": nearest_rank(s, 90),
        "p99": nearest_rank(s, 99),
        "max": s[-1] if s else None,
        "mean": (sum(s) / len(s)) if s else None,
    }


def jain(counts):
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal shares, 1/n = one takes all."""
    if not counts:
        return None
    sq = sum(c * c for c in counts)
    if sq == 0:
        return None
    return sum(counts) ** 2 / (len(counts) * sq)


# --- loading -------------------------------------------------------------------------------------


class WorkerFileError(Exception):
    pass


def load_worker_file(path, expected_w):
    """Returns (cycles [(acq, rel, wait_ns)], done record, events). Raises WorkerFileError when
    the file breaks §4 (no done record, done not last, wrong counts, non-integer stamps)."""
    cycles, events, done = [], [], None
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise WorkerFileError(f"{path}:{n}: not JSON: {e}")
        if done is not None:
            raise WorkerFileError(f"{path}:{n}: record after the done record")
        if rec.get("w") != expected_w:
            raise WorkerFileError(f"{path}:{n}: w={rec.get('w')!r}, expected {expected_w}")
        if "event" in rec:
            if rec["event"] == "done":
                done = rec
            else:
                events.append(rec)
            continue
        acq, rel, wait = rec.get("acq"), rec.get("rel"), rec.get("wait_ns")
        if not all(type(x) is int for x in (acq, rel, wait)):
            raise WorkerFileError(f"{path}:{n}: acq/rel/wait_ns must be JSON integers")
        if rel < acq:
            raise WorkerFileError(f"{path}:{n}: rel < acq")
        cycles.append((acq, rel, wait))
    if done is None:
        raise WorkerFileError(f"{path}: no done record")
    if done.get("cycles") != len(cycles):
        raise WorkerFileError(f"{path}: done.cycles={done.get('cycles')} but {len(cycles)} cycle records")
    return cycles, done, events


def floor_records(path):
    """{what: summary record} ("summary", "server_cost" and "done" records) of a floor program's file,
    and its hand-off floor's held share under "relay" (under "relay_procs" that of the same relay
    with a process per member); {} if absent."""
    out = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("event") in ("summary", "server_cost", "done"):
                    out[rec["what"]] = rec
                elif rec.get("event") in ("relay", "relay_procs"):
                    out[rec["event"]] = rec
    return out


def load_probe(wdir, meta):
    """The probe of one workload (bench/run's start_probe): meta["probe"] with, once it ran, "p50"
    and "n" of its round trip (`what`) and "read_p50" of its read (etcd). Returns (probe or None,
    problems). Runs before the probe existed had a PING every 1 ms in floor_load.jsonl instead."""
    probe = meta.get("probe")
    if probe is None:
        if not os.path.exists(os.path.join(wdir, "floor_load.jsonl")):
            return None, []
        probe = {"status": "run", "kind": "redis", "what": "redis_ping", "file": "floor_load.jsonl", "gap_ms": 1,
                 "client": "dlock-bench-floor (hiredis sync, one connection)", "op": "a PING", "exit_status": 0}
    probe = dict(probe)
    if probe.get("status") != "run":
        return probe, []
    recs = floor_records(os.path.join(wdir, probe.get("file", "probe.jsonl")))
    if probe.get("exit_status") != 0:
        return probe, [f"the probe exited {probe.get('exit_status')}: {probe.get('error', '(no output)')}"]
    main = recs.get(probe["what"])
    if not main or not main.get("n"):
        return probe, [f"the probe wrote no {probe['what']} round trips (see probe.log)"]
    probe.update({"p50": main["p50_ns"], "p99": main["p99_ns"], "n": main["n"]})
    if probe.get("read") and recs.get(probe["read"]):
        probe["read_p50"] = recs[probe["read"]]["p50_ns"]
    return probe, []


def probe_kind(mode):
    """The probe kind (bench/run's start_probe) that times a round trip to `mode`'s server."""
    return {"etcd": "etcd", "zk": "zk"}.get(mode, "redis")


def probe_text(probe):
    """How the report names a probe's round trip: "etcd `Put`", "ZooKeeper `delete`" or "Redis PING"."""
    return {"etcd": "etcd `Put`", "zk": "ZooKeeper `delete`"}.get((probe or {}).get("kind"), "Redis PING")


# --- one workload --------------------------------------------------------------------------------


def analyse_workload(wdir):
    """Every §5 figure for one workload directory. Returns a dict (see keys below)."""
    with open(os.path.join(wdir, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    start = meta["start_at_ns"]
    end = start + int(round(meta["duration_s"] * 1e9))
    out = {"meta": meta, "ok": True, "problems": [], "floor_p50": None}
    # The round trip under this workload's load; a probe that failed is a problem of the run
    # whoever's workload it was (the analysers list probe_problems apart from the workers').
    out["probe"], out["probe_problems"] = load_probe(wdir, meta)
    # The ratio basis: the PING floor measured right before and right after this workload.
    around = [meta.get("floor_before_p50"), meta.get("floor_after_p50")]
    around = [x for x in around if x]
    if around:
        out["floor_p50"] = sum(around) / len(around)

    per_worker = {}  # w -> sorted cycles
    errors = lib_retries = late = 0
    late_max = 0
    for w in meta["workers"]:
        wid = w["id"]
        if w.get("exit_status") != 0:
            out["ok"] = False
            out["problems"].append(f"worker {wid} exit status {w.get('exit_status')}")
        path = os.path.join(wdir, w["file"])
        if not os.path.exists(path):
            out["ok"] = False
            out["problems"].append(f"worker {wid}: no result file")
            continue
        try:
            cycles, done, events = load_worker_file(path, wid)
        except WorkerFileError as e:
            out["ok"] = False
            out["problems"].append(str(e))
            continue
        cycles.sort()
        per_worker[wid] = cycles
        errors += done.get("errors", 0)
        lib_retries += done.get("lib_retries", 0)
        for e in events:
            if e.get("event") == "late_start":
                late += 1
                late_max = max(late_max, e.get("late_ns", 0))

    def in_window(c):
        return start <= c[0] <= end

    # Acquire latency, cycle time and release gap, per worker then pooled.
    waits, cycle_times, release_gaps = [], [], []
    counts = {}
    for wid, cycles in per_worker.items():
        counts[wid] = sum(1 for c in cycles if in_window(c))
        waits.extend(c[2] for c in cycles if in_window(c))
        for prev, nxt in zip(cycles, cycles[1:]):
            if not in_window(prev):
                continue
            t0_prev, t0_next = prev[0] - prev[2], nxt[0] - nxt[2]
            cycle_times.append(t0_next - t0_prev)
            release_gaps.append(t0_next - prev[1])

    # Per key: hand-off, barging, held fraction, mutual-exclusion violations.
    keys = {}
    for w in meta["workers"]:
        keys.setdefault(w["key"], []).append(w["id"])
    handoff_all, handoff_other, handoff_self = [], [], []
    contended_grants = same_grants = 0
    longest_streak = 0
    held_fractions = []
    violations = []
    self_overlaps = 0
    for key, wids in keys.items():
        intervals = sorted((c[0], c[1], wid) for wid in wids for c in per_worker.get(wid, []))
        # Violations use every cycle, in or out of the window (§3 rule 3).
        max_rel, max_w = None, None
        for acq, rel, wid in intervals:
            if max_rel is not None and acq < max_rel:
                if max_w != wid:
                    if len(violations) < 20:
                        violations.append({"key": key, "worker": wid, "acq": acq, "overlaps_worker": max_w,
                                           "overlaps_until": max_rel})
                    else:
                        violations.append(None)
                else:
                    self_overlaps += 1
            if max_rel is None or rel > max_rel:
                max_rel, max_w = rel, wid
        streak = 0
        for (a0, r0, w0), (a1, r1, w1) in zip(intervals, intervals[1:]):
            if not (start <= a1 <= end):
                continue
            streak = streak + 1 if w1 == w0 else 0
            if len(wids) > 1:
                longest_streak = max(longest_streak, streak + 1)
            h = a1 - r0
            handoff_all.append(h)
            if w1 == w0:
                handoff_self.append(h)
            else:
                handoff_other.append(h)
            if len(wids) > 1:
                contended_grants += 1
                same_grants += w1 == w0
        held = 0
        for acq, rel, _ in intervals:
            lo, hi = max(acq, start), min(rel, end)
            if hi > lo:
                held += hi - lo
        held_fractions.append(held / (end - start))

    n_violations = len(violations)
    # The `shared` mode measures read locks: holders overlapping is what they are for, so an
    # overlap there is counted (concurrent_grants) rather than reported as a violation.
    concurrent_grants = 0
    if os.path.basename(os.path.normpath(wdir)).endswith("-shared"):
        concurrent_grants, n_violations, violations = n_violations, 0, []
    if n_violations:
        out["ok"] = False
        out["problems"].append(f"{n_violations} mutual-exclusion violations")
    if self_overlaps:
        out["ok"] = False
        out["problems"].append(f"{self_overlaps} overlapping intervals within one worker (worker bug)")

    total = sum(counts.values())
    worker_cpu = sum(w.get("cpu_s", 0.0) for w in meta["workers"])
    ctx = sum(w.get("ctx_switches", 0) for w in meta["workers"])
    wakeups = sum(w.get("wakeups", 0) for w in meta["workers"])
    cmds = meta.get("server_commands") or {}
    all_cycles = sum(len(c) for c in per_worker.values())
    contended = any(len(v) > 1 for v in keys.values())
    out.update({
        "workers": len(meta["workers"]),
        "keys": len(keys),
        "contended": contended,
        "cycles_in_window": total,
        "cycles_total": all_cycles,
        "throughput": total / meta["duration_s"] if meta["duration_s"] > 0 else None,
        "acquire": dist(waits),
        "cycle": dist(cycle_times),
        "release_gap": dist(release_gaps),
        "handoff": dist(handoff_all),
        "handoff_other": dist(handoff_other),
        "handoff_self": dist(handoff_self),
        "barging": (same_grants / contended_grants) if contended_grants else None,
        "held_fraction": sum(held_fractions) / len(held_fractions) if held_fractions else None,
        "per_worker": {str(k): v for k, v in sorted(counts.items())},
        "jain": jain(list(counts.values())) if len(counts) > 1 else None,
        "violations": n_violations,
        "concurrent_grants": concurrent_grants,
        "violation_examples": [v for v in violations if v][:5],
        "errors": errors,
        "lib_retries": lib_retries,
        "late_starts": late,
        "late_max_ns": late_max,
        "longest_streak": longest_streak if contended else None,
        "worker_cpu_us_per_cycle": (worker_cpu * 1e6 / all_cycles) if all_cycles else None,
        "ctx_switches_per_cycle": (ctx / all_cycles) if all_cycles and ctx else None,
        "wakeups_per_cycle": (wakeups / all_cycles) if all_cycles and wakeups else None,
        "commands_per_cycle": (sum(c.get("calls", 0) for c in cmds.values()) / all_cycles)
        if all_cycles and cmds else None,
        "server_cpu_us_per_cycle": (meta["server_cpu_pct"] / 100 * meta["duration_s"] * 1e6 / total)
        if total and meta.get("server_cpu_pct") is not None else None,
        "scripts_per_cycle": (sum(cmds.get(c, {}).get("calls", 0) for c in ("evalsha", "eval", "fcall"))
                              / all_cycles) if all_cycles and cmds else None,
        "subscribes_per_cycle": (sum(cmds.get(c, {}).get("calls", 0) for c in ("subscribe", "unsubscribe"))
                                 / all_cycles) if all_cycles and cmds else None,
        "server_commands": cmds,
        "server_cpu_pct": meta.get("server_cpu_pct"),
    })
    probe_p50 = (out["probe"] or {}).get("p50")
    other_p50 = out["handoff_other"]["p50"]
    # No ratio to a PING of a Redis server the workers do not use (ZooKeeper workloads of runs from
    # before the ZooKeeper probe).
    out["handoff_other_vs_probe"] = (other_p50 / probe_p50 if probe_p50 and other_p50 and contended
                                     and not out["probe"].get("idle_server") else None)
    # Raw distributions for the plots (not written to summary.json).
    out["_raw"] = {"acquire": waits, "handoff_other": handoff_other, "handoff": handoff_all}
    return out


# --- the report ----------------------------------------------------------------------------------

TARGETS = [
    # (id, description, workload, metric, limit, kind)
    ("uncontended-acquire", "uncontended acquire p50 (W1)", "W1", ("acquire", "p50"), 1.5, "ratio<="),
    ("full-cycle", "full cycle p50 (W1: acquire + release)", "W1", ("cycle", "p50"), 3.0, "ratio<="),
    ("handoff-other", "hot-key hand-off to another worker p50 (W3)", "W3", ("handoff_other", "p50"), 3.0,
     "ratio<="),
    ("w4-held", "W4 lock held share (1 ms critical section)", "W4", ("held_fraction",), 0.90, "value>="),
]


def us(ns):
    return "—" if ns is None else f"{ns / 1000:.1f} µs"


def ratio(ns, floor):
    return "—" if ns is None or not floor else f"{ns / floor:.2f}×"


def pct(x):
    return "—" if x is None else f"{100 * x:.1f} %"


def get(d, path):
    for p in path:
        if d is None:
            return None
        d = d.get(p)
    return d


def write_cdf(path, values, points=600):
    """Writes "x_us cum_fraction" lines: about `points` evenly spaced ranks plus the extremes."""
    s = sorted(values)
    n = len(s)
    with open(path, "w", encoding="utf-8") as f:
        if n == 0:
            f.write("# empty\n")
            return False
        step = max(1, n // points)
        idx = list(range(0, n, step))
        if idx[-1] != n - 1:
            idx.append(n - 1)
        for i in idx:
            f.write(f"{s[i] / 1000:.3f} {(i + 1) / n:.5f}\n")
    return True


def gnuplot(script, cwd):
    exe = shutil.which("gnuplot")
    if not exe:
        return "gnuplot not installed (Debian: gnuplot-nox)"
    r = subprocess.run([exe], input=script, text=True, cwd=cwd, capture_output=True)
    return None if r.returncode == 0 else (r.stderr.strip() or f"gnuplot exit {r.returncode}")


def make_plots(run_dir, results, floor_rtts, floor_p50, plots_dir, modes):
    """hand-off CDFs (W3, W4) and acquire CDFs (W1, W2), one curve per lock type, PING floor as
    reference. Returns (list of png names, list of problems)."""
    data_dir = os.path.join(run_dir, "plot-data")
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(plots_dir, exist_ok=True)
    have_floor = write_cdf(os.path.join(data_dir, "floor.dat"), floor_rtts)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"]
    made, problems = [], []

    def panel(workload, metric, title, marks):
        lines = []
        for i, mode in enumerate(modes):
            r = results.get(f"{workload}-{mode}")
            if not r:
                continue
            dat = f"{workload}-{mode}-{metric}.dat"
            if not write_cdf(os.path.join(data_dir, dat), r["_raw"][metric]):
                continue
            lines.append(f"'{dat}' using 1:2 with lines lw 2 lc rgb '{colors[i % len(colors)]}' "
                         f"title '{mode}'")
        # The floor curve: the PING measured just before this workload (else the run's W0).
        floor_dat, floor_title = ("floor.dat", "PING floor (W0)") if have_floor else (None, None)
        for m in modes:
            fpath = os.path.join(run_dir, f"{workload}-{m}", "floor_before.jsonl")
            if os.path.exists(fpath):
                with open(fpath, encoding="utf-8") as f:
                    samples = [json.loads(x).get("rtt_ns") for x in f]
                if write_cdf(os.path.join(data_dir, f"{workload}-floor.dat"), [x for x in samples if x]):
                    floor_dat, floor_title = f"{workload}-floor.dat", "PING floor"
                break
        if floor_dat:
            lines.append(f"'{floor_dat}' using 1:2 with lines lw 1.5 dt 2 lc rgb '#555555' title '{floor_title}'")
        if not lines:
            return None
        set_marks = ""
        local = [results[f"{workload}-{m}"].get("floor_p50") for m in modes if f"{workload}-{m}" in results]
        basis = next((x for x in local if x), floor_p50)
        if basis:
            for k, lab in marks:
                x = k * basis / 1000
                set_marks += (f"set arrow from {x:.3f}, graph 0 to {x:.3f}, graph 1 nohead dt 2 lw 1.5 "
                              f"lc rgb '#e08000'\n"
                              f"set label '{lab}' at {x:.3f}, graph 0.5 center rotate by 90 offset -1.2,0 "
                              f"font ',9' tc rgb '#e08000'\n")
        return (f"set title \"{title}\"\nunset arrow\nunset label\n{set_marks}"
                "plot " + ", \\\n     ".join(lines) + "\n")

    common = ("set terminal pngcairo size 1300,560 font 'DejaVu Sans,11'\n"
              "set logscale x\nset xlabel 'microseconds (log scale)'\nset ylabel 'fraction of samples <= x'\n"
              "set yrange [0:1]\nset grid xtics ytics mxtics\nset key right center box opaque font ',9' samplen 2\n"
              "set format x '%g'\nset tmargin 4\n")
    for name, panels, header in (
        ("handoff_cdf.png",
         [("W3", "handoff_other", "W3 hot key, empty critical section:\\n"
                                  "hand-off to ANOTHER worker (next acq - previous rel)",
           [(3, "target: 3× PING p50")]),
          ("W4", "handoff_other", "W4 hot key, 1 ms critical section:\\n"
                                  "hand-off to ANOTHER worker",
           [(3, "3× PING p50")])],
         "Hand-off latency CDF per lock type"),
        ("acquire_cdf.png",
         [("W1", "acquire", "W1 uncontended, 1 worker: acquire latency", [(1.5, "target: 1.5× PING p50")]),
          ("W2", "acquire", "W2 independent keys, one worker per key: acquire latency",
           [(1.5, "1.5× PING p50")])],
         "Acquire latency CDF per lock type"),
    ):
        bodies = [panel(*p) for p in panels]
        if not any(bodies):
            continue
        script = common + f"set output '{os.path.abspath(os.path.join(plots_dir, name))}'\n"
        script += f"set multiplot layout 1,2 title '{header}' font ',13'\n"
        for b in bodies:
            script += b if b else "set multiplot next\n"
        script += "unset multiplot\n"
        with open(os.path.join(data_dir, name.replace(".png", ".gp")), "w", encoding="utf-8") as f:
            f.write(script)
        err = gnuplot(script, data_dir)
        if err:
            problems.append(f"{name}: {err}")
        else:
            made.append(name)
    return made, problems


def fmt_cell(r, floor, metric):
    kind, path = metric
    v = get(r, path)
    if kind == "floor":
        return us(v)
    if kind == "load":
        return "—" if not v else v.split()[0]
    if kind == "lat":
        return f"{us(v)} ({ratio(v, floor)})"
    if kind == "rate":
        if v is None:
            return "—"
        return f"{v:,.0f}/s ({v * floor / 1e9:.3f}× PING rate)" if floor else f"{v:,.0f}/s"
    if kind == "pct":
        return pct(v)
    if kind == "float":
        return "—" if v is None else f"{v:.3f}"
    if kind == "float1":
        return "—" if v is None else f"{v:.1f}"
    if kind == "float2":
        return "—" if v is None else f"{v:.2f}"
    if kind == "int":
        return "—" if v is None else f"{v:,}"
    if kind == "cpu":
        return "—" if v is None else f"{v:.1f} µs"
    if kind == "srvpct":
        return "—" if v is None else f"{v:.0f} %"
    return str(v)


ROWS = [
    ("W0 PING p50 before / after (mean = the ratio basis)", ("around", None)),
    ("load average (1 min) at the start", ("load", ("meta", "loadavg"))),
    ("throughput (cycles/s in window)", ("rate", ("throughput",))),
    ("acquire p50", ("lat", ("acquire", "p50"))),
    ("acquire p90", ("lat", ("acquire", "p90"))),
    ("acquire p99", ("lat", ("acquire", "p99"))),
    ("acquire max", ("lat", ("acquire", "max"))),
    ("cycle time p50", ("lat", ("cycle", "p50"))),
    ("cycle time p99", ("lat", ("cycle", "p99"))),
    ("release gap p50 (rel → next acquire start)", ("lat", ("release_gap", "p50"))),
    ("hand-off p50 (all grants)", ("lat", ("handoff", "p50"))),
    ("hand-off p90", ("lat", ("handoff", "p90"))),
    ("hand-off p99", ("lat", ("handoff", "p99"))),
    ("hand-off to another worker p50", ("lat", ("handoff_other", "p50"))),
    ("hand-off to another worker p90", ("lat", ("handoff_other", "p90"))),
    ("hand-off to another worker p99", ("lat", ("handoff_other", "p99"))),
    ("round trip under the same load p50 (the probe: a separate process, one op per gap)", ("probe", None)),
    ("hand-off to another worker p50 / that round trip", ("probe_ratio", None)),
    ("hand-offs to another worker (count)", ("int", ("handoff_other", "n"))),
    ("hand-off to the same worker (re-take) p50", ("lat", ("handoff_self", "p50"))),
    ("barging (releaser re-took the lock)", ("pct", ("barging",))),
    ("longest run of grants to one worker", ("int", ("longest_streak",))),
    ("lock held (share of window)", ("pct", ("held_fraction",))),
    ("Jain fairness (per-worker counts)", ("float", ("jain",))),
    ("mutual-exclusion violations", ("int", ("violations",))),
    ("errors / lib retries / late starts", ("errs", None)),
    ("client CPU per cycle (all workers)", ("cpu", ("worker_cpu_us_per_cycle",))),
    ("context switches per cycle (all workers)", ("float1", ("ctx_switches_per_cycle",))),
    ("wake-ups per cycle (voluntary context switches, all workers)", ("float1", ("wakeups_per_cycle",))),
    ("script calls (FCALL, EVALSHA) per cycle, server side", ("float1", ("scripts_per_cycle",))),
    ("server commands per cycle (scripts' commands included)", ("float1", ("commands_per_cycle",))),
    ("redis-server CPU per cycle", ("cpu", ("server_cpu_us_per_cycle",))),
    ("(UN)SUBSCRIBEs per cycle, server side", ("float2", ("subscribes_per_cycle",))),
    ("redis-server CPU (share of one core)", ("srvpct", ("server_cpu_pct",))),
]


NO_FLOOR = "no floor measured in this run"


def zk_delete_floor(probe, zk):
    """(p50 of one ZooKeeper delete, measured under load?): the workload's probe's delete when a
    ZooKeeper probe ran beside it, else W0's on a quiet server (`zk`: floor_zk.jsonl's records; runs
    from before the ZooKeeper probe)."""
    if probe.get("kind") == "zk" and probe.get("p50"):
        return probe["p50"], True
    return (zk.get("zk_delete") or {}).get("p50_ns"), False


def held_by_delete(cs_ns, goal, rt, what, handoff=None):
    """A ZooKeeper held-share row's floor: the hand-off its goal needs against one delete under the
    same load (`rt`, `what` names it). A held share of `goal` with a critical section of `cs_ns`
    leaves at most cs × (1 − goal) / goal per hand-off, and a hand-off is at least the holder's
    delete. The probe's delete carries its own client's wake-ups, as the hand-off does the waiter's,
    so a hand-off can come out a little under it: the comparison is of the need with the delete."""
    need = cs_ns * (1 - goal) / goal
    text = (f"{pct(goal)} held with a {cs_ns / 1e6:g} ms critical section leaves at most {us(need)} per hand-off "
            f"(cs × (1 − goal) / goal); a hand-off is at least the holder's delete, and {what} took {us(rt)}, "
            f"{rt / need:.2f}× that")
    if handoff:
        text += (f"; dlock's hand-off to another p50 {us(handoff)} = {handoff / rt:.2f}× that delete"
                 + (" (under 1: the probe's own wake-ups are part of its round trip)" if handoff < rt else ""))
    return ("**above the physical bound**: " if rt > need else f"floor {us(rt)}, under the {us(need)} it leaves: ") + text


def scale_relay_text(what):
    """The W0 references table's text for a scale relay (bench/floor.cpp --relay-scale), else `what`."""
    n = what.removeprefix("relay_handoff_min_scripts_procs_")
    return (f"the least scripts of a fenced hand-off on one server, between {n} processes (the scale curves' floor)"
            if n != what and n.isdigit() else what)


def relay_floor(refs, cs_ns):
    """(held share, text) of W0's hand-off floor (bench/floor.cpp --relay-s: a turn passed by PUBLISH
    between bare hiredis threads with a busy critical section, a wake-up included) when it ran with
    that critical section; None otherwise. When W0 also ran it with a process per member
    (--relay-procs), as the workloads' workers are, that relay's share is the bound."""
    relay, handoff = refs.get("relay") or {}, refs.get("relay_handoff") or {}
    if not relay.get("held_fraction") or relay.get("cs_us", 0) * 1000 != cs_ns:
        return None
    text = (f"passing the turn by PUBLISH between {relay['workers']} bare hiredis threads with the same busy "
            f"critical section (W0's hand-off floor: the release, Redis' fan-out, the next one's wake-up) held "
            f"{pct(relay['held_fraction'])} (hand-off p50 {us(handoff.get('p50_ns'))}, mean "
            f"{us(handoff.get('mean_ns'))})")
    procs, procs_handoff = refs.get("relay_procs") or {}, refs.get("relay_handoff_procs") or {}
    if not procs.get("held_fraction") or procs.get("cs_us", 0) * 1000 != cs_ns:
        return relay["held_fraction"], text
    return procs["held_fraction"], (
        f"passing the turn by PUBLISH between {procs['workers']} bare hiredis processes, one per member as the "
        f"workers are, with the same busy critical section (W0's hand-off floor: the release, Redis' fan-out, "
        f"the next one's wake-up) held {pct(procs['held_fraction'])} (hand-off p50 "
        f"{us(procs_handoff.get('p50_ns'))}, mean {us(procs_handoff.get('mean_ns'))}); the same between threads "
        f"of one process {pct(relay['held_fraction'])} (hand-off p50 {us(handoff.get('p50_ns'))})")


def mode_floor(mode, desc, results, refs, zk, measured_ratio=None):
    """The floor of one per-lock-type target row in this run and whether its limit lies under it
    (docs/benchmarks.md, "Floors"): W0's references for W1 (dlock's own scripts from a bare hiredis
    client; `mutex` only: W0 times the mutex's scripts), the probe under the same load for hand-offs
    and held shares, W0's fan-out for Redlock, W0's ZooKeeper floor; "—" for rows without one."""
    ref50 = lambda what: (refs.get(what) or {}).get("p50_ns")  # noqa: E731
    ping = ref50("redis_ping")
    if desc.startswith("W6"):
        return "—"
    if desc.startswith(("uncontended acquire", "full cycle")):
        parts = ["acquire_script"] + (["release_script"] if desc.startswith("full") else [])
        lim = 1.5 if desc.startswith("uncontended") else 3.0
        if mode != "mutex" or not ping or not all(ref50(x) for x in parts):
            return NO_FLOOR + (" (W0 times the `mutex` scripts only)" if mode != "mutex" else "")
        q = sum(ref50(x) for x in parts) / ping
        r = results.get(f"W1-{mode}") or {}
        v = get(r, ("acquire", "p50") if len(parts) == 1 else ("cycle", "p50"))
        if v and r.get("floor_p50") and v / r["floor_p50"] < q:
            return (f"{NO_FLOOR}: W0's reference ({q:.2f}× a PING there) is above the measured ratio, so W0 ran "
                    "under other load than W1")
        what = ("one `FCALL` of dlock's acquire script" + (" and one of its release script" if len(parts) > 1
                                                               else "")
                + f" from a bare hiredis client took {q:.2f}× a PING in W0 ({us(sum(ref50(x) for x in parts))} vs "
                f"{us(ping)} p50)")
        return (f"**below the floor**: the goal asks for {lim:g}×; {what}" if q > lim else f"floor {q:.2f}×: {what}")
    if desc.startswith("hot-key hand-off"):
        r = results.get(f"W3-{mode}") or {}
        pr, idle = r.get("probe") or {}, r.get("floor_p50")
        if mode == "zk":
            d, under_load = zk_delete_floor(pr, zk)
            if not (d and idle):
                return NO_FLOOR
            q = d / idle
            what = (f"a ZooKeeper hand-off is at least the holder's delete ("
                    + (f"the probe's, {us(d)} p50 under this load" if under_load else f"{us(d)} p50 in W0, quiet")
                    + f"; the next in line needs no re-read): {q:.2f}× the PING around this workload ({us(idle)})")
        else:
            if not (pr.get("p50") and idle) or pr.get("idle_server"):
                return NO_FLOOR
            h = get(r, ("handoff_other", "p50"))
            if h and h < pr["p50"]:
                return (f"{NO_FLOOR}: the probe's PING p50 under this load ({us(pr['p50'])}) is above the hand-off "
                        "(the probe's own wake-up is part of its round trip)")
            q = pr["p50"] / idle
            what = (f"one round trip under this load (the probe's PING p50, {us(pr['p50'])}) is {q:.2f}× the quiet "
                    f"PING around this workload ({us(idle)})")
        return f"**below the physical floor**: the goal asks for 3×; {what}" if q > 3 else f"floor {q:.2f}×: {what}"
    if desc.startswith("W4 lock held"):
        r = results.get(f"W4-{mode}") or {}
        cs = (r.get("meta") or {}).get("cs_us", 0) * 1000
        pr = r.get("probe") or {}
        if mode == "zk":
            rt, under_load = zk_delete_floor(pr, zk)
            what = "one under this load (the probe's delete p50)" if under_load else "W0's (quiet)"
            return (held_by_delete(cs, 0.90, rt, what, get(r, ("handoff_other", "p50"))) if rt and cs
                    else NO_FLOOR)
        rt = None if pr.get("idle_server") or pr.get("kind") != probe_kind(mode) else pr.get("p50")
        what = f"the probe's {probe_text(pr)} p50 under this load"
        if not (rt and cs):
            return NO_FLOOR
        bound = cs / (cs + rt)
        text = (f"with a {cs / 1e6:g} ms critical section and one round trip per hand-off ({what}: {us(rt)}) the held "
                f"share is at most {cs / 1e6:g} ms / ({cs / 1e6:g} ms + {us(rt)}) = {pct(bound)}")
        relayed = relay_floor(refs, cs) if mode != "etcd" else None
        if relayed:
            bound = min(bound, relayed[0])
            text += "; " + relayed[1]
        lim = 0.90 if mode != "etcd" else None
        return (f"**above the physical bound**: {text}, the goal asks for {pct(lim)}" if lim and bound < lim
                else f"bound {pct(bound)}: {text}")
    if desc.startswith("W3 hand-off to another worker p50 vs a") or " under the same load" in desc:
        pr = (results.get(f"W3-{mode}") or {}).get("probe") or {}
        ok = pr.get("p50") and pr.get("kind") == probe_kind(mode)
        return "the floor is that round trip itself: 1.0× at best" if ok else NO_FLOOR
    if desc.startswith("W5: Redlock acquire"):
        nodes = desc.split(" on ")[1].split()[0]
        fan = ref50(f"fanout_ping_{nodes}")
        if not (fan and ping):
            return NO_FLOOR
        q = fan / ping
        if measured_ratio is not None and measured_ratio < q:
            return (f"{NO_FLOOR}: W0's fan-out ({q:.2f}× a PING) is above the measured ratio, so W0 ran under "
                    "other load")
        what = (f"a PING written to all {nodes} servers before any reply is read took {q:.2f}× one PING in W0 "
                f"({us(fan)} vs {us(ping)} p50)")
        return (f"**below the physical floor**: the goal asks for 1.5×; {what}" if q > 1.5
                else f"floor {q:.2f}×: {what}")
    return "—"


def report(run_dir, plots_dir, report_path):
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        run = json.load(f)
    floor = None
    floor_rtts = []
    references = []
    fpath = os.path.join(run_dir, "floor.jsonl")
    if os.path.exists(fpath):
        with open(fpath, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("event") == "done":
                    floor = rec
                elif rec.get("event") == "summary":
                    references.append(rec)
                elif "rtt_ns" in rec:
                    floor_rtts.append(rec["rtt_ns"])
    floor_p50 = floor["p50_ns"] if floor else None
    # W0's ZooKeeper half (bench/floor_zk.cpp): {what: summary record}, and what the runner knew.
    zk = floor_records(os.path.join(run_dir, "floor_zk.jsonl"))
    zk_info = run.get("zk_floor") or {}
    zk_around = [x for x in (zk_info.get("floor_before_p50"), zk_info.get("floor_after_p50")) if x]
    zk_basis = sum(zk_around) / len(zk_around) if zk_around else floor_p50
    # W0's etcd part (bench/floor_etcd.cpp), read like the ZooKeeper one.
    etcd = floor_records(os.path.join(run_dir, "floor_etcd.jsonl"))
    etcd_info = run.get("etcd_floor") or {}
    etcd_around = [x for x in (etcd_info.get("floor_before_p50"), etcd_info.get("floor_after_p50")) if x]
    etcd_basis = sum(etcd_around) / len(etcd_around) if etcd_around else floor_p50
    floor_end = None
    epath = os.path.join(run_dir, "floor_end.jsonl")
    if os.path.exists(epath):
        with open(epath, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("event") == "done":
                    floor_end = rec

    results = {}
    problems = []
    for wl in run["workloads_run"]:
        wdir = os.path.join(run_dir, wl)
        r = analyse_workload(wdir)
        results[wl] = r
        if not r["ok"]:
            problems.extend(f"{wl}: {p}" for p in r["problems"])
        problems.extend(f"{wl}: {p}" for p in r["probe_problems"])
    hold = {}
    for mode in run["modes"]:
        hpath = os.path.join(run_dir, f"W6-{mode}", "hold_many.json")
        if os.path.exists(hpath):
            with open(hpath, encoding="utf-8") as f:
                hold[mode] = json.loads(f.read().strip().splitlines()[-1])
            h = hold[mode]
            if h.get("still_held") != h.get("locks") or h.get("on_server") != h.get("locks"):
                problems.append(f"W6-{mode}: only {h.get('still_held')} / {h.get('on_server')} of "
                                f"{h.get('locks')} locks still held (client / server)")
    spread = None
    sdir = os.path.join(run_dir, "W6-spread-mutex")
    if os.path.exists(os.path.join(sdir, "meta.json")):
        with open(os.path.join(sdir, "meta.json"), encoding="utf-8") as f:
            spread = json.load(f)
        procs = []
        for i in range(spread["processes"]):
            ppath = os.path.join(sdir, f"p{i}.json")
            if os.path.exists(ppath):
                with open(ppath, encoding="utf-8") as f:
                    procs.append(json.loads(f.read().strip().splitlines()[-1]))
        spread.update({
            "reported": len(procs),
            "locks": sum(h["locks"] for h in procs),
            "still_held": sum(h["still_held"] for h in procs),
            "on_server": sum(h["on_server"] for h in procs),
            "cpu_pct_sum": sum(h["cpu_pct_of_core"] for h in procs),
            "cpu_pct_max": max((h["cpu_pct_of_core"] for h in procs), default=0.0),
            "renewals_per_s": sum(h["renewals_per_s"] for h in procs),
            "rss_per_lock_bytes": median_of([h["rss_per_lock_bytes"] for h in procs]),
            "lost": sum(h["lost"] for h in procs),
            "errors": sum(h["errors"] for h in procs),
        })
        want = spread["processes"] * spread["locks_each"]
        if spread["reported"] != spread["processes"] or spread["still_held"] != want or spread["on_server"] != want:
            problems.append(f"W6-spread-mutex: {spread['still_held']} / {spread['on_server']} of {want} locks still "
                            f"held (client / server), {spread['reported']} of {spread['processes']} processes reported")
    for p in run.get("problems", []):
        problems.append(p)
    micro = None
    mpath = os.path.join(run_dir, "micro.json")
    if os.path.exists(mpath):
        with open(mpath, encoding="utf-8") as f:
            micro = json.load(f)

    modes = run["modes"]
    pngs, plot_problems = make_plots(run_dir, results, floor_rtts, floor_p50, plots_dir, modes)

    # Targets, per lock type.
    target_rows = []
    for mode in modes:
        # The PING-based targets are Redis targets; etcd's floor is its own write round trip
        # (W0's etcd part), so its rows are below.
        for tid, desc, wl, path, limit, kind in TARGETS if mode != "etcd" else ():
            r = results.get(f"{wl}-{mode}")
            v = get(r, path) if r else None
            if v is None:
                if f"{wl}-{mode}" in run["workloads_run"]:  # run, but without that figure
                    target_rows.append((mode, desc, "—", "—", "not measured"))
                continue
            if kind == "ratio<=":
                wf = r.get("floor_p50") or floor_p50
                rv = v / wf if wf else None
                met = rv is not None and rv <= limit
                target_rows.append((mode, desc, f"{us(v)} = {rv:.2f}× PING p50 ({us(wf)})", f"<= {limit:g}×",
                                    "met" if met else "**missed**"))
            else:
                met = v >= limit
                target_rows.append((mode, desc, pct(v), f">= {100 * limit:.0f} %", "met" if met else "**missed**"))
        w3 = results.get(f"W3-{mode}")
        if w3 and mode not in ("etcd", "zk") and w3.get("contended"):  # zk: the PING is of an idle Redis
            # The hand-off against one round trip measured under the same load: a hand-off between
            # processes needs at least one (the release reaching the server, the grant the waiter).
            pr, q = w3.get("probe") or {}, w3.get("handoff_other_vs_probe")
            desc = "W3 hand-off to another worker p50 vs a Redis PING under the same load (the probe)"
            if q is None:
                target_rows.append((mode, desc, "not measured: " + pr.get("status", "no probe")
                                    if pr.get("status") != "run" else "not measured: the probe failed",
                                    "<= 1.5×" if mode == "fair" else "reported", "—"))
            else:
                target_rows.append((mode, desc, f"{us(w3['handoff_other']['p50'])} vs {us(pr['p50'])}: {q:.2f}×",
                                    "<= 1.5×" if mode == "fair" else "reported",
                                    ("met" if q <= 1.5 else "**missed**") if mode == "fair" else "—"))
        if mode == "redlock":
            # Each side divided by the PING measured just before it, so load drift cancels out.
            w1 = results.get("W1-mutex")
            base = get(w1, ("acquire", "p50"))
            base_f = (w1 or {}).get("floor_p50") or floor_p50
            for nodes in (3, 5):
                r5 = results.get(f"W5-redlock{nodes}")
                v = get(r5, ("acquire", "p50"))
                if v is None or base is None or not base_f:
                    continue
                wf = r5.get("floor_p50") or floor_p50
                rv = (v / wf) / (base / base_f)
                target_rows.append((mode, f"W5: Redlock acquire p50 on {nodes} nodes vs single-node (W1 mutex)",
                                    f"{us(v)} = {v / wf:.2f}× PING p50 vs {base / base_f:.2f}× single-node: "
                                    f"{rv:.2f}× single-node", "<= 1.5×", "met" if rv <= 1.5 else "**missed**"))
        if mode == "zk" and w3 and w3.get("contended"):
            # A ZooKeeper hand-off is at least the holder's delete: the probe's, under the same load.
            pr, q = w3.get("probe") or {}, w3.get("handoff_other_vs_probe")
            if q is not None and pr.get("kind") == "zk":
                measured = f"{us(w3['handoff_other']['p50'])} vs {us(pr['p50'])}: {q:.2f}×"
            elif pr.get("status") != "run":
                measured = "not measured: " + pr.get("status", "no probe")
            elif not pr.get("p50"):
                measured = "not measured: the probe failed"
            else:
                measured = "not measured: no ZooKeeper probe in this run"
            target_rows.append((mode, "W3 hand-off to another worker p50 vs a ZooKeeper `delete` under the same "
                                "load (the probe)", measured, "reported", "—"))
        put = (etcd.get("etcd_put") or {}).get("p50_ns")
        handoff = get(results.get(f"W3-{mode}"), ("handoff_other", "p50"))
        if mode == "etcd":
            acquire = get(results.get("W1-etcd"), ("acquire", "p50"))
            if acquire is not None and put:
                target_rows.append((mode, "W1 uncontended acquire p50 vs W0 etcd `Put` p50", f"{us(acquire)} = "
                                    f"{acquire / put:.2f}× Put p50 ({us(put)})", "reported", "—"))
            if handoff is not None:
                # The goal: within two write round trips measured under the same load (the probe's
                # Put while W3 ran); the quiet W0 Put beside it, reported.
                pr = results["W3-etcd"].get("probe") or {}
                desc = "W3 hand-off to another worker p50 vs an etcd `Put` under the same load (the probe)"
                if pr.get("p50") and pr.get("kind") == "etcd":  # older runs: a PING of the idle Redis
                    q = handoff / pr["p50"]
                    target_rows.append((mode, desc, f"{us(handoff)} = {q:.2f}× Put p50 under load ({us(pr['p50'])})",
                                        "<= 2×", "met" if q <= 2 else "**missed**"))
                else:
                    target_rows.append((mode, desc, "not measured: " + (pr.get("status", "no probe")
                                                                        if pr.get("status") != "run" else
                                                                        "the probe failed"), "<= 2×", "—"))
                target_rows.append((mode, "W3 hand-off to another worker p50 vs W0's quiet etcd `Put` p50",
                                    f"{us(handoff)} = {handoff / put:.2f}× Put p50 ({us(put)})" if put
                                    else "not measured: no W0 etcd floor in this run", "reported", "—"))
            held = get(results.get("W4-etcd"), ("held_fraction",))
            if held is not None:
                target_rows.append((mode, "W4 lock held share (1 ms critical section)", pct(held), "reported", "—"))
        h = hold.get(mode)
        if h:
            met = h["cpu_pct_of_core"] < 2.0 and h["still_held"] == h["locks"]
            target_rows.append((mode, f"W6: {h['locks']:,} renewing locks, CPU of renewal",
                                f"{h['cpu_pct_of_core']:.2f} % of a core", "< 2 %",
                                "met" if met else "**missed**"))
        if mode == "mutex" and spread and spread.get("reported"):
            want = spread["processes"] * spread["locks_each"]
            met = spread["still_held"] == want and spread["on_server"] == want and spread["lost"] == 0
            target_rows.append((mode, f"W6 spread: {want:,} locks held by {spread['processes']} processes",
                                f"{spread['still_held']:,} held, {spread['lost']} lost; clients "
                                f"{spread['cpu_pct_sum']:.2f} % of a core together, Redis "
                                f"{spread['server_cpu_pct']:.2f} %", "all held, none lost",
                                "met" if met else "**missed**"))

    L = []
    L.append("# dlock benchmark report")
    L.append("")
    L.append(f"Generated by `bench/analyse.py` from `{os.path.relpath(run_dir, run.get('repo', '.'))}`. "
             "Raw records stay under `bench/results/runs/` (not committed). "
             "How to read it: [docs/benchmarks.md](../../docs/benchmarks.md).")
    L.append("")
    L.append("| | |")
    L.append("|---|---|")
    L.append(f"| date | {run['date']} |")
    L.append(f"| command | `{run['command']}` |")
    L.append(f"| commit | {run.get('commit', '?')} |")
    L.append(f"| machine | {run['machine']} |")
    L.append(f"| load average (start → end) | {run.get('loadavg_start', '?')} → {run.get('loadavg_end', '?')} |")
    L.append(f"| redis-server | {run.get('redis_version', '?')}, loopback, `--save '' --appendonly no` |")
    if zk_info.get("version"):
        L.append(f"| ZooKeeper server (W0) | {zk_info['version']} standalone, OpenJDK, loopback, "
                 f"`forceSync={zk_info.get('forcesync', '?')}`, `tickTime={zk_info.get('tick_ms', '?')}`, "
                 f"serving {zk_info.get('startup_s', '?')} s after start |")
    if etcd_info.get("version"):
        L.append(f"| etcd member (W0, `etcd` mode, python-etcd3) | {etcd_info['version']}, one member, loopback, "
                 f"etcd's defaults (every write fsynced to the WAL before it is acknowledged), data dir on "
                 f"{etcd_info.get('data_fs', '?')}, serving {etcd_info.get('startup_s', '?')} s after start |")
    L.append(f"| build | {run.get('build', '?')} |")
    L.append(f"| duration per workload | {run['duration_s']} s, workers start together at a common "
             "CLOCK_MONOTONIC instant |")
    L.append("")
    side_rows = []
    if run.get("side"):
        import side  # bench/side.py: dlock and the peers side by side
        run["floor"] = {f"fanout{r['what'][-1]}_ratio": r["p50_ns"] / floor_p50
                        for r in references if r["what"].startswith("fanout_ping_") and floor_p50}
        side_lines, side_rows, side_pngs, side_problems = side.section(run_dir, run, plots_dir)
        L.extend(side_lines)
        problems.extend(side_problems)
    L.append("## W0: the floor")
    L.append("")
    if floor:
        L.append("| what | n | p50 | p90 | p99 | max |")
        L.append("|---|---|---|---|---|---|")
        L.append(f"| Redis PING round trip, {floor.get('client', 'hiredis')}, loopback | {floor['n']:,} | "
                 f"{us(floor['p50_ns'])} | {us(floor['p90_ns'])} | {us(floor['p99_ns'])} | {us(floor['max_ns'])} |")
        if floor_end:
            fe = floor_end
            L.append(f"| the same, again after the last workload (drift check, not used for ratios) | "
                     f"{fe['n']:,} | {us(fe['p50_ns'])} ({ratio(fe['p50_ns'], floor_p50)}) | {us(fe['p90_ns'])} | "
                     f"{us(fe['p99_ns'])} | {us(fe['max_ns'])} |")
        zk_rows = [
            ("zk_exists", "ZooKeeper read round trip, `zoo_exists(\"/\")`"),
            ("zk_create", "ZooKeeper write round trip, `zoo_create` of an EPHEMERAL_SEQUENTIAL node"),
            ("zk_delete", "ZooKeeper `zoo_delete` of that node (a release's write)"),
            ("zk_create_delete", "ZooKeeper create + delete: the least one ZooKeeper lock cycle costs"),
        ]
        if zk:
            for what, text in zk_rows:
                r = zk.get(what)
                if not r:
                    continue
                client = f", {r['client']}" if what == "zk_exists" else ""
                L.append(f"| {text}{client}, loopback | {r['n']:,} | "
                         f"{us(r['p50_ns'])} ({ratio(r['p50_ns'], zk_basis)}) | "
                         f"{us(r['p90_ns'])} ({ratio(r['p90_ns'], zk_basis)}) | "
                         f"{us(r['p99_ns'])} ({ratio(r['p99_ns'], zk_basis)}) | {us(r['max_ns'])} |")
        else:
            L.append(f"| ZooKeeper round trip | {zk_info.get('status', 'not measured in this run')} | | | | |")
        L.append("")
        if zk:
            L.append("ZooKeeper ratios (in brackets) are to the mean of the PING p50s measured just before and just "
                     f"after the ZooKeeper floor ({us(zk_info.get('floor_before_p50'))} / "
                     f"{us(zk_info.get('floor_after_p50'))}"
                     + (f", attempt {zk_info['attempt']}: earlier ones saw other load" if zk_info.get("attempt", 1) > 1
                        else "")
                     + "; the W0 PING above if those are missing). A read is answered by the server alone; a "
                     "write is a transaction the server logs before it answers ("
                     + ("fsynced: `forceSync=yes`" if zk_info.get("forcesync", "yes") == "yes"
                        else "not fsynced: `forceSync=no`")
                     + "). Every sync call of the C client also passes through its I/O and completion threads.")
            L.append("")
        etcd_rows = [
            ("etcd_range", "etcd read round trip, `Range` of one key (linearizable)"),
            ("etcd_put", "etcd write round trip, `Put` of a 32-byte value (Raft commit + WAL fsync)"),
            ("etcd_delete", "etcd `DeleteRange` of that key (a release's write)"),
            ("etcd_put_delete", "etcd put + delete: the least one etcd lock cycle costs"),
        ]
        if etcd:
            L.append("| what | n | p50 | p90 | p99 | max |")
            L.append("|---|---|---|---|---|---|")
            for what, text in etcd_rows:
                r = etcd.get(what)
                if not r:
                    continue
                client = f", {r['client']}" if what == "etcd_range" else ""
                L.append(f"| {text}{client}, loopback | {r['n']:,} | "
                         f"{us(r['p50_ns'])} ({ratio(r['p50_ns'], etcd_basis)}) | "
                         f"{us(r['p90_ns'])} ({ratio(r['p90_ns'], etcd_basis)}) | "
                         f"{us(r['p99_ns'])} ({ratio(r['p99_ns'], etcd_basis)}) | {us(r['max_ns'])} |")
            L.append("")
            L.append("etcd ratios (in brackets) are to the mean of the PING p50s measured just before and just after "
                     f"the etcd floor ({us(etcd_info.get('floor_before_p50'))} / "
                     f"{us(etcd_info.get('floor_after_p50'))}"
                     + (f", attempt {etcd_info['attempt']}: earlier ones saw other load"
                        if etcd_info.get("attempt", 1) > 1 else "")
                     + "). A linearizable read is answered by the member once Raft confirms it still leads; a "
                     "write is a Raft entry appended to the write-ahead log and fsynced before the answer. The "
                     "etcd hand-off goal is 2× the `Put` p50 (Targets; side by side with python-etcd3 when run "
                     "with `--peers`).")
            L.append("")
        elif etcd_info.get("status"):
            L.append(f"etcd round trip: {etcd_info['status']}.")
            L.append("")
        if references:
            ref_text = {
                "set_nx_px": "`SET k tok NX PX 10000` (the plainest lock command)",
                "multi_set_incr": "`MULTI; SET k tok NX PX; INCR fence; PTTL k; EXEC`, one write",
                "acquire_script": "`FCALL acquire` (dlock's acquire: EXISTS kind guard, TIME, SET ... GET fence, SET PX)",
                "release_script": "`FCALL release` (dlock's release: GET, DEL, PUBLISH, EXISTS)",
                "fanout_ping_3": "PING to 3 servers at once (all written, then all read): Redlock's floor",
                "fanout_ping_5": "PING to 5 servers at once: Redlock's floor on 5 nodes",
                "fanout_acquire_3": "`FCALL acquire` to 3 servers at once (all written, then all read), then an "
                                    "untimed release: a Redlock acquire's floor with dlock's script",
                "fanout_acquire_5": "the same on 5 servers",
                "relay_handoff": "the relay: a turn passed by PUBLISH between bare threads, each holding it for W4's "
                                 "critical section (W4's hand-off floor), per hand-off",
                "relay_handoff_1of1": "the relay with an empty critical section (W3's hand-off floor on one server)",
                "relay_handoff_2of3": "the same relay on 3 servers, the turn PUBLISHed on all 3 and taken at 2 of 3 "
                                      "messages (a Redlock hand-off's floor)",
                "relay_handoff_min_scripts_2of3": "the relay on 3 servers with the least scripts of a fenced hand-off "
                                                  "(each written to all 3, the turn taken at 2 of 3 messages): a "
                                                  "fenced Redlock hand-off's floor",
                "relay_handoff_procs": "the W4 relay with a process per member instead of a thread (as the "
                                       "workers are)",
                "relay_handoff_min_scripts_procs": "the least scripts of a fenced hand-off on one server, a process "
                                                   "per member (W3's fenced hand-off floor between processes)",
                "relay_handoff_min_scripts_2of3_procs": "the same on 3 servers, taken at 2 of 3 messages (a fenced "
                                                        "Redlock hand-off's floor between processes)",
            }
            L.append("References, same thin client and connection (not the floor: what the server's side "
                     "of a lock operation costs, so that dlock's own overhead shows as the difference):")
            L.append("")
            L.append("| what | n | p50 | p90 | p99 |")
            L.append("|---|---|---|---|---|")
            for r in references:
                L.append(f"| {ref_text.get(r['what'], scale_relay_text(r['what']))} | {r['n']:,} | "
                         f"{us(r['p50_ns'])} ({ratio(r['p50_ns'], floor_p50)}) | "
                         f"{us(r['p90_ns'])} ({ratio(r['p90_ns'], floor_p50)}) | "
                         f"{us(r['p99_ns'])} ({ratio(r['p99_ns'], floor_p50)}) |")
            L.append("")
        cost = floor_records(fpath)
        if cost.get("bare_scripts"):
            L.append("Server cost of an uncontended lock/unlock pair run as two scripts (bench/floor.cpp's server-cost "
                     "op on the quiet server: INFO commandstats and cpu around pairs on "
                     f"{cost['bare_scripts'].get('keys', 8)} keys in turn, pipelined, the two variants alternated in "
                     f"{cost['bare_scripts'].get('series', 1)} series each; per-pair figures from each variant's "
                     "quietest series; not round trips):")
            L.append("")
            L.append("| scripts | pairs | script time per pair (`EVALSHA` for the bare scripts, `FCALL` for dlock's), quietest series (median) | of it in the commands "
                     "run | redis-server CPU per pair | commands (scripts) per pair |")
            L.append("|---|---|---|---|---|---|")
            for what, text in (("bare_scripts", "bare: only the 8 commands dlock's safety rules need, same KEYS/ARGV "
                                                "counts (the W2 floor's script term)"),
                               ("dlock_scripts", "dlock's acquire.lua and release.lua, as the mutex sends them")):
                c = cost.get(what)
                if c:
                    L.append(f"| {text} | {c['pairs']:,} | {c['evalsha_us_per_pair']:.1f} µs "
                             f"({c.get('evalsha_us_per_pair_median', 0):.1f} µs) | "
                             f"{c['command_us_per_pair']:.1f} µs | {c['cpu_us_per_pair']:.1f} µs | "
                             f"{c['commands_per_pair']:.1f} ({c['scripts_per_pair']:.1f}) |")
            L.append("")
        L.append("Ratios: this machine is shared and its load drifts, so each workload below is divided by the "
                 "mean of the PING p50s measured on its server just before and just after it (0.5 s each, same "
                 "client as above; the runner waits for a quiet machine and re-runs a workload disturbed by "
                 "other load). Latencies are given as that ratio; throughput as a fraction of the PING rate "
                 "(1 / PING p50). The references above are divided by this W0's own PING p50 "
                 f"({us(floor_p50)}), measured interleaved with them.")
    else:
        L.append("W0 did not run: no ratios.")
    L.append("")
    L.append("## Targets")
    L.append("")
    probes = {}
    for r in results.values():
        pr = r.get("probe") or {}
        if pr.get("status") == "run":
            probes.setdefault(pr["kind"], pr)
    if probes:
        L.append("Rows \"under the same load\" are against **the probe**: a separate process started with the "
                 "workers, timing from their common start instant over the whole window one operation every "
                 + " / ".join(f"{pr['gap_ms']:g} ms ({kind})" for kind, pr in probes.items())
                 + " on a fixed schedule"
                 + ("; Redis: a PING by dlock-bench-floor (hiredis sync, one connection) to the server the "
                    "workers lock on" if "redis" in probes else "")
                 + ("; etcd (W3, W4): a `Put` (32-byte value) and a linearizable `Range` alternately, on the "
                    "probe's own key `dlock-floor-etcd/probe/<pid>` outside every lock's keys, by "
                    "dlock-bench-floor-etcd (gRPC C++ sync, one channel) to the same member; the `Put` p50 is "
                    "the figure" if "etcd" in probes else "")
                 + ("; ZooKeeper (W2-W4): a create of an ephemeral sequential node (32-byte value), a "
                    "`zoo_exists(\"/\")` and the delete of that node in turn, the probe's own node "
                    "`/dlock-floor-zk-probe-<pid>-<seq>` outside every lock's path, by dlock-bench-floor-zk "
                    "(libzookeeper_mt sync, one session) to the same server; the delete p50 is the figure (a "
                    "hand-off's release)" if "zk" in probes else "")
                 + ". The W0 floors above were measured on a quiet server; the probe's round trip is the one a "
                 "hand-off pays under its own load (docs/benchmarks.md, \"The probe\").")
        L.append("")
    refs = floor_records(fpath)
    floors = {}
    for row in target_rows:
        # The W5 rows' measured ratio ("...: 4.22× single-node") for the check against W0's fan-out.
        m = row[2].rsplit(": ", 1)[-1].split("×")[0] if row[1].startswith("W5") else None
        floors[(row[0], row[1])] = mode_floor(row[0], row[1], results, refs, zk,
                                              float(m) if m and m.replace(".", "").isdigit() else None)
    L.append("The last column: the floor of the target in this run and whether the limit lies under it "
             "(docs/benchmarks.md, \"Floors\").")
    L.append("")
    L.append("| lock type | target | measured | limit | | floor in this run / why |")
    L.append("|---|---|---|---|---|---|")
    for row in target_rows:
        L.append("| " + " | ".join(row) + f" | {floors[(row[0], row[1])]} |")
    tls = run.get("tls") or {}
    for key, what, limit in (("acquire_ratio_W1", "TLS / TCP acquire p50 (W1, once connected)", 1.15),
                             ("handoff_ratio_W3", "TLS / TCP hand-off to another worker p50 (W3)", None)):
        if key in tls:
            v = tls[key]
            verdict = "—" if v is None or limit is None else ("met" if v <= limit else "**missed**")
            L.append(f"| mutex | {what} | {'%.2f×' % v if v else 'not measured'} | "
                     f"{'<= %.2f×' % limit if limit else 'reported'} | {verdict} | — |")
    for item in run.get("pending", []):
        L.append(f"| — | {item} | not yet available | | pending | |")
    L.append("")
    for mode in modes:
        wls = [w for w in ("W1", "W2", "W3", "W4") if f"{w}-{mode}" in results]
        if not wls:
            continue
        L.append(f"## W1-W4: `{mode}` ({run.get('mode_labels', {}).get(mode, mode)})")
        L.append("")
        L.append("| figure | " + " | ".join(f"{w}: {results[f'{w}-{mode}']['meta']['title']}" for w in wls) + " |")
        L.append("|---|" + "---|" * len(wls))
        for label, metric in ROWS:
            cells = []
            for w in wls:
                r = results[f"{w}-{mode}"]
                if metric[0] == "around":
                    m = r["meta"]
                    cells.append(f"{us(m.get('floor_before_p50'))} / {us(m.get('floor_after_p50'))}"
                                 + (f" (run {m['attempt']})" if m.get("attempt", 1) > 1 else ""))
                elif metric[0] == "errs":
                    cells.append(f"{r['errors']} / {r['lib_retries']} / {r['late_starts']}")
                elif metric[0] == "probe":
                    pr = r.get("probe") or {}
                    cells.append(f"{probe_text(pr)} {us(pr['p50'])} (n {pr['n']:,})" if pr.get("p50")
                                 else "— (" + pr.get("status", "no probe") + ")" if pr.get("status") != "run"
                                 else "— (failed)")
                elif metric[0] == "probe_ratio":
                    v = r.get("handoff_other_vs_probe")
                    cells.append("—" if v is None else f"{v:.2f}×")
                elif metric[1][0].startswith("handoff_other") and not r["contended"]:
                    cells.append("— (one worker per key)")
                elif metric[1][0] in ("barging", "longest_streak", "handoff_self") and not r["contended"]:
                    cells.append("—")
                else:
                    cells.append(fmt_cell(r, r.get("floor_p50") or floor_p50, metric))
            L.append(f"| {label} | " + " | ".join(cells) + " |")
        L.append("")
        L.append("Per-worker cycles in the window: " + "; ".join(
            f"{w}: " + ", ".join(str(c) for c in results[f"{w}-{mode}"]["per_worker"].values()) for w in wls) + ".")
        L.append("")
    cli = run.get("cli_etcd")
    if cli:
        L.append("## CLI: `dlock run` and `etcdctl lock` (etcd)")
        L.append("")
        if cli.get("status") == "ok":
            L.append(f"`bench/cli_etcd.sh`: whole processes (start, connect, lease, lock, run `true`, unlock, exit) "
                     f"on a private etcd member of its own, the two tools alternating; {cli['rounds']} rounds of "
                     f"{cli['runs']} runs, the mean time per run of each round:")
            L.append("")
            L.append("| tool | per run, each round | best round |")
            L.append("|---|---|---|")
            for tool, label in (("etcdctl", "`etcdctl lock NAME true`"), ("dlock", "`dlock run --url etcd://... NAME -- true`")):
                v = cli["us"].get(tool) or []
                L.append(f"| {label} | " + ", ".join(f"{x / 1000:.1f} ms" for x in v)
                         + f" | {min(v) / 1000:.1f} ms |" if v else f"| {label} | — | — |")
        else:
            L.append(f"{cli.get('status')}.")
        L.append("")
    w5 = [w for w in ("W5-redlock3", "W5-redlock5") if w in results]
    if w5:
        L.append("## W5: Redlock, uncontended, 3 and 5 nodes")
        L.append("")
        L.append("| figure | " + " | ".join(f"{w}: {results[w]['meta']['title']}" for w in w5) + " |")
        L.append("|---|" + "---|" * len(w5))
        for label, metric in ROWS:
            if metric[0] in ("errs", "around") or not metric[1] or metric[1][0] in (
                    "handoff_other", "handoff_self", "barging", "longest_streak", "jain", "held_fraction"):
                continue
            L.append(f"| {label} | " + " | ".join(
                fmt_cell(results[w], results[w].get("floor_p50") or floor_p50, metric) for w in w5) + " |")
        L.append("")
    if hold:
        L.append("## W6: many locks held at once by one process, renewing")
        L.append("")
        L.append("| lock type | servers | locks | lease | hold window | CPU (share of one core) | renewals/s | still "
                 "held (client / server) | RSS before → holding | RSS per lock | acquire all | release all |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for mode, h in hold.items():
            L.append(f"| {mode} | {h.get('servers', 1)} | {h['locks']:,} | {h['lease_ms']} ms | {h['window_s']:.1f} s | "
                     f"{h['cpu_pct_of_core']:.2f} % | {h['renewals_per_s']:,.0f} | "
                     f"{h['still_held']:,} / {h['on_server']:,} | {h['rss_before_kb'] / 1024:.1f} → "
                     f"{h['rss_end_kb'] / 1024:.1f} MiB | {h['rss_per_lock_bytes']:.0f} B | "
                     f"{h['acquire_s']:.2f} s | {h['release_s']:.2f} s |")
        L.append("")
    if spread and spread.get("reported"):
        L.append("## W6 spread: many processes, each holding a few renewing locks")
        L.append("")
        L.append("| processes × locks | lease | still held (client / server) | lost | renewals/s | CPU of all clients "
                 "(share of one core) | busiest client | Redis CPU (middle of the window) | RSS per lock |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        L.append(f"| {spread['processes']} × {spread['locks_each']} | 3000 ms | {spread['still_held']:,} / "
                 f"{spread['on_server']:,} | {spread['lost']} | {spread['renewals_per_s']:,.0f} | "
                 f"{spread['cpu_pct_sum']:.2f} % | {spread['cpu_pct_max']:.3f} % | {spread['server_cpu_pct']:.2f} % | "
                 f"{spread['rss_per_lock_bytes']:.0f} B |")
        L.append("")
    local = sorted((r["floor_p50"], w) for w, r in results.items() if r.get("floor_p50"))
    if local:
        median = local[len(local) // 2][0]
        noisy = [(w, f) for f, w in local if f > 1.5 * median or f < median / 1.5]
        if noisy:
            L.append("## Noise")
            L.append("")
            L.append(f"The PING floor measured before these workloads differs from the run's median ({us(median)}) "
                     "by more than 1.5×, so other load shared the machine while they ran; their ratios (taken "
                     "against their own floor) are more reliable than their absolute times: "
                     + ", ".join(f"{w} ({us(f)})" for w, f in noisy) + ".")
            L.append("")
    L.append("## Plots")
    L.append("")
    for p in pngs:
        L.append(f"![{p}]({os.path.relpath(os.path.join(plots_dir, p), os.path.dirname(os.path.abspath(report_path)))})")
        L.append("")
    if plot_problems:
        L.append("Plot problems: " + "; ".join(plot_problems))
        L.append("")
    if micro:
        L.append("## Micro-benchmarks of the I/O-free core (Google Benchmark)")
        L.append("")
        L.append("| benchmark | time per iteration | vs PING p50 |")
        L.append("|---|---|---|")
        for b in micro.get("benchmarks", []):
            if b.get("run_type") == "aggregate":
                continue
            t = b.get("cpu_time")
            unit = b.get("time_unit", "ns")
            scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}.get(unit, 1)
            ns = t * scale if t is not None else None
            extra = ""
            if b.get("items_per_second"):
                extra = f" ({1e9 / b['items_per_second']:.1f} ns per reply)"
            if ns is None or not floor_p50:
                L.append(f"| {b['name']} | — | — |")
            else:
                L.append(f"| {b['name']} | {ns:,.1f} ns{extra} | {ns / floor_p50 * 100:.2f} % |")
        L.append("")
    L.append("## Not yet available")
    L.append("")
    for item in run.get("pending", []):
        L.append(f"- {item}")
    L.append("")
    if problems:
        L.append("## PROBLEMS")
        L.append("")
        for p in problems:
            L.append(f"- {p}")
        L.append("")
    table = readme_table(run, os.path.basename(os.path.normpath(run_dir)), target_rows, side_rows) if side_rows else None
    if table:
        L.append("## Summary (the README's benchmark table)")
        L.append("")
        L.extend(table)
        L.append("")
    text = "\n".join(L)
    os.makedirs(os.path.dirname(os.path.abspath(report_path)), exist_ok=True)
    with open(report_path, "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(run_dir, "REPORT.md"), "w", encoding="utf-8") as f:
        f.write(text)
    summary = {
        "floor": floor,
        "floor_references": references,
        "floor_end": floor_end,
        "zk_floor": {"runner": zk_info, "records": zk, "ratio_basis_p50": zk_basis if zk else None},
        "etcd_floor": {"runner": etcd_info, "records": etcd, "ratio_basis_p50": etcd_basis if etcd else None},
        "workloads": {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in results.items()},
        "hold_many": hold,
        "targets": [dict(zip(("mode", "target", "measured", "limit", "verdict"), r), floor=floors[(r[0], r[1])])
                    for r in target_rows],
        "problems": problems,
        "side_targets": [dict(zip(("target", "measured", "limit", "verdict", "floor"), r)) for r in side_rows],
        "plots": pngs,
        "readme_table": table,
    }
    with open(os.path.join(run_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    return summary


README_BEGIN = "<!-- bench-table: generated by bench/analyse.py --readme; do not edit by hand -->"
README_END = "<!-- bench-table end -->"


def readme_table(run, run_id, target_rows, side_rows):
    """The README's benchmark table: every side-by-side target of the run (each a ratio to the best
    peer measured in the same run) and the W6 targets, with the run's identity and conditions."""
    L = [f"Run `{run_id}`, command `{run['command']}` (commit "
         f"{run.get('commit', '?')}, {run.get('build', '?')}; {run['machine']}; load average "
         f"{run.get('loadavg_start', '?')} at the start, {run.get('loadavg_end', '?')} at the end; "
         f"medians of {(run.get('side') or {}).get('reps', '?')} repetitions; full tables, profiles and plots in "
         "[bench/results/REPORT.md](bench/results/REPORT.md)):", "",
         "| target | measured (same run) | limit | | floor in this run / why |", "|---|---|---|---|---|"]
    for t in side_rows:
        L.append("| " + " | ".join(t) + " |")
    for mode, desc, measured, limit, verdict in target_rows:
        if desc.startswith("W6"):
            L.append(f"| {desc} ({mode}) | {measured} | {limit} | {verdict} | — |")
    L.append("")
    L.append("Floor: what this run measured that no client can go under, and whether the goal lies under it "
             "(docs/benchmarks.md, \"Floors\"). Wake-ups and context switches per grant, client CPU, server "
             "commands (scripts) and server CPU per grant or lock/unlock pair, of dlock and every peer: REPORT.md, "
             "\"Profile per grant\"" + (f"; in short, {run['side_counts']}." if run.get("side_counts") else "."))
    return L


def splice_readme(readme, table_lines):
    """Replaces the README's generated block (between README_BEGIN and README_END) with the table."""
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    b, e = text.find(README_BEGIN), text.find(README_END)
    if b < 0 or e < b:
        raise SystemExit(f"{readme}: no generated block ({README_BEGIN} ... {README_END})")
    text = text[:b + len(README_BEGIN)] + "\n" + "\n".join(table_lines) + "\n" + text[e:]
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--report", help="markdown output (default RUN/../../REPORT.md)")
    ap.add_argument("--plots", help="PNG directory (default: the report's directory)")
    ap.add_argument("--readme", help="also write the side-by-side summary table into this README's generated "
                    "block (a side-by-side run only)")
    a = ap.parse_args(argv)
    report_path = a.report or os.path.join(a.run_dir, "..", "..", "REPORT.md")
    plots = a.plots or os.path.dirname(os.path.abspath(report_path))
    s = report(a.run_dir, plots, report_path)
    if a.readme:
        if not s.get("readme_table"):
            print(f"--readme: {a.run_dir} has no side-by-side figures", file=sys.stderr)
            return 1
        splice_readme(a.readme, s["readme_table"])
    for t in s["targets"]:
        print(f"{t['mode']:8} {t['target']:55} {t['measured']:28} {t['limit']:8} {t['verdict']}")
    for p in s["problems"]:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if s["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
