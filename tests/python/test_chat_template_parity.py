"""Chat template rendering: gridq's C++ Jinja engine against python jinja2 (the reference transformers uses).

Reference environment = what transformers' apply_chat_template builds: trim_blocks, lstrip_blocks, the
loopcontrols extension, a raise_exception global and a tojson filter that keeps key order and does not
escape (json.dumps(x, ensure_ascii=False, indent=indent, separators=...)). Every case must be byte-identical.
Run: GRIDQ_BIN=build/gridq .venv/bin/python -m pytest tests/python/test_chat_template_parity.py
"""
import json
import os
import re
import subprocess
from pathlib import Path

import jinja2
import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "laguna-tiny-code"
TEMPLATES = ROOT / "tests" / "text" / "templates"
GRIDQ = os.environ.get("GRIDQ_BIN", str(ROOT / "build" / "gridq"))


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    if separators is None:
        separators = (",", ": ") if indent else (", ", ": ")
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(msg):
    raise jinja2.exceptions.TemplateError(msg)


def reference_render(source, messages, tools=None, add_generation_prompt=True, kwargs=None):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    cfg = json.loads((MODEL / "tokenizer_config.json").read_text())
    variables = dict(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                     bos_token=cfg["bos_token"], eos_token=cfg["eos_token"], pad_token=cfg["pad_token"])
    variables.update(kwargs or {})
    return env.from_string(source).render(**variables)


def gridq_render(tmp_path, messages, tools=None, add_generation_prompt=True, kwargs=None, template=None,
                 check=True):
    mf = tmp_path / "messages.json"
    mf.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    cmd = [GRIDQ, "render-chat", str(MODEL), "--messages", str(mf)]
    if tools is not None:
        tf = tmp_path / "tools.json"
        tf.write_text(json.dumps(tools, ensure_ascii=False), encoding="utf-8")
        cmd += ["--tools", str(tf)]
    if not add_generation_prompt:
        cmd.append("--no-generation-prompt")
    if kwargs:
        cmd += ["--kwargs", json.dumps(kwargs)]
    if template:
        cmd += ["--template", str(template)]
    r = subprocess.run(cmd, capture_output=True)
    if check:
        assert r.returncode == 0, r.stderr.decode()
        return r.stdout.decode("utf-8")
    return r


LAGUNA = (MODEL / "chat_template.jinja").read_text(encoding="utf-8")

TOOLS = [
    {"type": "function", "function": {"name": "run_python", "description": "Run Python — returns stdout.",
                                      "parameters": {"type": "object", "properties": {
                                          "code": {"type": "string"}, "timeout_s": {"type": "integer"}},
                                          "required": ["code"]}}},
    {"type": "function", "function": {"name": "read_file", "description": "Läs en fil <path> & \"quote\"",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
]

CASES = {
    "plain": dict(messages=[{"role": "user", "content": "Write a function that reverses a string."}]),
    "system": dict(messages=[{"role": "system", "content": "  Be terse.\n\n"},
                             {"role": "user", "content": "Hi"}]),
    "empty_system_opt_out": dict(messages=[{"role": "system", "content": ""}, {"role": "user", "content": "x"}],
                                 kwargs={"enable_thinking": False}),
    "tools_call_response": dict(
        messages=[{"role": "user", "content": "Run it"},
                  {"role": "assistant", "content": "", "reasoning_content": "ok",
                   "tool_calls": [{"id": "c0", "type": "function", "function": {
                       "name": "run_python", "arguments": {"code": "print('é')\n", "timeout_s": 5,
                                                           "opts": {"a": [1, 2.5, None, True]}}}}]},
                  {"role": "tool", "tool_call_id": "c0", "content": "é\n"}],
        tools=TOOLS),
    "thinking_off": dict(messages=[{"role": "user", "content": "a"},
                                   {"role": "assistant", "reasoning_content": "r", "content": "b"},
                                   {"role": "user", "content": "c"}], kwargs={"enable_thinking": False}),
    "thinking_on_history": dict(messages=[{"role": "user", "content": "a"},
                                          {"role": "assistant", "reasoning": "fallback field", "content": "b"},
                                          {"role": "assistant", "content": "no reasoning"},
                                          {"role": "user", "content": [{"type": "text", "text": "part1 "},
                                                                       {"type": "image"},
                                                                       {"type": "text", "text": "part2"}]}],
                                kwargs={"enable_thinking": True}),
    "preserve_thinking": dict(messages=[{"role": "user", "content": "a"},
                                        {"role": "assistant", "reasoning_content": "kept", "content": "b"},
                                        {"role": "user", "content": "c"}],
                              kwargs={"enable_thinking": False, "preserve_thinking": True}),
    "multi_turn_no_gen": dict(messages=[{"role": "user", "content": "1 </think> typed"},
                                        {"role": "assistant", "content": "2"},
                                        {"role": "system", "content": "mid system"},
                                        {"role": "user", "content": "3 \U0001F600 \u05e9\u05dc\u05d5\u05dd"},
                                        {"role": "assistant", "content": "4"}], add_generation_prompt=False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_laguna_template_matches_jinja2(tmp_path, name):
    c = CASES[name]
    agp = c.get("add_generation_prompt", True)
    ref = reference_render(LAGUNA, c["messages"], c.get("tools"), agp, c.get("kwargs"))
    ours = gridq_render(tmp_path, c["messages"], c.get("tools"), agp, c.get("kwargs"))
    assert ours == ref


def _examples():
    text = (MODEL / "chat_template_examples.md").read_text(encoding="utf-8")
    sections = re.split(r"\n## \d+\. ", text)[1:]
    out = []
    for sec in sections:
        blocks = re.findall(r"```json\n(.*?)\n```", sec, re.S)
        out.append((json.loads(blocks[0]), json.loads(blocks[-1])))
    return out


@pytest.mark.parametrize("idx", range(4))
def test_bundled_examples(tmp_path, idx):
    examples = _examples()
    assert len(examples) == 4
    variables, expected = examples[idx]
    kwargs = {k: v for k, v in variables.items() if k not in ("messages", "tools", "add_generation_prompt")}
    ours = gridq_render(tmp_path, variables["messages"], variables.get("tools"),
                        variables.get("add_generation_prompt", False), kwargs)
    assert ours == expected


def test_openai_string_arguments_are_decoded(tmp_path):
    args = {"code": "x = 1\n", "n": 3}
    msgs = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c", "type": "function",
                             "function": {"name": "run_python", "arguments": json.dumps(args)}}]}]
    as_objects = [msgs[0], {**msgs[1], "tool_calls": [{"id": "c", "type": "function",
                                                       "function": {"name": "run_python", "arguments": args}}]}]
    ref = reference_render(LAGUNA, as_objects, TOOLS, True, None)
    assert gridq_render(tmp_path, msgs, TOOLS) == ref


def test_unknown_role_raises_with_line(tmp_path):
    r = gridq_render(tmp_path, [{"role": "robot", "content": "x"}], check=False)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "unsupported message role: robot" in err
    assert re.search(r"chat_template\.jinja:\d+:", err), err


OWN_TEMPLATES = sorted(TEMPLATES.glob("*.jinja")) if TEMPLATES.exists() else []

OWN_CASES = [
    dict(messages=[{"role": "user", "content": "hello"}]),
    dict(messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"},
                   {"role": "assistant", "content": "<think>\nhmm\n</think>\n\na1"},
                   {"role": "user", "content": "q2"}], kwargs={"enable_thinking": False}),
    dict(messages=[{"role": "user", "content": "weather?"},
                   {"role": "assistant", "content": "",
                    "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                     "arguments": {"city": "Zürich", "days": 3}}}]},
                   {"role": "tool", "content": "{\"t\": 21.5}"}, {"role": "tool", "content": "second"},
                   {"role": "assistant", "content": "It is 21.5 C."}],
         tools=[{"type": "function", "function": {"name": "get_weather", "description": "d",
                                                  "parameters": {"type": "object", "properties": {
                                                      "city": {"type": "string"}}}}}]),
    dict(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                   {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}],
         add_generation_prompt=False),
]


@pytest.mark.parametrize("template", OWN_TEMPLATES, ids=lambda p: p.name)
@pytest.mark.parametrize("case", range(len(OWN_CASES)))
def test_own_templates_match_jinja2(tmp_path, template, case):
    c = OWN_CASES[case]
    src = template.read_text(encoding="utf-8")
    agp = c.get("add_generation_prompt", True)
    ref = reference_render(src, c["messages"], c.get("tools"), agp, c.get("kwargs"))
    ours = gridq_render(tmp_path, c["messages"], c.get("tools"), agp, c.get("kwargs"), template=template)
    assert ours == ref
