"""The config pieces every trainer shares (run, task, optimiser), importable without torch: the command
line builds and checks a whole config before it loads torch (seconds). `seqrl.training.run` re-exports
them; each algorithm's own config lives in ``algos/<algorithm>_config.py`` beside its trainer.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from seqrl.config import ConfigError
from seqrl.types import Task

if TYPE_CHECKING:
    import torch

__all__ = ["OptimConfig", "RunConfig", "SamplingConfig", "TaskConfig"]


COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class RunConfig:
    """Where a run writes and how it behaves on this machine."""

    name: str = "run"
    """Run folder name: everything goes to `<out_dir>/<name>/`."""
    out_dir: str = "runs"
    """Parent folder of run folders."""
    seed: int = 0
    """Seed of weights, data order and sampling."""
    resume: bool = False
    """Continue from the run folder's last checkpoint (an error when there is none)."""
    threads: int = 1
    """torch intra-op threads (two threads under contention ran 3× slower than one here)."""
    device: str = "auto"
    """Where models, batches, caches and optimizer state live: auto (CUDA when available), cpu, cuda
    or cuda:N. Under torchrun, auto and cuda give each process GPU LOCAL_RANK."""
    bf16: bool | Literal["auto"] = "auto"
    """bf16 autocast for forward passes; master weights stay fp32. auto: on where the device runs bf16
    fast (a CUDA GPU with bf16, a CPU with AVX-512 BF16 or AMX-BF16), off elsewhere (AVX2-only CPUs
    emulate bf16, a step ran ~12× slower). false pins fp32: a seeded run then gives the same numbers
    on every CPU generation. TRL's ``bf16``."""
    compile: bool = False
    """`torch.compile` the trained model's forward (and a companion's, PPO's critic; a scalar model's
    backbone), in place with automatic dynamic shapes: checkpoints keep their names. Compilation time is
    logged as ``time/compile_s``; a model the backend cannot compile warns once and trains eager. Off by
    default: on a CPU the LM presets' training step ran 3–17 % faster compiled after 35–66 s of
    compilation, which runs of a few hundred steps never pay back, and the VLA's ran slower
    (benchmarks/RESULTS.md). TRL's ``torch_compile``."""
    compile_backend: str = "inductor"
    """The `torch.compile` backend (inductor; aot_eager traces without generating kernels). TRL's
    ``torch_compile_backend``."""
    compile_mode: str | None = None
    """The `torch.compile` mode: None (default), reduce-overhead, max-autotune,
    max-autotune-no-cudagraphs. TRL's ``torch_compile_mode``."""
    save_every: int = 0
    """Steps between checkpoints (0: only the final one)."""
    keep_last: int = 2
    """Checkpoints kept on disk."""
    log_every: int = 10
    """Steps between metric records."""
    progress: bool = True
    """Show a progress bar."""
    log_completions: int = 0
    """Completions of each logged step (spread over its prompts) written to ``completions.jsonl`` in the
    run folder — prompt, gold answer, completion, total reward, each function's score and reason — by
    the trainers that sample (GRPO, PPO); 0: none. TRL's ``log_completions``."""
    report_to: list[str] = field(default_factory=list)
    """Experiment trackers that receive the metrics beside metrics.jsonl: tensorboard, wandb
    (`seqrl.utils.trackers`; ``pip install 'seqrl[trackers]'``). TRL's ``report_to``."""
    on_nonfinite: Literal["stop", "skip_step"] = "stop"
    """A non-finite loss or gradient norm: stop the run naming the step and the newest checkpoint, or
    skip that optimizer update (weights and optimizer state unchanged; counted as
    `stats/skipped_updates`) and go on."""

    def __post_init__(self) -> None:
        for name in ("threads", "keep_last", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"run.{name} must be >= 1 (got {getattr(self, name)})")
        if self.save_every < 0:
            raise ValueError(f"run.save_every must be >= 0 (got {self.save_every})")
        if self.log_completions < 0:
            raise ValueError(f"run.log_completions must be >= 0 (got {self.log_completions})")
        if self.on_nonfinite not in ("stop", "skip_step"):
            hint = " (warn was removed: the update it let through made every weight NaN)" if self.on_nonfinite == "warn" else ""
            raise ValueError(f"run.on_nonfinite must be 'stop' or 'skip_step' (got {self.on_nonfinite!r}){hint}")
        if not self.name or "/" in self.name:
            raise ValueError(f"run.name must be a non-empty folder name (got {self.name!r})")
        if self.report_to:
            from seqrl.utils.trackers import check_trackers

            self.report_to = list(dict.fromkeys(self.report_to))
            check_trackers(self.report_to)
        if self.bf16 != "auto" and not isinstance(self.bf16, bool):
            raise ValueError(f"run.bf16 must be true, false or auto (got {self.bf16!r})")
        if not isinstance(self.compile, bool):
            raise ValueError(f"run.compile must be true or false (got {self.compile!r})")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"run.compile_mode must be one of {', '.join(map(str, COMPILE_MODES))} "
                             f"(got {self.compile_mode!r})")
        if not isinstance(self.compile_backend, str) or not self.compile_backend:
            raise ValueError(f"run.compile_backend must be a backend name (got {self.compile_backend!r})")
        if self.compile:
            from seqrl.utils.compiling import check_backend

            check_backend(self.compile_backend)
        spec = str(self.device).strip().lower()
        if spec not in ("auto", "cpu"):
            kind, colon, index = spec.partition(":")
            if kind != "cuda" or (colon and not index.isdigit()):
                raise ValueError(f"run.device must be auto, cpu, cuda or cuda:N (got {self.device!r})")
            from seqrl.utils import dist  # torch, only for a run that asks for CUDA

            dist.resolve_device(self.device)  # CUDA without CUDA fails at config time

    @property
    def torch_device(self) -> torch.device:
        """The resolved `device` (`seqrl.utils.dist.resolve_device`)."""
        from seqrl.utils import dist

        return dist.resolve_device(self.device)

    @property
    def use_bf16(self) -> bool:
        """The resolved `bf16`: true/false as given, auto → whether `torch_device` runs bf16 fast."""
        from seqrl.utils import dist

        return dist.resolve_bf16(self.bf16, self.torch_device)

    def announce(self) -> dict[str, Any]:
        """Print the chosen device and precision once (rank 0) and return them as metrics for step 0."""
        from seqrl.utils import dist

        device, bf16 = self.torch_device, self.use_bf16
        if dist.is_main():
            compiled = f", torch.compile ({self.compile_backend}{', ' + self.compile_mode if self.compile_mode else ''})" \
                if self.compile else ""
            print(f"device: {device} ({dist.world_size()} process(es)), precision: "
                  f"{'bf16 autocast, fp32 master weights' if bf16 else 'fp32'}{compiled} (run.device={self.device}, run.bf16={self.bf16})")
        return {"run/device": str(device), "run/bf16": float(bf16), "run/compile": float(self.compile)}

    @property
    def dir(self) -> Path:
        return Path(self.out_dir) / self.name


@dataclass
class TaskConfig:
    """Which task and how many problems."""

    name: str = "arith"
    """A task spec: arith, arith_add, arith_sub, arith_mul, arith_mixed, countdown, gsm, rg:<name>, jsonl:<path>."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the task (e.g. digits: 3)."""
    n_train: int = 20000
    """Training problems drawn from the train split (-1: every row of a file task)."""
    n_test: int = 200
    """Held-out problems drawn from the test split (-1: every row of a file task)."""
    seed: int = 0
    """Seed of the problem draw (independent of the run seed)."""

    def __post_init__(self) -> None:
        for name in ("n_train", "n_test"):
            if getattr(self, name) < 1 and getattr(self, name) != -1:
                raise ValueError(f"task.{name} must be >= 1, or -1 for every row (got {getattr(self, name)})")

    def check_kwargs(self) -> None:
        """`ConfigError` naming an unknown keyword of a built-in task, with the closest valid one, before a
        run builds anything (the task itself is built with the model, seconds later)."""
        import difflib
        import inspect

        from seqrl.data import registry

        prefix = self.name.partition(":")[0]
        cls = (registry.ArithmeticTask if self.name in registry._ARITH_OPS else
               {"countdown": registry.CountdownTask, "gsm": registry.GSMTask}.get(self.name) or
               (registry.JsonlTask if prefix == "jsonl" else None))
        if cls is None:
            return
        fixed = ("self", "path", "ops", "name") if cls is registry.ArithmeticTask else ("self", "path")  # set by the spec
        params = [n for n, q in inspect.signature(cls.__init__).parameters.items()
                  if n not in fixed and q.kind in (q.POSITIONAL_OR_KEYWORD, q.KEYWORD_ONLY)]
        for key in self.kwargs:
            if key not in params:
                close = difflib.get_close_matches(str(key), params, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ConfigError(f"task.kwargs.{key}: task {self.name!r} takes no such keyword; {hint}"
                                  f"valid: {', '.join(params)}")

    def build(self) -> Task:
        try:
            from seqrl.data import get_task

            return get_task(self.name, **self.kwargs)
        except TypeError as e:  # a keyword the task does not take
            if "argument" not in str(e):
                raise
            raise ConfigError(f"task.kwargs {self.kwargs}: {e} (task {self.name!r})") from e


@dataclass
class OptimConfig:
    """AdamW with linear warm-up and cosine (or constant) decay."""

    lr: float = 1e-3
    """Peak learning rate."""
    weight_decay: float = 0.01
    """Decoupled weight decay (AdamW)."""
    betas: tuple[float, float] = (0.9, 0.95)
    """Adam β1, β2."""
    warmup_steps: int = 50
    """Linear warm-up steps from 0 to lr."""
    schedule: Literal["cosine", "constant"] = "cosine"
    """Decay after warm-up."""
    min_lr_ratio: float = 0.1
    """Cosine floor as a fraction of lr."""
    schedule_steps: int = 0
    """Trainer steps the cosine spans (0: the run's `steps`). A resumed run made longer stretches its
    cosine over the new `steps` (its learning rate rises); set this to the old `steps` to continue the
    old schedule instead, held at its floor after it."""
    grad_clip: float = 1.0
    """Max global gradient norm (0: no clipping)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and 0 < self.lr <= MAX_LR):
            # past this, Adam's update overflows float32 (lr 1e38 became inf inside the optimizer step)
            raise ValueError(f"optim.lr must be a number in (0, {MAX_LR:g}] (got {self.lr})")
        if self.warmup_steps < 0 or self.grad_clip < 0 or self.schedule_steps < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError("optim.warmup_steps, optim.grad_clip and optim.schedule_steps must be >= 0, "
                             "optim.min_lr_ratio in [0, 1]")


@dataclass
class SamplingConfig:
    """How completions are sampled for training."""

    temperature: float = 1.0
    """Sampling temperature (log-probs are taken at the same temperature)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    top_k: int = 0
    """Top-k truncation (0: none)."""
    max_new_tokens: int = 64
    """Completion cap (also L_max of DAPO's overlong shaping)."""
    stop: list[str] = field(default_factory=list)
    """Stop strings (e.g. ["</answer>"]): a completion ends after the token that completes one, so a
    model that rambles after its answer costs no decode steps. Also used by the evaluation."""

    def __post_init__(self) -> None:
        if any(not isinstance(x, str) or not x for x in self.stop):
            raise ValueError(f"sampling.stop must be a list of non-empty strings (got {self.stop!r})")


@dataclass
class AgentConfig:
    """Multi-turn rollouts with tools (`seqrl.agents`): off while `tools` and `env` are empty and none is
    passed in Python (`GRPOTrainer(tools=[...], environment_factory=...)`)."""

    tools: list[str] = field(default_factory=list)
    """Tools as import paths ``pkg.module:function`` (plain functions with type hints and a Google-style
    docstring, as TRL's ``tools=``)."""
    env: str | None = None
    """An environment: one instance per episode, reset on its row, its public methods the episode's tools
    (TRL's ``environment_factory``): a built-in name (`seqrl env ls`) or an import path ``pkg.module:Class``."""
    max_turns: int = 4
    """Policy turns per episode at most."""
    max_tool_calls: int = 8
    """Tool calls per episode at most: a turn whose calls would pass it ends the episode unrun."""
    max_episode_tokens: int = 1024
    """Tokens after the prompt (the policy's and the tool turns') per episode at most; each turn samples
    at most ``sampling.max_new_tokens``."""
    tool_timeout_s: float = 10.0
    """Wall-clock limit of one tool call (its result is then a timeout error the policy reads)."""
    max_result_chars: int = 4000
    """A tool result's text is cut there (and the cut said)."""
    call_syntax: Literal["hermes", "compact"] = "hermes"
    """How the model writes a call: hermes = ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
    compact = ``[[name arg ...]]`` with results inline as ``=> result`` (a few tokens a call: the tiny
    presets' character-level vocabulary)."""
    kv_cache_mb: int = 1024
    """Keys and values kept between an episode's turns (the next turn prefills only the tool turn's
    tokens); past it, a turn prefills its whole history again. 0: always re-prefill."""
    tool_prompt: Literal["auto", "full", "compact", "none"] = "auto"
    """How the prompt tells the tools: auto = the chat template's ``tools`` where it renders them, else
    full; full = each tool's JSON schema and the call syntax in the system message; compact = one line
    (``add(a: integer, b: integer)``, for the tiny presets' short context); none = not at all (a policy
    taught the tools by demonstrations)."""

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_episode_tokens", "max_result_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"agent.{name} must be >= 1 (got {getattr(self, name)})")
        if self.call_syntax not in ("hermes", "compact"):
            raise ValueError(f"agent.call_syntax must be hermes or compact (got {self.call_syntax!r})")
        if self.kv_cache_mb < 0:
            raise ValueError(f"agent.kv_cache_mb must be >= 0 (got {self.kv_cache_mb})")
        if self.max_tool_calls < 0 or self.tool_timeout_s <= 0:
            raise ValueError(f"agent.max_tool_calls must be >= 0 and agent.tool_timeout_s > 0 (got "
                             f"{self.max_tool_calls}, {self.tool_timeout_s})")
        if self.tool_prompt not in ("auto", "full", "compact", "none"):
            raise ValueError(f"agent.tool_prompt must be one of auto, full, compact, none (got {self.tool_prompt!r})")
        if self.env is not None:
            from seqrl.agents.envs import environment_class

            environment_class(self.env, "agent.env")  # a wrong name fails with the config, before any model loads
        bad = [t for t in self.tools if not isinstance(t, str) or ":" not in t]
        if bad:
            raise ValueError(f"agent.tools: each an import path 'pkg.module:function' (got {bad!r})")


MAX_LR = 1e10
"""Largest `OptimConfig.lr` accepted: far above any learning rate that trains (a run diverging at 1e6 is
stopped by the NaN guard, with its last finite checkpoint kept), far below float32's overflow (3.4e38)."""


TRL_ALIASES = {
    "num_generations": "group_size",
    "max_completion_length": "sampling.max_new_tokens",
    "temperature": "sampling.temperature",
    "top_p": "sampling.top_p",
    "learning_rate": "optim.lr",
    "max_steps": "steps",
    "num_iterations": "num_iterations",
    "beta": "loss.beta",
    "epsilon": "loss.clip_eps_low",
    "epsilon_high": "loss.clip_eps_high",
    "scale_rewards": "loss.scale_rewards",
    "seed": "run.seed",
    "logging_steps": "run.log_every",
    "save_steps": "run.save_every",
    "eval_steps": "eval.every",
    "bf16": "run.bf16",
    "torch_compile": "run.compile",
    "torch_compile_backend": "run.compile_backend",
    "torch_compile_mode": "run.compile_mode",
    "report_to": "run.report_to",
    "center_rewards_coefficient": "center_coef",
}
"""TRL `GRPOConfig` (and `RewardConfig`) names `seqrl train grpo|ppo` accepts for the seqrl field they mean (and ``output_dir``:
the run folder, i.e. ``run.out_dir`` + ``run.name``). Left out where the meaning differs: TRL's
``loss_type`` (seqrl's ``loss.agg`` and ``advantage`` split it), per-device batch sizes and gradient
accumulation (seqrl counts completions per step: ``batch_size``)."""


TRL_NOT_ALIASED = {
    "loss_type": "loss.agg and loss.advantage (docs/algorithms/grpo.md maps each TRL value)",
    "per_device_train_batch_size": "batch_size (examples per optimizer step, across processes; GRPO and PPO count "
                                   "completions)",
    "gradient_accumulation_steps": "batch_size and micro_batch_size (the gradient does not depend on the latter)",
    "log_completions": "run.log_completions (the number of completions of each logged step to write)",
}
"""TRL `GRPOConfig` names whose meaning differs from any one seqrl field: refused naming what to set."""


def refuse_trl_name(key: str, fields: set[str], where: str) -> None:
    """A ValueError at `where` when `key` is a TRL name whose meaning differs (`TRL_NOT_ALIASED`) and the
    config has no field of that name, naming the fields to set instead."""
    if key in TRL_NOT_ALIASED and key not in fields:
        raise ValueError(f"{where}: TRL's {key} has no single seqrl counterpart; set {TRL_NOT_ALIASED[key]}")


def trl_report_to(value: Any) -> Any:
    """TRL's ``report_to`` as a list: "none" or None → [], "all" → every tracker installed here, a name →
    [name]; in a list, "all" and "none" mean the same.

    >>> trl_report_to("none"), trl_report_to(None), trl_report_to("wandb"), trl_report_to(["tensorboard"])
    ([], [], ['wandb'], ['tensorboard'])
    """
    import importlib.util

    from seqrl.utils.trackers import TRACKERS

    if value is None:
        return []
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else value
    if not isinstance(names, list):
        return value  # the config's own type check names it
    out: list = []
    for name in names:
        if name == "all":
            out += [t for t in TRACKERS if importlib.util.find_spec(t) is not None]
        elif name != "none":
            out.append(name)
    return list(dict.fromkeys(out))


def accepts_trl_names(cls: type) -> type:
    """Class decorator: the config's constructor also takes TRL's `GRPOConfig` keywords (`TRL_ALIASES`,
    and ``output_dir``, the run folder), so that ``GRPOConfig(output_dir="runs/x", learning_rate=1e-5,
    num_generations=8)`` means what it means in TRL. They apply over the other arguments and the whole
    config is checked again; a TRL name with no seqrl counterpart (`TRL_NOT_ALIASED`) is a ValueError
    naming the fields to set instead."""
    import dataclasses
    import functools
    import os

    init = cls.__init__
    fields = {f.name for f in dataclasses.fields(cls)}

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for key in kwargs:
            refuse_trl_name(key, fields, f"{cls.__name__}({key}=...)")
        trl = {k: kwargs.pop(k) for k in list(kwargs) if k not in fields and (k in TRL_ALIASES or k == "output_dir")}
        if not trl:
            init(self, *args, **kwargs)
            return
        if args:
            raise TypeError(f"{cls.__name__}: give the fields by keyword beside TRL's names")
        from seqrl.config import _plain, from_dict, merge

        update: dict[str, Any] = {}
        for key, value in trl.items():
            if key == "output_dir":
                folder = os.fspath(value).rstrip("/") or "."
                dotted = {"run.out_dir": os.path.dirname(folder) or ".", "run.name": os.path.basename(folder)}
            else:
                if TRL_ALIASES[key].split(".")[0] not in fields:
                    raise ValueError(f"{cls.__name__}({key}=...): TRL's {key} means {TRL_ALIASES[key]}, which "
                                     f"{cls.__name__} does not have")
                if key == "report_to":
                    value = trl_report_to(value)
                elif key == "bf16" and value is None:
                    value = "auto"  # TRL's unset bf16 means "where it is available"
                dotted = {TRL_ALIASES[key]: value}
            for name, v in dotted.items():
                *parents, leaf = name.split(".")
                node = update
                for part in parents:
                    node = node.setdefault(part, {})
                node[leaf] = v
        # one build from everything given, so that the checks see the final values (num_generations with batch_size)
        rebuilt = from_dict(cls, merge({k: _plain(v) for k, v in kwargs.items()}, update))
        self.__dict__.update(rebuilt.__dict__)

    cls.__init__ = __init__
    return cls


def trl_overrides(overrides: list[str], fields: set[str]) -> list[str]:
    """`overrides` with TRL's names (`TRL_ALIASES`, ``output_dir``) written as seqrl's, in either form
    (``--key=value`` or ``--key value``); `fields` are the top-level fields of the config class, so an
    alias whose target it lacks (PPO has no ``scale_rewards``) is left as it is and named by the config's
    own error; a TRL name whose meaning differs (`TRL_NOT_ALIASED`) is a ValueError naming what to set.

    >>> trl_overrides(["--num_generations=4", "--output_dir", "out/my_run", "--optim.lr=1e-5"], {"group_size", "run", "optim"})
    ['--group_size=4', '--run.out_dir=out', '--run.name=my_run', '--optim.lr=1e-5']
    """
    import os

    out, i = [], 0
    while i < len(overrides):
        arg = overrides[i]
        i += 1
        body = arg[2:] if arg.startswith("--") else arg
        key, sep, value = body.partition("=")
        if not sep and arg.startswith("--") and i < len(overrides) and not overrides[i].startswith("--"):
            sep, value = "=", overrides[i]  # the two-item form
            i += 1
        refuse_trl_name(key, fields, f"--{key}")
        if key == "output_dir" and sep:
            folder = value.rstrip("/") or "."
            out += [f"--run.out_dir={os.path.dirname(folder) or '.'}", f"--run.name={os.path.basename(folder)}"]
            continue
        target = TRL_ALIASES.get(key)
        if key == "report_to" and sep:
            value = "[" + ",".join(trl_report_to(value) if "[" not in value else [value.strip("[]")]) + "]"
        out.append(f"--{target if target is not None and target.split('.')[0] in fields else key}{sep}{value}"
                   if arg.startswith("--") or sep else arg)
    return out

