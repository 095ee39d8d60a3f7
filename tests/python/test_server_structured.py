"""Structured outputs through a real `gridq serve` on the bundled model (docs/serving.md "Structured outputs"):
response_format json_schema / json_object, vLLM's structured_outputs (json, regex, choice, grammar) and the older
guided_* fields, on chat and completions, streaming and not, n > 1 and seeded. Every constrained output is
checked by an independent judge: `jsonschema` for schemas, `re.fullmatch` for regexes and grammars, membership
for choices. The schemas are bounded (enums, bounded numbers and strings, maxItems) so a tiny model always
finishes them well inside max_tokens; finish_reason must then be "stop", never "length"."""

import json
import re
import time

import httpx
import jsonschema
import pytest

from server_util import MODEL_ID, Server

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "active": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
        "id": {"type": "string", "format": "uuid"},
    },
    "required": ["name", "age", "role", "active"],
    "additionalProperties": False,
}
NESTED = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
        "point": {"$ref": "#/$defs/point"},
        "kind": {"anyOf": [{"type": "null"}, {"const": "k"}]},
        "when": {"type": "string", "format": "date"},
    },
    "required": ["id", "point", "kind", "when"],
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9},
                                                         "y": {"type": "number", "minimum": 0, "maximum": 1}},
                        "required": ["x", "y"]}},
}
MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def server():
    s = Server("--max-model-len", "1024")
    yield s
    s.stop()


def post(server, path, body):
    return httpx.post(server.base + path, json=body, headers=server.headers(), timeout=60)


def chat_body(**kw):
    body = dict(model=MODEL_ID, messages=MESSAGES, max_tokens=200, **NO_THINK)
    body.update(kw)
    return body


def sse(server, path, body):
    """The stream's chunks (the framing is checked by test_server_api's checker; here the text matters)."""
    with httpx.stream("POST", server.base + path, json=body, headers=server.headers(), timeout=60) as r:
        assert r.status_code == 200, r.read()
        data = "".join(r.iter_text())
    events = [e for e in data.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    return [json.loads(e[len("data: "):]) for e in events[:-1]]


def streamed_chat(chunks):
    out = {}
    for c in chunks:
        for ch in c["choices"]:
            text, fin = out.get(ch["index"], ("", None))
            out[ch["index"]] = (text + (ch["delta"].get("content") or ""), ch["finish_reason"] or fin)
    return out


def test_json_schema_response_format_nonstream_and_stream(server):
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    c = server.client()
    r = c.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_tokens=200, temperature=1.0, seed=7, n=3,
                                  response_format=rf, logprobs=True, extra_body=NO_THINK)
    assert len(r.choices) == 3
    total = 0
    for ch in r.choices:
        assert ch.finish_reason == "stop", ch.message.content
        jsonschema.validate(json.loads(ch.message.content), PERSON)
        total += len(ch.logprobs.content)
    assert r.usage.completion_tokens == total  # one usage token per generated token, as before
    # Streaming gives the same text for the same seed, and it validates too.
    chunks = sse(server, "/v1/chat/completions",
                 chat_body(temperature=1.0, seed=7, n=3, response_format=rf, stream=True))
    got = streamed_chat(chunks)
    for ch in r.choices:
        assert got[ch.index] == (ch.message.content, "stop")


def test_json_schema_greedy_is_deterministic_and_validates(server):
    rf = {"type": "json_schema", "json_schema": {"name": "nested", "schema": NESTED}}
    outs = []
    for _ in range(2):
        r = post(server, "/v1/chat/completions", chat_body(temperature=0, response_format=rf))
        assert r.status_code == 200, r.text
        ch = r.json()["choices"][0]
        assert ch["finish_reason"] == "stop"
        jsonschema.validate(json.loads(ch["message"]["content"]), NESTED,
                            format_checker=jsonschema.FormatChecker())
        outs.append(ch["message"]["content"])
    assert outs[0] == outs[1]


def test_json_object(server):
    for seed in range(3):
        r = post(server, "/v1/chat/completions",
                 chat_body(temperature=1.0, seed=seed, max_tokens=400, response_format={"type": "json_object"}))
        assert r.status_code == 200, r.text
        ch = r.json()["choices"][0]
        content = ch["message"]["content"]
        assert content.startswith("{")
        if ch["finish_reason"] == "stop":
            assert isinstance(json.loads(content), dict)
        else:  # unbounded: it may run out of tokens, but never leaves the JSON grammar
            assert ch["finish_reason"] == "length"


def test_structured_outputs_regex_choice_grammar(server):
    pattern = r"[a-z]{2,6}@(example|test)\.(com|org)"
    r = post(server, "/v1/chat/completions",
             chat_body(temperature=1.0, seed=3, n=2, structured_outputs={"regex": pattern}))
    assert r.status_code == 200, r.text
    for ch in r.json()["choices"]:
        assert ch["finish_reason"] == "stop" and re.fullmatch(pattern, ch["message"]["content"])
    choices = ["red", "green", "blue", "ultraviolet"]
    r = post(server, "/v1/chat/completions", chat_body(temperature=1.0, seed=5, n=4, structured_outputs={"choice": choices}))
    for ch in r.json()["choices"]:
        assert ch["finish_reason"] == "stop" and ch["message"]["content"] in choices
    gbnf = 'root ::= item ("," item){0,3}\nitem ::= [a-c]{1,4} | "(" [0-9]{1,2} ")"'
    r = post(server, "/v1/chat/completions", chat_body(temperature=1.0, seed=9, structured_outputs={"grammar": gbnf}))
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    item = r"(?:[a-c]{1,4}|\([0-9]{1,2}\))"
    assert ch["finish_reason"] == "stop" and re.fullmatch(f"{item}(?:,{item}){{0,3}}", ch["message"]["content"])


def test_guided_fields_on_completions_and_streaming(server):
    c = server.client(strict=False)
    r = c.completions.create(model=MODEL_ID, prompt="The answer is", max_tokens=50, temperature=1.0, seed=1, n=2,
                             extra_body={"guided_choice": ["yes", "no", "maybe"]})
    for ch in r.choices:
        assert ch.finish_reason == "stop" and ch.text in ("yes", "no", "maybe")
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 1,
              "maxItems": 4}
    body = dict(model=MODEL_ID, prompt="Numbers:", max_tokens=60, temperature=0.8, seed=4, guided_json=schema)
    full = post(server, "/v1/completions", body).json()["choices"][0]
    assert full["finish_reason"] == "stop"
    jsonschema.validate(json.loads(full["text"]), schema)
    chunks = sse(server, "/v1/completions", dict(body, stream=True))
    text = "".join(ch["text"] for c in chunks for ch in c["choices"])
    assert text == full["text"] and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    # The SDK's own chat stream parser, on a regex (guided_regex).
    s = server.client().chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_tokens=40, temperature=0,
                                                stream=True, extra_body=dict(guided_regex=r"\d{3}-\d{4}", **NO_THINK))
    text = "".join((ev.choices[0].delta.content or "") for ev in s if ev.choices)
    assert re.fullmatch(r"\d{3}-\d{4}", text)


def test_pydantic_parse(server):
    from pydantic import BaseModel, Field
    from typing import Literal

    class Pet(BaseModel):
        name: str = Field(max_length=6)
        species: Literal["cat", "dog"]
        legs: int = Field(ge=0, le=8)

    r = server.client().beta.chat.completions.parse(model=MODEL_ID, messages=MESSAGES, max_tokens=100, temperature=0,
                                                    response_format=Pet, extra_body=NO_THINK)
    pet = r.choices[0].message.parsed
    assert isinstance(pet, Pet) and r.choices[0].finish_reason == "stop"


def test_constraint_starts_after_reasoning(server):
    # A logit bias makes the model close its reasoning at once; the answer after </think> is constrained.
    end = post(server, "/tokenize", {"prompt": "</think>"}).json()["tokens"]
    body = chat_body(temperature=0, max_tokens=120, chat_template_kwargs={"enable_thinking": True},
                     structured_outputs={"choice": ["alpha", "beta"]})
    if len(end) == 1:
        body["logit_bias"] = {str(end[0]): 100}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    if ch["finish_reason"] == "stop":
        assert ch["message"]["content"] in ("alpha", "beta")
    assert len(end) != 1 or ch["finish_reason"] == "stop"


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 12},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                       "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": -99, "maximum": 99},
                                         "b": {"type": "number", "minimum": 0, "maximum": 9},
                                         "exact": {"type": "boolean"}},
        "required": ["a", "b"]}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris, and what is 2 + 3?"}]


def check_calls(calls, only=None):
    assert calls
    for tc in calls:
        assert tc["type"] == "function" and tc["id"].startswith("call_")
        name = tc["function"]["name"]
        assert name in PARAMS and (only is None or name == only)
        jsonschema.validate(json.loads(tc["function"]["arguments"]), PARAMS[name])


def test_tool_choice_required_and_named_force_a_valid_call(server):
    c = server.client()
    r = c.chat.completions.create(model=MODEL_ID, messages=ASK, tools=TOOLS, tool_choice="required",
                                  parallel_tool_calls=False, max_tokens=200, temperature=1.0, seed=21, n=3,
                                  extra_body=NO_THINK)
    for ch in r.choices:
        assert ch.finish_reason == "tool_calls"
        calls = ch.message.model_dump()["tool_calls"]
        assert len(calls) == 1
        check_calls(calls)
    named = {"type": "function", "function": {"name": "add"}}
    body = chat_body(messages=ASK, tools=TOOLS, tool_choice=named, parallel_tool_calls=False, temperature=0.7,
                     seed=5)
    full = post(server, "/v1/chat/completions", body).json()["choices"][0]
    assert full["finish_reason"] == "tool_calls"
    check_calls(full["message"]["tool_calls"], only="add")
    # Streaming: the same call, its arguments in fragments that concatenate to the non-streamed string.
    chunks = sse(server, "/v1/chat/completions", dict(body, stream=True))
    args, names = "", []
    for ck in chunks:
        for ch in ck["choices"]:
            for tc in ch["delta"].get("tool_calls") or []:
                if "name" in tc.get("function", {}):
                    names.append(tc["function"]["name"])
                args += tc["function"].get("arguments", "")
    assert names == ["add"] and args == full["message"]["tool_calls"][0]["function"]["arguments"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # Parallel calls (the default): every call is valid; the model decides how many.
    r = post(server, "/v1/chat/completions", chat_body(messages=ASK, tools=TOOLS, tool_choice="required",
                                                       temperature=0, max_tokens=300))
    ch = r.json()["choices"][0]
    assert ch["finish_reason"] in ("tool_calls", "length")
    if ch["finish_reason"] == "tool_calls":
        check_calls(ch["message"]["tool_calls"])


def test_tool_choice_forced_in_the_json_syntax():
    # The hermes/JSON tool parser (other model families) gets its own grammar: <tool_call>\n{json}\n</tool_call>.
    s = Server("--max-model-len", "1024", "--tool-call-parser", "hermes")
    try:
        for seed in (2, 3):
            r = post(s, "/v1/chat/completions", chat_body(messages=ASK, tools=TOOLS, tool_choice="required",
                                                          parallel_tool_calls=False, temperature=0.8, seed=seed))
            ch = r.json()["choices"][0]
            assert ch["finish_reason"] == "tool_calls", ch
            assert len(ch["message"]["tool_calls"]) == 1
            check_calls(ch["message"]["tool_calls"])
    finally:
        s.stop()


def test_tool_choice_errors(server):
    bad_tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer", "not": {"const": 1}}}}}}]
    r = post(server, "/v1/chat/completions", chat_body(tools=bad_tools, tool_choice="required"))
    assert r.status_code == 400
    e = r.json()["error"]
    assert e["param"] == "tools" and "'f'" in e["message"] and "not" in e["message"], e
    # auto is not forced, so the same tools are fine there.
    r = post(server, "/v1/chat/completions", chat_body(tools=bad_tools, tool_choice="auto", max_tokens=4))
    assert r.status_code == 200
    r = post(server, "/v1/chat/completions", chat_body(tools=TOOLS, tool_choice="required",
                                                       response_format={"type": "json_object"}))
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"


def test_bad_requests_are_400_and_the_server_keeps_serving(server):
    def err(body, param, *words, path="/v1/chat/completions"):
        t0 = time.time()
        r = post(server, path, body)
        assert r.status_code == 400, r.text
        e = r.json()["error"]
        assert e["type"] == "invalid_request_error" and e["param"] == param, e
        for w in words:
            assert w in e["message"], e
        assert time.time() - t0 < 1.5
        return e

    rf = lambda schema: {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    err(chat_body(response_format=rf({"type": "object", "not": {}})), "response_format.json_schema.schema", "not")
    err(chat_body(response_format=rf({"type": "string", "format": "hostname"})),
        "response_format.json_schema.schema", "hostname")
    err(chat_body(response_format=rf({"type": "integer", "minimum": 5, "maximum": 1})),
        "response_format.json_schema.schema")
    err(chat_body(structured_outputs={"regex": "(a)\\1"}), "structured_outputs.regex")
    err(chat_body(structured_outputs={"grammar": "root ::= missing"}), "structured_outputs.grammar", "missing")
    err(chat_body(structured_outputs={"regex": "a", "choice": ["a"]}), "structured_outputs")
    err(chat_body(response_format={"type": "json_object"}, guided_regex="a"), "guided_regex")
    err(chat_body(response_format={"type": "json_schema"}), "response_format.json_schema")
    err(chat_body(structured_outputs={"json_object": True, "structural_tag": "x"}),
        "structured_outputs.structural_tag")
    err(dict(model=MODEL_ID, prompt="x", guided_json={"type": "object", "if": {}}), "guided_json", "if",
        path="/v1/completions")
    # Nesting past the grammar's limit (a string, so the body's own depth limit of 64 is not what refuses it),
    # and recursion that never bottoms out.
    deep = {"type": "integer"}
    for _ in range(140):
        deep = {"type": "array", "items": deep}
    err(chat_body(structured_outputs={"json": json.dumps(deep)}), "structured_outputs.json", "deep")
    err(chat_body(response_format=rf({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})),
        "response_format.json_schema.schema", "unsatisfiable")
    err(chat_body(guided_json={"type": "object", "properties": {"c": {"$ref": "#"}}, "required": ["c"]}),
        "guided_json", "unsatisfiable")
    big = {"type": "object", "properties": {f"p{i:06d}": {"type": "string", "description": "d" * 40}
                                            for i in range(16000)}}
    assert len(json.dumps(big)) > 1 << 20
    r = httpx.post(server.base + "/v1/chat/completions", json=chat_body(response_format=rf(big)),
                   headers=server.headers(), timeout=60)
    assert r.status_code in (400, 413), r.text
    # Still serving.
    ok = post(server, "/v1/chat/completions", chat_body(structured_outputs={"choice": ["fine"]}))
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "fine"
