"""Prompts for bench/loadgen.py: seeded random token ids (the `random` workload on /v1/completions), seeded random
words (the `random` workload on /v1/chat/completions) and the agent conversation (the `agent` workload).

Why the agent workload talks chat. A coding agent sends its whole conversation as messages every turn: the same
system prompt and tool definitions, then the history. The server renders them with the chat template, so what the
prefix cache can reuse is decided by how the template renders the history and how the previous answer's text
tokenizes again, not by the ids the model generated. Sending token ids to /v1/completions (turn k = turn k-1's
prompt + its output ids + new ids) would be the idealised best case, and it needs the output ids, which a
streamed completion does not return. So each turn here is a chat request with the shared system prompt (S tokens
of seeded words, measured with /tokenize), the shared tools, the user's earlier messages, the assistant answers as
the stream returned them (content, tool calls with a short tool result, and the reasoning when thinking is on)
and a new user message. Thinking is off by default: a Laguna template then renders a past answer exactly as the
generation prompt began it (`<assistant></think>` + content), so the cache can hit through the previous answer,
as it does for an agent that keeps its answers; with thinking on the template drops past reasoning
(unless preserve_thinking), and the hit ends where the last answer began.
"""

from __future__ import annotations

import random

# Plain English words: each is one to three tokens in a BPE vocabulary of 4k to 150k tokens.
WORDS = (
    "the of and to in is that for it as with was on be by this are or from at which but not have an they you one "
    "all were can there been if more when will would who so no their has its into only other time some could new "
    "these two may first then do any like my now over such our man me even most made after also did many before "
    "must through back years where much your way well down should because each just those people how too little "
    "state good very make world still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right used take three states "
    "himself few house use during without again place around however home small found thought went say part once "
    "general high upon school every don does got united left number course war until always away something fact "
    "though water less public put think almost hand enough far took head yet government system better set told "
    "nothing night end why called eyes find going look asked later knew point next program city business give group "
    "toward young days let room president side social given present several order national possible rather second "
    "face per among form important often things looked early white case john become large big need four within felt "
    "along children saw best church ever least power development light thing seemed family interest want members "
    "mind country area others done turned although open problem sense began help whole kind"
).split()

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository and return its text.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "path relative to the repository root"},
            "start_line": {"type": "integer"}, "end_line": {"type": "integer"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Replace the whole text of a file, creating it if needed.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "run_shell", "description": "Run a shell command in the repository and return its output.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string"}, "timeout_s": {"type": "number"}}, "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "search_code", "description": "Search the repository for a regular expression.",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string"}, "glob": {"type": "string"}}, "required": ["pattern"]}}},
]


def random_ids(seed: int, index: int, n: int, vocab: int, low: int = 0) -> list:
    """n token ids uniform in [low, vocab), a pure function of (seed, index): distinct requests share no page of
    16 ids, so none is a prefix-cache hit."""
    rng = random.Random(seed * 1_000_003 + index)
    return [rng.randrange(low, vocab) for _ in range(n)]


def random_words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(n, 0)))


class TextSizer:
    """Turns a token count into a word count: tokens per word measured once with the server's /tokenize on a
    sample of the word list (1.3 assumed when the server has no /tokenize)."""

    def __init__(self, server):
        self.server = server
        sample = random_words(random.Random(12345), 1000)
        n = server.count_tokens(sample) if server else None
        self.measured = n is not None
        self.per_word = (n / 1000) if n else 1.3
        self._overhead = None

    def chat_overhead(self, tag: str) -> int:
        """Tokens of the system tag plus about 12 of chat markup (a template's own count is not measurable
        through /tokenize, which takes a plain prompt)."""
        if self._overhead is None:
            n = self.server.count_tokens(tag) if self.measured else None
            self._overhead = (n if n is not None else len(tag) // 3) + 12
        return self._overhead

    def words_for(self, tokens: int) -> int:
        return max(1, round(tokens / self.per_word))

    def text_of_tokens(self, rng: random.Random, tokens: int) -> str:
        return random_words(rng, self.words_for(tokens))

    def exact_text(self, rng: random.Random, tokens: int, head: str = "") -> tuple:
        """A text of head + seeded words that tokenizes to `tokens` tokens (to within one word; binary search on
        the word count with /tokenize). Returns (text, measured tokens or None)."""
        words = [rng.choice(WORDS) for _ in range(self.words_for(tokens) * 2 + 16)]

        def text(k):
            return (head + " ".join(words[:k])).rstrip()

        if not self.measured:
            k = self.words_for(tokens)
            return text(k), None
        lo, hi = 0, len(words)  # count(text(lo)) <= tokens target, found by bisection on k
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.server.count_tokens(text(mid)) <= tokens:
                lo = mid
            else:
                hi = mid
        return text(lo), self.server.count_tokens(text(lo))


def random_chat_messages(sizer: TextSizer, seed: int, index: int, tokens: int) -> list:
    """A system message unique to the request (so even the template's markup plus a default system prompt is no
    shared page) and a user message of about `tokens` tokens of seeded words."""
    rng = random.Random(seed * 1_000_003 + index)
    tag = f"Session {rng.getrandbits(40):010x}."
    # Approximately `tokens` in all: the report gives the prompt lengths the server counted.
    return [{"role": "system", "content": tag},
            {"role": "user", "content": sizer.text_of_tokens(rng, max(tokens - sizer.chat_overhead(tag), 1))}]


class AgentWorkload:
    """The shared prefix and each user's messages. Warmup conversations use another seed, so they do not put the
    measured system prompt into the cache."""

    def __init__(self, sizer: TextSizer, seed: int, system_tokens: int, user_tokens: int, tools: bool = True):
        rng = random.Random(seed)
        head = (f"You are a coding agent (session {seed}-{rng.getrandbits(32):08x}) working in a large C++ "
                "repository. Follow the instructions below exactly.\n")
        self.system, self.system_tokens = sizer.exact_text(rng, system_tokens, head)
        self.sizer, self.seed, self.user_tokens = sizer, seed, user_tokens
        self.tools = TOOLS if tools else None

    def user_message(self, user: int, turn: int) -> dict:
        rng = random.Random((self.seed * 1_000_003 + user) * 1009 + turn)
        head = f"User {user}, turn {turn + 1}: "
        return {"role": "user", "content": head + self.sizer.text_of_tokens(rng, self.user_tokens)}

    def first_messages(self) -> list:
        return [{"role": "system", "content": self.system}]

    @staticmethod
    def answer_messages(res, thinking: bool) -> list:
        """The assistant message as an agent would keep it, and a short tool result per tool call."""
        calls = [c for c in res.tool_calls if c.get("id") and c["function"]["name"]]
        msg = {"role": "assistant", "content": res.text if (res.text or not calls) else None}
        if thinking and res.reasoning:
            msg["reasoning_content"] = res.reasoning
        if calls:
            msg["tool_calls"] = calls
        out = [msg]
        for c in calls:
            out.append({"role": "tool", "tool_call_id": c["id"], "content": "ok: 12 lines"})
        return out
