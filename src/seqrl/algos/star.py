"""STaR: the self-taught reasoner with rationalization (Zelikman et al. 2022, Algorithm 1).

    seqrl train star --config arith_tiny_star [--iterations=6] [--rationalize=false] [--resume]

Outer iteration i = 1 … N, starting from M_0 = the base model:

1. sample `samples_per_problem` rationales per training problem from M_{i-1}; keep those the task's
   verifier accepts (a complete completion, ended by EOS or a stop string; distinct texts per problem);
2. rationalize (`rationalize: true`): for each problem with nothing kept, prompt M_{i-1} with the gold
   answer as a hint (`hint_template`); keep the verified rationales that do not quote the hint
   (`quotes_hint`), and train on them **without** the hint: the example is (problem, rationale);
3. M_i = fine-tune of the base model (`restart_from_base: true`, the paper's choice against
   overfitting) or of M_{i-1} on every kept example, for round(steps · step_growth^(i-1)) steps
   (the paper: 40 steps, +20 % per iteration) with a fresh optimizer;
4. evaluate M_i on held-out problems (greedy accuracy, pass@k).

`rationalize: false` with `samples_per_problem > 1` is rejection-sampling fine-tuning (RFT,
Yuan et al. 2023; ReST-EM, Singh et al. 2023, is the same loop) and is logged as ``run/method: rft``.

The base: STaR starts from a few-shot prompted model. A tiny model from scratch has no few-shot
ability, so the base here is the preset after a deliberately short SFT on a few worked examples (the
analogue of the few-shot prompt), some of them hinted so that the hint format is known
(`BaseConfig`); `base.path` starts from an existing model instead.

Every random draw is a pure function of (run.seed, iteration), and each iteration's fine-tune starts
from weights on disk (the base, or the previous checkpoint) with a fresh optimizer, so a run resumed
after an interrupted iteration repeats the uninterrupted one exactly.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, replace

import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.star_config import _WORD_RE, BaseConfig, STaRConfig, hint_words  # noqa: F401 (re-exported)
from seqrl.evaluation import EvalConfig, evaluate
from seqrl.models.lm import ModelConfig, Policy, load_policy, model_device, num_parameters
from seqrl.prompts import PromptConfig, check_template
from seqrl.rollout import SamplingParams, generate
from seqrl.training.finetune import encode_pairs, finetune
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.run import make_optimizer, releases_run_folder
from seqrl.types import MARKERS, Problem, Task
from seqrl.utils import dist
from seqrl.utils.dist import bf16_autocast
from seqrl.utils.metrics import read_metrics

BASE_DIR = "base"
"""The run folder's copy of the base model M_0 (restart_from_base reloads it; resume reads it)."""


# ---- the hint -------------------------------------------------------------------------------------

def with_hint(problem: Problem, template: str) -> Problem:
    """The problem with its gold answer as a hint in the question (the last user turn of a
    conversational row); the answer, and so the verifier's verdict, is unchanged."""
    if problem.messages:
        messages = [dict(m) for m in problem.messages]
        last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
        if last is None:
            raise ValueError(f"problem {problem.uid!r}: a conversational prompt without a user turn cannot take a hint")
        messages[last]["content"] = template.format(question=messages[last]["content"], answer=problem.answer)
        return replace(problem, prompt=messages[last]["content"], messages=tuple(messages))
    return replace(problem, prompt=template.format(question=problem.prompt, answer=problem.answer))


def quotes_hint(completion: str, template: str) -> bool:
    """Whether a rationale quotes the hint beyond the answer itself: it contains, as a whole word
    (case-insensitive, the house markers such as <answer> removed), a word of the hint template's own
    text. Stating the answer, in the reasoning or the <answer> block, is not quoting.

    >>> quotes_hint("<think>7+5=12</think><answer>12</answer>", "{question} hint: {answer}")
    False
    >>> quotes_hint("<think>the Hint says 12</think><answer>12</answer>", "{question} hint: {answer}")
    True
    """
    for marker in MARKERS:
        completion = completion.replace(marker, " ")
    return bool(hint_words(template) & {w.lower() for w in _WORD_RE.findall(completion)})


def fine_tune_steps(steps: int, growth: float, iteration: int) -> int:
    """Fine-tune steps of outer iteration `iteration` (1-based): round(steps · growth^(iteration−1)).

    >>> [fine_tune_steps(40, 1.2, i) for i in (1, 2, 3, 4)]
    [40, 48, 58, 69]
    """
    if iteration < 1:
        raise ValueError(f"iteration must be >= 1 (got {iteration})")
    return max(1, round(steps * growth ** (iteration - 1)))


# ---- one iteration --------------------------------------------------------------------------------

@dataclass
class Kept:
    """A training example: the problem as asked (never hinted) and a verified rationale."""

    index: int
    """Position of the problem in the training list."""
    problem: Problem
    completion: str
    rationalized: bool
    """Found with the hint in the prompt."""


def sample_verified(policy: Policy, task: Task, problems: list[Problem], n: int, params: SamplingParams,
                    batch_size: int, hint_template: str | None = None) -> tuple[list[list[str]], int]:
    """Per problem, the distinct sampled completions the task verifies (and, hinted, that do not
    quote the hint); only completions ended by EOS or a stop string, short enough to train on after
    the unhinted prompt, count. Returns them and the
    number of generated tokens. With `hint_template` the prompts carry the gold answer."""
    asked = [with_hint(p, hint_template) for p in problems] if hint_template else problems
    prompts = policy.encode_prompts(asked)
    # the training example is the unhinted prompt + the rationale + EOS: it must fit the context
    room = [policy.max_seq_len - 1 - len(p) for p in (policy.encode_prompts(problems) if hint_template else prompts)]
    kept: list[list[str]] = []
    tokens = 0
    for c, start in enumerate(range(0, len(prompts), batch_size)):
        chunk = prompts[start : start + batch_size]
        seed = None if params.seed is None else params.seed + c
        ro = generate(policy, chunk, n, replace(params, seed=seed))
        tokens += ro.num_generated_tokens
        for j in range(len(chunk)):
            problem, good = problems[start + j], []
            for k in range(j * n, (j + 1) * n):
                text = ro.texts[k]
                if ro.finish_reasons[k] != "stop" or text in good:
                    continue
                if len(policy.tokenizer.encode(text, add_special_tokens=False)) > room[start + j]:
                    continue
                if hint_template is not None and quotes_hint(text, hint_template):
                    continue
                if task.verify(problem, text).correct:
                    good.append(text)
            kept.append(good)
    return kept, tokens


def collect(policy: Policy, task: Task, problems: list[Problem], cfg: STaRConfig, iteration: int,
            seed: int) -> tuple[list[Kept], dict[str, float]]:
    """Steps 1–2 of an iteration: rationales of the current model, then rationalization of the
    problems it failed, sampled under ``run.bf16`` as GRPO's rollouts are. Returns the training examples and
    their statistics."""
    with bf16_autocast(model_device(policy.model), cfg.run.use_bf16):
        return _collect(policy, task, problems, cfg, iteration, seed)


def _collect(policy: Policy, task: Task, problems: list[Problem], cfg: STaRConfig, iteration: int,
             seed: int) -> tuple[list[Kept], dict[str, float]]:
    params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                            stop=tuple(cfg.stop), seed=seed * 1_000_003 + iteration * 1_000)
    direct, tokens = sample_verified(policy, task, problems, cfg.samples_per_problem, params, cfg.sample_batch_size)
    kept = [Kept(i, problems[i], t, False) for i, texts in enumerate(direct) for t in texts]
    failed = [i for i, texts in enumerate(direct) if not texts]
    rescued = 0
    if cfg.rationalize and failed:
        hinted, more = sample_verified(policy, task, [problems[i] for i in failed], cfg.samples_per_problem,
                                       replace(params, seed=params.seed + 500), cfg.sample_batch_size, cfg.hint_template)
        tokens += more
        for i, texts in zip(failed, hinted):
            kept.extend(Kept(i, problems[i], t, True) for t in texts)
            rescued += bool(texts)
    solved = len(problems) - len(failed)
    stats = {
        "star/kept": float(len(kept)),
        "star/kept_from_rationalization": float(sum(k.rationalized for k in kept)),
        "star/solved": solved / len(problems),
        "star/rationalized": rescued / len(problems),
        "star/train_coverage": (solved + rescued) / len(problems),
        "star/iteration_generated_tokens": float(tokens),
    }
    return kept, stats


def reset_to(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` (a full state dict) into `model`'s parameters and buffers in place."""
    with torch.no_grad():
        model.load_state_dict(state, strict=True)


def fine_tune(policy: Policy, kept: list[Kept], cfg: STaRConfig, iteration: int,
              base_state: dict[str, torch.Tensor] | None) -> dict[str, float]:
    """Step 3: fine-tune on the kept examples (from `base_state` when given) with a fresh optimizer;
    no examples → a warning on stderr and no fine-tune (the model stays as it is)."""
    steps = fine_tune_steps(cfg.finetune_steps, cfg.step_growth, iteration)
    if not kept:
        print(f"WARNING: STaR iteration {iteration}: no rationale was kept (none verified"
              f"{', none rationalized' if cfg.rationalize else ''}); fine-tune skipped, the model stays as it was",
              file=sys.stderr)
        return {"star/fine_tune_steps": 0.0, "star/fine_tune_skipped": 1.0}
    if base_state is not None:
        reset_to(policy.model, base_state)
    examples = encode_pairs(policy, [k.problem for k in kept], [k.completion for k in kept])
    optimizer, scheduler = make_optimizer(policy.model, cfg.optim, steps)
    out = finetune(policy.model, examples, steps=steps, batch_size=cfg.batch_size, optimizer=optimizer,
                   scheduler=scheduler, pad_id=policy.tokenizer.pad_token_id, seed=cfg.run.seed * 1_000 + iteration,
                   grad_clip=cfg.optim.grad_clip, bf16=cfg.run.use_bf16, on_nonfinite=cfg.run.on_nonfinite,
                   label=f"STaR iteration {iteration}")
    skipped = out.pop("stats/skipped_updates")  # this iteration's fine-tune updates run.on_nonfinite skipped
    return {**out, "star/fine_tune_steps": float(steps), "star/fine_tune_skipped": 0.0,
            "star/skipped_updates": skipped}


def accuracy_by(problems: list[Problem], records: list[dict], key: str) -> dict[str, float]:
    """Greedy accuracy per value of ``problem.metadata[key]``: ``eval/acc_<key>_<value>`` (numeric
    values in numeric order). `records` are `evaluate`'s, one per problem (score ≥ 1 is correct);
    problems without the key, or records without a greedy score, are left out.

    >>> ps = [Problem("1+2=", "3", metadata={"digits": d}) for d in (1, 2, 2, 10)]
    >>> accuracy_by(ps, [{"score": s} for s in (1.0, 0.0, 1.0, 0.0)], "digits")
    {'eval/acc_digits_1': 1.0, 'eval/acc_digits_2': 0.5, 'eval/acc_digits_10': 0.0}
    """
    if len(problems) != len(records):
        raise ValueError(f"accuracy_by: {len(problems)} problems but {len(records)} records")
    groups: dict[str, list[bool]] = {}
    for problem, record in zip(problems, records):
        if key in problem.metadata and "score" in record:
            groups.setdefault(str(problem.metadata[key]), []).append(record["score"] >= 1.0)
    order = sorted(groups, key=lambda v: (0, int(v), v) if re.fullmatch(r"-?[0-9]+", v) else (1, 0, v))
    return {f"eval/acc_{key}_{v}": sum(groups[v]) / len(groups[v]) for v in order}


def held_out(policy: Policy, task: Task, problems: list[Problem], cfg: STaRConfig) -> dict[str, float]:
    """Step 4: held-out greedy accuracy (overall and by `accuracy_by`), and pass@k (pass_k) /
    pass@1 (eval.samples) when asked."""
    ks = sorted({k for k in (cfg.pass_k, 1 if cfg.eval.samples else 0) if k})
    result = evaluate(policy, task, problems, pass_k=ks, n_samples=max([cfg.eval.samples, *ks]),
                      temperature=cfg.eval.temperature, max_new_tokens=cfg.eval.max_new_tokens,
                      batch_size=cfg.eval.batch_size, seed=cfg.run.seed, stop=list(cfg.eval.stop) or list(cfg.stop))
    return {**result.metrics, **(accuracy_by(problems, result.records, cfg.accuracy_by) if cfg.accuracy_by else {})}


def by_group(metrics: dict[str, float], key: str) -> str:
    """`` (digits 2: 0.610, 3: 0.290)`` from the eval/acc_<key>_<value> metrics; empty without them."""
    prefix = f"eval/acc_{key}_"
    parts = [f"{k[len(prefix):]}: {v:.3f}" for k, v in metrics.items() if key and k.startswith(prefix)]
    return f" ({key} {', '.join(parts)})" if parts else ""


# ---- the base model -------------------------------------------------------------------------------

def train_base(policy: Policy, problems: list[Problem], cfg: STaRConfig) -> dict[str, float]:
    """The short SFT that stands in for the paper's few-shot prompt: `base.examples` worked
    solutions, then `base.hinted` more shown with the hint (their target is the plain worked solution)."""
    plain, hinted = problems[: cfg.base.examples], problems[cfg.base.examples :]
    examples = encode_pairs(policy, plain + [with_hint(p, cfg.hint_template) for p in hinted],
                            [p.target for p in plain + hinted])
    optim = cfg.optim if cfg.base.lr is None else replace(cfg.optim, lr=cfg.base.lr)
    optimizer, scheduler = make_optimizer(policy.model, optim, cfg.base.steps)
    out = finetune(policy.model, examples, steps=cfg.base.steps, batch_size=cfg.base.batch_size, optimizer=optimizer,
                   scheduler=scheduler, pad_id=policy.tokenizer.pad_token_id, seed=cfg.run.seed,
                   grad_clip=cfg.optim.grad_clip, bf16=cfg.run.use_bf16, on_nonfinite=cfg.run.on_nonfinite,
                   label="STaR base fine-tune")
    return {"base/loss": out["loss/sft_last"], "base/examples": float(len(plain)), "base/hinted": float(len(hinted))}


def split_problems(task: Task, cfg: STaRConfig) -> tuple[list[Problem], list[Problem], list[Problem]]:
    """(STaR training problems, the base's worked examples, held-out problems), disjoint. The base's
    examples follow the training problems in the train split's draw (with n_train: -1 they are the
    split's last rows, and STaR trains on the rows before them)."""
    n_base = 0 if cfg.base.path else cfg.base.examples + cfg.base.hinted
    if cfg.task.n_train == -1:
        rows = task.problems("train", -1, cfg.task.seed)
        if n_base and len(rows) <= n_base:
            raise ValueError(f"task {cfg.task.name!r}: the train split has {len(rows)} rows, not more than the base's "
                             f"{n_base} worked examples (base.examples + base.hinted); lower them or add rows")
        train, base = (rows[:-n_base], rows[-n_base:]) if n_base else (rows, [])
    else:
        drawn = task.problems("train", cfg.task.n_train + n_base, cfg.task.seed)
        train, base = drawn[: cfg.task.n_train], drawn[cfg.task.n_train :]
    test = task.problems("test", cfg.task.n_test, cfg.task.seed)
    if not train or not test:
        raise ValueError(f"task {cfg.task.name!r}: STaR needs training and held-out problems "
                         f"(got {len(train)} and {len(test)})")
    return train, base, test


# ---- the loop -------------------------------------------------------------------------------------

class SelfTaught:
    """STaR (or rejection-sampling fine-tuning) as a run-loop method: unit 0 evaluates the base on the
    held-out problems (a fresh run); unit u is iteration u — sample rationales for the training problems,
    keep the verified ones (rationalizing the rest where enabled), fine-tune afresh on them, evaluate."""

    def __init__(self, cfg: STaRConfig, loop: RunLoop, policy, task, train_problems, test_problems, base_state,
                 generated: int, first: dict) -> None:
        self.cfg, self.loop, self.policy, self.task = cfg, loop, policy, task
        self.train_problems, self.test_problems, self.base_state = train_problems, test_problems, base_state
        self.generated, self.first = generated, first

    def step(self, u: int, log: bool) -> dict[str, float]:
        """Unit 0: the base's held-out evaluation (a fresh run); unit u: STaR iteration u."""
        cfg, policy = self.cfg, self.policy
        if u == 0:
            out = {**self.first, **held_out(policy, self.task, self.test_problems, cfg),
                   "model/parameters": num_parameters(policy.model), "data/train_problems": len(self.train_problems),
                   "data/test_problems": len(self.test_problems), "run/method": cfg.method,
                   "star/generated_tokens": 0.0, **self.loop.placement}
            print(f"{cfg.method} iteration 0 (base): held-out accuracy {out['eval/accuracy']:.3f}"
                  f"{by_group(out, cfg.accuracy_by)}")
            return out
        self.loop.guard.current = u  # a second signal loses this iteration's work: the messages say so
        t0 = time.perf_counter()
        kept, stats = collect(policy, self.task, self.train_problems, cfg, u, cfg.run.seed)
        self.generated += int(stats["star/iteration_generated_tokens"])
        t1 = time.perf_counter()
        stats.update(fine_tune(policy, kept, cfg, u, self.base_state))
        t2 = time.perf_counter()
        stats.update(held_out(policy, self.task, self.test_problems, cfg))
        stats.update({"star/generated_tokens": float(self.generated), "perf/sample_s": t1 - t0,
                      "perf/fine_tune_s": t2 - t1, "perf/eval_s": time.perf_counter() - t2})
        print(f"{cfg.method} iteration {u}: kept {int(stats['star/kept'])} "
              f"({int(stats['star/kept_from_rationalization'])} rationalized), coverage "
              f"{stats['star/train_coverage']:.3f}, held-out accuracy {stats['eval/accuracy']:.3f}"
              f"{by_group(stats, cfg.accuracy_by)}")
        return stats

    def state(self) -> dict:
        self.loop.guard.current = None  # the unit's work is done: a stop from here keeps it
        return {"generated_tokens": self.generated}


@releases_run_folder
def train(cfg: STaRConfig) -> dict[str, float]:
    """Run STaR; returns the last iteration's metrics (held-out eval/accuracy among them)."""
    if dist.world_size() > 1:
        raise ValueError("seqrl train star runs in one process (its sampling and fine-tunes are not "
                         "distributed); start it without torchrun")
    loop = RunLoop(cfg, cfg.method, distributed=False, unit="iteration")
    device, run_dir, resume_from = loop.device, loop.dir, loop.resume_from
    task = cfg.task.build()
    train_problems, base_problems, test_problems = split_problems(task, cfg)
    check_template(cfg.prompt, train_problems + base_problems + test_problems)

    base_dir = run_dir / BASE_DIR
    fresh_base = resume_from is None and cfg.base.path is None
    if resume_from is not None:
        policy = load_policy(ModelConfig(path=str(base_dir)), device)
    elif cfg.base.path is None:
        policy = load_policy(cfg.model, device)
    else:
        try:
            policy = load_policy(ModelConfig(path=cfg.base.path), device)
        except ValueError as e:
            raise ValueError(f"base.path: {e}") from e
    policy.prompt = cfg.prompt
    model, tok = policy.model, policy.tokenizer

    # a checkpoint holds the weights only: each iteration fine-tunes afresh, seeded by (seed, iteration)
    state = loop.resume(model, None, None, tok, restore_rng=False)
    generated, metrics = int(state.get("generated_tokens", 0)), {}
    if resume_from is None and fresh_base:
        t0 = time.perf_counter()
        metrics.update(train_base(policy, base_problems, cfg))
        metrics["perf/base_s"] = time.perf_counter() - t0
    if resume_from is None:
        policy.save(base_dir)
    # M_0 on disk is what every restart reloads; a CPU copy keeps it at hand.
    base_state = None
    if cfg.restart_from_base:
        reloaded = load_policy(ModelConfig(path=str(base_dir)))
        base_state = {k: v.detach().clone() for k, v in reloaded.model.state_dict().items()}
        del reloaded

    # units: 0 the base's evaluation, then iterations 1 … N; unit u is recorded and saved as step u
    method = SelfTaught(cfg, loop, policy, task, train_problems, test_problems, base_state, generated, metrics)
    final = loop.run(cfg.iterations + 1, method, Cadence(start=0 if resume_from is None else loop.start + 1,
                                                         at=lambda done: max(done - 1, 0), log_due=lambda done: True,
                                                         save_due=lambda done: True))
    records = read_metrics(run_dir / "metrics.jsonl")
    groups = [k for k in dict.fromkeys(k for r in records for k in r) if k.startswith("eval/acc_")]
    loop.plot(["eval/accuracy", *groups, "star/train_coverage", "star/kept", "star/kept_from_rationalization"],
              "star.png", f"{cfg.method} {cfg.run.name}")
    return final


# ---- the seed's interface -------------------------------------------------------------------------

class STaRTrainer:
    """STaR over a model and tokenizer in hand (scripts, notebooks); `train(cfg)` is the full run
    with a run folder, checkpoints and resume. The model as given is the base M_0."""

    def __init__(self, model, tokenizer, num_iterations: int = 4, task: Task | None = None,
                 config: STaRConfig | None = None):
        self.cfg = replace(config or STaRConfig(), iterations=num_iterations)
        self.policy = Policy(model, tokenizer, prompt=self.cfg.prompt)
        self.task = task if task is not None else self.cfg.task.build()
        self.base_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.iteration = 0
        self.generated_tokens = 0

    def generate_rationale(self, question: str | Problem, hint: str | None = None) -> str:
        """One sampled rationale for a question; with `hint` (the gold answer) in the hinted prompt."""
        problem = question if isinstance(question, Problem) else Problem(question, hint or "")
        if hint is not None:
            problem = with_hint(replace(problem, answer=hint), self.cfg.hint_template)
        params = SamplingParams(temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                                max_new_tokens=self.cfg.max_new_tokens, stop=tuple(self.cfg.stop))
        return generate(self.policy, self.policy.encode_prompts([problem]), 1, params).texts[0]

    def star_iteration(self, dataset: list[Problem]) -> dict[str, float]:
        """One outer iteration on `dataset` (collect, rationalize, fine-tune); its statistics."""
        self.iteration += 1
        kept, stats = collect(self.policy, self.task, dataset, self.cfg, self.iteration, self.cfg.run.seed)
        self.generated_tokens += int(stats["star/iteration_generated_tokens"])
        stats.update(fine_tune(self.policy, kept, self.cfg, self.iteration,
                               self.base_state if self.cfg.restart_from_base else None))
        return {**stats, "star/generated_tokens": float(self.generated_tokens)}

    def train(self, dataset: list[Problem], eval_problems: list[Problem] | None = None) -> list[dict[str, float]]:
        """`num_iterations` iterations; each record has held-out metrics when `eval_problems` are given."""
        history = []
        for _ in range(self.cfg.iterations):
            stats = self.star_iteration(dataset)
            if eval_problems:
                stats.update(held_out(self.policy, self.task, eval_problems, self.cfg))
            history.append(stats)
        return history

