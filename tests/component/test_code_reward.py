"""Multi-level code reward (`seqrl.rewards.code`) and `seqrl sandbox run` (component tier: real sandbox).

Default weights: syntax 0.1, compiles 0.1, functional 0.8, timeout −0.2, error −0.1, memory −0.1;
total clipped to [−1, 1]. Expected totals below are derived from these in the comments.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from seqrl.cli import main
from seqrl.rewards import code as code_mod
from seqrl.rewards.code import CodeExecutionReward, CodeTests, check_static, extract_code, score_code
from seqrl.sandbox import Limits
from seqrl.types import Problem, RewardResult

ADD = "def add(a, b):\n    return a + b\n"
ADD_IO = [[[1, 2], 3], [[-1, 1], 0], [["a", "b"], "ab"], [[10, 20], 30]]
ADD_TESTS = "assert add(1, 2) == 3\nassert add(0, 0) == 0\nassert add(2, 2) == 4\nassert add(5, 0) == 5\n"
OK_RUN = {"timeout": 0.0, "error": 0.0, "memory": 0.0}


@pytest.fixture
def sandbox_calls(monkeypatch):
    """Record every run_many call (jobs, max_workers) while still running the real sandbox."""
    calls = []
    real = code_mod.run_many

    def spy(jobs, max_workers=2):
        calls.append((list(jobs), max_workers))
        return real(jobs, max_workers)

    monkeypatch.setattr(code_mod, "run_many", spy)
    return calls


# ----------------------------------------------------------------------------- levels, exact parts
def test_correct_solution_full_marks():
    r = score_code(ADD, io_cases=ADD_IO, entry_point="add")
    # 0.1·1 + 0.1·1 + 0.8·4/4 = 1.0
    assert r == RewardResult(1.0, "", {"syntax": 1.0, "compiles": 1.0, "functional": 1.0, **OK_RUN})


def test_wrong_solution_gets_the_fraction_passed():
    wrong = "def add(a, b):\n    return a * 2 if a == b else a - b if b == 0 else 0\n"
    # add(1,2)=0 ✗, add(0,0)=0 ✓, add(2,2)=4 ✓, add(5,0)=5 ✓ → 3/4
    r = score_code(wrong, tests=ADD_TESTS)
    assert r.parts == {"syntax": 1.0, "compiles": 1.0, "functional": 0.75, **OK_RUN}
    assert r.score == pytest.approx(0.1 + 0.1 + 0.8 * 0.75, abs=1e-12)  # 0.8
    assert r.reason.startswith("3/4 tests passed; assert@1: ")


def test_syntax_error_never_reaches_the_sandbox(sandbox_calls):
    r = score_code("def add(a, b):\n    x = 1\n    return (a +\n", io_cases=ADD_IO, entry_point="add")
    assert r.score == 0.0 and r.parts == {"syntax": 0.0, "compiles": 0.0, "functional": 0.0}
    assert r.reason.startswith("syntax error line 3: ")
    assert sandbox_calls == []


def test_compile_error_after_a_good_parse_skips_the_sandbox(sandbox_calls):
    r = score_code("def add(a, b):\n    return a + b\nreturn 1\n", io_cases=ADD_IO, entry_point="add")
    # 0.1·1 (parses) + 0.1·0 (compile: 'return' outside function) = 0.1
    assert r == RewardResult(0.1, "compile error line 3: 'return' outside function",
                             {"syntax": 1.0, "compiles": 0.0, "functional": 0.0})
    assert sandbox_calls == []
    assert check_static("nonlocal x\n")[:2] == (1.0, 0.0)


def test_runtime_error_at_import_is_penalised():
    r = score_code("raise ValueError('boom')\n" + ADD, io_cases=ADD_IO, entry_point="add")
    # 0.1 + 0.1 + 0.8·0 − 0.1·1 = 0.1
    assert r.score == pytest.approx(0.1, abs=1e-12)
    assert r.parts == {"syntax": 1.0, "compiles": 1.0, "functional": 0.0, "timeout": 0.0, "error": 1.0, "memory": 0.0}
    assert r.reason.startswith("runtime error: ValueError at import") and "0/4 tests passed" in r.reason


def test_an_exception_inside_tests_is_a_failed_test_not_the_error_penalty():
    """Status ``runtime_error`` from tests that raised (SystemExit(0) here) keeps the scoring of a
    completed run: the fraction passed, no error penalty, the first failing test as reason."""
    sol = "def add(a, b):\n    if a == 1:\n        raise SystemExit(0)\n    return a + b\n"
    r = score_code(sol, io_cases=ADD_IO, entry_point="add")
    # 0.1 + 0.1 + 0.8·3/4 = 0.8
    assert r.parts == {"syntax": 1.0, "compiles": 1.0, "functional": 0.75, **OK_RUN}
    assert r.score == pytest.approx(0.8, abs=1e-12) and r.reason.startswith("3/4 tests passed; case[0]: SystemExit")


def test_infinite_loop_gets_the_timeout_penalty_and_clipping():
    loop = "def add(a, b):\n    while True:\n        pass\n"
    r = score_code(loop, io_cases=ADD_IO, entry_point="add", reward=CodeExecutionReward(limits=Limits(timeout_s=1.0)))
    # 0.1 + 0.1 + 0 − 0.2·1 = 0.0
    assert r.score == pytest.approx(0.0, abs=1e-12)
    assert r.parts == {"syntax": 1.0, "compiles": 1.0, "functional": 0.0, "timeout": 1.0, "error": 0.0, "memory": 0.0}
    assert r.reason.startswith("timeout after 1.0 s; 0/4 tests passed")
    # 0.2 − 1.0 = −0.8, clipped to min_score −0.5
    harsh = CodeExecutionReward(limits=Limits(timeout_s=1.0), timeout_penalty=-1.0, min_score=-0.5)
    assert score_code(loop, io_cases=ADD_IO[:1], entry_point="add", reward=harsh).score == -0.5


# ----------------------------------------------------------------------------- extraction
def test_fenced_code_is_extracted_last_python_block_wins():
    text = ("Try:\n```python\ndef add(a, b):\n    return a - b\n```\nFixed:\n```python\n" + ADD + "```\n"
            "Run it:\n```bash\npython add.py\n```\n")
    assert extract_code(text) == (ADD, "fence")
    assert score_code(text, io_cases=ADD_IO, entry_point="add").score == 1.0
    assert extract_code("no tag:\n```\nx = 1\n```") == ("x = 1\n", "fence")
    assert extract_code("truncated\n```python\nx = 1\ny = ") == ("x = 1\ny = ", "fence")


def test_answer_tag_is_extracted():
    text = f"<think>add them</think><answer>\n{ADD}</answer>"
    assert extract_code(text) == (f"\n{ADD}", "answer_tag")
    assert score_code(text, io_cases=ADD_IO, entry_point="add").score == 1.0
    assert extract_code(f"<think>easy</think>{ADD}") == (ADD, "text")


@pytest.mark.parametrize("garbage", [None, 42, "", "\x00\x00", "(" * 5000, "```", "<answer>", "é" * 100,
                                     "```python\n", "def f(:\n" * 200, "1" * 100_000 + "e"])
def test_garbage_never_raises(garbage):
    r = CodeExecutionReward().score_many([garbage], [CodeTests(io_cases=ADD_IO, entry_point="add")])[0]
    assert isinstance(r, RewardResult) and -1.0 <= r.score <= 1.0 and r.score < 1.0 and r.reason


# ----------------------------------------------------------------------------- batch, metadata
def test_batch_preserves_order_and_uses_the_pool(sandbox_calls):
    # Distinguishable per item: item i passes exactly i of 3 io cases (add(k, k) == 2k for k = 1..3).
    io = [[[1, 1], 2], [[2, 2], 4], [[3, 3], 6]]
    sols = [f"def add(a, b):\n    return a + b if a <= {i} else -1\n" for i in range(4)]
    problems = [Problem(f"p{i}", "", metadata={"io_cases": io, "entry_point": "add"}, uid=f"u{i}") for i in range(4)]
    completions = [f"```python\n{s}```" for s in sols]
    completions.insert(2, "```python\ndef add(:\n```")
    problems.insert(2, problems[2])
    reward = CodeExecutionReward(max_workers=3)
    results = reward(problems, completions)
    funcs = [r.parts["functional"] for r in results]
    assert funcs == [0.0, pytest.approx(1 / 3), 0.0, pytest.approx(2 / 3), 1.0]
    assert results[2].reason.startswith("syntax error")
    assert len(sandbox_calls) == 1
    jobs, workers = sandbox_calls[0]
    assert workers == 3 and len(jobs) == 4  # the unparsable one skipped the sandbox
    assert reward.__name__ == "code_execution"


def test_metadata_contract_fails_loudly_by_name():
    reward = CodeExecutionReward()
    with pytest.raises(ValueError, match="problem 'q7' has neither 'tests', 'io_cases' nor 'stdio_cases'"):
        reward([Problem("q", "", metadata={}, uid="q7")], [ADD])
    with pytest.raises(ValueError, match="problem 'q8' has 'io_cases' but no 'entry_point'"):
        reward([Problem("q", "", metadata={"io_cases": ADD_IO}, uid="q8")], [ADD])
    with pytest.raises(ValueError, match="max_workers must be >= 1"):
        CodeExecutionReward(max_workers=0)
    # tests + entry_point (HumanEval style check(candidate)) from metadata
    p = Problem("q", "", metadata={"tests": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
                                   "entry_point": "add"}, uid="q9")
    assert reward([p], [ADD])[0].score == 1.0


def test_limits_are_one_dataclass_validated_by_field_name():
    for bad in (dict(memory_mb=0), dict(memory_mb=-5), dict(timeout_s=float("nan")), dict(cpus=0),
                dict(scratch_inodes=True)):
        with pytest.raises(ValueError, match=f"Limits.{next(iter(bad))} must be a number > 0"):
            Limits(**bad)
    with pytest.raises(ValueError, match="Limits.memory_mb"):
        CodeExecutionReward(limits={"memory_mb": 0})
    with pytest.raises(ValueError, match="code reward: limits: .*memory_gb"):
        CodeExecutionReward(limits={"memory_gb": 1})
    assert CodeExecutionReward(limits={"timeout_s": 3}).limits == Limits(timeout_s=3)
    with pytest.raises(TypeError, match=r"run_python: unknown argument\(s\) \['memory_gb'\]"):
        code_mod.run_many([dict(solution=ADD, io_cases=ADD_IO, entry_point="add", memory_gb=1)])
    with pytest.raises(ValueError, match="2 specs for 1 completions"):
        CodeExecutionReward().score_many([ADD], [CodeTests(tests="assert True"), CodeTests(tests="assert True")])


def test_the_reward_sandbox_seam_uses_public_names_only():
    """Nothing with a leading underscore is imported from seqrl.sandbox by the code reward."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(code_mod))
    imported = [(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and (n.module or "").startswith("seqrl.sandbox") for a in n.names]
    assert imported and all(m == "seqrl.sandbox" and not name.startswith("_") for m, name in imported), imported


def test_efficiency_relative_to_reference():
    reward = CodeExecutionReward(efficiency=0.1, max_score=2.0)
    fast = reward.score_many([ADD], [CodeTests(io_cases=ADD_IO, entry_point="add", reference_time_s=100.0)])[0]
    assert fast.parts["efficiency"] == 1.0 and fast.score == pytest.approx(1.1, abs=1e-12)
    slow = reward.score_many([ADD], [CodeTests(io_cases=ADD_IO, entry_point="add", reference_time_s=1e-9)])[0]
    assert 0.0 <= slow.parts["efficiency"] < 0.01 and "slower than reference" in slow.reason
    none = reward.score_many([ADD], [CodeTests(io_cases=ADD_IO, entry_point="add")])[0]
    assert "efficiency" not in none.parts and "efficiency skipped: no reference_time_s" in none.reason
    wrong = reward.score_many(["def add(a, b):\n    return 0\n"], [CodeTests(io_cases=ADD_IO, entry_point="add", reference_time_s=100.0)])[0]
    assert wrong.parts["efficiency"] == 0.0


def test_style_uses_ruff_or_says_why_not(tmp_path, monkeypatch):
    fake = tmp_path / "ruff"  # stands in for ruff: two findings, whatever the input
    fake.write_text('#!/bin/sh\ncat >/dev/null\necho \'[{"code": "F401"}, {"code": "E501"}]\'\nexit 1\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    reward = CodeExecutionReward(style=0.1, functional=0.7, ruff=str(fake))
    r = reward.score_many([ADD], [CodeTests(io_cases=ADD_IO, entry_point="add")])[0]
    # style = 1 − 2/10 = 0.8; total = 0.1 + 0.1 + 0.7 + 0.1·0.8 = 0.98
    assert r.parts["style"] == pytest.approx(0.8) and r.score == pytest.approx(0.98, abs=1e-12)
    assert r.reason == "2 ruff findings"
    monkeypatch.setattr(code_mod.shutil, "which", lambda *a, **k: None)
    r = CodeExecutionReward(style=0.1).score_many([ADD], [CodeTests(io_cases=ADD_IO, entry_point="add")])[0]
    assert "style" not in r.parts and r.reason == "style skipped: ruff not installed"


# ----------------------------------------------------------------------------- attacks (see test_sandbox for more)
def test_always_equal_object_and_exit_at_import_score_zero_functional():
    always_equal = ("class Eq:\n    def __eq__(self, other):\n        return True\n"
                    "def add(a, b):\n    return Eq()\n")
    r = score_code(always_equal, io_cases=ADD_IO, entry_point="add")
    assert r.parts["functional"] == 0.0 and r.score == pytest.approx(0.2, abs=1e-12)
    r = score_code(always_equal, tests=ADD_TESTS)
    assert r.parts["functional"] == 0.0
    r = score_code("import sys\nsys.exit(0)\n" + ADD, tests=ADD_TESTS)
    assert r.parts["functional"] == 0.0 and r.parts["error"] == 1.0


# ----------------------------------------------------------------------------- CLI
def _files(tmp_path, solution=ADD, tests=None, io=None):
    sol = tmp_path / "sol.py"
    sol.write_text(solution)
    out = [str(sol)]
    if tests is not None:
        (tmp_path / "tests.py").write_text(tests)
        out += ["--tests", str(tmp_path / "tests.py")]
    if io is not None:
        (tmp_path / "cases.json").write_text(io if isinstance(io, str) else json.dumps(io))
        out += ["--io", str(tmp_path / "cases.json")]
    return out


def test_cli_json_with_tests(tmp_path, capsys):
    wrong_tests = ADD_TESTS + "assert add(1, 1) == 3\n"
    assert main(["sandbox", "run", *_files(tmp_path, tests=wrong_tests), "--json", "--timeout", "3"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert {"status", "passed", "total", "tests", "layers", "elapsed_s", "reason"} <= out.keys()
    assert (out["status"], out["passed"], out["total"]) == ("wrong_answer", 4, 5)
    assert out["tests"][4]["name"] == "assert@5" and out["tests"][4]["passed"] is False
    assert set(out["tests"][0]) == {"name", "passed", "reason", "elapsed"}
    if os.geteuid() == 0:
        assert "netns" in out["layers"] and "unconfined" not in out["layers"]


def test_cli_io_cases_and_human_summary(tmp_path, capsys):
    assert main(["sandbox", "run", *_files(tmp_path, io=ADD_IO), "--entry-point", "add", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["status"], out["passed"], out["total"]) == ("ok", 4, 4)
    assert [t["name"] for t in out["tests"]] == ["case[0]", "case[1]", "case[2]", "case[3]"]
    assert main(["sandbox", "run", *_files(tmp_path, solution="while True:\n    pass\n", io=ADD_IO),
                 "--entry-point", "add", "--timeout", "0.5"]) == 1
    assert capsys.readouterr().out.startswith("timeout: 0/4 passed")


@pytest.mark.parametrize("case,message", [
    ("missing_solution", "solution {tmp}/nope.py: no such file"),
    ("missing_tests", "--tests {tmp}/nope.py: no such file"),
    ("bad_json", "--io {tmp}/cases.json: not valid JSON"),
    ("bad_case", "--io {tmp}/cases.json: run_python: io_cases[0] must be"),
    ("no_entry_point", "needs --entry-point"),
    ("neither", "exactly one of --tests"),
])
def test_cli_bad_inputs_exit_2_naming_the_file(case, message, tmp_path, capsys):
    argv = {
        "missing_solution": lambda: [str(tmp_path / "nope.py"), "--tests", _files(tmp_path)[0]],
        "missing_tests": lambda: [_files(tmp_path)[0], "--tests", str(tmp_path / "nope.py")],
        "bad_json": lambda: [*_files(tmp_path, io="[[[1, 2], 3"), "--entry-point", "add"],
        "bad_case": lambda: [*_files(tmp_path, io=[[1, 2]]), "--entry-point", "add"],
        "no_entry_point": lambda: _files(tmp_path, io=ADD_IO),
        "neither": lambda: _files(tmp_path),
    }[case]()
    assert main(["sandbox", "run", *argv]) == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err


def test_cli_sandbox_unavailable_exits_2_unless_allowed(tmp_path, capsys, monkeypatch):
    from seqrl.sandbox import runner

    monkeypatch.setattr(runner, "_unshare_cmd", lambda: None)
    argv = ["sandbox", "run", *_files(tmp_path, io=ADD_IO), "--entry-point", "add", "--json"]
    assert main(argv) == 2
    assert "sandbox namespaces unavailable" in capsys.readouterr().err
    assert main([*argv, "--allow-unconfined"]) == 0
    layers = json.loads(capsys.readouterr().out)["layers"]
    assert layers[:2] == ["rlimits", "unconfined"] and not {"netns", "pidns", "setuid"} & set(layers)


def test_code_reward_is_available_by_name_in_configs():
    from seqrl.data import get_task
    from seqrl.rewards.combine import RewardSpec, build_reward, score_completions

    fn = build_reward(RewardSpec(name="code"), get_task("arith"))
    problem = Problem("add", "", metadata={"io_cases": [[[1, 2], 3]], "entry_point": "add"})
    scored = score_completions({"code": (fn, 1.0)}, [problem, problem],
                               ["```python\ndef add(a, b):\n    return a + b\n```", "def add(a, b): return a - b"])
    assert scored.scores["code"] == [1.0, pytest.approx(0.2)]


def test_code_reward_scores_stdio_programs_from_metadata(tmp_path, capsys):
    prog = "```python\nn = int(input())\nprint(n * 2)\n```"
    cases = [["3\n", "6"], {"input": "5\n", "output": "10\n"}]
    assert score_code(prog, stdio_cases=cases).score == 1.0
    half = score_code("```python\nprint(6)\n```", stdio_cases=cases)
    assert half.parts["functional"] == 0.5 and "case[1]: wrong answer" in half.reason
    with pytest.raises(ValueError, match=r"stdio_cases\[0\] input and output must be strings"):
        score_code(prog, stdio_cases=[["3", 6]])
    with pytest.raises(ValueError, match="together with"):
        score_code(prog, stdio_cases=cases, tests="assert True")
    sol, cf = tmp_path / "sol.py", tmp_path / "cases.json"
    sol.write_text("n = int(input())\nprint(n * 2)\n")
    cf.write_text(json.dumps(cases))
    assert main(["sandbox", "run", str(sol), "--stdio", str(cf), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["status"], out["passed"], out["total"]) == ("ok", 2, 2)


# ----------------------------------------------------------------------------- one number rule for io and stdio
BIG = 1_000_000_007


@pytest.mark.parametrize("kind", ["io", "stdio"])
@pytest.mark.parametrize("printed,expected,passes", [
    ("1e9", BIG, False),                       # an integer answer is exact: 1e9 is not 1,000,000,007
    (f"{BIG}.0", BIG, True),                   # the same value written as a float
    ("0.33333333", 1 / 3, True),               # a float answer has the tolerance
    ("0.334", 1 / 3, False),
])
def test_io_and_stdio_cases_share_one_number_rule(kind, printed, expected, passes):
    if kind == "io":
        r = score_code(f"def f():\n    return {printed}\n", io_cases=[[[], expected]], entry_point="f")
    else:
        shown = repr(expected) if isinstance(expected, float) else str(expected)
        r = score_code(f"print('{printed}')\n", stdio_cases=[["", shown]])
    assert r.parts["functional"] == float(passes), r.reason


def test_a_printed_decimal_is_read_exactly_against_an_integer():
    """float("1000000000000000001.0") is 1e18: the token is compared as written, not as a float."""
    assert score_code("print('1000000000000000001.0')\n", stdio_cases=[["", str(10**18)]]).parts["functional"] == 0.0
    assert score_code("print('1e18')\n", stdio_cases=[["", str(10**18)]]).parts["functional"] == 1.0
