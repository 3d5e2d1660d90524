"""The ``python`` tool: the model's code runs in the sandbox; what it prints, its error or the limit it hit
comes back as the tool's text, and nothing it does reaches the trainer's process or files."""

from __future__ import annotations

import os

import pytest

from seqrl.agents import Toolbox, ToolCall
from seqrl.agents.builtin import python_tool

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's namespaces and uids need root (CI runs as root)")


def test_the_models_code_runs_in_the_sandbox_and_its_output_comes_back(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("trainer data")
    os.chmod(tmp_path, 0o700)
    box = Toolbox([python_tool(timeout_s=3)], timeout_s=30)
    run = lambda code: box.call(ToolCall("python", {"code": code}))  # noqa: E731
    assert run("print(sum(range(101)))").content == "5050"
    err = run("1/0")
    assert err.error == "" and "ZeroDivisionError: division by zero" in err.content
    assert "[stopped: no result within 3 s]" in run("while True: pass").content
    leaked = run(f"print(open({str(secret)!r}).read())").content
    assert "trainer data" not in leaked and ("PermissionError" in leaked or "FileNotFoundError" in leaked)
    assert run("import os; print(os.getpid() != 1 and os.getuid() != 0)").content == "True"
    assert run("x = 1").content == "(no output)"
    assert box.schemas[0]["function"]["parameters"]["required"] == ["code"]


def test_a_config_names_the_python_tool_by_import_path():
    from seqrl.algos.config import AgentConfig
    from seqrl.training.sampled import build_agent_tools

    box = build_agent_tools(AgentConfig(tools=["seqrl.agents.builtin:python"], tool_timeout_s=30)).toolbox()
    assert [s["function"]["name"] for s in box.schemas] == ["python"]
    assert box.call(ToolCall("python", {"code": "print(6 * 7)"})).content == "42"
