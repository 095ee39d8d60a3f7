"""Issue 14 against a live server, the client-compatibility half: prompt scoring for evaluation harnesses
(item 8), the transport cases of item 9 (half-closed clients, bursts against --max-queue), metrics that
prometheus_client parses with process_* and vLLM names, the access log and X-Request-Id (item 10), and
non-finite logits failing the request with a 500 (item 4)."""

import json
import math
import shutil
import socket
import struct
import threading
import time

import httpx
import pytest

from server_util import API_KEY, MODEL_DIR, MODEL_ID, Server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("access") / "access.jsonl"
    s = Server("--max-model-len", "256", "--access-log", str(log))
    s.access_log = log
    yield s
    s.stop()


def post(server, path, body, **kw):
    return httpx.post(server.base + path, json=body, headers={**server.headers(), **kw.pop("headers", {})},
                      timeout=60, **kw)


# --- item 8: prompt scoring (what lm-evaluation-harness's local-completions loglikelihood sends) ---

def loglikelihood_request(prompt, max_tokens=0):
    # lm_eval/models/openai_completions.py LocalCompletionsAPI._create_payload(generate=False).
    return {"model": MODEL_ID, "prompt": prompt, "temperature": 0, "max_tokens": max_tokens, "logprobs": 1,
            "seed": 1234, "echo": True}


def test_echo_logprobs_score_the_prompt(server):
    prompt = "def add(a, b):\n    return a + b\n"
    ids = post(server, "/tokenize", {"model": MODEL_ID, "prompt": prompt}).json()["tokens"]
    r = post(server, "/v1/completions", loglikelihood_request(prompt))
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    assert ch["text"] == prompt and ch["finish_reason"] == "length"
    lp = ch["logprobs"]
    assert len(lp["tokens"]) == len(ids) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"][1:])
    assert "".join(lp["tokens"]) == prompt
    # Each prompt token's logprob is the one a 1-token completion of the prefix before it reports for it.
    for i in (1, len(ids) // 2, len(ids) - 1):
        g = post(server, "/v1/completions", {"model": MODEL_ID, "prompt": ids[:i], "max_tokens": 1,
                                             "temperature": 0, "logprobs": 5}).json()["choices"][0]["logprobs"]
        top = g["top_logprobs"][0]
        if lp["tokens"][i] in top:
            assert math.isclose(top[lp["tokens"][i]], lp["token_logprobs"][i], abs_tol=1e-4), i
    # The usage counts the prompt; nothing was generated.
    assert r.json()["usage"]["completion_tokens"] == 0


def test_echo_logprobs_with_generation_and_the_sdk(server):
    # Not strict: the SDK types token_logprobs as floats, while the API (and vLLM) send null for the first
    # prompt token, which has nothing before it to be scored against.
    c = server.client(strict=False)
    r = c.completions.create(model=MODEL_ID, prompt="import os\n", max_tokens=3, temperature=0, echo=True,
                             logprobs=2, extra_body={"ignore_eos": True})
    ch = r.choices[0]
    n_prompt = r.usage.prompt_tokens
    assert len(ch.logprobs.tokens) == n_prompt + r.usage.completion_tokens
    assert ch.logprobs.token_logprobs[0] is None
    assert all(x is not None for x in ch.logprobs.token_logprobs[1:])
    assert ch.text == "".join(ch.logprobs.tokens)


def test_lm_eval_loglikelihood_batch(server):
    """lm-evaluation-harness 0.4.13's local-completions loglikelihood path, step by step: a batch of token-id
    prompts (context + continuation), max_tokens 1, logprobs 1, echo; parse_logprobs() sums
    token_logprobs[ctxlen:-1] and calls the continuation greedy when each token is its top_logprobs max."""
    def tok(t):
        return post(server, "/tokenize", {"model": MODEL_ID, "prompt": t}).json()["tokens"]

    pairs = [("def add(a, b):\n    return", " a + b"), ("The capital of France is", " Paris")]
    prompts = [tok(c) + tok(x) for c, x in pairs]
    ctxlens = [len(tok(c)) for c, _ in pairs]
    body = {"model": MODEL_ID, "prompt": prompts, "temperature": 0, "max_tokens": 1, "logprobs": 1,
            "seed": 1234, "echo": True}
    out = post(server, "/v1/completions", body).json()
    res = []
    for choice, ctxlen in zip(sorted(out["choices"], key=lambda c: c["index"]), ctxlens):
        lps = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        res.append((sum(lps), all(t == max(top.values()) for t, top in zip(lps, tops))))
    assert len(res) == 2 and all(ll < 0 for ll, _ in res)
    # Each prompt alone, and scored without generating, gives the same numbers (batch invariance).
    for p, ctxlen, (ll, greedy) in zip(prompts, ctxlens, res):
        one = post(server, "/v1/completions", {**body, "prompt": p, "max_tokens": 0}).json()["choices"][0]
        lps = one["logprobs"]["token_logprobs"][ctxlen:]
        assert math.isclose(sum(lps), ll, abs_tol=1e-4)
        assert greedy == all(t == max(top.values()) for t, top in zip(lps, one["logprobs"]["top_logprobs"][ctxlen:]))


def test_max_tokens_zero_needs_echo(server):
    r = post(server, "/v1/completions", {"model": MODEL_ID, "prompt": "x", "max_tokens": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def test_text_offset_counts_characters(server):
    prompt = "é ü — 東京 ok"
    r = post(server, "/v1/completions", loglikelihood_request(prompt)).json()["choices"][0]
    lp = r["logprobs"]
    # Offsets are Python string indexes into the text: each token starts where the text before it ends.
    pos = 0
    for tok, off in zip(lp["tokens"], lp["text_offset"]):
        assert off == pos
        pos += len(tok)
    # The prompt's tokens hold multi-byte characters, so byte offsets would differ.
    assert sum(len(t.encode()) for t in lp["tokens"][:-1]) != lp["text_offset"][-1]


# --- item 9: half-closed clients, bursts ---

def test_half_closed_client_gets_its_answer(server):
    body = json.dumps({"model": MODEL_ID, "prompt": "hello", "max_tokens": 4, "temperature": 0}).encode()
    req = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(req)
        s.shutdown(socket.SHUT_WR)  # done sending, still reading
        out = b""
        while b"\r\n\r\n" not in out.split(b"HTTP/1.1 200", 1)[-1] or not out.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    assert b"HTTP/1.1 200 OK" in out, out[:300]
    final = out[out.index(b"HTTP/1.1 200"):]
    body = json.loads(final.split(b"\r\n\r\n", 1)[1])
    assert body["choices"][0]["text"] and body["usage"]["completion_tokens"] >= 1


def test_burst_fills_free_slots_before_429():
    s = Server("--max-model-len", "256", "--max-num-seqs", "4", "--max-queue", "0")
    try:
        barrier = threading.Barrier(4)
        codes = []

        def one():
            barrier.wait()
            r = httpx.post(s.base + "/v1/completions", headers=s.headers(), timeout=60,
                           json={"model": MODEL_ID, "prompt": "x", "max_tokens": 2})
            codes.append(r.status_code)

        ts = [threading.Thread(target=one) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert codes == [200] * 4, codes
    finally:
        s.stop()


# --- item 10: metrics, access log, X-Request-Id ---

def test_metrics_parse_with_prometheus_client(server):
    from prometheus_client.parser import text_string_to_metric_families

    post(server, "/v1/completions", {"model": MODEL_ID, "prompt": "x", "max_tokens": 2})
    text = httpx.get(server.base + "/metrics", headers=server.headers()).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    untyped = [n for n, f in fams.items() if f.type == "unknown"]
    assert not untyped, untyped
    for name in ("gridq:prompt_tokens", "gridq:generation_tokens", "gridq:http_requests",
                 "gridq:request_success", "process_cpu_seconds"):
        assert fams[name].type == "counter", name
    assert fams["process_resident_memory_bytes"].samples[0].value > 1e6
    assert abs(fams["process_start_time_seconds"].samples[0].value - time.time()) < 3600
    # vLLM's names for the same families, with the same values.
    for g in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert fams["vllm:" + g].type == "gauge"
    for h in ("time_to_first_token_seconds", "e2e_request_latency_seconds"):
        assert fams["vllm:" + h].type == "histogram"
    for c in ("prompt_tokens", "generation_tokens"):
        ours = fams["gridq:" + c].samples[0].value
        assert fams["vllm:" + c].samples[0].value == ours and ours > 0


def test_request_id_echoed_or_generated(server):
    r = post(server, "/v1/completions", {"model": MODEL_ID, "prompt": "x", "max_tokens": 1},
             headers={"X-Request-Id": "trace-42.a:b"})
    assert r.headers["x-request-id"] == "trace-42.a:b"
    for bad in ("x" * 200, "a b", "é", "a\"b"):
        h = httpx.get(server.base + "/v1/models", headers={**server.headers(), "X-Request-Id": bad.encode()})
        rid = h.headers["x-request-id"]
        assert rid != bad and 0 < len(rid) <= 128 and rid.isascii()
    assert httpx.get(server.base + "/health").headers["x-request-id"]


def test_access_log_lines(server):
    rid = "access-log-check-1"
    r = post(server, "/v1/completions", {"model": MODEL_ID, "prompt": "hello", "max_tokens": 3},
             headers={"X-Request-Id": rid})
    assert r.status_code == 200
    post(server, "/v1/completions", {"model": MODEL_ID, "prompt": "x", "max_tokens": -1},
         headers={"X-Request-Id": rid + "-bad"})
    time.sleep(0.2)
    lines = [json.loads(x) for x in server.access_log.read_text().splitlines()]
    ok = [x for x in lines if x["request_id"] == rid][-1]
    assert ok["status"] == 200 and ok["path"] == "/v1/completions" and ok["method"] == "POST"
    assert ok["prompt_tokens"] == r.json()["usage"]["prompt_tokens"]
    assert ok["completion_tokens"] == r.json()["usage"]["completion_tokens"]
    assert ok["latency_ms"] >= 0
    bad = [x for x in lines if x["request_id"] == rid + "-bad"][-1]
    assert bad["status"] == 400
    # A request refused by the transport before dispatch (obs-fold) is logged too, under a fresh id.
    n = len(lines)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n")
        head = s.recv(65536)
    assert head.startswith(b"HTTP/1.1 400") and b"X-Request-Id: " in head
    time.sleep(0.2)
    later = [json.loads(x) for x in server.access_log.read_text().splitlines()][n:]
    assert any(x["status"] == 400 and x["method"] == "other" for x in later), later


# --- item 4: non-finite logits fail the request with a 500 naming the cause ---

def poison_final_norm(model_dir):
    """Sets the final norm's weights to NaN (BF16 0x7FC0) in place, so every logit is NaN."""
    index = json.loads((model_dir / "model.safetensors.index.json").read_text())["weight_map"]
    name = next(n for n in index if n.endswith("norm.weight") and "layers" not in n)
    path = model_dir / index[name]
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        t = header[name]
        assert t["dtype"] == "BF16"
        start, end = t["data_offsets"]
        f.seek(8 + n + start)
        f.write(b"\xc0\x7f" * ((end - start) // 2))


def test_nan_logits_are_a_500_naming_the_cause(tmp_path):
    d = tmp_path / "model"
    shutil.copytree(MODEL_DIR, d)
    poison_final_norm(d)
    s = Server("--max-model-len", "256", model_dir=d)
    try:
        r = httpx.post(s.base + "/v1/completions", headers=s.headers(), timeout=60,
                       json={"model": "model", "prompt": "hello", "max_tokens": 3})
        assert r.status_code == 500, r.text
        err = r.json()["error"]
        assert err["code"] == "non_finite_logits" and "nan" in err["message"].lower(), err
        # The server itself stays up and answers the next request the same way.
        assert httpx.get(s.base + "/health").status_code == 200
    finally:
        s.stop()
