"""Start-up and shutdown of gridq serve (api.md §9, §11 T4, T24-T27, T33): pins, signals, draining."""

import json
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest

from server_util import MODEL_DIR, MODEL_ID, REPO, Server, gridq_bin


def test_sigterm_mid_load_exits_cleanly():
    s = Server(wait=False)
    try:
        deadline = time.time() + 30
        # Wait until it listens (health 503 while loading, or 200 if loading already finished).
        while time.time() < deadline:
            try:
                r = httpx.get(s.base + "/health", timeout=0.5)
                assert r.status_code in (200, 503)
                if r.status_code == 503:
                    assert r.json()["error"]["code"] in ("loading",)
                break
            except httpx.TransportError:
                time.sleep(0.01)
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=10) == 0
    finally:
        s.stop()


def test_sigterm_lets_inflight_finish_and_refuses_new():
    s = Server("--shutdown-timeout", "30")
    try:
        c = s.client(strict=False)  # a completions stream (see Server.client)
        result = {}

        def run():
            st = c.completions.create(model=MODEL_ID, prompt="def main():", max_tokens=48, temperature=0, stream=True,
                                      extra_body={"ignore_eos": True})
            text, finish = "", None
            for ev in st:
                if ev.choices:
                    text += ev.choices[0].text
                    finish = ev.choices[0].finish_reason or finish
            result["finish"] = finish

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.3)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        try:
            r = httpx.post(s.base + "/v1/completions", headers=s.headers(),
                           json={"model": MODEL_ID, "prompt": "x", "max_tokens": 2}, timeout=5)
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "shutting_down"
            h = httpx.get(s.base + "/health", timeout=5)
            assert h.status_code == 503
        except httpx.TransportError:
            pass  # already gone: the in-flight request was short
        t.join(timeout=30)
        assert result.get("finish") == "length"
        assert s.proc.wait(timeout=15) == 0
    finally:
        s.stop()


def test_shutdown_timeout_zero_aborts_streams_with_error_event():
    s = Server("--shutdown-timeout", "0")
    try:
        body = {"model": MODEL_ID, "prompt": "def main():", "max_tokens": 900, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", s.base + "/v1/completions", json=body, headers=s.headers(), timeout=30) as r:
            it = r.iter_text()
            first = next(it)
            assert first.startswith("data: ")
            t0 = time.time()
            s.proc.send_signal(signal.SIGTERM)
            rest = first + "".join(it)
        events = [e for e in rest.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        assert "error" in json.loads(events[-2][len("data: "):])
        assert s.proc.wait(timeout=4) == 0
        assert time.time() - t0 < 4
    finally:
        s.stop()


def test_sdk_raises_api_error_on_error_event():
    s = Server("--shutdown-timeout", "0")
    try:
        # Not strict (see Server.client): strict validation would raise APIResponseValidationError, itself an
        # APIError, on the first chunk, before the signal, and prove nothing about the error event.
        c = s.client(strict=False)
        st = c.completions.create(model=MODEL_ID, prompt="def main():", max_tokens=900, stream=True,
                                  extra_body={"ignore_eos": True})
        with pytest.raises(openai.APIError):
            for i, _ in enumerate(st):
                if i == 1:
                    s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=4)
    finally:
        s.stop()


def copy_model(tmp_path):
    d = tmp_path / MODEL_ID
    shutil.copytree(MODEL_DIR, d)
    return d


def test_tampered_artifact_refuses_to_start(tmp_path):
    d = copy_model(tmp_path)
    out = subprocess.run([gridq_bin(), "pin", str(d)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (d / "PINS.json").exists()
    ok = subprocess.run([gridq_bin(), "pin", str(d), "--verify"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    with open(d / "config.json", "a") as f:
        f.write(" ")
    r = subprocess.run([gridq_bin(), "serve", str(d), "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "config.json" in r.stderr and "refusing to start" in r.stderr
    # --skip-pin-check starts anyway and says so loudly.
    s = Server("--skip-pin-check", model_dir=d)
    try:
        assert "--skip-pin-check" in s.output() and "WARNING" in s.output()
    finally:
        s.stop()


def model_info_format(server):
    m = httpx.get(server.base + "/metrics", headers=server.headers()).text
    line = [x for x in m.splitlines() if x.startswith("gridq:model_info{")][0]
    return re.search(r'format="([^"]*)"', line).group(1)


def test_kernel_path_logged():
    # A plain HF checkpoint without PINS.json: served with a warning; its weights are all BF16.
    s = Server()
    try:
        out = s.output()
        assert "WARNING" in out and "no PINS.json" in out
        kernels = [x for x in out.splitlines() if "kernel: weights " in x]
        # The path named is the device's own: the CPU's matmul or the CUDA engine (GRIDQ_SERVE_ARGS=--device cuda).
        path = "runtime/cuda" if "device: cuda" in out else "runtime/cpu/matmul.cpp"
        assert len(kernels) == 1 and "kernel: weights BF16:" in kernels[0] and path in kernels[0], out
        assert model_info_format(s) == "BF16"
    finally:
        s.stop()


def fp8_tensor_count(d):
    """F8_E4M3 tensors in an artifact's safetensors headers: the FP8 W8A8 matrices, counted independently of
    gridq."""
    n = 0
    for f in d.glob("*.safetensors"):
        with open(f, "rb") as fh:
            size = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(size))
        n += sum(1 for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F8_E4M3")
    return n


def test_artifact_needs_pins_and_reports_its_formats(tmp_path):
    art = tmp_path / "fp8art"
    mk = subprocess.run([sys.executable, str(REPO / "tests" / "cli" / "make_fp8_artifact.py"), str(MODEL_DIR), str(art)],
                        capture_output=True, text=True, timeout=120)
    assert mk.returncode == 0, mk.stderr
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(MODEL_DIR / f, art / f)  # the maker writes weights and configs only
    assert not (art / "PINS.json").exists()
    # An artifact without pins is refused, pointing at `gridq pin`.
    r = subprocess.run([gridq_bin(), "serve", str(art), "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "refusing to start" in r.stderr and "PINS.json" in r.stderr and f"gridq pin {art}" in r.stderr, r.stderr
    # --skip-pin-check serves it, loudly; the log and model_info name the formats the engine really runs.
    s = Server("--skip-pin-check", model_dir=art)
    try:
        out = s.output()
        assert "WARNING: --skip-pin-check" in out and "UNVERIFIED" in out
        kernels = {x.split("kernel: weights ", 1)[1].split(":", 1)[0]: x for x in out.splitlines() if "kernel: weights " in x}
        assert set(kernels) == {"BF16", "FP8_W8A8"}, out
        assert f"FP8_W8A8: {fp8_tensor_count(art)} matrices" in kernels["FP8_W8A8"]
        assert "W8A8" in kernels["FP8_W8A8"] and "per-token" in kernels["FP8_W8A8"]
        assert model_info_format(s) == "BF16+FP8_W8A8"
    finally:
        s.stop()
    # Once pinned it starts with the pins verified.
    assert subprocess.run([gridq_bin(), "pin", str(art)], capture_output=True, timeout=60).returncode == 0
    s = Server(model_dir=art)
    try:
        assert "verified" in s.output() and "WARNING" not in s.output()
    finally:
        s.stop()
