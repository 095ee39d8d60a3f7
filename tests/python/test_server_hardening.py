"""Issue 14 (hardening and client compatibility) against a live server: bounded metric labels, unknown methods,
ambiguous headers, nullable fields, request validation, start-up flag checks and --api-key-file."""

import json
import socket
import subprocess
import time

import httpx
import pytest

from server_util import API_KEY, MODEL_DIR, MODEL_ID, Server, free_port, gridq_bin


@pytest.fixture(scope="module")
def server():
    s = Server("--max-model-len", "256")
    yield s
    s.stop()


def raw(server, data: bytes, timeout=10.0) -> bytes:
    """Sends raw bytes on a fresh connection and returns everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                length = [int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")]
                if length and len(body) >= length[0]:
                    break
        return out


def status_of(resp: bytes) -> int:
    return int(resp.split(b" ", 2)[1])


def metrics(server) -> str:
    r = httpx.get(server.base + "/metrics", headers=server.headers(), timeout=10)
    assert r.status_code == 200
    return r.text


def chat(**kw):
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    body.update(kw)
    return body


def post(server, path, body):
    return httpx.post(server.base + path, json=body, headers=server.headers(), timeout=60)


# --- item 1: no metric label takes an unbounded client value ---

def test_unknown_methods_are_refused_before_accounting(server):
    before = metrics(server)
    for i in range(200):
        method = ("X" * 8000 + str(i)).encode()
        r = raw(server, method + b" /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert status_of(r) == 501, r[:200]
        assert b'"error"' in r
    # A known path with a made-up method, a lower-case one, and unknown paths with a key.
    assert status_of(raw(server, b"get /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 501
    for i in range(50):
        httpx.get(server.base + f"/nope/{'y' * 500}{i}", headers=server.headers(), timeout=10)
    after = metrics(server)
    assert "XXXX" not in after and "yyyy" not in after
    # Only the new 404 series (handler "other") and the /metrics scrape itself may be new.
    assert len(after) < len(before) + 1000, (len(before), len(after))


def test_known_methods_still_get_405_and_are_counted(server):
    r = httpx.request("DELETE", server.base + "/v1/models", headers=server.headers(), timeout=10)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert 'handler="/v1/models",method="DELETE",status="405"' in metrics(server)


# --- item 6: ambiguous requests are refused ---

def test_duplicate_authorization_is_400(server):
    r = raw(server, (f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                     f"Authorization: Bearer wrong\r\nConnection: close\r\n\r\n").encode())
    assert status_of(r) == 400, r[:300]
    assert b"duplicate authorization" in r
    # The same with the valid key second: still ambiguous.
    r = raw(server, (f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
                     f"Authorization: Bearer {API_KEY}\r\nConnection: close\r\n\r\n").encode())
    assert status_of(r) == 400


def test_obs_fold_is_400(server):
    for fold in (b" ", b"\t"):
        r = raw(server, (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n" + fold +
                         API_KEY.encode() + b"\r\nConnection: close\r\n\r\n"))
        assert status_of(r) == 400, r[:300]
        assert b"obs-fold" in r
    # Whitespace before the first header line is the same defect (RFC 9112 §2.2).
    r = raw(server, b"GET /health HTTP/1.1\r\n Host: x\r\nConnection: close\r\n\r\n")
    assert status_of(r) == 400
    # An ordinary request on the same server still works.
    assert httpx.get(server.base + "/health", timeout=10).status_code == 200


# --- item 7: nullable fields take null as the default ---

NULLABLE_CHAT = ["seed", "n", "max_completion_tokens", "top_logprobs", "temperature", "top_p", "stop",
                 "logprobs", "presence_penalty", "frequency_penalty", "user", "tools", "tool_choice",
                 "response_format", "stream_options", "logit_bias", "parallel_tool_calls", "stream",
                 "metadata", "service_tier", "store", "reasoning_effort"]


def test_nullable_chat_fields(server):
    for field in NULLABLE_CHAT:
        r = post(server, "/v1/chat/completions", chat(**{field: None}))
        assert r.status_code == 200, (field, r.text)
    body = chat(**{f: None for f in NULLABLE_CHAT})
    body["max_tokens"] = None
    body["max_completion_tokens"] = 2
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["logprobs"] is None and len(r.json()["choices"]) == 1


def test_nullable_completion_fields_as_langchain_sends_them(server):
    # LangChain's OpenAI (completions) client sends these nulls on every call.
    body = {"model": MODEL_ID, "prompt": "def f():", "max_tokens": 2, "seed": None, "n": None, "logprobs": None,
            "best_of": None, "suffix": None, "echo": None, "stop": None, "user": None, "logit_bias": None,
            "temperature": None, "top_p": None, "presence_penalty": None, "frequency_penalty": None}
    r = post(server, "/v1/completions", body)
    assert r.status_code == 200, r.text
    body["max_tokens"] = None  # null -> the default (16, clamped to the room left)
    r = post(server, "/v1/completions", body)
    assert r.status_code == 200, r.text


# --- item 11: request validation as OpenAI's ---

def test_message_validation(server):
    r = post(server, "/v1/chat/completions", chat(messages=[]))
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    msgs = [{"role": "user", "content": "x"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "content": "42"}]
    r = post(server, "/v1/chat/completions", chat(messages=msgs))
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[2].tool_call_id", r.text
    msgs[2]["tool_call_id"] = "c1"
    assert post(server, "/v1/chat/completions", chat(messages=msgs)).status_code == 200


def test_legacy_functions_are_refused_by_name(server):
    fn = {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    for body, param in ((chat(functions=[fn]), "functions"), (chat(function_call="auto"), "function_call"),
                        (chat(function_call={"name": "get_weather"}), "function_call")):
        r = post(server, "/v1/chat/completions", body)
        assert r.status_code == 400, r.text
        e = r.json()["error"]
        assert e["param"] == param and param in e["message"] and e["code"] == "unsupported_parameter"


# --- item 5: nonsense flag values are refused at start-up ---

@pytest.mark.parametrize("flags", [
    ["--max-model-len", "0"], ["--max-num-batched-tokens", "-5"], ["--max-body-bytes", "0"],
    ["--max-body-bytes", "-5"], ["--served-model-name", ""], ["--queue-timeout", "-1"],
    ["--shutdown-timeout", "-0.5"], ["--shutdown-timeout", "nan"], ["--threads", "-1"], ["--max-num-seqs", "0"],
    ["--port", "70000"], ["--api-key", ""], ["--gpu-memory-utilization", "nan"],
], ids=lambda f: " ".join(f) or "''")
def test_nonsense_flags_refused_at_start(flags):
    t0 = time.time()
    r = subprocess.run([gridq_bin(), "serve", str(MODEL_DIR), "--port", "0", *flags], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0, r.stderr
    assert flags[0] in r.stderr, r.stderr
    assert "listening" not in r.stderr
    assert time.time() - t0 < 10


def test_busy_port_is_reported_before_pins_are_hashed(tmp_path):
    import shutil
    d = tmp_path / MODEL_ID
    shutil.copytree(MODEL_DIR, d)
    out = subprocess.run([gridq_bin(), "pin", str(d)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = subprocess.run([gridq_bin(), "serve", str(d), "--port", str(port)], capture_output=True, text=True,
                           timeout=30)
    assert r.returncode != 0
    assert "cannot listen" in r.stderr, r.stderr
    assert "verified" not in r.stderr  # the pins were not hashed first


# --- item 6: --api-key-file ---

def test_api_key_file_trims_and_skips_comments(tmp_path):
    f = tmp_path / "keys"
    f.write_text("# team keys\r\n\r\n   first-key  \r\n#disabled-key\n\tsecond-key\n")
    s = Server("--api-key-file", str(f), api_key=None)
    try:
        for key, ok in (("first-key", True), ("second-key", True), ("disabled-key", False), ("#disabled-key", False),
                        ("  first-key", False)):
            r = httpx.get(s.base + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
            assert (r.status_code == 200) == ok, (key, r.status_code)
        assert "every route is open" not in s.output()
    finally:
        s.stop()


def test_api_key_file_without_keys_is_refused(tmp_path):
    f = tmp_path / "keys"
    f.write_text("# nothing here yet\n\n   \n")
    r = subprocess.run([gridq_bin(), "serve", str(MODEL_DIR), "--port", str(free_port()), "--api-key-file", str(f)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "no API key" in r.stderr and str(f) in r.stderr, r.stderr
    assert "listening" not in r.stderr


# --- item 9: routes and HTTP behaviour real clients rely on ---

def test_model_by_id(server):
    r = httpx.get(server.base + f"/v1/models/{MODEL_ID}", headers=server.headers(), timeout=10)
    assert r.status_code == 200, r.text
    m = r.json()
    assert m["id"] == MODEL_ID and m["object"] == "model" and m["max_model_len"] == 256
    assert server.client().models.retrieve(MODEL_ID).id == MODEL_ID
    r = httpx.get(server.base + "/v1/models/nope", headers=server.headers(), timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert httpx.get(server.base + f"/v1/models/{MODEL_ID}", timeout=10).status_code == 401


def test_head_health_and_version(server):
    r = httpx.head(server.base + "/health", timeout=10)
    assert r.status_code == 200 and r.content == b""
    assert int(r.headers["content-length"]) == len(httpx.get(server.base + "/health").content)
    r = httpx.get(server.base + "/version", timeout=10)  # public, as in vLLM
    assert r.status_code == 200 and isinstance(r.json()["version"], str) and r.json()["version"]
    r = httpx.request("PUT", server.base + "/health", timeout=10)
    assert r.status_code == 405 and "HEAD" in r.headers["allow"]


def test_expect_100_continue(server):
    body = json.dumps(chat()).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n"
                   "Connection: close\r\n\r\n").encode())
        interim = s.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
        s.sendall(body)
        out = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
        while chunk := s.recv(65536):
            out += chunk
    assert out.startswith(b"HTTP/1.1 200"), out[:200]
    r = raw(server, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nContent-Length: 2\r\n"
                    b"Connection: close\r\n\r\n")
    assert status_of(r) == 417


def test_http10_stream_is_close_delimited(server):
    # Repeated: the server must close after the last event whether or not that event's write has completed
    # by the time the stream ends (a race that once left the connection open now and then).
    body = json.dumps(chat(stream=True, max_tokens=3)).encode()
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall((f"POST /v1/chat/completions HTTP/1.0\r\nAuthorization: Bearer {API_KEY}\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
            out = b""
            while chunk := s.recv(65536):  # ends when the server closes: the stream's only delimiter
                out += chunk
        head, _, rest = out.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert b"transfer-encoding" not in head.lower()
        assert rest.startswith(b"data: {"), rest[:50]  # no chunk-size line
        assert rest.endswith(b"data: [DONE]\n\n"), rest[-50:]


def test_cors_default_allows_every_origin(server):
    r = httpx.request("OPTIONS", server.base + "/v1/models",
                      headers={"Origin": "https://app.example", "Access-Control-Request-Method": "GET",
                               "Access-Control-Request-Headers": "authorization, content-type"}, timeout=10)
    assert r.status_code == 200 and r.content == b""
    assert r.headers["access-control-allow-origin"] == "*"
    assert "GET" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"] == "authorization, content-type"
    r = httpx.get(server.base + "/v1/models", headers={**server.headers(), "Origin": "https://app.example"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-origin" not in httpx.get(server.base + "/v1/models", headers=server.headers()).headers


def test_cors_allowed_origins_list():
    s = Server("--allowed-origins", '["https://ok.example"]')
    try:
        pre = {"Access-Control-Request-Method": "POST"}
        r = httpx.request("OPTIONS", s.base + "/v1/chat/completions", headers={"Origin": "https://ok.example", **pre})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://ok.example"
        assert r.headers["vary"] == "Origin"
        r = httpx.request("OPTIONS", s.base + "/v1/chat/completions", headers={"Origin": "http://evil", **pre})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
        r = httpx.get(s.base + "/v1/models", headers={**s.headers(), "Origin": "http://evil"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    finally:
        s.stop()
    r = subprocess.run([gridq_bin(), "serve", str(MODEL_DIR), "--port", "0", "--allowed-origins", "https://x"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "--allowed-origins" in r.stderr
