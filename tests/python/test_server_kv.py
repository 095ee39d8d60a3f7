"""KV-page admission, preemption and prefix caching through the HTTP server (docs/serving.md "KV cache"), on
the bundled model on the CPU with a deliberately small page pool (--num-gpu-blocks-override): greedy output
of a request is the same alone, among others that force preemptions, on a prefix-cache hit, as one of n
choices, and with prefix caching off; a request that can never fit is a 400 naming the numbers."""

import json
import re
import threading

import httpx
import pytest

from server_util import MODEL_ID, Server

PAGES = 40  # 640 tokens: 4 of the requests below at their longest, while 5 are admitted on their prompts
PROMPT_LEN, MAX_TOKENS, N_REQ = 100, 60, 8
LONG = 300  # a prompt past the sliding layers' receptive field (2 × 63): a hit recomputes only part of it


def prompt(i: int, n: int = PROMPT_LEN) -> list:
    # Token ids 100..3099 of the 4096-token vocabulary: plain text pieces, no special tokens.
    return [100 + (i * 977 + j * 31) % 3000 for j in range(n)]


def complete(server, ids, n=1, max_tokens=MAX_TOKENS):
    r = httpx.post(server.base + "/v1/completions", headers=server.headers(), timeout=120,
                   json={"model": MODEL_ID, "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "n": n,
                         "ignore_eos": True})
    return r


def texts(r):
    assert r.status_code == 200, r.text
    return [c["text"] for c in sorted(r.json()["choices"], key=lambda c: c["index"])]


def metric(server, name) -> float:
    m = httpx.get(server.base + "/metrics", headers=server.headers(), timeout=10).text
    found = re.search(rf"^gridq:{name}{{[^}}]*}} (\S+)$", m, re.M)
    assert found, f"{name} missing from /metrics"
    return float(found.group(1))


def burst(server, ids_list):
    out = [None] * len(ids_list)

    def run(i):
        out[i] = complete(server, ids_list[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(ids_list))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [texts(r)[0] for r in out]


@pytest.fixture(scope="module")
def small():
    s = Server("--num-gpu-blocks-override", str(PAGES), "--max-num-seqs", "8", "--max-num-batched-tokens", "64",
               "--enable-prompt-tokens-details")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def refs(small):
    # Each request alone (one after the other).
    return [texts(complete(small, prompt(i)))[0] for i in range(N_REQ)]


def test_startup_names_the_pool(small):
    assert f"kv cache: {PAGES} pages of 16 tokens ({PAGES * 16} tokens), prefix caching on" in small.output()
    info = httpx.get(small.base + "/metrics", headers=small.headers()).text
    assert f'block_size="16",num_gpu_blocks="{PAGES}",enable_prefix_caching="True"' in info


def test_never_fits_is_400_naming_the_limit(small):
    r = complete(small, prompt(0), max_tokens=1000)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "kv_cache_too_small"
    assert f"holds {PAGES} pages" in err["message"] and "prompt 100 + max_tokens 1000" in err["message"]
    # n counts: 5 × 160 tokens is 50 pages, more than the whole cache (4 × is exactly the cache, and runs).
    r = complete(small, prompt(0), n=5)
    assert r.status_code == 400 and r.json()["error"]["code"] == "kv_cache_too_small"


def test_preemption_keeps_every_stream_identical(small, refs):
    # Preemption needs the burst's requests to overlap; on a fast GPU an early one can finish before the last
    # arrives. Every burst must give the reference texts; the burst is repeated (at most 5 times) until one of
    # them has preempted, so the test cannot pass without exercising preemption.
    preempted = False
    for _ in range(5):
        before = metric(small, "num_preemptions_total")
        assert burst(small, [prompt(i) for i in range(N_REQ)]) == refs
        if metric(small, "num_preemptions_total") > before:
            preempted = True
            break
    assert preempted, "no burst preempted: the pool never ran out"
    # Afterwards nothing is referenced and the pool is full of cached (evictable) pages: 6 prompts of 9+
    # full pages each could not all stay, so eviction ran.
    assert metric(small, "kv_cache_pages_used") == 0
    assert 0 < metric(small, "kv_cache_pages_cached") <= PAGES
    assert metric(small, "num_requests_waiting") == 0
    assert metric(small, "kv_cache_usage_perc") == 0


def test_repeated_prompt_hits_the_prefix_cache(small):
    ids = prompt(99, LONG)
    q0, h0 = metric(small, "prefix_cache_queries_total"), metric(small, "prefix_cache_hits_total")
    r0 = metric(small, "prefix_cache_recomputed_tokens_total")
    r1 = complete(small, ids, max_tokens=8)
    first = texts(r1)[0]
    assert metric(small, "prefix_cache_hits_total") == h0  # a prompt never seen: no hit
    assert r1.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    r2 = complete(small, ids, max_tokens=8)
    assert texts(r2)[0] == first
    assert metric(small, "prefix_cache_queries_total") - q0 == 2 * LONG
    # The 18 full pages before the last token (288 tokens) are found. The CPU backend runs the last 2 × 63
    # of them again to rebuild the two sliding layers' rings; the CUDA backend restores the rings from the
    # snapshot the first request left at that boundary (its prompt's end) and runs none.
    assert metric(small, "prefix_cache_hits_total") - h0 == 288
    recomputed = 0 if "device: cuda" in small.output() else 126
    assert metric(small, "prefix_cache_recomputed_tokens_total") - r0 == recomputed
    # usage reports the positions that ran no forward (--enable-prompt-tokens-details).
    usage = r2.json()["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 288 - recomputed}
    assert usage["prompt_tokens"] == LONG


def test_streamed_usage_reports_cached_tokens(small):
    ids = prompt(97, LONG)
    complete(small, ids, max_tokens=2)  # fills the cache
    r = httpx.post(small.base + "/v1/completions", headers=small.headers(), timeout=120,
                   json={"model": MODEL_ID, "prompt": ids, "max_tokens": 4, "temperature": 0, "stream": True,
                         "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    usage = events[-1]["usage"]
    assert not events[-1]["choices"] and usage["completion_tokens"] == 4
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0


def test_n_choices_share_the_prompt_and_match(small):
    ids = prompt(98, LONG)
    alone = texts(complete(small, ids, max_tokens=8))[0]
    h0 = metric(small, "prefix_cache_hits_total")
    # 2 × 308 tokens is 40 pages unshared: the whole cache. Choice 1 shares choice 0's 18 prompt pages.
    assert texts(complete(small, ids, n=2, max_tokens=8)) == [alone, alone]
    assert metric(small, "prefix_cache_hits_total") - h0 >= 2 * 288


def test_prefix_caching_off_gives_the_same_text(small, refs):
    long_ref = texts(complete(small, prompt(99, LONG), max_tokens=8))[0]  # on `small`: a prefix-cache hit
    s = Server("--no-enable-prefix-caching", "--max-num-batched-tokens", "64")
    try:
        assert "prefix caching off" in s.output()
        assert burst(s, [prompt(i) for i in range(N_REQ)]) == refs
        assert texts(complete(s, prompt(99, LONG), max_tokens=8))[0] == long_ref
        assert metric(s, "prefix_cache_queries_total") == 0
        assert metric(s, "num_preemptions_total") == 0
    finally:
        s.stop()
