"""gridq serve against the openai SDK with strict response validation (api.md §4, §12): chat and
completions, streaming and not, tools, thinking on/off, usage, n>1/seeds, logprobs, and 32 concurrent
streaming clients that must each get their own greedy output."""

import json
import os
import subprocess
import threading

import httpx
import openai
import pytest

from server_util import API_KEY, MODEL_DIR, MODEL_ID, Server, gridq_bin


@pytest.fixture(scope="module")
def server():
    s = Server("--max-model-len", "1024")
    yield s
    s.stop()


def sse_events(server, path, body):
    """Raw SSE read; checks the framing invariants of api.md §4 and returns the decoded chunks."""
    chunks = []
    with httpx.stream("POST", server.base + path, json=body, headers=server.headers(), timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        buf = ""
        for text in r.iter_text():
            buf += text
        events = buf.split("\n\n")
        assert events[-1] == ""
        events = events[:-1]
        assert events[-1] == "data: [DONE]"
        for e in events[:-1]:
            assert e.startswith("data: ") and "\n" not in e
            chunks.append(json.loads(e[len("data: "):]))
    return chunks


def check_chat_stream(chunks, n=1, include_usage=False):
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1
    assert len({c["created"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    body = [c for c in chunks if c["choices"]]
    if include_usage:
        assert not chunks[-1]["choices"] and chunks[-1]["usage"]["total_tokens"] > 0
        assert all(c["usage"] is None for c in chunks[:-1])
    per = {}
    for c in body:
        ch = c["choices"][0]
        per.setdefault(ch["index"], []).append(ch)
    assert sorted(per) == list(range(n))
    out = {}
    for i, lst in per.items():
        assert lst[0]["delta"] == {"role": "assistant", "content": ""}
        assert lst[-1]["delta"] == {} and lst[-1]["finish_reason"] in ("stop", "length", "tool_calls")
        content, reasoning = "", ""
        for ch in lst[1:-1]:
            assert ch["finish_reason"] is None
            d = ch["delta"]
            assert d, "later deltas are never empty"
            if "content" in d:
                assert d["content"]
                content += d["content"]
            if "reasoning_content" in d:
                assert d["reasoning_content"] and d["reasoning"] == d["reasoning_content"]
                reasoning += d["reasoning_content"]
            assert set(d) <= {"content", "reasoning_content", "reasoning", "tool_calls"}
        out[i] = (content, reasoning, lst[-1]["finish_reason"])
    return out


def check_completion_stream(chunks, n=1):
    """api.md §4 rules 2 and 6 for text_completion chunks (what strict SDK validation cannot check, see
    Server.client): returns {index: (text, finish_reason)}."""
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1
    assert all(c["object"] == "text_completion" for c in chunks)
    per = {}
    for c in chunks:
        if c["choices"]:
            ch = c["choices"][0]
            per.setdefault(ch["index"], []).append(ch)
    assert sorted(per) == list(range(n))
    out = {}
    for i, lst in per.items():
        assert all(ch["finish_reason"] is None for ch in lst[:-1])
        assert lst[-1]["finish_reason"] in ("stop", "length")
        out[i] = ("".join(ch["text"] for ch in lst), lst[-1]["finish_reason"])
    return out


def test_models(server):
    c = server.client()
    models = c.models.list()
    assert [m.id for m in models.data] == [MODEL_ID]
    raw = httpx.get(server.base + "/v1/models", headers=server.headers()).json()
    assert raw["object"] == "list"
    m = raw["data"][0]
    assert m["owned_by"] == "gridq" and m["max_model_len"] == 1024 and m["object"] == "model"


def test_health_public(server):
    r = httpx.get(server.base + "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


@pytest.mark.parametrize("thinking", [True, False])
def test_chat_nonstream_and_stream_agree(server, thinking):
    c = server.client()
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Write a function."}], max_tokens=24,
              temperature=0, extra_body={"chat_template_kwargs": {"enable_thinking": thinking}})
    r = c.chat.completions.create(**kw)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    ch = r.choices[0]
    assert ch.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details is None  # as vLLM without --enable-prompt-tokens-details
    msg = ch.message.model_dump()
    assert "</think>" not in (msg["content"] or "")
    if not thinking:
        assert msg.get("reasoning_content") is None
    chunks = sse_events(server, "/v1/chat/completions",
                        dict(model=MODEL_ID, messages=kw["messages"], max_tokens=24, temperature=0, stream=True,
                             chat_template_kwargs={"enable_thinking": thinking},
                             stream_options={"include_usage": True}))
    content, reasoning, finish = check_chat_stream(chunks, include_usage=True)[0]
    assert content == (msg["content"] or "")
    assert reasoning == (msg.get("reasoning_content") or "")
    assert msg.get("reasoning") == msg.get("reasoning_content")
    assert finish == ch.finish_reason
    # The SDK's own stream parser accepts the stream.
    s = c.chat.completions.create(**kw, stream=True)
    text = "".join((ev.choices[0].delta.content or "") for ev in s if ev.choices)
    assert text == (msg["content"] or "")


def test_reasoning_effort_none_turns_thinking_off(server):
    c = server.client()
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                  temperature=0, reasoning_effort="none")
    assert r.choices[0].message.model_dump().get("reasoning_content") is None


def test_chat_with_tools_and_history(server):
    c = server.client()
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                                "parameters": {"type": "object",
                                                               "properties": {"city": {"type": "string"}},
                                                               "required": ["city"]}}}]
    messages = [
        {"role": "system", "content": "You call tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning_content": "I need the tool.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    for choice in ("auto", "required", "none", {"type": "function", "function": {"name": "get_weather"}}):
        r = c.chat.completions.create(model=MODEL_ID, messages=messages, tools=tools, tool_choice=choice,
                                      max_tokens=16, temperature=0)
        ch = r.choices[0]
        # The tiny model answers in prose: finish_reason stop/length with its content (api.md §5).
        assert ch.finish_reason in ("stop", "length", "tool_calls")
        if ch.finish_reason == "tool_calls":
            for tc in ch.message.tool_calls:
                assert tc.id.startswith("call_") and isinstance(json.loads(tc.function.arguments), dict)
    s = c.chat.completions.create(model=MODEL_ID, messages=messages, tools=tools, max_tokens=16, temperature=0,
                                  stream=True)
    for ev in s:
        pass


def test_completions(server):
    c = server.client()
    r = c.completions.create(model=MODEL_ID, prompt="def fibonacci(n):", max_tokens=16, temperature=0)
    assert r.object == "text_completion" and len(r.choices) == 1
    text = r.choices[0].text
    assert r.choices[0].finish_reason in ("stop", "length")
    s = server.client(strict=False).completions.create(model=MODEL_ID, prompt="def fibonacci(n):", max_tokens=16,
                                                       temperature=0, stream=True)
    streamed = "".join(ev.choices[0].text for ev in s if ev.choices)
    assert streamed == text
    raw = sse_events(server, "/v1/completions", {"model": MODEL_ID, "prompt": "def fibonacci(n):", "max_tokens": 16,
                                                 "temperature": 0, "stream": True})
    assert check_completion_stream(raw)[0] == (text, r.choices[0].finish_reason)
    # echo, token-id prompts, a list of prompts, logprobs.
    e = c.completions.create(model=MODEL_ID, prompt="def f(x):", max_tokens=4, temperature=0, echo=True)
    assert e.choices[0].text.startswith("def f(x):")
    ids = httpx.post(server.base + "/tokenize", json={"prompt": "def fibonacci(n):"}, headers=server.headers()).json()
    t = c.completions.create(model=MODEL_ID, prompt=ids["tokens"], max_tokens=16, temperature=0)
    assert t.choices[0].text == text
    many = c.completions.create(model=MODEL_ID, prompt=["import os", "class A:"], max_tokens=4, temperature=0, n=2)
    assert sorted(ch.index for ch in many.choices) == [0, 1, 2, 3]
    lp = c.completions.create(model=MODEL_ID, prompt="x = ", max_tokens=3, temperature=0, logprobs=2)
    assert len(lp.choices[0].logprobs.tokens) == len(lp.choices[0].logprobs.token_logprobs)
    assert all(len(t) <= 2 for t in lp.choices[0].logprobs.top_logprobs)


def test_chat_logprobs_seed_and_n(server):
    c = server.client()
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Count"}], max_tokens=8, temperature=1.0,
              seed=1234, n=3, reasoning_effort="none")
    a = c.chat.completions.create(**kw)
    b = c.chat.completions.create(**kw)
    assert [x.message.content for x in a.choices] == [x.message.content for x in b.choices]
    assert len(a.choices) == 3
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Count"}], max_tokens=5,
                                  temperature=0, logprobs=True, top_logprobs=3, reasoning_effort="none")
    lps = r.choices[0].logprobs.content
    assert 0 < len(lps) <= 5
    for t in lps:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].logprob >= t.logprob - 1e-6


@pytest.mark.parametrize("extra", [[], ["--top-k", "40", "--min-p", "0.02", "--repetition-penalty", "1.2"]])
def test_generate_and_serve_same_seed_same_text(server, extra):
    # One sampler (runtime/sampler.h): choice 0 of a completion with seed S samples exactly what
    # `gridq generate --seed S` samples from the same logits. The prompt encodes the same on both (the
    # tokenizer adds no special tokens); special tokens are rendered on both.
    prompt, n = "def fibonacci(n):", 24
    args = [gridq_bin(), "generate", str(MODEL_DIR), "--prompt", prompt, "--max-tokens", str(n), "--threads", "2",
            "--temperature", "0.9", "--top-p", "0.95", "--seed", "123", *extra]
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    out = subprocess.run(args, check=True, capture_output=True, timeout=300, env=env).stdout.decode("utf-8")
    assert out.startswith(prompt) and out.endswith("\n")
    body = {"skip_special_tokens": False}
    for k, v in zip(extra[::2], extra[1::2]):
        body[k[2:].replace("-", "_")] = float(v) if "." in v else int(v)
    r = server.client().completions.create(model=MODEL_ID, prompt=prompt, max_tokens=n, temperature=0.9,
                                           top_p=0.95, seed=123, extra_body=body)
    assert r.choices[0].text == out[len(prompt):-1]


def test_stop_strings(server):
    c = server.client()
    base = c.completions.create(model=MODEL_ID, prompt="def fibonacci(n):", max_tokens=24, temperature=0)
    text = base.choices[0].text
    if len(text) < 6:
        pytest.skip("model output too short to choose a stop string")
    stop = text[3:6]
    r = c.completions.create(model=MODEL_ID, prompt="def fibonacci(n):", max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].text == text[: text.find(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_context_end_gives_length(server):
    # max_tokens absent or null (issue 14 item 7: null is the default): completions default to 16 clamped to the
    # room the context leaves (§2, T18): 5 here, ending with "length" at the context end (--max-model-len 1024).
    c = server.client()
    prompt = [10 + i % 200 for i in range(1024 - 5)]
    r = c.completions.create(model=MODEL_ID, prompt=prompt, temperature=0, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (1019, 5)
    r = c.completions.create(model=MODEL_ID, prompt=prompt, temperature=0, max_tokens=None,
                             extra_body={"ignore_eos": True})
    assert (r.usage.completion_tokens, r.choices[0].finish_reason) == (5, "length")


def test_32_concurrent_streams_get_their_own_greedy_output(server):
    c = server.client()
    prompts = [f"def func_{i}(a, b):\n    return a {'+-*'[i % 3]} b * {i}" for i in range(32)]
    ref = {}
    for i, p in enumerate(prompts[:8]):
        ref[i] = c.completions.create(model=MODEL_ID, prompt=p, max_tokens=12, temperature=0).choices[0].text
    got = {}
    errors = []

    def worker(i):
        try:
            s = server.client(strict=False).completions.create(model=MODEL_ID, prompt=prompts[i], max_tokens=12,
                                                               temperature=0, stream=True)
            got[i] = "".join(ev.choices[0].text for ev in s if ev.choices)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # Each concurrent stream equals the sequential greedy output of its own prompt.
    for i in range(8):
        assert got[i] == ref[i], i
    for i in range(8, 32):
        seq = c.completions.create(model=MODEL_ID, prompt=prompts[i], max_tokens=12, temperature=0).choices[0].text
        assert got[i] == seq, i


def test_metrics_move(server):
    def scrape():
        r = httpx.get(server.base + "/metrics", headers=server.headers())
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        vals = {}
        for line in r.text.splitlines():
            if line.startswith("#") or not line:
                continue
            name, _, v = line.rpartition(" ")
            vals[name] = float(v)
        return vals

    before = scrape()
    c = server.client()
    r = c.completions.create(model=MODEL_ID, prompt="import sys", max_tokens=5, temperature=0, extra_body={"ignore_eos": True})
    after = scrape()
    key = 'gridq:generation_tokens_total{model_name="laguna-tiny-code"}'
    assert after[key] - before[key] == r.usage.completion_tokens
    pkey = 'gridq:prompt_tokens_total{model_name="laguna-tiny-code"}'
    assert after[pkey] - before[pkey] == r.usage.prompt_tokens
    for name in ("gridq:num_requests_running", "gridq:num_requests_waiting", "gridq:kv_cache_usage_perc"):
        assert f'{name}{{model_name="laguna-tiny-code"}}' in after
    assert any(k.startswith("gridq:time_to_first_token_seconds_bucket") for k in after)
    assert any(k.startswith("gridq:inter_token_latency_seconds_bucket") for k in after)
