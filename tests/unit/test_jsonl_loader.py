"""JsonlTask: GSM8K answers, row errors that name file, line and field, splits, and the verifier."""

from __future__ import annotations

import json

import pytest

from seqrl.data import DatasetFormatError, JsonlTask, Problem, get_task
from seqrl.data.jsonl import answers_match, parse_gsm8k_answer

GSM8K_ROW = {
    "question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether.\n#### 72",
}


def write_jsonl(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_gsm8k_answers_give_gold_and_steps(tmp_path):
    path = write_jsonl(tmp_path / "gsm.jsonl", [{**GSM8K_ROW, "split": "train"}])
    (problem,) = JsonlTask(path, split_field="split").problems("train", -1)
    assert problem.answer == "72"
    assert problem.steps == (
        "Natalia sold 48/2 = 24 clips in May.",
        "Natalia sold 48+24 = 72 clips altogether.",
    )
    assert problem.prompt == GSM8K_ROW["question"]
    assert problem.uid == "gsm/1"
    assert problem.target.endswith("<answer>72</answer>")


def test_plain_and_numeric_answers(tmp_path):
    path = write_jsonl(
        tmp_path / "qa.jsonl",
        [
            {"q": "Capital of France?", "a": "Paris", "s": "train"},
            {"q": "6*7?", "a": 42, "s": "train"},
            "",  # blank lines are skipped
            {"q": "1/2 as a decimal?", "a": 0.5, "s": "test"},
        ],
    )
    task = JsonlTask(path, prompt_field="q", answer_field="a", split_field="s")
    train = sorted((p.prompt, p.answer, p.steps) for p in task.problems("train", -1))
    assert train == [("6*7?", "42", ()), ("Capital of France?", "Paris", ())]
    assert [p.answer for p in task.problems("test", -1)] == ["0.5"]
    assert [p.uid for p in task.problems("test", -1)] == ["qa/4"]


@pytest.mark.parametrize(
    "bad_row, message",
    [
        ('{"question": "q", "answer": ', "data.jsonl line 3: invalid JSON"),
        ({"question": "q"}, "data.jsonl line 3: missing field 'answer'"),
        ({"answer": "1"}, "data.jsonl line 3: missing field 'question'"),
        ({"question": ["q"], "answer": "1"}, "line 3: field 'question' item 0 must be {'role': str, 'content': str}"),
        ({"question": {"q": 1}, "answer": "1"}, "line 3: field 'question' must be str or list (got dict)"),
        (
            {"question": "q", "answer": None},
            "data.jsonl line 3: field 'answer' must be str or int or float (got NoneType)",
        ),
        (
            {"question": "q", "answer": True},
            "data.jsonl line 3: field 'answer' must be str or int or float (got bool)",
        ),
        ('["q", "1"]', "data.jsonl line 3: expected an object, got list"),
    ],
)
def test_malformed_rows_name_file_line_and_field(tmp_path, bad_row, message):
    good = {"question": "q", "answer": "1"}
    path = write_jsonl(tmp_path / "data.jsonl", [good, good, bad_row, good])
    with pytest.raises(DatasetFormatError) as err:
        JsonlTask(path)
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)


def test_bad_split_values_are_named(tmp_path):
    path = write_jsonl(tmp_path / "data.jsonl", [{"question": "q", "answer": "1", "split": "dev"}])
    message = "data.jsonl line 1: field 'split' must be 'train' or 'test'"
    with pytest.raises(DatasetFormatError, match=message):
        JsonlTask(path, split_field="split")
    with pytest.raises(DatasetFormatError, match="data.jsonl line 1: missing field 'part'"):
        JsonlTask(path, split_field="part")


def rows(count: int) -> list[dict]:
    return [{"question": f"What is {i}+1?", "answer": str(i + 1)} for i in range(count)]


def test_split_field_decides_the_split(tmp_path):
    data = [{**row, "split": "test" if i % 3 == 0 else "train"} for i, row in enumerate(rows(30))]
    task = JsonlTask(write_jsonl(tmp_path / "d.jsonl", data), split_field="split")
    test = {p.prompt for p in task.problems("test", -1)}
    assert test == {f"What is {i}+1?" for i in range(0, 30, 3)}
    assert len(task.problems("train", -1)) == 20


def test_without_split_field_prompts_hash_into_disjoint_splits(tmp_path):
    task = JsonlTask(write_jsonl(tmp_path / "d.jsonl", rows(500)))
    train = {p.prompt for p in task.problems("train", -1)}
    test = {p.prompt for p in task.problems("test", -1)}
    assert train.isdisjoint(test) and len(train | test) == 500
    assert 25 < len(test) < 75  # ~10%
    again = JsonlTask(write_jsonl(tmp_path / "again.jsonl", rows(500)[::-1]))
    assert {p.prompt for p in again.problems("test", -1)} == test  # by content, not position


def test_problems_are_a_seeded_shuffle(tmp_path):
    task = JsonlTask(write_jsonl(tmp_path / "d.jsonl", rows(100)))
    first = [p.uid for p in task.problems("train", 20, seed=0)]
    assert first == [p.uid for p in task.problems("train", 20, seed=0)]
    assert first != [p.uid for p in task.problems("train", 20, seed=1)]
    assert len(set(first)) == 20
    available = len(task.problems("train", -1))
    message = f"asked for {available + 1} train problems but there are {available}"
    with pytest.raises(ValueError, match=message):
        task.problems("train", available + 1)


def test_json_array_csv_and_get_task(tmp_path):
    array = tmp_path / "arr.json"
    array.write_text(json.dumps([{"question": "a", "answer": "1"}, {"question": "b"}]))
    with pytest.raises(DatasetFormatError, match="arr.json item 2: missing field 'answer'"):
        JsonlTask(array)
    csv = tmp_path / "table.csv"
    csv.write_text("question,answer\nWhat is 2+2?,4\nWhat is 3+3?,6\n")
    task = get_task(f"jsonl:{csv}", split_field=None)
    assert sorted(p.answer for s in ("train", "test") for p in task.problems(s, -1)) == ["4", "6"]
    assert task.name == "table"


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        JsonlTask(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    "gold, completion, score, reason",
    [
        ("72", "<answer>72</answer>", 1.0, ""),
        ("1000", "<answer>1,000</answer>", 1.0, ""),
        ("$18", "<answer>18.00</answer>", 1.0, ""),
        ("Paris", "<answer> paris. </answer>", 1.0, ""),
        ("\\frac{1}{2}", "<answer>0.5</answer>", 1.0, ""),  # decided by math-verify
        ("72", "<answer>71</answer>", 0.0, "not equal: 71 vs 72"),
        ("Paris", "<answer>Lyon</answer>", 0.0, "not equal: Lyon vs Paris"),
        ("72", "72", 0.0, "no answer found"),
        ("72", "<answer>" + "7" * 2000 + "</answer>", 0.0, "answer too long"),
    ],
)
def test_verifier(tmp_path, gold, completion, score, reason):
    path = write_jsonl(tmp_path / "one.jsonl", [{"question": "q", "answer": gold}])
    result = JsonlTask(path).verify(Problem("q", gold), completion)
    assert (result.score, result.reason) == (score, reason)


@pytest.mark.parametrize(
    "pred", ["", "\x00", "\U0001f600" * 50, "{", "\\frac{", "1/0", "nan", "1e999", "((((("]
)
def test_answers_match_never_raises(pred):
    assert answers_match("72", pred) is False


def test_parse_gsm8k_answer_takes_the_last_marker():
    assert parse_gsm8k_answer("a\n#### 1\n#### 2") == ("2", ("a", "#### 1"))


def test_trl_formats_load_with_no_settings(tmp_path):
    """TRL's standard (`prompt`, `solution`) and conversational (`prompt` as messages, `messages`) rows:
    no task.kwargs; every column, the prompt's included, keeps its name for templates and rewards."""
    from seqrl.prompts import PromptConfig, build_messages

    standard = get_task(f"jsonl:{write_jsonl(tmp_path / 'std.jsonl', [{'prompt': f'{a}+2?', 'solution': str(a + 2)} for a in range(40)])}")
    p = (standard.problems("train", 1) or standard.problems("test", 1))[0]
    assert (standard.prompt_field, standard.answer_field) == ("prompt", "solution")
    assert standard.verify(p, f"<answer>{p.answer}</answer>").score == 1.0
    assert build_messages(p, PromptConfig(template="Q: {prompt}"))[-1]["content"] == f"Q: {p.prompt}"

    chat = [{"prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"{a}+1?"}],
             "answer": str(a + 1)} for a in range(40)]
    conv = get_task(f"jsonl:{write_jsonl(tmp_path / 'conv.jsonl', chat)}")
    q = conv.problems("train", 1)[0]
    assert q.messages[-1]["role"] == "user" and q.prompt.endswith("+1?") and q.answer.isdigit()

    sft = [{"messages": [{"role": "user", "content": f"say {a}"}, {"role": "assistant", "content": str(a)}]}
           for a in range(40)]
    msgs = get_task(f"jsonl:{write_jsonl(tmp_path / 'msgs.jsonl', sft)}")
    r = msgs.problems("train", 1)[0]
    assert [m["role"] for m in r.messages] == ["user"] and msgs.answer_field is None

    with pytest.raises(DatasetFormatError, match="no prompt column .*question, prompt, problem, messages.*prompt_field"):
        get_task(f"jsonl:{write_jsonl(tmp_path / 'odd.jsonl', [{'text': 'x', 'answer': '1'}])}")


def test_a_dataset_with_only_a_train_split_gets_a_stated_held_out_split(tmp_path, capsys):
    """`datasets.load_dataset(folder)` on a folder with train.jsonl has no 'test' split (most GRPO sets on
    the hub too): it crashed with KeyError: 'test'."""
    folder = tmp_path / "trl_set"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [{"prompt": f"{a}*3?", "solution": str(3 * a)} for a in range(200)])
    task = JsonlTask(str(folder))
    train, test = task.problems("train", -1), task.problems("test", -1)
    assert len(train) + len(test) == 200 and 5 <= len(test) <= 40
    assert not {p.prompt for p in train} & {p.prompt for p in test}
    assert "no 'test' split; holding out" in capsys.readouterr().err
    capsys.readouterr()
    half = JsonlTask(str(folder), test_fraction=0.5)
    held = {p.prompt for p in half.problems("test", -1)}
    smaller = {p.prompt for p in JsonlTask(str(folder), test_fraction=0.3).problems("test", -1)}
    assert 70 <= len(held) <= 130 and smaller < held  # a larger share keeps the smaller's held-out prompts
    assert "holding out 50% of the prompts" in capsys.readouterr().err


def test_test_fraction_sets_the_held_out_share_of_a_file(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", rows(1000))
    for fraction, low, high in ((0.05, 25, 80), (0.3, 250, 350)):
        task = JsonlTask(path, test_fraction=fraction)
        train = {p.prompt for p in task.problems("train", -1)}
        test = {p.prompt for p in task.problems("test", -1)}
        assert train.isdisjoint(test) and len(train | test) == 1000 and low <= len(test) <= high
    assert {p.prompt for p in get_task(f"jsonl:{path}", test_fraction=0.3).problems("test", -1)} == test
    for bad in (0, 1, 1.5, "0.2", True):
        with pytest.raises(ValueError, match="test_fraction must be a number in"):
            JsonlTask(path, test_fraction=bad)
    with pytest.raises(ValueError, match="exclude each other"):
        JsonlTask(path, test_fraction=0.2, split_field="split")


def test_a_file_without_a_known_answer_column_says_so_and_conversational_completions_load(tmp_path, capsys):
    rows = [{"prompt": f"{a}+1?", "final_answer": str(a + 1)} for a in range(20)]
    task = get_task(f"jsonl:{write_jsonl(tmp_path / 'odd.jsonl', rows)}")
    assert "no gold-answer column" in capsys.readouterr().err
    p = (task.problems("train", 1))[0]
    assert task.verify(p, "<answer>1</answer>").reason.startswith("no gold-answer column found")
    chat = [{"prompt": [{"role": "user", "content": f"{a}+1?"}],
             "completion": [{"role": "assistant", "content": f"It is {a + 1}.\n#### {a + 1}"}]} for a in range(20)]
    conv = get_task(f"jsonl:{write_jsonl(tmp_path / 'pc.jsonl', chat)}")
    q = conv.problems("train", 1)[0]
    assert conv.answer_field == "completion" and q.answer == str(int(q.prompt.split("+")[0]) + 1)


def test_test_fraction_is_refused_for_a_dataset_with_its_own_test_split(tmp_path):
    folder = tmp_path / "both"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", rows(20))
    write_jsonl(folder / "test.jsonl", rows(5))
    assert len(JsonlTask(str(folder)).problems("test", -1)) == 5
    with pytest.raises(ValueError, match="has a 'test' split of its own"):
        JsonlTask(str(folder), test_fraction=0.2)
