"""litellm against a live server (issue 14 "done when"): chat, a stream, a forced tool call and a text
completion through its OpenAI-compatible providers, with litellm's own defaults for everything else.
litellm 1.80.0 is the newest release that takes an openai 1.x SDK (the pin in scripts/requirements-test.txt);
later ones need openai>=2.8. On import litellm fetches a model price list from the internet unless
LITELLM_LOCAL_MODEL_COST_MAP is set, which makes it read the copy inside its wheel: set before the import."""

import json
import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

from server_util import API_KEY, MODEL_ID, Server  # noqa: E402

# litellm's own response models trip pydantic's serializer warnings on every call (its Message has optional
# fields it leaves unset); they say nothing about the server.
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
                   "required": ["city"]}}}


@pytest.fixture(scope="module")
def server():
    s = Server("--max-model-len", "512")
    yield s
    s.stop()


def chat(server, **kw):
    # "openai/NAME": litellm's provider for any OpenAI-compatible server at api_base.
    return litellm.completion(model="openai/" + MODEL_ID, api_base=server.base + "/v1", api_key=API_KEY,
                              temperature=0, num_retries=0, extra_body=NO_THINK, **kw)


def test_litellm_chat_and_stream(server):
    msgs = [{"role": "user", "content": "Say hi"}]
    r = chat(server, messages=msgs, max_tokens=8)
    text = r.choices[0].message.content
    assert text and r.usage.completion_tokens > 0
    streamed = "".join(c.choices[0].delta.content or "" for c in chat(server, messages=msgs, max_tokens=8,
                                                                        stream=True))
    assert streamed == text


def test_litellm_forced_tool_call(server):
    r = chat(server, messages=[{"role": "user", "content": "What is the weather in Paris?"}], max_tokens=64,
             tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = r.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather"], r
    assert json.loads(calls[0].function.arguments)["city"] in ("Paris", "Oslo")
    assert r.choices[0].finish_reason == "tool_calls"


def test_litellm_text_completion(server):
    # "text-completion-openai/NAME": the /v1/completions provider.
    kw = dict(model="text-completion-openai/" + MODEL_ID, api_base=server.base + "/v1", api_key=API_KEY,
              prompt="def fib(n):", max_tokens=8, temperature=0)
    r = litellm.text_completion(**kw)
    text = r.choices[0].text
    assert text
    direct = server.client().completions.create(model=MODEL_ID, prompt="def fib(n):", max_tokens=8,
                                                temperature=0)
    assert text == direct.choices[0].text
