#!/usr/bin/env python3
"""CPU backend speed (issue 16): prefill and decode tok/s of `gridq generate` on the CPU.

Every (model, --cpu-kernels, --threads) cell runs once per repetition, the cells interleaved so a noisy
neighbour hits them alike; the table gives the median of the repetitions. The prompt is the first 1,560
bytes of data/code-eval.txt (514 tokens), greedy, 256 new tokens, OMP_WAIT_POLICY unset.

  python3 bench/cpu_speed.py --model models/laguna-tiny-code --model build/demo/laguna-tiny-code-gridbook \
      --reps 5 --out bench/results/cpu-speed.json

A second --bin (an older build, say) joins the interleaving, so a before/after pair shares the same noise.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

LINE = re.compile(r"prefill ([0-9.]+) tok/s \| generated (\d+) tok, decode ([0-9.]+) tok/s")


def run(binary, model, kernels, threads, prompt, max_tokens, extra):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    cmd = [binary, "generate", model, "--prompt", prompt, "--max-tokens", str(max_tokens), "--temperature", "0",
           "--device", "cpu", "--threads", str(threads), "--cpu-kernels", kernels] + extra
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    m = LINE.search(p.stderr)
    if not m:
        raise RuntimeError(f"no speed line in the output of {' '.join(cmd)}:\n{p.stderr}")
    return float(m.group(1)), float(m.group(3)), p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="model or artifact directory (repeatable)")
    ap.add_argument("--kernels", default="reference,bf16", help="--cpu-kernels values (comma separated)")
    ap.add_argument("--threads", default="1,2", help="thread counts (comma separated)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--bin", action="append", help="gridq binary (repeatable; default build/gridq)")
    ap.add_argument("--extra", default="", help="more arguments for every run (e.g. '--cpu-weights mmap')")
    ap.add_argument("--text", default="data/code-eval.txt")
    ap.add_argument("--out", help="JSON file to write (the table is printed either way)")
    a = ap.parse_args()
    with open(a.text, "rb") as f:
        prompt = f.read(1560).decode("utf-8", errors="ignore")
    bins = a.bin or ["build/gridq"]
    extra = a.extra.split()
    cells = [(b, m, k, int(t)) for b in bins for m in a.model for k in a.kernels.split(",")
             for t in a.threads.split(",")]
    samples = {c: [] for c in cells}
    texts = {}
    for rep in range(a.reps):
        for c in cells:
            pre, dec, text = run(c[0], c[1], c[2], c[3], prompt, a.max_tokens, extra)
            samples[c].append((pre, dec))
            texts.setdefault((c[0], c[1], c[2]), set()).add(text)
            print(f"rep {rep} {c[0]} {c[1]} {c[2]} t{c[3]}: prefill {pre:.1f} decode {dec:.1f}", file=sys.stderr)
    rows = []
    for c in cells:
        pre = statistics.median(s[0] for s in samples[c])
        dec = statistics.median(s[1] for s in samples[c])
        rows.append({"bin": c[0], "model": c[1], "cpu_kernels": c[2], "threads": c[3], "prefill_tok_s": round(pre, 1),
                     "decode_tok_s": round(dec, 1), "samples": samples[c]})
    print("| bin | model | kernels | threads | prefill tok/s | decode tok/s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['bin']} | {r['model']} | {r['cpu_kernels']} | {r['threads']} | {r['prefill_tok_s']:,.0f} | "
              f"{r['decode_tok_s']:,.0f} |")
    # Greedy text must not depend on the thread count (the same kernels, the same bits).
    same = {f"{b} {m} {k}": len(t) == 1 for (b, m, k), t in texts.items()}
    print("greedy text identical across threads and repetitions:", same)
    if a.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        cpu = ""
        if os.path.exists("/proc/cpuinfo"):
            with open("/proc/cpuinfo") as f:
                cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
        with open(a.out, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
                       "machine": f"{platform.node()} {cpu}, {os.cpu_count()} CPUs", "reps": a.reps,
                       "max_tokens": a.max_tokens, "extra": a.extra, "greedy_identical_across_threads": same, "rows": rows},
                      f, indent=1)
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
