#!/usr/bin/env python3
"""The cells of `gridq bench decode` JSON files, one line each: an A/B at a glance.

Reads JSON files, folders of them, or .tar.xz archives holding them (bench/gpu_engine_step.sh returns one per
invocation; step "benchab" names its files ab_SIDE_ROUND.json: SIDE is new, base or var_N). For every cell:
batch, context, ms a step, tok/s of the logits pass and of the sampled pass, the logits hash and the argmax
check of the sampled pass (None when the pass was not greedy). With --by-side, the sampled tok/s of each side
is listed per cell across rounds, and the hashes that differ from side `new`'s are marked.

  python3 bench/tools/ab_summary.py /work/.device/12/*.tar.xz
  python3 bench/tools/ab_summary.py results_folder --by-side
"""
import argparse
import json
import os
import re
import sys
import tarfile


def load(paths):
    """(name, dict) for every bench JSON found, in name order."""
    out = []
    for p in paths:
        if p.endswith(".tar.xz") or p.endswith(".tar"):
            with tarfile.open(p) as t:
                for m in t.getmembers():
                    if m.isfile() and m.name.endswith(".json"):
                        out.append((f"{os.path.basename(p)}:{m.name}", json.load(t.extractfile(m))))
        elif os.path.isdir(p):
            for root, _, files in os.walk(p):
                for f in files:
                    if f.endswith(".json"):
                        with open(os.path.join(root, f)) as fh:
                            out.append((os.path.join(root, f), json.load(fh)))
        else:
            with open(p) as fh:
                out.append((p, json.load(fh)))
    return sorted((n, d) for n, d in out if isinstance(d, dict) and "cells" in d)


def side_of(name):
    m = re.search(r"ab_(new|base|var_\d+)_(\d+)\.json$", name)
    return (m.group(1), int(m.group(2))) if m else (name, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--by-side", action="store_true", help="sampled tok/s per side and cell across rounds")
    a = ap.parse_args()
    runs = load(a.paths)
    if not runs:
        print("no bench decode JSON found", file=sys.stderr)
        return 1
    if not a.by_side:
        for name, d in runs:
            print(f"== {name} ({d.get('gpu', '?')}, copy {d.get('copy_gbs', 0):.0f} GB/s)")
            for c in d["cells"]:
                print(f"  b{c['batch']:<4} ctx {c['context']:<6} {c['ms_per_step']:8.3f} ms  "
                      f"{c['tok_s']:9.1f} tok/s  smp {c.get('tok_s_sampled') or 0:9.1f}  "
                      f"{c.get('logits_fnv1a')}  argmax {c.get('sampled_is_logits_argmax')}")
        return 0
    # One table per invocation (the folder holding its ab_*.json: var_N names differ between invocations):
    # side -> (batch, context) -> [(round, tok/s sampled, hash)].
    groups = {}
    for name, d in runs:
        side, rnd = side_of(name)
        g = groups.setdefault(os.path.dirname(name), ({}, {}, d.get("options", {}).get("sampling")))
        for c in d["cells"]:
            key = (c["batch"], c["context"])
            g[0].setdefault(side, {}).setdefault(key, []).append(
                (rnd, c.get("tok_s_sampled") or 0.0, c.get("logits_fnv1a")))
            if side == "new":
                g[1].setdefault(key, c.get("logits_fnv1a"))
    for gname, (table, ref, sampling) in sorted(groups.items()):
        print(f"== {gname}" + (f" (sampling {json.dumps(sampling)})" if sampling else ""))
        for side in sorted(table):
            for key in sorted(table[side]):
                vals = sorted(table[side][key])
                hashes = {h for _, _, h in vals}
                mark = "" if key not in ref or hashes == {ref[key]} else "  (hash differs from new)"
                tok = " / ".join(f"{v:.1f}" for _, v, _ in vals)
                print(f"  {side:8} b{key[0]:<4} ctx {key[1]:<6} smp {tok}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
