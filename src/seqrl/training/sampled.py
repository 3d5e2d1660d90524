"""What the trainers that sample their own batches (GRPO and its variants, PPO) share: one collect path.

`SampledLearner` holds the policy, its reward functions and this process's place in the endless
prompt stream; ``sample(step, count, round_)`` draws the next prompts, samples G completions of each
(seeded by run seed, step, round and rank, so a resumed run draws the same) and scores them.
`RewardTally` sums a step's rounds into the ``reward/<fn>/…`` metrics. `SampledSteps` is the step of
such a trainer on the `RunLoop`: the learner's ``collect(i)`` then ``train_step(batch)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from seqrl.evaluation import run_evaluation
from seqrl.models.lm import Policy, model_device
from seqrl.rewards.combine import RewardFn, ScoredBatch, score_completions
from seqrl.rollout import Rollouts, SamplingParams, generate, sequence_logprobs
from seqrl.rollout.logprobs import pack_micro_batches, shared_prompt_logprobs, use_shared_prompt_forward
from seqrl.training.loop import Metrics, RunLoop
from seqrl.training.run import FiniteCheck, completion_samples, reduce_rank_metrics, stream_indices
from seqrl.training.update import OptimGroup, Stepped, apply_update
from seqrl.types import Problem, Task
from seqrl.utils import dist
from seqrl.utils.dist import bf16_autocast


@dataclass
class SampledRound:
    """One round of sampling: `n` prompts × G completions (rows g·G … g·G+G−1 answer prompt g)."""

    problems: list[Problem]  # (n,) the prompts drawn
    rollout: Rollouts
    scored: ScoredBatch
    total: torch.Tensor  # (n·G,) weighted reward
    cut_off: torch.Tensor  # (n·G,) bool: stopped by the token budget, no EOS or stop string
    agent: dict = field(default_factory=dict)  # multi-turn episodes: `seqrl.agents.episode_metrics`
    episodes: list | None = None  # multi-turn episodes (`seqrl.agents.Episode`), row by row

    @property
    def row_problems(self) -> list[Problem]:
        return [self.problems[i // self.rollout.n] for i in range(len(self.rollout.texts))]


class RewardTally:
    """Per reward function, a step's scores, errors, timeouts and not-applicable counts over its rounds,
    and the first error text: the ``reward/<fn>/…`` metrics."""

    def __init__(self, names) -> None:
        self.scores: dict[str, list[float]] = {n: [] for n in names}
        self.errors = dict.fromkeys(self.scores, 0)
        self.timeouts = dict.fromkeys(self.scores, 0)
        self.not_applicable = dict.fromkeys(self.scores, 0)
        self.first_error: dict[str, str] = {}

    def add(self, scored: ScoredBatch) -> None:
        for name in self.scores:
            self.scores[name] += scored.scores[name]
            self.errors[name] += scored.errors[name]
            self.timeouts[name] += scored.timeouts[name] + scored.over_budget[name]
            self.not_applicable[name] += scored.not_applicable[name]
        for name, text in scored.first_error.items():
            self.first_error.setdefault(name, text)

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, scores in self.scores.items():
            t = torch.tensor(scores, dtype=torch.float64)
            t = t[~t.isnan()]  # NaN: the function does not apply to that completion
            out[f"reward/{name}/mean"] = float(t.mean()) if len(t) else 0.0
            out[f"reward/{name}/std"] = float(t.std()) if len(t) > 1 else 0.0
            out[f"reward/{name}/errors"] = float(self.errors[name])
            out[f"reward/{name}/timeouts"] = float(self.timeouts[name])
            if self.not_applicable[name]:
                out[f"reward/{name}/not_applicable"] = float(self.not_applicable[name])
            if name in self.first_error:
                out[f"reward/{name}/first_error"] = self.first_error[name]
        return out


class WeightedMeans:
    """A step's metrics as weighted means (by tokens, by updates): ``add(key, value, weight)``, then
    `means`; `total` is a key's plain weighted sum (a loss summed over micro-batches)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, key: str, value: float, weight: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value * weight
        self.weights[key] = self.weights.get(key, 0.0) + weight

    def total(self, key: str) -> float:
        return self.sums.get(key, 0.0)

    def means(self) -> dict[str, float]:
        return {key: self.sums[key] / max(self.weights[key], 1e-12) for key in self.sums}


class SampledLearner:
    """The sampling half of a learner that draws its own batches (`GRPOLearner`, `PPOLearner`).

    `cfg` gives ``sampling`` (temperature, top_p, top_k, max_new_tokens, stop), ``group_size``,
    ``run`` (seed, use_bf16, log_completions), ``reward_budget_s`` and ``reward_failures``."""

    def __init__(self, cfg: Any, policy: Policy, problems: list[Problem],
                 reward_fns: dict[str, tuple[RewardFn, float]], agent: Any = None) -> None:
        self.cfg, self.policy, self.problems, self.reward_fns = cfg, policy, problems, reward_fns
        self.agent = agent  # `seqrl.agents.AgentTools`: multi-turn episodes with tools (``cfg.agent``)
        if agent is not None:  # environments that own a reward score beside the others (weight 1, TRL's rule)
            clash = sorted(set(agent.rewards()) & set(reward_fns))
            if clash:
                raise ValueError(f"rewards: {clash[0]!r} names both a reward function and an environment whose "
                                 f"get_reward is a reward; rename the function")
            self.reward_fns = {**reward_fns, **{k: (fn, 1.0) for k, fn in agent.rewards().items()}}
        # Position in this process's share of the endless prompt stream: with W processes, process r
        # reads the global positions r, r + W, r + 2W, … so the shares never overlap.
        self.prompt_cursor = 0
        self.samples: list[dict] = []  # the last collected step's logged completions (run.log_completions)
        self.finite = FiniteCheck(cfg.run.on_nonfinite)  # counts what run.on_nonfinite=skip_step skipped
        self.shared_forward = use_shared_prompt_forward(cfg.shared_prompt_forward, policy.model)

    # -- the forward passes GRPO and PPO share -----------------------------------------------------
    def micro_batches(self, rows: torch.Tensor, prompt_ids: list[list[int]], mask: torch.Tensor,
                      packed: bool = True) -> list[torch.Tensor]:
        """`rows` in micro-batches of ``micro_batch_size``: packed by prompt and length for the
        shared-prompt forward (when on and `packed`), else in order."""
        if self.shared_forward and packed:
            return pack_micro_batches(rows, prompt_ids, mask, self.cfg.micro_batch_size)
        return list(rows.split(self.cfg.micro_batch_size)) if len(rows) else []

    def token_logprobs(self, model, prompt_ids: list[list[int]], completion_ids: torch.Tensor,
                       mask: torch.Tensor | None, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(log π of each completion token under the sampling temperature, its entropy or None), (m, T)
        each; with the shared-prompt forward and the completions' `mask` each prompt is computed once."""
        args = (self.policy.tokenizer.pad_token_id, self.cfg.sampling.temperature, self.cfg.run.use_bf16, with_entropy)
        if self.shared_forward and mask is not None:
            return shared_prompt_logprobs(model, prompt_ids, completion_ids, mask, *args)
        return sequence_logprobs(model, prompt_ids, completion_ids, *args)

    @torch.no_grad()
    def eval_rows(self, fn: Callable[[torch.Tensor], torch.Tensor], model, rows: torch.Tensor, n: int,
                  prompt_ids: list[list[int]], mask: torch.Tensor, packed: bool = True) -> torch.Tensor:
        """``fn(chunk)`` over `rows` in micro-batches without a graph, in eval mode (no dropout noise in
        fixed targets: π_old, π_ref, values), gathered into an (n, …) tensor; rows not asked for stay 0."""
        was = model.training
        model.eval()
        out = None
        try:
            for chunk in self.micro_batches(rows, prompt_ids, mask, packed):
                part = fn(chunk)
                out = part.new_zeros((n, *part.shape[1:])) if out is None else out
                out[chunk] = part
        finally:
            model.train(was)
        return out if out is not None else torch.zeros((n, mask.shape[1]), dtype=torch.float32)

    def update(self, step: int, loss: float, groups: list[OptimGroup], **values: float) -> Stepped:
        """One optimizer update of `groups` at 0-based step `step` (`apply_update`): `loss` and `values`
        must be the same on every process (summed over them), so that every process decides alike."""
        return apply_update(groups, step, self.finite, loss, **values)

    @property
    def skipped_updates(self) -> int:
        """Optimizer updates ``run.on_nonfinite=skip_step`` skipped (in the checkpoint state)."""
        return self.finite.skipped

    def _sampling(self, seed: int) -> SamplingParams:
        s = self.cfg.sampling
        return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                              max_new_tokens=s.max_new_tokens, stop=tuple(s.stop), seed=seed)

    def _params(self, step: int, round_: int) -> SamplingParams:
        """Training samples: seeded by (run seed, step, round, rank), so a resumed run draws the same."""
        return self._sampling(self.cfg.run.seed * 1_000_003 + step * 101 + round_ + 7_919_111 * dist.rank())

    def _next_prompts(self, count: int) -> list[Problem]:
        world, r = dist.world_size(), dist.rank()
        local = range(self.prompt_cursor, self.prompt_cursor + count)
        self.prompt_cursor += count
        if world == 1:
            idx = stream_indices(local.start, count, len(self.problems), self.cfg.run.seed)
        else:
            idx = [stream_indices(p * world + r, 1, len(self.problems), self.cfg.run.seed)[0] for p in local]
        return [self.problems[i] for i in idx]

    def _score(self, problems: list[Problem], texts: list[str], episodes: list | None = None) -> ScoredBatch:
        extras = None if episodes is None else {"trajectories": [e.messages for e in episodes],
                                                "environments": [e.env for e in episodes]}
        return score_completions(self.reward_fns, problems, texts, self.cfg.reward_budget_s,
                                 self.cfg.reward_failures == "stop", extras)

    def _rollout(self, problems: list[Problem], n: int, params: SamplingParams) -> tuple[Rollouts, dict, list | None]:
        """`n` samples of each problem: single completions, or with tools multi-turn episodes (their
        policy tokens masked in, `seqrl.agents.as_rollouts`; each with its environment instance, reset on
        its row), their metrics and the episodes."""
        if self.agent is None:
            with bf16_autocast(model_device(self.policy.model), self.cfg.run.use_bf16):
                return generate(self.policy, self.policy.encode_prompts(problems), n, params), {}, None
        from seqrl.agents.rollout import as_rollouts, encode_prompts, episode_metrics, multi_turn_rollout

        a = self.cfg.agent
        boxes, envs, added = self.agent.prepare(problems, n)
        prompts = encode_prompts(self.policy, problems, boxes[::n], a.tool_prompt, added)
        with bf16_autocast(model_device(self.policy.model), self.cfg.run.use_bf16):
            episodes = multi_turn_rollout(self.policy, prompts, boxes, params, n=n, max_turns=a.max_turns,
                                          max_tool_calls=a.max_tool_calls, max_episode_tokens=a.max_episode_tokens,
                                          envs=envs, cache_bytes=a.kv_cache_mb << 20)
        for e, env in zip(episodes, envs or [None] * len(episodes)):
            e.env = env
        self.agent.release(episodes)
        pad = self.policy.tokenizer.pad_token_id
        return as_rollouts(episodes, n, pad if pad is not None else 0), episode_metrics(episodes), episodes

    def sample(self, step: int, count: int, round_: int = 0) -> SampledRound:
        """The next `count` prompts of the stream, G completions (or episodes) each (under ``run.bf16``),
        scored (the episodes' rewards read before the next rollout resets their environments)."""
        probs = self._next_prompts(count)
        ro, agent, episodes = self._rollout(probs, self.cfg.group_size, self._params(step, round_))
        g = self.cfg.group_size
        scored = self._score([probs[i // g] for i in range(len(ro.texts))], ro.texts, episodes)
        return SampledRound(probs, ro, scored, torch.tensor(scored.total, dtype=torch.float32),
                            torch.tensor([r == "length" for r in ro.finish_reasons], dtype=torch.bool), agent,
                            episodes)

    def keep_samples(self, rnd: SampledRound, totals: list[float]) -> None:
        """``run.log_completions``: a sample of `rnd`'s completions with their rewards and reasons."""
        self.samples = completion_samples(self.cfg.run.log_completions, rnd.row_problems, rnd.rollout.texts, totals,
                                          rnd.scored.scores, rnd.scored.reasons, rnd.episodes)

    @torch.no_grad()
    def agent_evaluation(self, task: Task, problems: list[Problem]) -> dict[str, float]:
        """Held-out episodes, greedy (one per problem, ``eval.max_new_tokens`` a turn): ``eval/accuracy`` —
        the task's verifier on the policy's turns, or where the environment owns a reward the share of
        episodes it calls ``solved`` (where it says; else whose reward is 1 or more), with
        ``eval/env_reward``, the reward's mean — and the episodes' metrics (``eval/agent/…``)."""
        cfg = self.cfg
        params = replace(self._sampling(cfg.run.seed), temperature=0.0, max_new_tokens=cfg.eval.max_new_tokens)
        ro, agent, episodes = self._rollout(problems, 1, params)
        if self.agent is not None and self.agent.pool is not None and self.agent.pool.rewarded:
            rewards = self.agent.rewards()  # an environment with a reward judges its own rows
            scored = score_completions({k: (fn, 1.0) for k, fn in rewards.items()}, problems, ro.texts, None, False,
                                       {"environments": [e.env for e in episodes]})
            owners = set(self.agent.pool.rewarded.values())  # rows of another environment: the task's verifier
            correct = [(bool(e.env.solved) if hasattr(e.env, "solved") else t >= 1.0)
                       if type(e.env).__name__ in owners else task.verify(p, text).score >= 1.0
                       for e, t, p, text in zip(episodes, scored.total, problems, ro.texts)]
            agent["env_reward"] = sum(scored.total) / max(len(scored.total), 1)
        else:
            correct = [task.verify(p, t).score >= 1.0 for p, t in zip(problems, ro.texts)]
        return {"eval/accuracy": sum(correct) / max(len(correct), 1),
                **{f"eval/{k}": v for k, v in agent.items()}}

    @torch.no_grad()
    def heldout_reward(self, problems: list[Problem], samples: int, seed: int) -> dict[str, float]:
        """Mean training reward (every function, weighted) of `samples` completions per held-out problem."""
        ro, _, episodes = self._rollout(problems, samples, self._sampling(seed))
        scored = self._score([problems[i // samples] for i in range(len(ro.texts))], ro.texts, episodes)
        out = {"eval/reward": sum(scored.total) / len(scored.total)}
        for name, v in scored.scores.items():
            applied = [x for x in v if x == x]  # NaN: the function did not apply
            out[f"eval/reward/{name}"] = sum(applied) / len(applied) if applied else 0.0
        return out


def build_agent_tools(agent: Any, tools: list | None = None, environment_factory: Any = None) -> Any:
    """The `seqrl.agents.AgentTools` of `agent.tools` (import paths) and `tools` (functions), and of
    `environment_factory` or else ``agent.env`` (a built-in environment's name or an import path), with
    the agent config's limits; None when there are none (single-turn sampling)."""
    fns = list(tools or [])
    if agent is not None and agent.tools:
        from seqrl.utils.imports import import_object

        fns = [import_object(t, "agent.tools") for t in agent.tools] + fns
    if environment_factory is None and agent is not None and agent.env:
        from seqrl.agents.envs import environment_class

        environment_factory = environment_class(agent.env, "agent.env")
    if not fns and environment_factory is None:
        return None
    from seqrl.agents import AgentTools

    limits = ({"timeout_s": agent.tool_timeout_s, "max_result_chars": agent.max_result_chars,
               "syntax": agent.call_syntax} if agent is not None else {})
    return AgentTools(fns, environment_factory, **limits)


def check_rewards_given(cfg: Any, rewards: dict | None, trainer: str, agent: Any = None) -> None:
    """A ValueError when neither the config, the caller nor an environment of `agent` (``get_reward``)
    gives a reward function."""
    if not cfg.rewards and not rewards and not (agent is not None and agent.rewards()):
        raise ValueError(f"rewards: no reward function; name one in the config's rewards (task: the verifier) or "
                         f"pass functions ({trainer}(reward_funcs=[...]), train(cfg, rewards={{...}}))")


def build_sampled_run(cfg: Any, device: Any, rewards: dict | None, policy: Policy | None, episodes: bool = False
                      ) -> tuple[Task, list[Problem], list[Problem], dict[str, tuple[RewardFn, float]], Policy]:
    """What a sampling trainer builds before its learner: the task and its train and held-out problems (the
    prompt template checked on both), the reward functions (the config's and `rewards`, their columns
    checked on the training rows; `episodes`: multi-turn, where they also get ``trajectories`` and
    ``environments``) and the policy (`cfg.model` loaded, or `policy` moved to `device`), prompting with
    ``cfg.prompt``."""
    from seqrl.models.lm import load_policy
    from seqrl.prompts import check_template
    from seqrl.rewards.combine import build_rewards, check_reward_columns

    task = cfg.task.build()
    problems = task.problems("train", cfg.task.n_train, cfg.task.seed)
    test_problems = task.problems("test", cfg.task.n_test, cfg.task.seed)
    check_template(cfg.prompt, problems + test_problems)
    reward_fns = build_rewards(cfg.rewards, task, rewards)
    check_reward_columns(reward_fns, problems, episodes)
    if policy is None:
        policy = load_policy(cfg.model, device)
    else:
        policy.model.to(device)
    policy.prompt = cfg.prompt
    return task, problems, test_problems, reward_fns, policy


class SampledSteps:
    """A trainer that samples its own batch (GRPO, PPO) as a run-loop method (`seqrl.training.loop.Method`):
    a step is the learner's ``collect(i)`` then ``train_step(batch)``, their metrics reduced over
    processes (`reduce_rank_metrics`) with ``perf/tokens_per_s``; each reward's first failure printed once
    and its text logged beside the numbers; ``run.log_completions``'s samples (``learner.samples``)
    written to completions.jsonl with each record; each process's prompt cursor in the checkpoint state.

    `task`, `problems`, `reward`: the held-out evaluation (`evaluate`). `after(i, metrics)` runs after
    each update (a reference sync); `extra_state()` adds to the checkpoint state; `stopping(step)` runs
    before a signal ends the run."""

    def __init__(self, loop: RunLoop, learner: SampledLearner, task: Task, problems: list[Problem],
                 reward: str = "sampled", after: Callable[[int, Metrics], None] | None = None,
                 extra_state: Callable[[], Mapping[str, Any]] | None = None,
                 stopping: Callable[[int], None] | None = None) -> None:
        from seqrl.rewards.combine import report_reward_errors

        self.loop, self.learner, self.after, self._report = loop, learner, after, report_reward_errors
        self.task, self.problems, self.reward = task, problems, reward
        self.extra_state, self.stopping = extra_state, stopping
        self.samples_log = loop.open_log("completions.jsonl") if loop.cfg.run.log_completions else None
        self.warned: set[str] = set()  # reward functions whose first failure was printed
        self.errors: dict[str, str] = {}  # the last step's reward/<fn>/first_error texts
        self.live: Metrics = {}  # the bar's reward, every step
        state = loop.state
        if loop.resume_from is not None:
            cursors = state["prompt_cursor"]
            cursors = cursors if isinstance(cursors, list) else [cursors]
            if len(cursors) != dist.world_size():
                raise ValueError(f"{loop.resume_from} was written by {len(cursors)} process(es); resume it with "
                                 f"the same number (got {dist.world_size()})")
            learner.prompt_cursor = cursors[dist.rank()]
            learner.finite.skipped = int(state.get("skipped_updates", 0))

    def step(self, i: int, log: bool) -> Metrics:
        batch = self.learner.collect(i)
        metrics = reduce_rank_metrics(dist.all_gather_objects({**batch.metrics, **self.learner.train_step(batch)}))
        metrics["perf/tokens_per_s"] = metrics["perf/gen_tokens"] / (metrics["perf/gen_s"] + metrics["perf/train_s"])
        if self.after is not None:
            self.after(i, metrics)
        self.errors = self._report(metrics, i + 1, self.warned if self.loop.main else None)
        self.live["reward"] = metrics["reward/total/mean"]
        return metrics if log else {}

    def record(self, done: int) -> dict[str, str]:
        for sample in self.learner.samples if self.samples_log is not None else ():
            self.samples_log.log(done, sample)
        return dict(self.errors)

    def state(self) -> dict[str, Any]:
        cursors = dist.all_gather_objects(self.learner.prompt_cursor)
        return {"prompt_cursor": cursors if len(cursors) > 1 else cursors[0],
                "skipped_updates": self.learner.skipped_updates, **(self.extra_state() if self.extra_state else {})}

    def evaluate(self) -> Metrics:
        """The held-out evaluation (main process; the others wait): greedy accuracy and pass@k
        (`run_evaluation`), and with ``eval.samples`` the held-out reward: ``"sampled"`` (the training
        rewards on fresh samples), ``"pass1"`` (taken from pass@1: the training reward is the verifier
        alone, sampled alike) or ``"none"``. With tools, greedy episodes (`SampledLearner.agent_evaluation`)."""
        learner, cfg = self.learner, self.loop.cfg
        reward = "sampled" if self.reward == "pass1" and learner.agent is not None else self.reward  # episodes: no pass@1
        out: Metrics = {}
        if self.loop.main:
            out = (run_evaluation(learner.policy, self.task, self.problems, cfg.eval, cfg.run.seed, stop=cfg.sampling.stop)
                   if learner.agent is None else learner.agent_evaluation(self.task, self.problems))
            if cfg.eval.samples and reward == "pass1":
                out.update({"eval/reward": out["eval/pass@1"], "eval/reward/accuracy": out["eval/pass@1"]})
            elif cfg.eval.samples and reward == "sampled":
                out.update(learner.heldout_reward(self.problems, cfg.eval.samples, cfg.run.seed + 1))
            learner.policy.model.train()
        dist.barrier()
        return out

    def show(self, metrics: Metrics) -> Metrics:
        return {**self.live, **({"acc": metrics["eval/accuracy"]} if "eval/accuracy" in metrics else {})}

    def on_stop(self, step: int) -> None:
        if self.stopping is not None:
            self.stopping(step)
