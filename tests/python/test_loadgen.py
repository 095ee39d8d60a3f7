"""bench/loadgen.py against the bundled model on the CPU: every request counted, exactly requests × O output tokens
(the client's count from the streams' usage equals the server's generation_tokens counter), TTFT ≤ e2e, failures
counted with their first error, Ctrl-C reporting what was measured, and the agent workload's prefix-cache hit rate
(> 0 on a later turn; 0 on a second server with --no-enable-prefix-caching). docs/serving.md "Load testing"."""

import json
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from server_util import API_KEY, MODEL_ID, REPO, Server

LOADGEN = REPO / "bench" / "loadgen.py"
sys.path.insert(0, str(REPO / "bench"))
from loadgen_report import percentile  # noqa: E402


@pytest.fixture(scope="module")
def server():
    s = Server("--max-num-seqs", "8")
    yield s
    s.stop()


def loadgen(server, tmp_path, *args, expect_rc=0):
    out = tmp_path / "report.json"
    cmd = [sys.executable, str(LOADGEN), "--base-url", server.base, "--api-key", API_KEY, "--out", str(out),
           "--per-request", "--no-progress", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == expect_rc, p.stdout + p.stderr
    rep = json.loads(out.read_text())
    return rep, p.stdout


def check_consistent(rep, n, out_tokens):
    s = rep["summary"]
    assert s["requests"] == {"ok": n, "failed": 0, "cancelled": 0}, s["errors"]
    assert s["output_tokens"] == n * out_tokens
    assert s["token_count_source"] == "usage"
    reqs = rep["requests"]
    assert len(reqs) == n
    for r in reqs:
        assert r["ok"] and r["output_tokens"] == out_tokens and r["finish_reason"] == "length"
        assert 0 < r["ttft_s"] <= r["e2e_s"]
        assert 1 <= r["chunks"] <= r["output_tokens"]
    assert s["ttft_ms"]["n"] == n and s["e2e_ms"]["n"] == n
    assert s["itl_ms"]["n"] == sum(r["chunks"] - 1 for r in reqs)
    assert s["ttft_ms"]["p50"] <= s["ttft_ms"]["p99"] <= s["ttft_ms"]["max"]
    assert s["ttft_ms"]["max"] <= s["e2e_ms"]["max"]
    assert s["output_tok_s"] == pytest.approx(s["output_tokens"] / s["wall_s"])
    assert s["wall_s"] >= max(r["e2e_s"] for r in reqs)
    m = rep["server_metrics"]
    assert m["generation_tokens"] == n * out_tokens  # the server generated what the client counted, no more
    assert rep["meta"]["server"]["version"] and rep["meta"]["server"]["model"] == MODEL_ID
    assert rep["meta"]["date"] and rep["meta"]["machine"]["hostname"] is not None
    assert "***" in rep["meta"]["command"] and API_KEY not in rep["meta"]["command"]


def test_percentile():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentile(list(range(101)), 90) == 90
    assert percentile([], 50) is None


def test_random_completions(server, tmp_path):
    rep, table = loadgen(server, tmp_path, "--num-prompts", "8", "--concurrency", "4", "--prompt-tokens", "32",
                         "--output-tokens", "8", "--warmup", "2")
    check_consistent(rep, 8, 8)
    s = rep["summary"]
    assert s["prompt_tokens"] == 8 * 32
    assert rep["warmup"] == {"ok": 2, "failed": 0}
    assert rep["config"]["vocab_size"] == 4096  # read from the server
    # Distinct random prompts: nothing for the prefix cache, not even the warmup's.
    assert rep["server_metrics"]["prefix_cache_hits"] == 0
    assert rep["server_metrics"]["prefix_cache_queries"] == 8 * 32
    assert "requests ok / failed / cancelled   8 / 0 / 0" in table and "TTFT" in table and "ITL" in table


def test_random_chat(server, tmp_path):
    rep, _ = loadgen(server, tmp_path, "--endpoint", "chat", "--num-prompts", "4", "--concurrency", "2",
                     "--prompt-tokens", "48", "--output-tokens", "6")
    check_consistent(rep, 4, 6)
    assert rep["server_metrics"]["prefix_cache_hits"] == 0


def test_failures_are_counted(server, tmp_path):
    # Prompts at the model's 4096-token context leave no room for output: every request is a 400.
    rep, table = loadgen(server, tmp_path, "--num-prompts", "3", "--concurrency", "3", "--prompt-tokens", "4096",
                         "--output-tokens", "4", expect_rc=1)
    s = rep["summary"]
    assert s["requests"] == {"ok": 0, "failed": 3, "cancelled": 0}
    assert s["errors"][0]["count"] == 3 and s["errors"][0]["error"].startswith("HTTP 400")
    assert "first errors" in table and "context length" in table


def generated(server):
    m = httpx.get(server.base + "/metrics", headers=server.headers(), timeout=10).text
    return float(re.search(r"^gridq:generation_tokens_total{[^}]*} (\S+)$", m, re.M).group(1))


def test_interrupt_reports_partial(server, tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.Popen([sys.executable, str(LOADGEN), "--base-url", server.base, "--api-key", API_KEY,
                          "--num-prompts", "1000", "--concurrency", "2", "--prompt-tokens", "16",
                          "--output-tokens", "4", "--out", str(out), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Interrupt once the server has generated tokens for it (the measured phase, its SIGINT handler installed).
    base = generated(server)
    deadline = time.time() + 60
    while generated(server) < base + 8 and time.time() < deadline and p.poll() is None:
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    stdout, _ = p.communicate(timeout=30)
    assert p.returncode == 130, stdout
    rep = json.loads(out.read_text())
    s = rep["summary"]
    assert rep["interrupted"] and "INTERRUPTED" in stdout
    assert s["requests"]["failed"] == 0 and s["requests"]["ok"] + s["requests"]["cancelled"] < 1000
    assert s["output_tokens"] == 4 * s["requests"]["ok"]


AGENT = ["--workload", "agent", "--users", "2", "--turns", "2", "--system-tokens", "96", "--user-tokens", "16",
         "--output-tokens", "6", "--sync-turns"]


def test_agent_prefix_cache_hits(server, tmp_path):
    rep, table = loadgen(server, tmp_path, *AGENT)
    check_consistent(rep, 4, 6)
    assert 90 <= rep["config"]["system_prompt_tokens_measured"] <= 96
    turns = rep["by_turn"]
    assert [t["turn"] for t in turns] == [1, 2] and all(t["ok"] == 2 for t in turns)
    # Turn 2 resends turn 1's conversation: most of its prompt is cached.
    assert turns[1]["prefix_cache_hit_rate"] > 0.5
    assert turns[1]["mean_prompt_tokens"] > turns[0]["mean_prompt_tokens"]
    assert all(t["ttft_ms"]["n"] == 2 for t in turns)
    assert rep["server_metrics"]["prefix_cache_hits"] == sum(t["prefix_cache_hits"] for t in turns)
    # Hit tokens the sliding-window layers computed again (no ring snapshots on the CPU backend), by turn.
    assert rep["server_metrics"]["prefix_cache_recomputed_tokens"] == sum(
        t["prefix_cache_recomputed_tokens"] for t in turns)
    assert rep["meta"]["server"]["cache_config"]["enable_prefix_caching"] == "True"
    assert "hit %" in table and "recomputed" in table


def test_agent_without_prefix_caching(tmp_path):
    s = Server("--max-num-seqs", "8", "--no-enable-prefix-caching")
    try:
        rep, _ = loadgen(s, tmp_path, *AGENT)
    finally:
        s.stop()
    check_consistent(rep, 4, 6)
    assert rep["meta"]["server"]["cache_config"]["enable_prefix_caching"] == "False"
    assert rep["server_metrics"]["prefix_cache_hits"] == 0
    assert all(not t["prefix_cache_hit_rate"] for t in rep["by_turn"])


def test_agent_history_with_tool_calls(server):
    # The tiny model seldom calls a tool; the history an agent sends after one must still be a valid request.
    from loadgen_client import Result
    from loadgen_workloads import TOOLS, AgentWorkload

    res = Result(text="", tool_calls=[{"id": "call_abc", "type": "function",
                                       "function": {"name": "read_file", "arguments": '{"path": "a.cpp"}'}}])
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    msgs += AgentWorkload.answer_messages(res, thinking=False)
    assert msgs[2]["content"] is None and msgs[3] == {"role": "tool", "tool_call_id": "call_abc",
                                                      "content": "ok: 12 lines"}
    msgs.append({"role": "user", "content": "next"})
    r = httpx.post(server.base + "/v1/chat/completions", headers=server.headers(), timeout=60,
                   json={"model": MODEL_ID, "messages": msgs, "tools": TOOLS, "max_tokens": 2})
    assert r.status_code == 200, r.text
