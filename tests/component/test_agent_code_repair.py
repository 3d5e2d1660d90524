"""The ``code_repair`` environment: a snapshot with an injected bug and its failing tests hidden, tools that
stay inside it (tests in the sandbox), and the code-agent verdict on the episode's diff as the reward."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from seqrl.agents import AgentTools
from seqrl.agents.envs import environment_class
from seqrl.agents.tools import ToolCall
from seqrl.data.registry import get_task

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's namespaces and uids need root (CI runs as root)")

SOURCE = "def add(a, b):\n    return a + b\n\n\ndef double(x):\n    return 2 * x\n"


def task_set(root: Path) -> Path:
    """One package, one task: ``a + b`` turned into ``a - b``; its test of add fails, that of double passes."""
    tree = root / "trees" / "calc-1.0"
    (tree / "calc").mkdir(parents=True)
    (tree / "calc" / "__init__.py").write_text(SOURCE)
    (tree / "test_add.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    (tree / "test_double.py").write_text("from calc import double\n\n\ndef test_double():\n    assert double(4) == 8\n")
    task = {"package": "calc", "version": "1.0", "file": "calc/__init__.py", "line": 2, "operator": "+ -> -",
            "edit": {"start": SOURCE.index("a + b"), "old": "a + b", "new": "a - b"},
            "test_cmd": "python -m pytest -q test_add.py test_double.py", "fail_to_pass": ["test_add.py::test_add"],
            "pass_to_pass": 1, "id": "calc-000", "tree": "trees/calc-1.0"}
    (root / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    return root


@needs_root
def test_an_honest_episode_earns_the_verdict_and_a_wrong_one_does_not(tmp_path):
    problems = get_task("code_repair", tasks_dir=str(task_set(tmp_path)), test_packages=["calc"]).problems("test", -1)
    assert len(problems) == 1 and "`test_add.py::test_add`" in problems[0].prompt
    agent = AgentTools(environments=environment_class("code_repair"), timeout_s=120)
    boxes, envs, added = agent.prepare(problems, n=2)
    box, env = boxes[0], envs[0]
    assert added == [None] and set(box.tools) == {"list_files", "read_file", "search", "edit", "run_tests", "submit"}

    def call(name, **args):
        return box.call(ToolCall(name, args))

    listed = call("list_files").content.splitlines()
    assert "calc/__init__.py" in listed and "test_double.py" in listed and "test_add.py" not in listed  # hidden
    assert call("read_file", path="calc/__init__.py", start=2, end=2).content == "2:     return a - b"
    assert call("search", text="a - b").content == "calc/__init__.py:2: return a - b"
    for escape in ("../../../etc/passwd", "/etc/passwd"):
        assert call("read_file", path=escape).error == "raised"
    assert "occurs 0 times" in call("edit", path="calc/__init__.py", old="nope", new="x").content
    assert call("run_tests").content.startswith("1 passed, 0 failed")  # the visible tests only
    assert call("edit", path="calc/__init__.py", old="a - b", new="a + b").content == "edited calc/__init__.py"
    assert call("submit").content == "submitted" and env.done
    assert env.get_reward() > 1.0, env.last.reason  # tests 1, quality, less 7 actions' penalty

    other, wrong = boxes[1], envs[1]  # its own snapshot: untouched by the first episode
    assert other.call(ToolCall("read_file", {"path": "calc/__init__.py", "start": 2, "end": 2})).content.endswith("a - b")
    other.call(ToolCall("edit", {"path": "calc/__init__.py", "old": "2 * x", "new": "x + x"}))
    assert wrong.get_reward() < 1.0
    agent.close()
    assert not any(e.scratch for e in envs)


@needs_root
def test_the_privileged_expert_repairs_the_task_through_the_rollout(tmp_path):
    """The repair expert (it reads the task's mutation from its episode's environment) as the rollout's
    sampler: read, edit, test, submit — a solved episode that costs four actions; with noise, two more."""
    import torch

    from seqrl.agents.demos import episode_examples, expert_sampler
    from seqrl.agents.envs.code_repair import repair_expert
    from seqrl.agents.rollout import encode_prompts, multi_turn_rollout
    from seqrl.models.lm import ModelConfig, load_policy
    from seqrl.rollout import SamplingParams

    problems = get_task("code_repair", tasks_dir=str(task_set(tmp_path)), test_packages=["calc"]).problems("test", -1)
    torch.manual_seed(0)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=2048))
    agent = AgentTools(environments=environment_class("code_repair"), timeout_s=120)  # one pool: instances reused
    bases = set()
    for noise, actions in ((0.0, ["read_file", "edit", "run_tests", "submit"]),
                           (1.0, ["list_files", "search", "read_file", "edit", "run_tests", "submit"]),
                           (0.0, ["read_file", "edit", "run_tests", "submit"])):
        boxes, envs, added = agent.prepare(problems, n=1)
        episodes = multi_turn_rollout(policy, encode_prompts(policy, problems, boxes, "none", added), boxes,
                                      SamplingParams(max_new_tokens=400), max_turns=8, max_tool_calls=8,
                                      max_episode_tokens=1500, envs=envs,
                                      sampler=expert_sampler(policy, repair_expert(noise), "</tool_call>", with_env=True))
        env, e = envs[0], episodes[0]
        assert e.end == "done" and env.actions == actions and not e.errors, (e.end, env.actions, e.messages)
        assert env.get_reward() > 1.0 and env.solved
        assert episode_examples(episodes)[0][2].count(0) > 0  # the tool turns are left out of the loss
        bases.add(env.base)
    assert len(bases) == 1  # the task's snapshot is written once; each episode edits its own copy
    agent.close()
