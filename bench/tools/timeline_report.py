#!/usr/bin/env python3
"""Per-kernel report of a CUPTI kernel timeline (bench/tools/kernel_timeline.cpp's CSV).

For every CUDA graph in the file: its replays (a replay ends where a node id repeats), the median replay's
wall time, the time some kernel was running (busy) and none was (idle), and kernels grouped by name. With
--detail N the median replay of the N-th largest graph is listed kernel by kernel (start offset, duration,
gap after the previous kernel of its stream: negative = overlapped under programmatic dependent launch).

Kernels outside graphs (a prefill: `bench prefill` runs eagerly) are reported with --outside MARKER: the
eager kernels are cut into runs at each kernel whose name contains MARKER (`embed_kernel` starts every forward
step), and the first --runs of them (e.g. the 4 steps of 2048 rows of an 8k prompt) are reported together.

  python3 bench/tools/timeline_report.py k.csv [--detail 1] [--json out.json]
  python3 bench/tools/timeline_report.py prefill.csv --outside embed_kernel --runs 4
  python3 bench/tools/timeline_report.py k.csv --api k.api.csv   # kernel_timeline.cpp's GRIDQ_TIMELINE_API file

With --api, the time between consecutive replays of the largest graph (the host's share of a decode step) is
broken down: the copies in it and the host's CUDA runtime calls, clipped to the gap and
summed by name; and for each replay, how long after its cudaGraphLaunch call its first kernel started.
"""
import argparse
import bisect
import csv
import json
import re
import statistics
import sys


def strip_params(name: str) -> str:
    """The name without its final top-level parameter list (the one that closes the name)."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name


def short(name: str) -> str:
    n = strip_params(name)
    n = re.sub(r"^void ", "", n)
    n = n.replace("gridq::cuda::detail::", "").replace("gridq::cuda::", "")
    n = re.sub(r"\(anonymous namespace\)::", "", n)
    return n if len(n) <= 90 else n[:87] + "..."


def exposed(ks):
    """Per kernel, how far it pushed the end of the work done so far (all streams), idle time before it
    included: what it added to the replay's wall time. A kernel that ends under another's shadow (PDL overlap,
    the side stream) adds 0; the values sum to the wall."""
    ks = sorted(ks, key=lambda k: k["start"])
    out, front = [], ks[0]["start"] if ks else 0
    for k in ks:
        out.append((k, max(0, k["end"] - front)))
        front = max(front, k["end"])
    return out


def busy_idle(ks):
    iv = sorted((k["start"], k["end"]) for k in ks)
    busy, cur_s, cur_e = 0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    wall = max(k["end"] for k in ks) - min(k["start"] for k in ks)
    return wall, busy


def replays_of(ks):
    ks = sorted(ks, key=lambda k: k["start"])
    out, cur, seen = [], [], set()
    for k in ks:
        if k["node"] in seen:
            out.append(cur)
            cur, seen = [], set()
        cur.append(k)
        seen.add(k["node"])
    if cur:
        out.append(cur)
    n = max(len(r) for r in out)
    return [r for r in out if len(r) == n]  # whole replays only


def by_kernel(ks):
    """name -> [launches, summed duration us, exposed us] over the kernels ks."""
    by = {}
    for k, x in exposed(ks):
        d = by.setdefault(k["name"], [0, 0.0, 0.0])
        d[0] += 1
        d[1] += (k["end"] - k["start"]) / 1e3
        d[2] += x / 1e3
    return by


def print_by_kernel(by, wall, top):
    print(f"  {'count':>5} {'total us':>9} {'mean us':>8} {'exposed':>8} {'% wall':>6}  kernel")
    for name, (c, t, x) in sorted(by.items(), key=lambda x: -x[1][2])[:top]:
        print(f"  {c:5d} {t:9.1f} {t / c:8.2f} {x:8.1f} {100 * x * 1e3 / wall:6.1f}  {name}")


def by_kernel_json(by):
    return {n: {"count": c, "total_us": t, "exposed_us": x} for n, (c, t, x) in by.items()}


def report_outside(rows, marker, runs, top):
    """The eager kernels from the first `marker` kernel on, cut into runs at each `marker` kernel; the first
    `runs` runs (0: all) reported together with exposed() over their union."""
    eager = sorted((r for r in rows if not r["graph"]), key=lambda r: r["start"])
    starts = [i for i, r in enumerate(eager) if marker in r["name"]]
    if not starts:
        sys.exit(f"no eager kernel named like {marker!r}")
    cuts = starts + [len(eager)]
    n = len(starts) if runs <= 0 else min(runs, len(starts))
    ks = eager[starts[0]:cuts[n]]
    wall, busy = busy_idle(ks)
    by = by_kernel(ks)
    print(f"\n== eager runs 1-{n} of {len(starts)} (cut at {marker}): {len(ks)} kernels, wall {wall / 1e3:.1f} us, "
          f"busy {busy / 1e3:.1f}, idle {(wall - busy) / 1e3:.1f} us")
    for i in range(n):
        seg = eager[cuts[i]:cuts[i + 1]]
        print(f"  run {i + 1}: {len(seg)} kernels, wall {busy_idle(seg)[0] / 1e3:.1f} us")
    print_by_kernel(by, wall, top)
    return {"eager_runs": n, "marker": marker, "kernels": len(ks), "wall_us": wall / 1e3, "busy_us": busy / 1e3,
            "by_kernel": by_kernel_json(by)}


def report_gaps(reps, api_csv, top):
    """The gaps between consecutive replays (whole ones, in time order) of one graph, and what the host and
    the GPU did in them (see the module doc)."""
    recs = []
    with open(api_csv, newline="") as f:
        for r in csv.DictReader(f):
            recs.append((r["kind"], int(r["start_ns"]), int(r["end_ns"]), r["name"], int(r["bytes"])))
    spans = sorted((min(k["start"] for k in r), max(k["end"] for k in r)) for r in reps)
    launches = sorted(s for kind, s, _, name, _ in recs if kind == "api" and name.startswith("cudaGraphLaunch"))
    gaps, by = [], {}
    for (s0, e0), (s1, _) in zip(spans, spans[1:]):
        gaps.append(s1 - e0)
        for kind, s, e, name, nbytes in recs:
            lo, hi = max(s, e0), min(e, s1)
            if hi <= lo:
                continue
            key = f"{kind} {name}" + (f" ({nbytes} B)" if kind == "memcpy" else "")
            d = by.setdefault(key, [0, 0.0])
            d[0] += 1
            d[1] += (hi - lo) / 1e3
    lat = []  # each replay's first kernel after the last cudaGraphLaunch call before it
    for s0, _ in spans:
        i = bisect.bisect_right(launches, s0)
        if i:
            lat.append((s0 - launches[i - 1]) / 1e3)
    n = max(1, len(gaps))
    print(f"\n== between replays: {len(gaps)} gaps, median {statistics.median(gaps) / 1e3 if gaps else 0:.1f} us "
          f"(min {min(gaps, default=0) / 1e3:.1f}, max {max(gaps, default=0) / 1e3:.1f}); cudaGraphLaunch call to "
          f"first kernel: median {statistics.median(lat) if lat else 0:.1f} us")
    print(f"  {'count/gap':>9} {'us/gap':>8}  host call or GPU work inside the gaps (clipped)")
    for key, (c, t) in sorted(by.items(), key=lambda x: -x[1][1])[:top]:
        print(f"  {c / n:9.2f} {t / n:8.1f}  {key}")
    return {"gaps_us": [g / 1e3 for g in gaps], "launch_to_first_kernel_us": lat,
            "in_gaps": {k: {"count": c, "us": t} for k, (c, t) in by.items()}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--detail", type=int, default=0, help="list the median replay of the N-th largest graph")
    ap.add_argument("--top", type=int, default=25, help="kernel names shown per graph")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--outside", help="report the kernels outside graphs, cut into runs at this kernel name")
    ap.add_argument("--api", help="kernel_timeline.cpp's GRIDQ_TIMELINE_API file: what fills the gaps between "
                    "the largest graph's replays")
    ap.add_argument("--runs", type=int, default=0, help="with --outside: the first N runs (0: all)")
    a = ap.parse_args()
    rows = []
    with open(a.csv, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({"start": int(r["start_ns"]), "end": int(r["end_ns"]), "stream": int(r["stream"]),
                         "graph": int(r["graph"]), "node": int(r["node"]), "grid": int(r["grid"]),
                         "block": int(r["block"]), "smem": int(r["smem"]), "regs": int(r["regs"]),
                         "name": short(r["name"])})
    if not rows:
        sys.exit("no kernels in " + a.csv)
    graphs = {}
    for r in rows:
        if r["graph"]:
            graphs.setdefault(r["graph"], []).append(r)
    print(f"{len(rows)} kernels, {len(rows) - sum(len(v) for v in graphs.values())} outside graphs, "
          f"{len(graphs)} graphs")
    summary = []
    order = sorted(graphs, key=lambda g: -len(replays_of(graphs[g])[0]))
    for gi, g in enumerate(order, 1):
        reps = replays_of(graphs[g])
        walls = [busy_idle(r) for r in reps]
        med = sorted(range(len(reps)), key=lambda i: walls[i][0])[len(reps) // 2]
        rep, (wall, busy) = reps[med], walls[med]
        by = by_kernel(rep)
        print(f"\n== graph {gi} (id {g}): {len(rep)} kernels, {len(reps)} replays; median replay wall "
              f"{wall / 1e3:.1f} us (min {min(w for w, _ in walls) / 1e3:.1f}), busy {busy / 1e3:.1f}, "
              f"idle {(wall - busy) / 1e3:.1f} us, sum of kernel durations "
              f"{sum(k['end'] - k['start'] for k in rep) / 1e3:.1f} us, streams "
              f"{sorted(set(k['stream'] for k in rep))}")
        # "exposed": the wall time the kernels added (exposed() above)
        print_by_kernel(by, wall, a.top)
        summary.append({"graph": g, "kernels": len(rep), "replays": len(reps), "wall_us": wall / 1e3,
                        "busy_us": busy / 1e3, "by_kernel": by_kernel_json(by)})
        if gi == a.detail:
            t0 = min(k["start"] for k in rep)
            last_end = {}
            print(f"\n  {'#':>4} {'start':>8} {'dur':>7} {'expo':>6} {'gap':>6} {'strm':>4} {'grid':>5} "
                  f"{'blk':>4} {'smem':>6} {'regs':>4}  kernel")
            for i, (k, x) in enumerate(exposed(rep)):
                gap = (k["start"] - last_end[k["stream"]]) / 1e3 if k["stream"] in last_end else 0.0
                last_end[k["stream"]] = k["end"]
                print(f"  {i:4d} {(k['start'] - t0) / 1e3:8.2f} {(k['end'] - k['start']) / 1e3:7.2f} "
                      f"{x / 1e3:6.2f} {gap:6.2f} {k['stream']:4d} {k['grid']:5d} {k['block']:4d} "
                      f"{k['smem']:6d} {k['regs']:4d}  {k['name']}")
    if a.api and order:
        summary.append(report_gaps(replays_of(graphs[order[0]]), a.api, a.top))
    if a.outside:
        summary.append(report_outside(rows, a.outside, a.runs, a.top))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
