#!/usr/bin/env python3
"""A load generator for OpenAI-compatible servers (gridq serve, vLLM, SGLang), with asyncio and httpx only, for
machines where guidellm and aiperf cannot be installed (docs/serving.md "Load testing"; issue 11).

  python3 bench/loadgen.py --base-url http://127.0.0.1:8000 --api-key KEY \\
      --workload random --concurrency 64 --prompt-tokens 1024 --output-tokens 256 --num-prompts 256
  python3 bench/loadgen.py --base-url ... --workload agent --system-tokens 4096 --users 32 --turns 8 --sync-turns

Every request streams and asks for exactly --output-tokens tokens (`max_tokens` = `min_tokens` = O,
`ignore_eos: true`), so a request that ends early counts as failed. `random` sends distinct prompts that no
prefix cache can share: token ids to /v1/completions (no tokenizer needed client-side) or seeded words to
/v1/chat/completions. `agent` is U users sharing one S-token system prompt and tools, T turns each, every turn
resending the conversation (bench/loadgen_workloads.py says why it uses chat). Token counting and timing:
bench/loadgen_client.py; the statistics: bench/loadgen_report.py. The report (table, or --json / --out FILE)
records the machine, date, server version, the server's cache configuration and the command line; the server's
/metrics counters are read before and after the measured phase (prefix-cache hit rate, generation tokens,
preemptions). Exit status: 0, 1 if a request failed, 130 if interrupted (Ctrl-C prints what was measured).
Python 3.9 or later.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import signal
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadgen_client import Result, ServerInfo, metrics_delta, stream_request  # noqa: E402
from loadgen_report import (by_turn, format_table, git_commit, machine_info, masked_command,  # noqa: E402
                            summarize)
from loadgen_workloads import AgentWorkload, TextSizer, random_chat_messages, random_ids  # noqa: E402

WARMUP_SEED_OFFSET = 1_000_000


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--base-url", default="http://127.0.0.1:8000", help="server root (a trailing /v1 is accepted)")
    a("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="bearer key (default $OPENAI_API_KEY)")
    a("--model", help="model id (default: the first of /v1/models)")
    a("--workload", choices=("random", "agent"), default="random")
    a("--endpoint", choices=("completions", "chat"),
      help="random: completions (token ids, default) or chat (words); agent: chat only")
    a("--num-prompts", type=int, help="random: requests to send (default 4 x concurrency, unbounded with "
                                      "--duration alone)")
    a("--concurrency", type=int, help="requests in flight at most (default 8; agent: --users)")
    a("--request-rate", type=float, default=0.0, help="random: Poisson arrivals per second (0 = as fast as "
                                                      "--concurrency allows)")
    a("--prompt-tokens", type=int, default=256, help="random: prompt length")
    a("--output-tokens", type=int, default=128, help="output tokens of every request (exact)")
    a("--vocab-size", type=int, help="random completions: ids in [0, V) (default: asked of the server)")
    a("--users", type=int, default=4, help="agent: concurrent users")
    a("--turns", type=int, default=4, help="agent: turns per user")
    a("--system-tokens", type=int, default=1024, help="agent: tokens of the shared system prompt (plus tools)")
    a("--user-tokens", type=int, default=64, help="agent: tokens of each new user message")
    a("--no-tools", action="store_true", help="agent: no tool definitions in the shared prefix")
    a("--sync-turns", action="store_true",
      help="agent: all users finish turn k before turn k+1 starts; gives the prefix-cache hit rate by turn")
    a("--enable-thinking", action="store_true", help="chat: leave the template's thinking on (default off)")
    a("--temperature", type=float, default=0.0)
    a("--seed", type=int, help="prompt seed (default: a fresh one per run, recorded in the report; a run that "
                               "reuses a seed finds its prompts in the server's prefix cache)")
    a("--warmup", type=int, default=0, help="requests sent first and not counted (other prompts)")
    a("--duration", type=float, help="seconds after which no new request (or turn) starts; in-flight ones finish")
    a("--timeout", type=float, default=600.0, help="seconds a request may take")
    a("--extra-body", type=json.loads, default={}, help="JSON object merged into every request body")
    a("--no-usage", action="store_true", help="do not send stream_options (count output chunks instead)")
    a("--allow-short", action="store_true", help="a request with fewer output tokens than asked is not a failure")
    a("--json", action="store_true", help="print the JSON report on stdout instead of the table")
    a("--out", help="also write the JSON report to this file")
    a("--per-request", action="store_true", help="include every request's numbers in the JSON")
    a("--progress", action=argparse.BooleanOptionalAction, default=None,
      help="progress line on stderr (default: when stderr is a terminal)")
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    if args.workload == "agent":
        if args.endpoint == "completions":
            p.error("--workload agent talks chat (bench/loadgen_workloads.py says why)")
        args.endpoint = "chat"
        args.concurrency = args.concurrency or args.users
    args.endpoint = args.endpoint or "completions"
    args.concurrency = args.concurrency or 8
    if args.num_prompts is None and args.duration is None:
        args.num_prompts = 4 * args.concurrency
    for name in ("concurrency", "output_tokens", "prompt_tokens", "users", "turns"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


class Run:
    def __init__(self, args, server: ServerInfo, model: str):
        self.args, self.server, self.model = args, server, model
        self.results: list = []
        self.live: set = set()          # Results of requests in flight (for the progress line)
        self.tasks: set = set()
        self.stop = asyncio.Event()     # Ctrl-C: stop issuing, cancel what is in flight
        self.interrupted = False
        self.deadline = None
        self.t0 = None
        self.total = None
        self.client = None
        self.path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"

    def issuing(self):
        return not self.stop.is_set() and (self.deadline is None or time.perf_counter() < self.deadline)

    def body(self, prompt=None, messages=None, tools=None):
        a = self.args
        b = {"model": self.model, "max_tokens": a.output_tokens, "min_tokens": a.output_tokens, "ignore_eos": True,
             "temperature": a.temperature, "stream": True}
        if not a.no_usage:
            b["stream_options"] = {"include_usage": True}
        if messages is not None:
            b["messages"] = messages
            b["chat_template_kwargs"] = {"enable_thinking": bool(a.enable_thinking)}
            if tools:
                b["tools"] = tools
        else:
            b["prompt"] = prompt
        b.update(a.extra_body)
        return b

    async def request(self, body, tag=None, keep_text=False, record=True):
        res = Result(tag=tag or {})
        self.live.add(res)
        task = asyncio.current_task()
        self.tasks.add(task)
        try:
            expect = None if self.args.allow_short else self.args.output_tokens
            res = await stream_request(self.client, self.path, body, expect, keep_text, tag, res=res)
        except asyncio.CancelledError:
            res.cancelled, res.ok, res.error = True, False, "cancelled"
            res.e2e = time.perf_counter() - res.start
        finally:
            self.live.discard(res)
            self.tasks.discard(task)
        if record:
            self.results.append(res)
        return res

    def interrupt(self):
        if self.stop.is_set():
            os._exit(130)  # a second Ctrl-C
        self.interrupted = True
        self.stop.set()
        for t in list(self.tasks):
            t.cancel()

    async def progress(self):
        while True:
            await asyncio.sleep(0.5)
            if self.t0 is None:
                continue
            el = time.perf_counter() - self.t0
            done = len(self.results)
            failed = sum(1 for r in self.results if not r.ok and not r.cancelled)
            tok = sum(r.output_tokens for r in self.results if r.ok) + sum(r.chunks for r in list(self.live))
            total = "?" if self.total is None else self.total
            sys.stderr.write(f"\r[{el:7.1f} s] {done}/{total} done, {failed} failed, {len(self.live)} in flight, "
                             f"{tok / max(el, 1e-9):8.1f} output tok/s ")
            sys.stderr.flush()

    # ---- workloads ----

    def warmup_body(self, i, sizer):
        a = self.args
        seed = a.seed + WARMUP_SEED_OFFSET
        if a.endpoint == "chat":
            tokens = a.prompt_tokens if a.workload == "random" else a.user_tokens
            return self.body(messages=random_chat_messages(sizer, seed, i, tokens))
        return self.body(prompt=random_ids(seed, i, a.prompt_tokens, a.vocab_size))

    async def warmup(self, sizer):
        n = self.args.warmup
        sem = asyncio.Semaphore(self.args.concurrency)

        async def one(i):
            async with sem:
                return await self.request(self.warmup_body(i, sizer), record=False)

        return list(await asyncio.gather(*(one(i) for i in range(n))))

    async def run_random(self, sizer):
        a = self.args
        self.total = a.num_prompts
        sem = asyncio.Semaphore(a.concurrency)
        rng = random.Random(a.seed ^ 0x5EED)
        pending = []

        async def one(i):
            try:
                if a.endpoint == "chat":
                    body = self.body(messages=random_chat_messages(sizer, a.seed, i, a.prompt_tokens))
                else:
                    body = self.body(prompt=random_ids(a.seed, i, a.prompt_tokens, a.vocab_size))
                await self.request(body, tag={"index": i})
            finally:
                sem.release()

        i = 0
        while self.issuing() and (a.num_prompts is None or i < a.num_prompts):
            if a.request_rate > 0:
                try:
                    await asyncio.wait_for(self.stop.wait(), rng.expovariate(a.request_rate))
                except asyncio.TimeoutError:
                    pass
            await sem.acquire()
            if not self.issuing():
                sem.release()
                break
            pending.append(asyncio.create_task(one(i)))
            i += 1
        await asyncio.gather(*pending)
        return None

    async def run_agent(self, wl: AgentWorkload):
        a = self.args
        self.total = a.users * a.turns
        sem = asyncio.Semaphore(a.concurrency)
        convs = {u: wl.first_messages() for u in range(a.users)}
        alive = set(range(a.users))

        async def turn(u, t):
            convs[u].append(wl.user_message(u, t))
            async with sem:
                res = await self.request(self.body(messages=list(convs[u]), tools=wl.tools),
                                         tag={"user": u, "turn": t}, keep_text=True)
            if not res.ok:
                alive.discard(u)  # an agent whose turn failed does not go on
                return
            convs[u].extend(wl.answer_messages(res, a.enable_thinking))
            res.text = res.reasoning = ""

        if a.sync_turns:
            per_turn = []
            for t in range(a.turns):
                if not self.issuing():
                    break
                before = self.server.metrics()
                await asyncio.gather(*(turn(u, t) for u in sorted(alive)))
                per_turn.append(metrics_delta(before, self.server.metrics()))
            return per_turn

        async def user(u):
            for t in range(a.turns):
                if not self.issuing() or u not in alive:
                    return
                await turn(u, t)

        await asyncio.gather(*(user(u) for u in range(a.users)))
        return None


async def main_async(args):
    server = ServerInfo(args.base_url, args.api_key)
    models = server.models()
    if not models:
        raise SystemExit("the server lists no model on /v1/models")
    model = args.model or models[0]["id"]
    if args.endpoint == "completions" and args.vocab_size is None:
        args.vocab_size = server.vocab_size()
        if args.vocab_size is None:
            raise SystemExit("cannot find the vocabulary size from the server: pass --vocab-size")
    mml = next((m.get("max_model_len") for m in models if m.get("id") == model), None)
    if mml and args.workload == "random" and args.prompt_tokens + args.output_tokens > mml:
        print(f"loadgen: warning: prompt {args.prompt_tokens} + output {args.output_tokens} tokens exceed the "
              f"server's max_model_len {mml}: the requests will fail", file=sys.stderr)
    run = Run(args, server, model)
    sizer = TextSizer(server) if args.endpoint == "chat" else None
    wl = None
    if args.workload == "agent":
        wl = AgentWorkload(sizer, args.seed, args.system_tokens, args.user_tokens, tools=not args.no_tools)
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, run.interrupt)
    except (NotImplementedError, RuntimeError):
        pass
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    prog = asyncio.create_task(run.progress()) if show else None
    limits = httpx.Limits(max_connections=args.concurrency + 8, max_keepalive_connections=args.concurrency + 8)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    timeout = httpx.Timeout(args.timeout, connect=30.0)
    async with httpx.AsyncClient(base_url=server.base, headers=headers, limits=limits, timeout=timeout) as client:
        run.client = client
        warm = await run.warmup(sizer) if args.warmup else []
        before = server.metrics()
        cpu0 = time.process_time()
        run.t0 = time.perf_counter()
        if args.duration:
            run.deadline = run.t0 + args.duration
        per_turn = await (run.run_agent(wl) if wl else run.run_random(sizer))
        wall_end = max([r.start + r.e2e for r in run.results], default=time.perf_counter())
        wall = wall_end - run.t0
        cpu = time.process_time() - cpu0
    after = server.metrics()
    if prog:
        prog.cancel()
        sys.stderr.write("\n")
    cfg = {k: v for k, v in vars(args).items() if k not in ("api_key", "json", "out", "progress")}
    cfg["max_tokens_sent"] = args.output_tokens
    if wl:
        cfg["system_prompt_tokens_measured"] = wl.system_tokens
        cfg["tools"] = [t["function"]["name"] for t in wl.tools or []]
    if sizer:
        cfg["tokens_per_word"] = sizer.per_word
    rep = {
        "meta": {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "machine": machine_info(), "command": masked_command([sys.executable] + sys.argv),
                 "server": {"base_url": server.base, "model": model, "version": server.version(),
                            "models": models, "cache_config": (before or {}).get("_cache_config"),
                            "info_metrics": (before or {}).get("_info")},
                 "loadgen_commit": git_commit()},
        "config": cfg,
        "interrupted": run.interrupted,
        "warmup": {"ok": sum(r.ok for r in warm), "failed": sum(not r.ok for r in warm)},
        "summary": summarize(run.results, wall),
        "server_metrics": metrics_delta(before, after),
        "client": {"cpu_s": cpu, "cpu_frac": cpu / wall if wall > 0 else None},
    }
    if wl:
        rep["by_turn"] = by_turn(run.results, per_turn)
    if args.per_request:
        rep["requests"] = [{"ok": r.ok, "error": r.error, "ttft_s": r.ttft, "e2e_s": r.e2e,
                            "start_s": r.start - run.t0, "output_tokens": r.output_tokens,
                            "prompt_tokens": r.prompt_tokens, "chunks": r.chunks, "finish_reason": r.finish_reason,
                            "tool_calls": len(r.tool_calls),
                            **r.tag} for r in run.results]
    return rep


def main(argv=None):
    args = parse_args(argv)
    try:
        rep = asyncio.run(main_async(args))
    except KeyboardInterrupt:  # before the run's own SIGINT handler was installed
        print("loadgen: interrupted before the measured phase", file=sys.stderr)
        return 130
    text = json.dumps(rep, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text if args.json else format_table(rep), flush=True)
    if rep["interrupted"]:
        return 130
    return 1 if rep["summary"]["requests"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
