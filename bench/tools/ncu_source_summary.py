#!/usr/bin/env python3
"""Where a kernel's instructions and stall samples go, from an ncu SASS source page.

    ncu_source_summary.py NCU_SOURCE.csv[.xz] [--units N] [--top K] [--show A-B]

NCU_SOURCE.csv is `ncu -i REP --page source --csv --print-source sass -k KERNEL` (bench/gpu_engine.sh step
"ncu" writes it as ncu_source.csv.xz). Prints the executed warp-instructions and the stall samples of the first
kernel in the file, grouped into runs of consecutive instructions with the same execution count (a run is a
basic block or several: its count says how often it ran: once per warp, per item, per unit, ...). With
--units N (the weight units the launch decoded, e.g. 15,360 for a batch-1 gate_up) it also prints the
instructions per unit. --show A-B lists the instructions of lines A..B with their counts and samples.
"""
import csv
import io
import lzma
import sys


def rows_of(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", newline="") as f:
        text = f.read()
    r = csv.reader(io.StringIO(text))
    next(r)  # "Kernel Name", ...
    hdr = next(r)
    out = []
    for row in r:
        if len(row) < len(hdr) or not row[0].startswith("0x"):
            break  # the next kernel (or the end)
        out.append(row)
    return hdr, out


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) > 1 else 2
    hdr, rows = rows_of(argv[1])
    ie = hdr.index("Instructions Executed")
    iss = hdr.index("Warp Stall Sampling (All Samples)")
    units = int(argv[argv.index("--units") + 1]) if "--units" in argv else 0
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 20
    execd = [int(x[ie] or 0) for x in rows]
    samples = [int(x[iss] or 0) for x in rows]
    total, stot = sum(execd), sum(samples)
    print(f"{len(rows)} SASS instructions, {total:,} warp-instructions executed, {stot:,} stall samples")
    if units:
        print(f"{total / units:.1f} warp-instructions a unit ({units:,} units)")
    runs, start = [], 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or execd[i] != execd[start]:
            runs.append((start, i - 1, execd[start], sum(execd[start:i]), sum(samples[start:i])))
            start = i
    runs = [r for r in runs if r[2] > 0]
    print(f"\n{'lines':>11} {'count':>9} {'instr':>6} {'executed':>12} {'%':>6} {'samples':>8} {'%':>6}")
    for a, b, n, ex, sm in sorted(runs, key=lambda r: -r[3])[:top]:
        print(f"{a:>5}-{b:<5} {n:>9,} {b - a + 1:>6} {ex:>12,} {100 * ex / total:>5.1f}% {sm:>8,} "
              f"{100 * sm / max(stot, 1):>5.1f}%")
    by_count = {}
    for a, b, n, ex, sm in runs:
        by_count.setdefault(n, [0, 0, 0])
        by_count[n][0] += b - a + 1
        by_count[n][1] += ex
        by_count[n][2] += sm
    print(f"\n{'count':>9} {'instr':>6} {'executed':>12} {'samples':>8}   (instructions grouped by how often they ran)")
    for n, (k, ex, sm) in sorted(by_count.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{n:>9,} {k:>6} {ex:>12,} {sm:>8,}")
    if "--show" in argv:
        a, b = (int(v) for v in argv[argv.index("--show") + 1].split("-"))
        print()
        for i in range(max(a, 0), min(b, len(rows) - 1) + 1):
            print(f"{i:>5} {execd[i]:>9,} {samples[i]:>5}  {rows[i][1].strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
