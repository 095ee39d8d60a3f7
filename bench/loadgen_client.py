"""The HTTP side of bench/loadgen.py: one streamed request timed chunk by chunk, and what the load generator asks
of the server before and after a run (/v1/models, /version, the vocabulary size, /tokenize, /metrics).

Token counting. Every request streams (SSE) with `stream_options: {"include_usage": true}`; the server's last chunk
carries `usage.completion_tokens`, the exact number of tokens generated, which is what the report counts. Timing
comes from the chunks: TTFT is the time from sending the request to the first chunk that carries output (text,
reasoning or a tool-call part; the chat role chunk that gridq sends before the prefill is not output), and the
inter-token latencies are the gaps between consecutive output chunks (as vLLM's benchmark_serving.py counts them).
gridq sends one chunk per token except where text is held back (a partial UTF-8 code point, the possible start of
a tag); the report shows tokens per chunk so that is visible. A server that sends no usage falls back to counting
output chunks, and the report says so (`token_count_source`).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

import httpx


@dataclass(eq=False)
class Result:
    ok: bool = False
    error: str | None = None
    start: float = 0.0          # perf_counter when the request was sent
    ttft: float | None = None   # seconds to the first output chunk
    e2e: float = 0.0            # seconds to the end of the stream
    chunk_times: list = field(default_factory=list)  # perf_counter of each output chunk
    output_tokens: int = 0
    prompt_tokens: int = 0
    usage: bool = False         # output_tokens came from the server's usage chunk
    finish_reason: str | None = None
    text: str = ""
    reasoning: str = ""
    tool_calls: list = field(default_factory=list)
    cancelled: bool = False
    tag: dict = field(default_factory=dict)  # workload labels: user, turn

    @property
    def chunks(self):
        return len(self.chunk_times)

    def itls(self):
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:])]


def _delta_output(obj, chat, res):
    """Appends the output a chunk carries to res; True when there was any."""
    got = False
    for ch in obj.get("choices") or []:
        if ch.get("finish_reason"):
            res.finish_reason = ch["finish_reason"]
        if not chat:
            if ch.get("text"):
                res.text += ch["text"]
                got = True
            continue
        d = ch.get("delta") or {}
        if d.get("content"):
            res.text += d["content"]
            got = True
        r = d.get("reasoning_content") or d.get("reasoning")
        if r:
            res.reasoning += r
            got = True
        for tc in d.get("tool_calls") or []:
            got = True
            i = tc.get("index", 0)
            while len(res.tool_calls) <= i:
                res.tool_calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
            call, fn = res.tool_calls[i], tc.get("function") or {}
            if tc.get("id"):
                call["id"] = tc["id"]
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""
    return got


async def stream_request(client: httpx.AsyncClient, path: str, body: dict, expect_tokens: int | None,
                         keep_text: bool = False, tag: dict | None = None, res: Result | None = None) -> Result:
    """POSTs body (stream forced on) and times the SSE stream. A request fails on a non-200 status, an error event,
    a stream without [DONE], a transport error, or (when expect_tokens is set) a different number of output
    tokens than asked for. res: the Result to fill (the caller may watch it while in flight)."""
    chat = path.endswith("chat/completions")
    res = res if res is not None else Result(tag=tag or {})
    res.start = time.perf_counter()
    done = False
    try:
        async with client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                raw = (await r.aread()).decode(errors="replace")
                res.error = f"HTTP {r.status_code}: {raw[:400]}"
                res.e2e = time.perf_counter() - res.start
                return res
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, ": ping" comments, event:/id: fields
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                now = time.perf_counter()
                obj = json.loads(data)
                if "error" in obj:
                    res.error = "stream error event: " + json.dumps(obj["error"])[:400]
                    break
                if _delta_output(obj, chat, res):
                    if res.ttft is None:
                        res.ttft = now - res.start
                    res.chunk_times.append(now)
                u = obj.get("usage")
                if u:
                    res.usage = True
                    res.output_tokens = int(u.get("completion_tokens") or 0)
                    res.prompt_tokens = int(u.get("prompt_tokens") or 0)
    except httpx.HTTPError as e:
        res.error = f"{type(e).__name__}: {e}"[:400]
    except json.JSONDecodeError as e:
        res.error = f"bad SSE data: {e}"
    res.e2e = time.perf_counter() - res.start
    if not res.usage:
        res.output_tokens = res.chunks
    if res.error is None and not done:
        res.error = "stream ended without data: [DONE]"
    if res.error is None and expect_tokens is not None and res.output_tokens != expect_tokens:
        res.error = (f"expected {expect_tokens} output tokens, got {res.output_tokens} "
                     f"(finish_reason={res.finish_reason}, counted from {'usage' if res.usage else 'chunks'})")
    res.ok = res.error is None
    if not keep_text:
        res.text, res.reasoning = "", ""
    return res


class ServerInfo:
    """What the run records about the server and asks of it outside the measured requests."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float = 30.0):
        self.base = base_url.rstrip("/")
        if self.base.endswith("/v1"):
            self.base = self.base[:-3]
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout

    def _get(self, path):
        return httpx.get(self.base + path, headers=self.headers, timeout=self.timeout)

    def _post(self, path, body):
        return httpx.post(self.base + path, headers=self.headers, json=body, timeout=self.timeout)

    def models(self) -> list:
        r = self._get("/v1/models")
        r.raise_for_status()
        return r.json().get("data") or []

    def version(self) -> str | None:
        try:
            r = self._get("/version")
            return r.json().get("version") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def vocab_size(self) -> int | None:
        """gridq range-checks token ids on /detokenize as on prompts and names the range in the 400
        ("token id N is out of vocabulary [0, V)"); /v1/models carries no vocabulary size. Failing that, a
        binary search for the largest id /detokenize accepts."""
        try:
            r = self._post("/detokenize", {"tokens": [2**31 - 1]})
            m = re.search(r"\[0, (\d+)\)", r.text)
            if m:
                return int(m.group(1))
            if r.status_code == 404:
                return None
            lo, hi = 1, 1 << 24  # lo accepted, hi refused
            if self._post("/detokenize", {"tokens": [lo - 1]}).status_code != 200:
                return None
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._post("/detokenize", {"tokens": [mid - 1]}).status_code == 200:
                    lo = mid
                else:
                    hi = mid
            return lo
        except httpx.HTTPError:
            return None

    def count_tokens(self, text: str) -> int | None:
        try:
            r = self._post("/tokenize", {"prompt": text})
            return int(r.json()["count"]) if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    def metrics(self) -> dict | None:
        """Prometheus text as {name: value summed over labels}; the labels of the *_info metrics (the model's
        artifact and format, the cache configuration) under "_info", gridq:cache_config_info's under
        "_cache_config"."""
        try:
            r = self._get("/metrics")
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        out, info = {}, {}
        for line in r.text.splitlines():
            if not line or line[0] == "#":
                continue
            m = re.match(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
            if not m:
                continue
            name, labels, val = m.groups()
            try:
                out[name] = out.get(name, 0.0) + float(val)
            except ValueError:
                continue
            if name.endswith("_info") and name not in info:
                info[name] = dict(re.findall(r'(\w+)="([^"]*)"', labels or ""))
        out["_info"] = info
        out["_cache_config"] = next((v for k, v in info.items() if k.endswith(":cache_config_info")), {})
        return out


PREFIXES = ("gridq:", "vllm:")


def metric(m: dict | None, short: str) -> float | None:
    if not m:
        return None
    for p in PREFIXES:
        if p + short in m:
            return m[p + short]
    return None


def metrics_delta(before: dict | None, after: dict | None) -> dict | None:
    """The counters a run moved; prefix-cache hit rate = hits / queries (both in tokens, as vLLM's)."""
    if not before or not after:
        return None
    out = {}
    for short in ("prefix_cache_queries_total", "prefix_cache_hits_total", "prefix_cache_recomputed_tokens_total",
                  "generation_tokens_total", "prompt_tokens_total", "num_preemptions_total",
                  "request_success_total", "request_aborted_total"):
        a, b = metric(before, short), metric(after, short)
        if a is not None and b is not None:
            out[short.removesuffix("_total")] = b - a
    # Histogram means over the run: a decode-only step's wall time and its forward + sampling (gridq's own
    # families; the difference is the scheduler's host work a step), and tokens a step.
    for short, key in (("decode_step_seconds", "decode_step_s"), ("decode_step_forward_seconds", "decode_forward_s"),
                       ("iteration_tokens_total", "step_tokens")):
        s0, s1 = metric(before, short + "_sum"), metric(after, short + "_sum")
        c0, c1 = metric(before, short + "_count"), metric(after, short + "_count")
        if None not in (s0, s1, c0, c1) and c1 > c0:
            out[key + "_mean"] = (s1 - s0) / (c1 - c0)
            out[key + "_count"] = c1 - c0
    q, h = out.get("prefix_cache_queries"), out.get("prefix_cache_hits")
    out["prefix_cache_hit_rate"] = (h / q if q else 0.0) if q is not None and h is not None else None
    return out
