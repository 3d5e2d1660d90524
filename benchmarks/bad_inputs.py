"""Bad-input table: a new user's mistakes, each run through the real `seqrl` command, and what it answers.

Purpose: bad input (config, dataset row, model output, untrusted code) gets a clear error naming the
field, or a zero reward with a reason — never a crash of the trainer, never lost data.

Every case runs `seqrl ARGS` as a subprocess in a fresh temporary folder (its cwd; nothing is written
into the repository), with a timeout, and records the exit code, seconds, non-empty stderr lines, the
first error line (or the reason of a reward / sandbox verdict), and whether a Python traceback appeared.

Verdict rules:
  error    ok = a nonzero exit (2 is the documented code; another nonzero code reads "ok (exit N)"), no
           traceback, at most 3 non-empty stderr lines, and the output contains every `expect` string
           (a tuple inside `expect` means any one of them). `expect` is what a user needs to read to fix
           the mistake (the field, the value, the path), chosen from the mistake, not from today's output.
  accept   valid input that looks risky (a template with colons, a dataset with no test split):
           ok = exit 0, no traceback, and the output contains `expect`.
  reward   `seqrl reward ... --json` on bad model output: ok = exit 0 (documented), score 0, and a
           non-empty reason that contains `expect`.
  verdict  `seqrl sandbox run ... --json` on hostile code: ok = exit 1 (documented: the run finished, not
           everything passed), status not "ok", no test passed, no traceback, and a non-empty reason
           (the verdict's or a failed test's) that contains `expect`.
  every    where a case has a `check` (nothing left in a folder that is not a run, an existing run's
           files unchanged and its checkpoint still loading, nothing written outside the sandbox), its
           finding is added to the verdict. A case past its timeout is "timeout".
A case that is not ok lists what failed, e.g. "exit 0", "traceback", "7 lines", "no 'optim.lr'".

    .venv/bin/python benchmarks/bad_inputs.py [--out FILE] [--only SUBSTR] [--list] [--jobs N]

Not a test: pytest never collects it. Takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
TRACEBACK = "Traceback (most recent call last)"


# ----------------------------------------------------------------------------------------------------
# cases


@dataclasses.dataclass
class Case:
    name: str
    argv: list[str]  # after `seqrl`
    expect: tuple = ()  # strings (or tuples of alternatives) a good answer contains
    kind: str = "error"  # error | accept | reward | verdict
    setup: Callable[[Path, "Ctx"], None] | None = None  # writes files into the case folder
    check: Callable[[Path, "Ctx", dict], str | None] | None = None  # a finding, or None
    env: dict = dataclasses.field(default_factory=dict)
    timeout: float = 120.0
    show: str | None = None  # the command as printed, where argv is too long or holds file contents


def files(contents: dict[str, str]) -> Callable[[Path, "Ctx"], None]:
    """A setup that writes the given files (relative path -> text) into the case folder."""

    def setup(d: Path, ctx: "Ctx") -> None:
        for name, text in contents.items():
            p = d / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)

    return setup


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


FRUIT = [{"question": f"Ann has {a} apples and buys {b} more. How many apples?", "answer": str(a + b),
          "split": "train" if i < 24 else "test"} for i, (a, b) in enumerate((i % 7 + 1, i % 5 + 2) for i in range(30))]


def grpo_yaml(data: str = "jsonl:data.jsonl", rewards: str = "[{name: task, weight: 1.0}]",
              kwargs: str = "{split_field: split}") -> str:
    """A GRPO config on the tiny preset from scratch (no SFT checkpoint needed), as in docs/bring-your-own.md."""
    return (f"model: {{preset: tiny, max_seq_len: 512}}\n"
            f"task: {{name: '{data}', kwargs: {kwargs}, n_train: -1, n_test: -1}}\n"
            f"prompt: {{system: r1}}\n"
            f"rewards: {rewards}\n"
            f"sampling: {{max_new_tokens: 16}}\n"
            f"eval: {{max_new_tokens: 16}}\n"
            f"steps: 2\nbatch_size: 8\ngroup_size: 4\nrun: {{name: byo}}\n")


MY_REWARDS = '''import os

_seen = [0]


def boom(completions, **kwargs):
    raise KeyError("score")  # a bug in the user's reward: every completion


def flaky(completions, **kwargs):
    """Raises on every third completion it sees: some calls fail, never a whole batch."""
    out = []
    for _ in completions:
        _seen[0] += 1
        if _seen[0] % 3 == 0:
            raise ValueError("flaky")
        out.append(1.0)
    return out


def quit(completions, **kwargs):
    os._exit(3)  # a reward that ends its process


def nan(completions, **kwargs):
    return [float("nan") for _ in completions]
'''


def byo_rewards(rewards: str) -> Callable[[Path, "Ctx"], None]:
    """The GRPO config naming `rewards`, the fruit rows and the user's reward module (MY_REWARDS)."""
    return files({"byo.yaml": grpo_yaml(rewards=rewards), "data.jsonl": jsonl(FRUIT), "my_rewards.py": MY_REWARDS})


# a tiny repository for the code-agent reward: total_price ignores the quantity; its test catches that
SHOP = {
    "repo/shop/__init__.py": "from shop.pricing import total_price\n",
    "repo/shop/pricing.py": "def total_price(items):\n    return sum(price for price, qty in items)\n",
    "repo/tests/test_pricing.py": "from shop import total_price\n\n\ndef test_qty():\n"
                                  "    assert total_price([(2.5, 2)]) == 5.0\n",
    "repo/pyproject.toml": '[project]\nname = "shop"\nversion = "0"\n',
}
EDIT_TESTS_DIFF = """diff --git a/tests/test_pricing.py b/tests/test_pricing.py
--- a/tests/test_pricing.py
+++ b/tests/test_pricing.py
@@ -4,2 +4,2 @@ from shop import total_price
 def test_qty():
-    assert total_price([(2.5, 2)]) == 5.0
+    assert total_price([(2.5, 2)]) == 2.5
"""

TESTS_F = "assert f() == 1\n"


def sandbox(code: str, tests: str = TESTS_F) -> dict:
    """A `seqrl sandbox run` case on the solution `code` with assert-style tests."""
    return dict(argv=["sandbox", "run", "sol.py", "--tests", "t.py", "--timeout", "3", "--json"],
                setup=files({"sol.py": code, "t.py": tests}), kind="verdict")


def outside(code: str, tests: str) -> Callable[[Path, "Ctx"], None]:
    """sol.py whose code names the absolute path of secret.txt in the case folder."""

    def setup(d: Path, ctx: "Ctx") -> None:
        (d / "secret.txt").write_text("SECRET")
        files({"sol.py": code.format(path=str(d / "secret.txt")), "t.py": tests})(d, ctx)

    return setup


def math(pred: str, gold: str) -> dict:
    """A `seqrl reward math --json` case on the completion `pred`."""
    return dict(argv=["reward", "math", "--pred", pred, "--gold", gold, "--json"], kind="reward")


# --- checks: nothing lost, nothing left behind ----------------------------------------------------


def tree(d: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under d."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()} if d.is_dir() else {}


def unchanged(folder: str) -> Callable:
    """The folder holds exactly the files it held before the command (no run.lock, no config.yaml)."""

    def check(d: Path, ctx: Ctx, before: dict) -> str | None:
        after = tree(d / folder)
        old = before[folder]
        added = sorted(set(after) - set(old))
        gone = sorted(set(old) - set(after))
        changed = sorted(k for k in set(old) & set(after) if old[k] != after[k])
        parts = ([f"left {', '.join(added)}"] if added else []) + ([f"lost {', '.join(gone)}"] if gone else []) \
            + ([f"changed {', '.join(changed)}"] if changed else [])
        return "; ".join(parts) or None

    return check


def run_intact(folder: str) -> Callable:
    """An existing run keeps every file (run.lock aside: the lock of whoever last held it) and its newest
    checkpoint still loads."""

    def check(d: Path, ctx: Ctx, before: dict) -> str | None:
        old = {k: v for k, v in before[folder].items() if k != "run.lock"}
        after = {k: v for k, v in tree(d / folder).items() if k != "run.lock"}
        lost = sorted(k for k in old if after.get(k) != old[k])
        if lost:
            return f"lost/changed {', '.join(lost[:3])}"
        ckpts = sorted((d / folder).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        if not ckpts:
            return "no checkpoint left"
        code = ("import sys; from seqrl.models import ModelConfig, load_policy; "
                "load_policy(ModelConfig(path=sys.argv[1]))")
        r = subprocess.run([ctx.python, "-c", code, str(ckpts[-1])], capture_output=True, text=True, timeout=120)
        return None if r.returncode == 0 else f"checkpoint does not load: {last_line(r.stderr)}"

    return check


def nothing_at(*paths: str) -> Callable:
    def check(d: Path, ctx: Ctx, before: dict) -> str | None:
        made = [p for p in paths if (d / p).exists()]
        return f"created {', '.join(made)}" if made else None

    return check


def no_sandbox_procs(d: Path, ctx: Ctx, before: dict) -> str | None:
    """No process of a sandbox uid (200000-259999, docs/sandbox.md) outlives the command."""
    left = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = int(next(ln for ln in status.read_text().splitlines() if ln.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        if 200_000 <= uid < 260_000:
            left.append(status.parent.name)
    return f"left {len(left)} sandbox processes" if left else None


def seed_run(d: Path, ctx: Ctx) -> None:
    """A finished 2-step SFT run at runs/mine (trained once per table, copied into each case)."""
    shutil.copytree(ctx.seed_run(), d / "runs" / "mine")


def not_a_run(d: Path, ctx: Ctx) -> None:
    """runs/notes/: a user's folder of notes that merely sits where a run would."""
    (d / "runs" / "notes").mkdir(parents=True)
    (d / "runs" / "notes" / "todo.txt").write_text("try lr 1e-3\n")


TINY = ["--steps=2"]  # every train case that might start training anyway stays short

CASES: list[Case] = [
    # --- the command line itself ---
    Case("unknown subcommand", ["trian", "sft", "--config", "arith_tiny"], ("trian",)),
    Case("train with no algo", ["train", "--config", "arith_tiny"], ("algo",)),
    Case("unknown algo", ["train", "sfx", "--config", "arith_tiny"], ("sfx",)),
    Case("unknown preset", ["train", "sft", "--config", "arith_tiyn", *TINY], ("arith_tiyn",)),
    Case("missing config file", ["train", "sft", "--config", "mine.yaml", *TINY], ("mine.yaml",)),
    Case("configs show unknown", ["configs", "show", "arith_tiyn"], ("arith_tiyn",)),
    Case("models get unknown", ["models", "get", "smollm3-135m"], ("smollm3-135m",)),
    # --- config values and keys ---
    Case("lr not a number", ["train", "sft", "--config", "arith_tiny", "--optim.lr=abc", *TINY], ("optim.lr", "abc")),
    Case("mistyped key", ["train", "sft", "--config", "arith_tiny", "--optim.lrr=1e-3", *TINY], ("optim.lrr",)),
    Case("negative steps", ["train", "sft", "--config", "arith_tiny", "--steps=-5"], ("steps", "-5")),
    Case("float for int", ["train", "sft", "--config", "arith_tiny", "--batch_size=1.5", *TINY], ("batch_size",)),
    Case("zero batch", ["train", "sft", "--config", "arith_tiny", "--batch_size=0", *TINY], ("batch_size", "0")),
    Case("negative save_every", ["train", "sft", "--config", "arith_tiny", "--run.save_every=-5", *TINY],
         ("save_every",)),
    Case("bad enum loss.agg", ["train", "grpo", "--config", "arith_tiny_grpo", "--loss.agg=foo", *TINY],
         ("loss.agg", "foo")),
    Case("bad enum schedule", ["train", "sft", "--config", "arith_tiny", "--optim.schedule=cosine_warm", *TINY],
         ("optim.schedule", "cosine_warm")),
    Case("bad bool bf16", ["train", "sft", "--config", "arith_tiny", "--run.bf16=maybe", *TINY], ("run.bf16",)),
    Case("unknown model preset", ["train", "sft", "--config", "arith_tiny", "--model.preset=huge", *TINY],
         ("huge",)),
    # the machine has no GPU: the device must be refused up front, naming it
    Case("cuda on a CPU machine", ["train", "sft", "--config", "arith_tiny", "--run.device=cuda", *TINY],
         (("run.device", "cuda"),)),
    Case("batch not a multiple of G", ["train", "grpo", "--config", "byo.yaml", "--batch_size=10"],
         (("batch_size", "group_size"),), setup=files({"byo.yaml": grpo_yaml(), "data.jsonl": jsonl(FRUIT)})),
    Case("override without value", ["train", "sft", "--config", "arith_tiny", *TINY, "--optim.lr"], ("optim.lr",)),
    Case("override with colon", ["train", "sft", "--config", "arith_tiny", "--optim.lr:3e-4", *TINY],
         ("optim.lr",)),
    Case("bad key in $SEQRL_OVERRIDES", ["train", "sft", "--config", "arith_tiny", *TINY], ("optim.lrr",),
         env={"SEQRL_OVERRIDES": "--optim.lrr=1e-3"}),
    # --- the user's config file ---
    Case("YAML syntax error", ["train", "sft", "--config", "mine.yaml"], ("mine.yaml", "line"),
         setup=files({"mine.yaml": "run:\n  name: mine\noptim: {lr: 3e-4\nsteps: 2\n"})),
    Case("YAML not a mapping", ["train", "sft", "--config", "mine.yaml"], ("mine.yaml",),
         setup=files({"mine.yaml": "- steps: 2\n- batch_size: 8\n"})),
    Case("YAML unknown nested key", ["train", "sft", "--config", "mine.yaml"], ("optim.lrr",),
         setup=files({"mine.yaml": "model: {preset: tiny}\ntask: {name: arith}\noptim: {lrr: 1.0e-3}\nsteps: 2\n"})),
    # --- prompt templates ---
    Case("template with colons (valid)", ["prompt", "show", "--config", "arith_tiny", "--algo", "sft", "--n", "1",
                                          "--prompt.template=Q: {question} A:"], ("Q: ", " A:"), kind="accept"),
    Case("template with colons, train (valid)", ["train", "sft", "--config", "arith_tiny", "--print-config",
                                                 "--prompt.template=Question: {question} Answer:"],
         ("Question: {question} Answer:",), kind="accept"),
    Case("template names no column", ["prompt", "show", "--config", "arith_tiny", "--algo", "sft",
                                      "--prompt.template=Solve: {questoin}"], ("questoin",)),
    # --- TRL names ---
    Case("TRL per_device_train_batch_size", ["train", "grpo", "--config", "arith_tiny_grpo",
                                             "--per_device_train_batch_size=4", *TINY],
         ("per_device_train_batch_size",)),
    Case("TRL gradient_accumulation_steps", ["train", "grpo", "--config", "arith_tiny_grpo",
                                             "--gradient_accumulation_steps=2", *TINY],
         ("gradient_accumulation_steps",)),
    # TRL's loss_type maps onto two seqrl fields; a user needs to be told which
    Case("TRL loss_type", ["train", "grpo", "--config", "arith_tiny_grpo", "--loss_type=dr_grpo", *TINY],
         ("loss_type", "loss.agg")),
    Case("TRL name on sft", ["train", "sft", "--config", "arith_tiny", "--num_generations=4", *TINY],
         ("num_generations",)),
    Case("TRL alias learning_rate (valid)", ["train", "grpo", "--config", "arith_tiny_grpo",
                                             "--learning_rate=1e-5", "--print-config"], ("1.0e-05",), kind="accept"),
    # --- models and run folders ---
    # a GRPO preset in a fresh folder: its warm start (the short SFT) is not there yet
    Case("GRPO preset without its SFT", ["train", "grpo", "--config", "arith_tiny_grpo", *TINY],
         ("sft_arith_tiny_short", "seqrl train sft")),
    Case("resume a folder that is not a run", ["train", "sft", "--config", "arith_tiny", "--run.name=notes",
                                               "--resume", *TINY], ("runs/notes",),
         setup=not_a_run, check=unchanged("runs/notes")),
    Case("resume a run that never was", ["train", "sft", "--config", "arith_tiny", "--run.name=never", "--resume",
                                         *TINY], ("runs/never",), check=nothing_at("runs/never")),
    Case("new run in another run's folder", ["train", "sft", "--config", "arith_tiny", "--run.name=mine",
                                             "--optim.lr=1e-4", *TINY], ("runs/mine",),
         setup=seed_run, check=run_intact("runs/mine")),
    Case("resume with changed lr", ["train", "sft", "--config", "arith_tiny", "--run.name=mine", "--resume",
                                    "--optim.lr=1e-4", "--steps=4"], ("optim.lr",),
         setup=seed_run, check=run_intact("runs/mine")),
    Case("resume with changed model", ["train", "sft", "--config", "arith_tiny", "--run.name=mine", "--resume",
                                       "--model.preset=small", "--steps=4"], ("model.preset",),
         setup=seed_run, check=run_intact("runs/mine")),
    # without a runs/ folder `runs/x` may be read as a hub id; a user still needs one short line
    Case("eval runs/x, no runs/ here", ["eval", "runs/my_run"], ("runs/my_run",)),
    Case("eval runs/x, runs/ here", ["eval", "runs/my_run"], ("runs/my_run",),
         setup=lambda d, ctx: (d / "runs").mkdir()),
    Case("eval ./x", ["eval", "./my_model"], ("my_model",)),
    Case("eval a folder that is not a run", ["eval", "runs/notes"], ("runs/notes",), setup=not_a_run,
         check=unchanged("runs/notes")),
    Case("eval unknown metric", ["eval", "runs/mine", "--metrics", "accuracy", "--n", "4"], ("accuracy",),
         setup=seed_run, check=run_intact("runs/mine")),
    Case("eval task-kwargs not JSON", ["eval", "runs/mine", "--task-kwargs", "{digits: 3", "--n", "4"],
         ("task-kwargs",), setup=seed_run, check=run_intact("runs/mine")),
    # --- tasks and datasets ---
    Case("wrong task name", ["train", "sft", "--config", "arith_tiny", "--task.name=arithmetic", *TINY],
         ("arithmetic",)),
    Case("task kwarg typo", ["train", "sft", "--config", "arith_tiny", "--task.kwargs.digts=3", *TINY], ("digts",)),
    Case("dataset file missing", ["train", "grpo", "--config", "byo.yaml"], ("data.jsonl",),
         setup=files({"byo.yaml": grpo_yaml()})),
    # no question/prompt column: the user needs the file and the column it looked for
    Case("dataset missing column", ["train", "grpo", "--config", "byo.yaml"], ("data.jsonl", "question"),
         setup=files({"byo.yaml": grpo_yaml(),
                     "data.jsonl": jsonl([{"q": r["question"], "answer": r["answer"]} for r in FRUIT])})),
    Case("dataset malformed JSON line", ["train", "grpo", "--config", "byo.yaml"], ("data.jsonl", ("line 3", ":3")),
         setup=files({"byo.yaml": grpo_yaml(),
                     "data.jsonl": jsonl(FRUIT[:2]) + '{"question": "2+2?", "answer": 4,\n' + jsonl(FRUIT[2:])})),
    Case("dataset empty file", ["train", "grpo", "--config", "byo.yaml"], ("data.jsonl", ("empty", "no rows")),
         setup=files({"byo.yaml": grpo_yaml(), "data.jsonl": ""})),
    # a split column whose rows are all "train": nothing is left to evaluate on; the user needs the column named
    Case("dataset split column all train", ["train", "grpo", "--config", "byo.yaml"], ("split",),
         setup=files({"byo.yaml": grpo_yaml(), "data.jsonl": jsonl([{**r, "split": "train"} for r in FRUIT])})),
    Case("dataset folder, train.jsonl only (valid)", ["train", "grpo", "--config", "byo.yaml"],
         (("holding out", "held out", "holds out"),), kind="accept",
         setup=files({"byo.yaml": grpo_yaml(data="jsonl:fruit", kwargs="{}"),
                      "fruit/train.jsonl": jsonl([{k: v for k, v in r.items() if k != "split"} for r in FRUIT])})),
    # --- the user's reward function, fed model output ---
    Case("reward import typo", ["train", "grpo", "--config", "byo.yaml"], ("my_rewrds",),
         setup=byo_rewards("[{name: 'my_rewrds:boom'}]")),
    Case("reward raises on every completion", ["train", "grpo", "--config", "byo.yaml"], ("boom",),
         setup=byo_rewards("[{name: 'my_rewards:boom'}]")),
    Case("reward raises on some (valid run)", ["train", "grpo", "--config", "byo.yaml"], ("flaky",), kind="accept",
         setup=byo_rewards("[{name: 'my_rewards:flaky'}, {name: task}]")),
    # os._exit inside a reward is documented as that reward's error, not the end of the trainer
    Case("reward calls os._exit", ["train", "grpo", "--config", "byo.yaml"], ("quit",),
         setup=byo_rewards("[{name: 'my_rewards:quit'}]")),
    Case("reward returns NaN", ["train", "grpo", "--config", "byo.yaml"], ("nan",),
         setup=byo_rewards("[{name: 'my_rewards:nan'}]")),
    # --- seqrl reward math on model output ---
    Case("math: garbage", **math("}}{{\\boxed{ <answer></answer> \\frac{", "5")),
    Case("math: tower of powers", **math("<answer>9^{9^{9^{9}}}</answer>", "5")),
    Case("math: 120k characters", **math("1" * 120_000, "5"),
         show="seqrl reward math --pred '111…(120k)' --gold 5 --json"),
    Case("math: 5000 nested boxes", **math("\\boxed{" * 5000 + "5" + "}" * 5000, "7"),
         show="seqrl reward math --pred '\\boxed{×5000 5 }×5000' --gold 7 --json"),
    Case("math: hedged answers", **math("\\boxed{3} or maybe \\boxed{5}", "5"), expect=("hedg",)),
    Case("math: no --gold", ["reward", "math", "--pred", "<answer>5</answer>"], ("--gold",)),
    # --- seqrl sandbox run on untrusted code ---
    Case("sandbox: infinite loop", **sandbox("def f():\n    while True:\n        pass\n"), expect=("timeout",),
         check=no_sandbox_procs),
    Case("sandbox: 4 GB allocation", **sandbox("def f():\n    x = bytearray(4 * 1024**3)\n    return 1\n"),
         expect=("memory",)),
    Case("sandbox: fork bomb", **sandbox("import os\n\ndef f():\n    while True:\n        os.fork()\n"),
         check=no_sandbox_procs),
    # a file of the user's beside the solution, outside the sandbox's scratch: reading it must fail
    Case("sandbox: reads a file outside", ["sandbox", "run", "sol.py", "--tests", "t.py", "--json"], (),
         kind="verdict", setup=outside("def f():\n    return open({path!r}).read()\n", "assert f() == 'SECRET'\n")),
    Case("sandbox: writes a file outside", ["sandbox", "run", "sol.py", "--tests", "t.py", "--json"], (),
         kind="verdict", setup=outside("def f():\n    open({path!r}, 'w').write('pwned')\n    return 0\n",
                                       "assert f() == 1\n"),
         check=lambda d, ctx, before: "wrote secret.txt" if (d / "secret.txt").read_text() != "SECRET" else None),
    Case("sandbox: os._exit(0) at import", **sandbox("import os\nos._exit(0)\ndef f():\n    return 1\n"),
         expect=("exit",)),
    # inside the test: prints what a passing verdict looks like, then exits 0 before the assert
    Case("sandbox: prints a fake verdict", **sandbox(
        "import json, os, sys\n\ndef f():\n    print(json.dumps({'status': 'ok', 'passed': 1, 'total': 1}))\n"
        "    print('ok: 1/1 passed')\n    sys.stdout.flush()\n    os._exit(0)\n")),
    Case("sandbox: missing tests file", ["sandbox", "run", "sol.py", "--tests", "nope_tests.py"], ("nope_tests.py",),
         setup=files({"sol.py": "def f():\n    return 1\n"})),
    Case("sandbox: --io not JSON", ["sandbox", "run", "sol.py", "--io", "cases.json", "--entry-point", "f"],
         ("cases.json",), setup=files({"sol.py": "def f(x):\n    return x\n", "cases.json": "[[1], 1,\n"})),
    Case("sandbox: --io without entry point", ["sandbox", "run", "sol.py", "--io", "cases.json"], ("--entry-point",),
         setup=files({"sol.py": "def f(x):\n    return x\n", "cases.json": "[[[1], 1]]"})),
    # --- seqrl reward code-agent ---
    Case("code-agent: patch edits the tests", ["reward", "code-agent", "--repo", "repo", "--patch", "p.diff",
                                               "--test-cmd", "pytest -q", "--json"], ("test",), kind="reward",
         setup=files({**SHOP, "p.diff": EDIT_TESTS_DIFF}), check=unchanged("repo")),
    Case("code-agent: not a diff", ["reward", "code-agent", "--repo", "repo", "--patch", "p.diff",
                                    "--test-cmd", "pytest -q", "--json"], (("diff", "patch"),), kind="reward",
         setup=files({**SHOP, "p.diff": "I fixed it, trust me.\n"}), check=unchanged("repo")),
    Case("code-agent: missing repo", ["reward", "code-agent", "--repo", "nope_repo", "--patch", "p.diff",
                                      "--test-cmd", "pytest -q"], ("nope_repo",),
         setup=files({"p.diff": EDIT_TESTS_DIFF})),
    Case("code-agent: test-cmd not pytest", ["reward", "code-agent", "--repo", "repo", "--patch", "p.diff",
                                             "--test-cmd", "rm -rf ."], ("pytest",),
         setup=files({**SHOP, "p.diff": EDIT_TESTS_DIFF}), check=unchanged("repo")),
    # --- search, data, decision transformers ---
    Case("search: missing policy", ["search", "bon", "--policy", "runs/nope", "--task", "arith", "--budget", "1,4"],
         ("runs/nope",), setup=lambda d, ctx: (d / "runs").mkdir()),
    Case("search: missing scorer", ["search", "bon", "--policy", "simulated:0.1", "--scorer", "prm:runs/nope_prm",
                                    "--task", "arith", "--budget", "1,4", "--problems", "4"], ("runs/nope_prm",),
         setup=lambda d, ctx: (d / "runs").mkdir()),
    Case("minari: unknown env", ["data", "minari", "hoper", "medium", "--out", "ds"], ("hoper",)),
    Case("minari: unknown level", ["data", "minari", "hopper", "mediun", "--out", "ds"], ("mediun",)),
    Case("dt: target returns not numbers", ["train", "dt", "--config", "pendulum_medium_replay",
                                            "--eval.target_returns=abc", *TINY], ("target_returns",)),
    Case("dt: no target returns", ["train", "dt", "--config", "pendulum_medium_replay",
                                   "--eval.target_returns=[]", *TINY], ("target_returns",)),
    Case("eval dt: missing checkpoint", ["eval", "dt", "--checkpoint", "runs/nope_dt", "--target-returns=-150"],
         ("runs/nope_dt",), setup=lambda d, ctx: (d / "runs").mkdir()),
]


# ----------------------------------------------------------------------------------------------------
# running


class Ctx:
    def __init__(self, seqrl: str, python: str, root: Path):
        self.seqrl, self.python, self.root = seqrl, python, root
        self._seed_lock = threading.Lock()
        self._seed: Path | None = None

    def env(self, extra: dict) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SEQRL_")}
        env.update(SEQRL_HOME=str(self.root / "seqrl-home"), MINARI_DATASETS_PATH=str(self.root / "minari"))
        env.update(extra)
        return env

    def seed_run(self) -> Path:
        with self._seed_lock:
            if self._seed is None:
                d = self.root / "seed"
                d.mkdir()
                r = subprocess.run([self.seqrl, "train", "sft", "--config", "arith_tiny", "--steps=2",
                                    "--run.name=mine"], cwd=d, env=self.env({}), capture_output=True, text=True,
                                   timeout=300)
                if r.returncode != 0:
                    raise RuntimeError(f"the seed run failed:\n{r.stderr[-2000:]}")
                self._seed = d / "runs" / "mine"
            return self._seed


def last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def first_error(stdout: str, stderr: str) -> str:
    """The line a user reads for the cause: the last stderr line after a traceback (the exception), else
    the first stderr line saying 'error', else the last stderr line, else the first stdout line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    if TRACEBACK in stderr:
        return lines[-1]
    for ln in lines:
        if re.search(r"error", ln, re.I):
            return ln
    if lines:
        return lines[-1]
    out = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    return out[0] if out else ""


def has(text: str, expect: tuple) -> list[str]:
    """The expect items missing from text (case-insensitive)."""
    low = text.lower()
    missing = []
    for item in expect:
        alts = item if isinstance(item, tuple) else (item,)
        if not any(a.lower() in low for a in alts):
            missing.append("|".join(alts))
    return missing


def run_case(case: Case, ctx: Ctx) -> dict:
    d = Path(tempfile.mkdtemp(prefix="case-", dir=ctx.root))
    if case.setup:
        case.setup(d, ctx)
    before = {sub: tree(d / sub) for sub in ("runs/notes", "runs/mine", "repo")}
    t0 = time.time()
    p = subprocess.Popen([ctx.seqrl, *case.argv], cwd=d, env=ctx.env(case.env), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=case.timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the case's own process group only
        stdout, stderr = p.communicate()
        timed_out = True
    secs = time.time() - t0
    both = stdout + "\n" + stderr
    err_lines = sum(1 for ln in stderr.splitlines() if ln.strip())
    tb = TRACEBACK in both
    message = first_error(stdout, stderr)
    problems: list[str] = []
    rc = p.returncode
    if timed_out:
        problems.append("timeout")
    elif case.kind == "error":
        if rc == 0:
            problems.append("exit 0")
        if err_lines > 3:
            problems.append(f"{err_lines} lines")
        problems += [f"no '{m}'" for m in has(both, case.expect)]
    elif case.kind == "accept":
        hits = [ln.strip() for ln in (stderr + "\n" + stdout).splitlines() if not has(ln, case.expect[:1])]
        message = hits[0] if hits and case.expect else message
        if rc != 0:
            problems.append(f"exit {rc}")
        problems += [f"no '{m}'" for m in has(both, case.expect)]
    else:  # reward / verdict: one JSON object on the last stdout line
        want_rc = 0 if case.kind == "reward" else 1
        try:
            res = json.loads(last_line(stdout))
        except ValueError:
            res = None
        if rc != want_rc:
            problems.append(f"exit {rc}")
        if not isinstance(res, dict):
            problems.append("no JSON result")
        else:
            reasons = [str(res.get("reason") or "")] + [str(t.get("reason") or "") for t in res.get("tests", [])
                                                        if not t.get("passed")]
            reason = next((r for r in reasons if r), "")
            message = (f"score={res.get('score')} " if case.kind == "reward" else
                       f"{res.get('status')} {res.get('passed')}/{res.get('total')} ") + (reason or "(no reason)")
            if case.kind == "reward" and res.get("score") != 0:
                problems.append(f"score {res.get('score')}")
            if case.kind == "verdict" and (res.get("status") == "ok" or res.get("passed")):
                problems.append(f"passed: {res.get('status')} {res.get('passed')}/{res.get('total')}")
            if not reason:
                problems.append("no reason")
            problems += [f"no '{m}'" for m in has(" ".join(reasons) + " " + str(res.get("status")), case.expect)]
    if tb:
        problems.append("traceback")
    if case.check and not timed_out:
        finding = case.check(d, ctx, before)
        if finding:
            problems.append(finding)
    if case.kind == "error" and not problems and rc != 2:
        verdict = f"ok (exit {rc})"
    else:
        verdict = "ok" if not problems else "; ".join(problems)
    shutil.rmtree(d, ignore_errors=True)
    return dict(name=case.name, command=show(case), rc=rc, secs=secs, err_lines=err_lines,
                message=trim(message, 120), tb=tb, verdict=verdict, ok=not problems)


def trim(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def show(case: Case) -> str:
    return case.show or trim("seqrl " + " ".join(shlex.quote(a) for a in case.argv), 110)


def md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(results: list[dict], wall: float) -> str:
    ok = sum(r["ok"] for r in results)
    out = [f"# seqrl bad-input table: {ok}/{len(results)} ok, {wall:.0f} s in all", "",
           "Verdict rules: the top of benchmarks/bad_inputs.py.", "",
           "| # | case | command | exit | s | stderr lines | first error line / reason | traceback | verdict |",
           "|---:|---|---|---:|---:|---:|---|---|---|"]
    for i, r in enumerate(results, 1):
        out.append(f"| {i} | {md(r['name'])} | `{md(r['command'])}` | {r['rc']} | {r['secs']:.1f} | {r['err_lines']} | "
                   f"{md(r['message'])} | {'yes' if r['tb'] else ''} | {md(r['verdict'])} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="also write the markdown table to this file")
    ap.add_argument("--only", help="run the cases whose name contains this (case-insensitive)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1: sequential)")
    ap.add_argument("--seqrl", default=str(REPO / ".venv" / "bin" / "seqrl"), help="the seqrl executable")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.only or args.only.lower() in c.name.lower()]
    if args.list:
        for i, c in enumerate(cases, 1):
            print(f"{i:3d}  {c.kind:7s}  {c.name:40s}  {show(c)}")
        return
    python = str(Path(args.seqrl).with_name("python"))
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="seqrl-bad-inputs-") as root:
        ctx = Ctx(args.seqrl, python, Path(root))
        results: list[dict | None] = [None] * len(cases)
        width = max(len(c.name) for c in cases)

        def one(i: int) -> None:
            r = run_case(cases[i], ctx)
            results[i] = r
            print(f"[{i + 1:2d}/{len(cases)}] {r['name']:{width}s}  exit {r['rc']!s:>4}  {r['secs']:5.1f} s  "
                  f"{r['verdict']}", flush=True)

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            list(pool.map(one, range(len(cases))))
    text = table([r for r in results if r is not None], time.time() - t0)
    print()
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()
