"""End-to-end check of `gridq serve --device cuda` on the GPU machine, with httpx only (the openai SDK and
pydantic do not fit in the tree that travels to the GPU machine, so the full Python suite runs on the CPU
server in CI; this covers the CUDA server's paths): health, models, greedy completions identical to
`gridq generate --device cuda`, streamed chat whose content never holds </think>, and 16 concurrent greedy
requests each identical to the same request alone (batch invariance through the scheduler).

  python3 bench/gpu_serve_smoke.py GRIDQ_BIN MODEL_DIR
"""

import concurrent.futures as cf
import json
import socket
import subprocess
import sys
import time

import httpx

KEY = "smoke-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    gridq, model = sys.argv[1], sys.argv[2]
    prompt = "def fibonacci(n):"
    # Before the server starts: it takes --gpu-memory-utilization of the GPU for KV, leaving none for a second engine.
    gen = subprocess.run([gridq, "generate", model, "--device", "cuda", "--prompt", prompt, "--max-tokens", "48"],
                         capture_output=True, text=True, timeout=120)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open("/tmp/serve_smoke.log", "w")
    proc = subprocess.Popen([gridq, "serve", model, "--device", "cuda", "--port", str(port), "--api-key", KEY,
                             "--max-num-seqs", "16", "--served-model-name", "m"], stdout=log, stderr=subprocess.STDOUT)
    failures, checks = [], []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        checks.append(what)
        if not cond:
            failures.append(what)

    try:
        h = {"Authorization": f"Bearer {KEY}"}
        t0 = time.time()
        while time.time() - t0 < 120:
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                break
            time.sleep(0.3)
        check(proc.poll() is None, f"server is up after {time.time() - t0:.1f} s")
        models = httpx.get(base + "/v1/models", headers=h, timeout=10).json()
        check(models["data"][0]["id"] == "m", "/v1/models lists the served name")

        body = {"model": "m", "prompt": prompt, "max_tokens": 48, "temperature": 0, "skip_special_tokens": False}
        r = httpx.post(base + "/v1/completions", headers=h, json=body, timeout=60).json()
        text = r["choices"][0]["text"]
        same = gen.stdout.startswith(prompt) and gen.stdout[len(prompt):-1] == text
        check(same, "greedy /v1/completions == gridq generate --device cuda")
        if not same:
            print("  serve:    " + repr(text) + "\n  generate: " + repr(gen.stdout[len(prompt):-1]))

        chat = {"model": "m", "messages": [{"role": "user", "content": "Write a Python function that adds two numbers."}],
                "max_tokens": 64, "temperature": 0, "stream": True}
        content, reasoning, done = "", "", False
        with httpx.stream("POST", base + "/v1/chat/completions", headers=h, json=chat, timeout=60) as s:
            for line in s.iter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                d = json.loads(line[6:])["choices"][0]["delta"]
                content += d.get("content") or ""
                reasoning += d.get("reasoning_content") or d.get("reasoning") or ""
        check(done and (content or reasoning), f"streamed chat completes ({len(content)} content chars)")
        check("</think>" not in content, "no </think> in streamed content")

        prompts = [f"# task {i}\ndef f{i}(x):" for i in range(16)]
        def one(p):
            b = {"model": "m", "prompt": p, "max_tokens": 32, "temperature": 0}
            return httpx.post(base + "/v1/completions", headers=h, json=b, timeout=120).json()["choices"][0]["text"]
        alone = [one(p) for p in prompts]
        with cf.ThreadPoolExecutor(16) as ex:
            together = list(ex.map(one, prompts))
        same = sum(a == b for a, b in zip(alone, together))
        check(same == 16, f"16 concurrent greedy requests identical to each alone ({same}/16)")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        print("".join(l for l in open("/tmp/serve_smoke.log") if "memory:" in l or "device:" in l or "kernel:" in l))
    print(f"{len(checks) - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
