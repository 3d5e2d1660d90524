"""Tools in TRL's shape: schemas from plain functions, the model's calls parsed, and every way a call can
fail coming back as the tool's result (counted by kind), never as an exception in the trainer."""

from __future__ import annotations

import json
import threading

import pytest

from seqrl.agents import ToolCall, Toolbox, ToolResult, check_arguments, tool_schema


def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def shout(text: str, mode: str = "upper") -> str:
    """Change a text's case.

    Args:
        text: The text.
        mode: Which case. (choices: ["upper", "lower"])
    """
    return text.upper() if mode == "upper" else text.lower()


def boom(x: int) -> str:
    """Always fails.

    Args:
        x: Anything.
    """
    raise KeyError(f"no such key {x}")


RELEASE = threading.Event()


def hang(x: int) -> str:
    """Waits until released.

    Args:
        x: Anything.
    """
    RELEASE.wait(30)
    return "late"


def big(n: int) -> dict:
    """A large result.

    Args:
        n: How many entries.
    """
    return {f"k{i}": i for i in range(n)}


def test_a_schema_comes_from_type_hints_and_the_docstring():
    s = tool_schema(add)
    assert s["function"]["name"] == "add" and s["function"]["description"] == "Add two integers."
    assert s["function"]["parameters"]["required"] == ["a"]
    assert s["function"]["parameters"]["properties"]["a"] == {"type": "integer", "description": "The first integer."}

    def undocumented(a):
        return a

    with pytest.raises(ValueError, match="tool 'undocumented'"):
        tool_schema(undocumented)
    with pytest.raises(ValueError, match="two tools named 'add'"):
        Toolbox([add, add])


def test_arguments_are_checked_against_the_schema():
    s, e = tool_schema(add), tool_schema(shout)
    assert check_arguments(s, {"a": 1}) == "" and check_arguments(s, {"a": 1, "b": 5}) == ""
    assert "missing required argument(s): a" in check_arguments(s, {"b": 1})
    assert "unknown argument(s): c" in check_arguments(s, {"a": 1, "c": 2})
    assert "must be of type integer, got str" in check_arguments(s, {"a": "1"})
    assert "got bool" in check_arguments(s, {"a": True})  # a bool is not an integer here
    assert "must be one of ['upper', 'lower']" in check_arguments(e, {"text": "x", "mode": "title"})
    assert "JSON object" in check_arguments(s, [1, 2])


def test_calls_are_parsed_in_order_and_a_malformed_one_is_a_result():
    box = Toolbox([add, shout])
    text = ('I will add. <tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call> and '
            '<tool_call>{"name": "shout", "arguments": "{\\"text\\": \\"hi\\"}"}</tool_call>'
            "<tool_call>{not json}</tool_call>")
    calls, any_call = box.parse(text)
    assert any_call and calls[:2] == [ToolCall("add", {"a": 3, "b": 4}), ToolCall("shout", {"text": "hi"})]
    assert isinstance(calls[2], ToolResult) and calls[2].error == "malformed" and "{not json}" in calls[2].content
    assert box.parse("The answer is 7.") == ([], False)
    unclosed, any_call = box.parse('<tool_call>{"name": "add", "arguments": {"a": 1}}')
    assert any_call and unclosed[0].error == "malformed" and "never closed" in unclosed[0].content
    results = box.run(calls)
    assert [r.content for r in results[:2]] == ["7", "HI"] and results[2] is calls[2]


def test_every_failure_is_the_models_to_read_and_counted_by_kind():
    box = Toolbox([add, boom, hang, big], timeout_s=3, max_result_chars=50)  # hang waits 30 s
    got = {r.error: r for r in box.run([ToolCall("nope", {}), ToolCall("add", {"a": "x"}), ToolCall("boom", {"x": 1}),
                                        ToolCall("hang", {"x": 1})])}
    assert set(got) == {"unknown_tool", "bad_arguments", "raised", "timeout"}
    assert "tools: add, boom, hang, big" in got["unknown_tool"].content
    assert got["raised"].content == "error: KeyError: 'no such key 1'"
    assert "within 3 s" in got["timeout"].content
    RELEASE.set()
    r = box.call(ToolCall("big", {"n": 100}))
    assert r.error == "" and r.truncated and r.content.startswith('{"k0": 0') and "more characters cut" in r.content
    assert len(r.content.split("\n")[0]) == 50
    assert json.loads(box.call(ToolCall("big", {"n": 2})).content) == {"k0": 0, "k1": 1}


def test_a_batch_of_calls_runs_at_once():
    """Two calls that each wait for the other to start finish only if they run concurrently."""
    started = threading.Barrier(2, timeout=20)

    def meet(x: int) -> int:
        """Waits for a second call.

        Args:
            x: Returned.
        """
        started.wait()
        return x

    box = Toolbox([meet], timeout_s=60, max_workers=2)  # run one at a time, the barrier breaks: an error result
    assert [r.content for r in box.run([ToolCall("meet", {"x": 1}), ToolCall("meet", {"x": 2})])] == ["1", "2"]


def test_the_system_prompt_names_each_tool_and_the_call_syntax():
    text = Toolbox([add, shout]).system_prompt()
    lines = text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(x)["function"]["name"] for x in lines] == ["add", "shout"]
    assert "<tool_call>" in text and "</tool_call>" in text


def test_the_compact_syntax_reads_positional_arguments_in_the_schemas_order():
    box = Toolbox([add, shout], syntax="compact")
    assert box.call_close == "]]" and "[[name arg ...]]" in box.system_prompt()
    calls, any_call = box.parse('first [[add 3 4]] then [[shout "two words"]] and [[shout plain lower]]')
    assert any_call and calls == [ToolCall("add", {"a": 3, "b": 4}), ToolCall("shout", {"text": "two words"}),
                                  ToolCall("shout", {"text": "plain", "mode": "lower"})]
    assert box.call(calls[0]).content == "7"
    (too_many,), _ = box.parse("[[add 1 2 3]]")
    assert too_many.error == "bad_arguments" and "takes 2 argument(s), got 3" in too_many.content
    for text in ("[[ ]]", "[[3 4]]", '[[shout "open]]', "[[add 1 2"):
        (bad,), called = box.parse(text)
        assert called and bad.error == "malformed", text
    (text,), _ = box.parse("[[shout 0 lower]]")  # a string parameter takes the word as written
    assert text == ToolCall("shout", {"text": "0", "mode": "lower"})
    (wrong_type,), _ = box.parse("[[add x 2]]")  # a bare word is text: the schema refuses it for an integer
    assert box.call(wrong_type).error == "bad_arguments"
    (unknown,), _ = box.parse("[[nope 1]]")
    assert box.call(unknown).error == "unknown_tool"
    assert box.parse("no call here [x]") == ([], False)
    with pytest.raises(ValueError, match="syntax must be one of hermes, compact"):
        Toolbox([add], syntax="xml")
