"""Statistics and the printed table of bench/loadgen.py.

Definitions (those of vLLM's benchmark_serving.py where it has one):
- wall time: from the first measured request's send to the last one's end (warmup excluded);
- output tok/s: output tokens of the successful requests / wall time; total tok/s adds their prompt tokens (from
  the server's usage); `mid-80 %` is the output rate over the middle 80 % of output chunks in time, which leaves
  out the ramp-up of the first wave and the drain of the last one;
- TTFT: send → first output chunk; ITL: gaps between consecutive output chunks, pooled over all requests;
  TPOT: per request (e2e − TTFT) / (output tokens − 1); e2e: send → end of stream.
Percentiles interpolate linearly between order statistics (numpy's default).
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess


def percentile(xs, q):
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def dist_ms(xs, qs=(50, 90, 99)):
    if not xs:
        return None
    out = {f"p{q}": percentile(xs, q) * 1e3 for q in qs}
    out["mean"] = sum(xs) / len(xs) * 1e3
    out["min"], out["max"] = min(xs) * 1e3, max(xs) * 1e3
    out["n"] = len(xs)
    return out


def mid80_rate(results):
    """Output tokens per second over the middle 80 % of output chunks in time (each chunk weighted by its
    request's tokens per chunk)."""
    pts = []
    for r in results:
        if r.chunks:
            w = r.output_tokens / r.chunks
            pts.extend((t, w) for t in r.chunk_times)
    if len(pts) < 10:
        return None
    pts.sort()
    total = sum(w for _, w in pts)
    acc, t10, t90, tok = 0.0, None, None, 0.0
    for t, w in pts:
        acc += w
        if t10 is None and acc >= 0.1 * total:
            t10 = t
        if t10 is not None and t90 is None:
            tok += w
        if t90 is None and acc >= 0.9 * total:
            t90 = t
    return tok / (t90 - t10) if t90 and t90 > t10 else None


def summarize(results, wall, label=None):
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok and not r.cancelled]
    out_tok = sum(r.output_tokens for r in ok)
    prompt_tok = sum(r.prompt_tokens for r in ok)
    chunks = sum(r.chunks for r in ok)
    itl = [g for r in ok for g in r.itls()]
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.ttft is not None and r.output_tokens > 1]
    s = {
        "requests": {"ok": len(ok), "failed": len(failed), "cancelled": sum(r.cancelled for r in results)},
        "wall_s": wall,
        "output_tokens": out_tok,
        "prompt_tokens": prompt_tok,
        "mean_prompt_tokens": prompt_tok / len(ok) if ok else None,
        "output_tok_s": out_tok / wall if wall > 0 else None,
        "total_tok_s": (out_tok + prompt_tok) / wall if wall > 0 else None,
        "output_tok_s_mid80": mid80_rate(ok),
        "requests_per_s": len(ok) / wall if wall > 0 else None,
        "output_chunks": chunks,
        "tokens_per_chunk": out_tok / chunks if chunks else None,
        "token_count_source": ("usage" if all(r.usage for r in ok) else "chunks (no usage from the server)")
        if ok else None,
        "ttft_ms": dist_ms([r.ttft for r in ok if r.ttft is not None]),
        "itl_ms": dist_ms(itl),
        "tpot_ms": dist_ms(tpot),
        "e2e_ms": dist_ms([r.e2e for r in ok]),
        "errors": first_errors(failed),
    }
    if label:
        s["label"] = label
    return s


def first_errors(failed, n=5):
    seen, out = {}, []
    for r in failed:
        seen[r.error] = seen.get(r.error, 0) + 1
    for err, count in list(seen.items())[:n]:
        out.append({"error": err, "count": count})
    return out


def by_turn(results, turn_metrics=None):
    turns = sorted({r.tag.get("turn") for r in results if r.tag.get("turn") is not None})
    rows = []
    for t in turns:
        rs = [r for r in results if r.tag.get("turn") == t]
        ok = [r for r in rs if r.ok]
        row = {"turn": t + 1, "ok": len(ok), "failed": sum(1 for r in rs if not r.ok and not r.cancelled),
               "mean_prompt_tokens": sum(r.prompt_tokens for r in ok) / len(ok) if ok else None,
               "ttft_ms": dist_ms([r.ttft for r in ok if r.ttft is not None]),
               "e2e_ms": dist_ms([r.e2e for r in ok])}
        if turn_metrics and t < len(turn_metrics) and turn_metrics[t]:
            row["prefix_cache_hit_rate"] = turn_metrics[t].get("prefix_cache_hit_rate")
            row["prefix_cache_hits"] = turn_metrics[t].get("prefix_cache_hits")
            row["prefix_cache_queries"] = turn_metrics[t].get("prefix_cache_queries")
            row["prefix_cache_recomputed_tokens"] = turn_metrics[t].get("prefix_cache_recomputed_tokens")
        rows.append(row)
    return rows


def _f(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)


def format_table(rep) -> str:
    s, cfg, meta = rep["summary"], rep["config"], rep["meta"]
    lines = []
    srv = meta.get("server") or {}
    lines.append(f"gridq loadgen  {meta.get('date')}  {srv.get('base_url')}  model {srv.get('model')}  "
                 f"server {srv.get('version')}")
    shape = (f"workload {cfg['workload']} via {cfg['endpoint']}: concurrency {cfg['concurrency']}, "
             f"output tokens {cfg['output_tokens']}")
    if cfg["workload"] == "random":
        shape += f", prompt tokens {cfg['prompt_tokens']}"
    else:
        shape += (f", system prompt {cfg.get('system_prompt_tokens_measured') or cfg['system_tokens']} tokens "
                  f"+ {len(cfg.get('tools') or [])} tools, {cfg['users']} users x {cfg['turns']} turns, "
                  f"user messages ~{cfg['user_tokens']} tokens")
    lines.append(shape)
    cc = srv.get("cache_config") or {}
    if cc:
        lines.append("server cache: " + ", ".join(f"{k}={v}" for k, v in cc.items() if k != "model_name"))
    if rep.get("interrupted"):
        lines.append("INTERRUPTED: partial results")
    rq = s["requests"]
    lines.append("")
    lines.append(f"  requests ok / failed / cancelled   {rq['ok']} / {rq['failed']} / {rq['cancelled']}"
                 f"   (warmup {rep.get('warmup', {}).get('ok', 0)} not counted)")
    lines.append(f"  wall time                          {_f(s['wall_s'], '{:.2f}')} s")
    lines.append(f"  output tokens                      {s['output_tokens']}  (counted from "
                 f"{s['token_count_source']}; {_f(s['tokens_per_chunk'], '{:.3f}')} tokens per chunk)")
    lines.append(f"  prompt tokens                      {s['prompt_tokens']}  "
                 f"(mean {_f(s['mean_prompt_tokens'])} per request)")
    lines.append(f"  output tok/s                       {_f(s['output_tok_s'])}   "
                 f"(mid-80 %: {_f(s['output_tok_s_mid80'])})")
    lines.append(f"  total tok/s                        {_f(s['total_tok_s'])}")
    lines.append(f"  requests/s                         {_f(s['requests_per_s'], '{:.3f}')}")
    lines.append("")
    lines.append(f"  {'ms':<8}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}{'max':>10}")
    for key, name in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("tpot_ms", "TPOT"), ("e2e_ms", "e2e")):
        d = s.get(key)
        if d:
            lines.append(f"  {name:<8}" + "".join(f"{_f(d[k], '{:.2f}'):>10}" for k in
                                                  ("p50", "p90", "p99", "mean", "max")))
    m = rep.get("server_metrics")
    if m:
        lines.append("")
        hr = m.get("prefix_cache_hit_rate")
        lines.append(f"  server /metrics delta: prefix cache hit rate {_f(hr and hr * 100, '{:.1f}')} % "
                     f"({_f(m.get('prefix_cache_hits'), '{:.0f}')} / {_f(m.get('prefix_cache_queries'), '{:.0f}')}"
                     f" tokens; recomputed {_f(m.get('prefix_cache_recomputed_tokens'), '{:.0f}')}), "
                     f"generation tokens {_f(m.get('generation_tokens'), '{:.0f}')}, "
                     f"preemptions {_f(m.get('num_preemptions'), '{:.0f}')}")
        st, fw = m.get("decode_step_s_mean"), m.get("decode_forward_s_mean")
        if st is not None and fw is not None:
            lines.append(f"  decode-only steps: {_f(m.get('decode_step_s_count'), '{:.0f}')}, mean "
                         f"{_f(st * 1e3, '{:.2f}')} ms, forward + sampling {_f(fw * 1e3, '{:.2f}')} ms, scheduler "
                         f"{_f((st - fw) * 1e3, '{:.2f}')} ms; tokens a step (all steps) "
                         f"{_f(m.get('step_tokens_mean'), '{:.1f}')}")
    if rep.get("by_turn"):
        lines.append("")
        # recomputed: hit tokens computed again anyway (sliding-window rings without a snapshot; docs/serving.md)
        lines.append(f"  {'turn':<6}{'ok':>5}{'prompt tok':>12}{'TTFT p50':>10}{'p90':>9}{'mean':>9}{'hit %':>8}"
                     f"{'recomputed':>12}")
        for row in rep["by_turn"]:
            t = row["ttft_ms"] or {}
            hr = row.get("prefix_cache_hit_rate")
            lines.append(f"  {row['turn']:<6}{row['ok']:>5}{_f(row['mean_prompt_tokens']):>12}"
                         f"{_f(t.get('p50'), '{:.1f}'):>10}{_f(t.get('p90'), '{:.1f}'):>9}"
                         f"{_f(t.get('mean'), '{:.1f}'):>9}{_f(hr and hr * 100, '{:.1f}'):>8}"
                         f"{_f(row.get('prefix_cache_recomputed_tokens'), '{:.0f}'):>12}")
        if not any("prefix_cache_hit_rate" in r for r in rep["by_turn"]):
            lines.append("  (hit rate by turn needs --sync-turns: turns overlap across users otherwise)")
    cpu = rep.get("client", {}).get("cpu_frac")
    if cpu is not None and cpu > 0.85:
        lines.append(f"\n  WARNING: the client used {cpu * 100:.0f} % of a core: it may be the bottleneck")
    if s["errors"]:
        lines.append("")
        lines.append("  first errors:")
        for e in s["errors"]:
            lines.append(f"    {e['count']} x {e['error']}")
    return "\n".join(lines)


# ---- what the report records about the run ----

def machine_info():
    info = {"hostname": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "python": platform.python_version()}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            info["gpus"] = [g.strip() for g in out.stdout.strip().splitlines()]
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def git_commit():
    try:
        out = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def masked_command(argv):
    out, hide = [], False
    for x in argv:
        if hide:
            out.append("***")
            hide = False
        elif x == "--api-key":
            out.append(x)
            hide = True
        elif x.startswith("--api-key="):
            out.append("--api-key=***")
        else:
            out.append(x)
    return shlex.join(out)
