"""Real clients against a live server (issue 14 "done when"): langchain-openai's OpenAI (completions) and
ChatOpenAI (invoke, stream, tools, with_structured_output) with their own defaults, which send fields such
as "seed": null and "n": 1 that a strict server must accept. litellm has its own file, test_server_litellm.py."""

from typing import Literal

import pytest

pytest.importorskip("langchain_openai")

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI, OpenAI  # noqa: E402

from server_util import API_KEY, MODEL_ID, Server  # noqa: E402

NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def server():
    s = Server("--max-model-len", "512")
    yield s
    s.stop()


def test_langchain_completions_invoke_and_stream(server):
    llm = OpenAI(base_url=server.base + "/v1", api_key=API_KEY, model=MODEL_ID, max_tokens=8, temperature=0,
                 max_retries=0)
    out = llm.invoke("def fib(n):")
    assert isinstance(out, str) and out
    assert "".join(llm.stream("def fib(n):")) == out


def test_langchain_chat_invoke_and_stream(server):
    chat = ChatOpenAI(base_url=server.base + "/v1", api_key=API_KEY, model=MODEL_ID, max_tokens=8,
                      temperature=0, max_retries=0, extra_body=NO_THINK)
    msg = chat.invoke("Say hi")
    assert msg.content
    assert "".join(c.content for c in chat.stream("Say hi")) == msg.content


@tool
def get_weather(city: Literal["Paris", "Oslo"]) -> str:
    """The weather in a city."""
    return "sunny"


def test_langchain_chat_tools(server):
    chat = ChatOpenAI(base_url=server.base + "/v1", api_key=API_KEY, model=MODEL_ID, max_tokens=64,
                      temperature=0, max_retries=0, extra_body=NO_THINK)
    # A named tool_choice forces a call (the server constrains the output to the tool's schema).
    bound = chat.bind_tools([get_weather], tool_choice="get_weather")
    msg = bound.invoke("What is the weather in Paris?")
    assert [c["name"] for c in msg.tool_calls] == ["get_weather"], msg
    assert msg.tool_calls[0]["args"]["city"] in ("Paris", "Oslo")
    acc = None
    for chunk in bound.stream("What is the weather in Paris?"):
        acc = chunk if acc is None else acc + chunk
    assert [c["name"] for c in acc.tool_calls] == ["get_weather"]
    assert acc.tool_calls[0]["args"] == msg.tool_calls[0]["args"]
    # The tool's answer goes back as a tool message with its call id.
    result = get_weather.invoke(msg.tool_calls[0])
    follow = chat.invoke(["What is the weather in Paris?", msg, result])
    assert isinstance(follow.content, str)


def test_langchain_with_structured_output(server):
    from pydantic import BaseModel

    class Answer(BaseModel):  # bounded fields: the tiny model may write digits until max_tokens
        city: Literal["Paris", "Oslo"]
        sunny: bool

    chat = ChatOpenAI(base_url=server.base + "/v1", api_key=API_KEY, model=MODEL_ID, max_tokens=200,
                      temperature=0, max_retries=0, extra_body=NO_THINK)
    # json_schema: response_format with the model's JSON schema (constrained decoding on the server);
    # function_calling: a forced call to a tool named after the schema.
    for method in ("json_schema", "function_calling"):
        out = chat.with_structured_output(Answer, method=method).invoke("Is it sunny in Paris?")
        assert isinstance(out, Answer), method
        assert out.city in ("Paris", "Oslo") and isinstance(out.sunny, bool)
