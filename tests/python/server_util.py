"""Shared helpers for the gridq serve tests: start `$GRIDQ_BIN serve` on a free port and wait until ready."""

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "models" / "laguna-tiny-code"
MODEL_ID = "laguna-tiny-code"
API_KEY = "test-key-123"


def gridq_bin() -> str:
    b = os.environ.get("GRIDQ_BIN")
    if b:
        return b
    for cand in ("build/gridq", "build-h7/gridq"):
        p = REPO / cand
        if p.exists():
            return str(p)
    raise RuntimeError("set GRIDQ_BIN to the gridq binary")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *extra, model_dir=MODEL_DIR, api_key=API_KEY, wait=True):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = [gridq_bin(), "serve", str(model_dir), "--port", str(self.port), "--threads", "2"]
        if api_key:
            args += ["--api-key", api_key]
        # GRIDQ_SERVE_ARGS (e.g. "--device cuda") runs the whole suite against another configuration of the
        # same server: bench/gpu_engine.sh runs it against the CUDA backend on the GPU machine.
        args += os.environ.get("GRIDQ_SERVE_ARGS", "").split()
        args += list(extra)
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"gridq-serve-{self.port}.log"
        self.log = open(self.log_path, "wb")
        # OpenMP workers that spin while they wait (libgomp's default) each take a core for seconds per decode
        # step when the 2-core CI machine is shared (the client, the server's I/O threads, other jobs): a
        # 1-token request measured 3.5 s spinning against 0.04 s passive. Passive waiting keeps the suite in
        # minutes; the numbers are the same either way.
        env = dict(os.environ)
        env.setdefault("OMP_WAIT_POLICY", "passive")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=60.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.output()}")
            try:
                r = httpx.get(self.base + "/health", timeout=1.0)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become ready: " + self.output())

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def client(self, strict=True, **kw):
        """The openai SDK, strict by default. Streamed /v1/completions need strict=False: the SDK types a
        completion choice's finish_reason as non-null, while every chunk but a choice's last carries null, as
        the OpenAI API itself sends (openai/openai-openapi#100), vLLM too, and api.md §4 rule 6 requires.
        Strict validation therefore refuses every conforming completions stream; those tests check the chunks
        with check_completion_stream instead."""
        from openai import OpenAI

        return OpenAI(base_url=self.base + "/v1", api_key=API_KEY, max_retries=0,
                      _strict_response_validation=strict, timeout=60.0, **kw)

    def headers(self):
        return {"Authorization": f"Bearer {API_KEY}"}
