"""What the TRL-style trainers (`GRPOTrainer`, `PPOTrainer`, `SFTTrainer`, `RewardTrainer`, `PRMTrainer`) share: how a ``model=``
argument and in-memory datasets become a run's config (the run folder then records both), and
``train()`` / ``model`` / ``save_model()``."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from seqrl.models.config import PRESETS, ModelConfig


def model_config_for(model: str | os.PathLike, base: ModelConfig) -> ModelConfig:
    """`base` pointed at `model`: a preset trained from scratch (``tiny``, ``small``) when it names one
    and no such local folder exists, else a path (a folder, a hub id, a catalogue name, a .gguf file)."""
    name = os.fspath(model)
    if name in PRESETS and not Path(name).expanduser().exists():
        return replace(base, preset=name, path=None)
    return replace(base, path=name)


def dataset_file(run_dir: Path, name: str, train: Any, test: Any, resume: bool,
                 own_split: str | None = None) -> tuple[str, str | None]:
    """Where a config finds the rows of `train` (and `test`, the held-out rows), and the column that
    splits them: ``<run_dir>/data/<name>`` with `seqrl.data.jsonl.SPLIT_COLUMN` when there are held-out
    rows, else None; a file given as `train` with no `test` is used where it is, with `own_split` (its
    own split column, if the config names one). A resumed run must find the same rows there; a fresh
    run writes them (over a failed attempt's), except on a folder that already holds checkpoints, where
    it writes nothing (the trainer refuses the folder, saying how to resume)."""
    from seqrl.data.jsonl import SPLIT_COLUMN, write_rows
    from seqrl.utils.checkpoint import latest_checkpoint

    if isinstance(train, (str, os.PathLike)) and test is None:
        return os.fspath(train), own_split
    file = run_dir / "data" / name
    split = SPLIT_COLUMN if test is not None else None
    if resume and not file.is_file():
        raise ValueError(f"run.resume: {run_dir} holds no data/{name} (not a run given its data in memory); "
                         "give its own output_dir")
    if not resume and latest_checkpoint(run_dir) is not None:
        return str(file), split
    return str(write_rows(train, test, file, keep=resume)), split


class RunTrainer:
    """The TRL-style face of a trainer (`GRPOTrainer`, `RewardTrainer`, `PRMTrainer`): ``train()`` runs
    the config `args` on the run loop, ``model`` is what it trained (read from the run's newest
    checkpoint), ``save_model()`` writes it. A subclass sets `args` and gives `_run` (point the config
    at the data and call the algorithm's ``train(cfg)``); `_load` (a checkpoint → the trained object),
    `_model_of` and `_save` (that object → the model; → a folder) default to a policy's."""

    args: Any
    _trained: Any = None
    _in_memory = False
    """Whether `_trained` is a model given in memory (trained in place), not one read back from disk."""
    metrics: dict[str, float]

    def _run(self) -> dict[str, float]:
        raise NotImplementedError

    def _load(self, checkpoint: Path) -> Any:
        from seqrl.models.lm import load_pretrained

        return load_pretrained(str(checkpoint))

    def _model_of(self, trained: Any) -> Any:
        return trained.model

    def _save(self, trained: Any, out: Path) -> None:
        trained.save(out)

    def train(self, resume_from_checkpoint: bool | None = None) -> dict[str, float]:
        """Run the training (``resume_from_checkpoint=True``: continue from the run folder's newest
        checkpoint, as ``--resume``); returns the last logged metrics."""
        if resume_from_checkpoint not in (None, False, True):
            raise ValueError("resume_from_checkpoint: True resumes from the run folder's newest checkpoint (a seqrl "
                             "run resumes from its own folder; give that folder as output_dir)")
        if resume_from_checkpoint:
            self.args.run.resume = True
        if not self._in_memory:
            self._trained = None  # read the new last checkpoint when `model` is next asked for
        self.metrics = self._run()
        return self.metrics

    @property
    def model(self) -> Any:
        """The trained model (None before `train`)."""
        if self._trained is None:
            from seqrl.utils.checkpoint import latest_checkpoint

            last = latest_checkpoint(self.args.run.dir)
            if last is None:
                return None
            self._trained = self._load(last)
        return self._model_of(self._trained)

    def save_model(self, output_dir: str | None = None) -> Path:
        """Write the trained model and its tokenizer to `output_dir` (default: the run folder, TRL's
        output_dir), loadable with ``from_pretrained``."""
        if self.model is None:
            raise ValueError("save_model: nothing trained yet (call train() first)")
        out = Path(output_dir) if output_dir is not None else self.args.run.dir
        self._save(self._trained, out)
        return out


class RowsTrainer(RunTrainer):
    """A `RunTrainer` whose model is named by a string (a folder, hub id, catalogue name or preset; its
    tokenizer is the one saved with it) and trained on rows (`SFTTrainer`, `RewardTrainer`,
    `PRMTrainer`): the rows of `train_dataset` / `eval_dataset` go to ``<run>/data/<data_file>`` with a
    split column for the eval rows, and by default the config's ``data.path`` / ``data.split_field``
    name them. A subclass sets `config_cls`, `data_file`, `rows` (what a row holds, for messages),
    `train_fn`, and `needs_rows` False where the config has data of its own."""

    config_cls: Any
    data_file: str
    rows: str
    train_fn: Any
    needs_rows = True

    def __init__(self, model: Any, args: Any = None, train_dataset: Any = None, eval_dataset: Any = None,
                 processing_class: Any = None) -> None:
        import copy

        name = type(self).__name__
        cfg = copy.deepcopy(args) if args is not None else self.config_cls()
        if not isinstance(model, (str, os.PathLike)):
            raise TypeError(f"{name}(model=...): expected a folder, hub id, catalogue or preset name (got "
                            f"{type(model).__name__}); save a loaded model with save_pretrained and give its folder")
        if processing_class is not None:
            raise ValueError(f"{name}(processing_class=...): the tokenizer is the one saved with the model")
        if train_dataset is None and (self.needs_rows or eval_dataset is not None):
            raise ValueError(f"{name} needs a train_dataset ({self.rows})")
        cfg.model = model_config_for(model, cfg.model)
        self.args, self._data, self.metrics = cfg, (train_dataset, eval_dataset), {}

    def _run(self) -> dict[str, float]:
        cfg = self.args
        train_dataset, eval_dataset = self._data
        path, split = dataset_file(cfg.run.dir, self.data_file, train_dataset, eval_dataset, cfg.run.resume,
                                   cfg.data.split_field)
        cfg.data = replace(cfg.data, path=path, split_field=split)
        return type(self).train_fn(cfg)


class SampledTrainer(RunTrainer):
    """A `RunTrainer` for a trainer that samples from its policy and scores the samples (`GRPOTrainer`,
    `PPOTrainer`): `model` a string (folder, hub id, catalogue name, preset) or a loaded causal LM
    trained in place; `reward_funcs` functions, import paths or reward-model folders; `tools` functions
    the model may call and `environment_factory` environments to act in (multi-turn episodes); the rows of
    `train_dataset` / `eval_dataset` read as a task (`jsonl_task`). A subclass sets `config_cls` and
    `train_fn` (``train_fn(cfg, rewards, policy)``)."""

    config_cls: Any
    train_fn: Any

    def __init__(self, model: Any, reward_funcs: Any = None, args: Any = None, train_dataset: Any = None,
                 eval_dataset: Any = None, processing_class: Any = None, tools: Any = None,
                 environment_factory: Any = None) -> None:
        import copy

        from seqrl.models.config import looks_local
        from seqrl.models.lm import Policy

        name = type(self).__name__
        cfg = copy.deepcopy(args) if args is not None else self.config_cls()
        self._trained = None  # a model given in memory is trained in place
        if isinstance(model, (str, os.PathLike)):
            cfg.model = model_config_for(model, cfg.model)
        elif hasattr(model, "config") and hasattr(model, "generate"):
            where = getattr(model.config, "_name_or_path", "") or getattr(model, "name_or_path", "")
            if processing_class is None:
                if not where:
                    raise ValueError(f"{name}(model=<a model object>): pass its tokenizer as processing_class "
                                     "(the model does not say where it was loaded from)")
                from transformers import AutoTokenizer

                processing_class = AutoTokenizer.from_pretrained(where)
            self._trained, self._in_memory = Policy(model, processing_class), True
            if where and (not looks_local(where) or Path(where).exists()):
                cfg.model = replace(cfg.model, path=str(where))  # config.yaml names what was trained
        else:
            raise TypeError(f"{name}(model=...): expected a path, hub id, catalogue or preset name, or a loaded "
                            f"causal LM (got {type(model).__name__})")
        self._rewards: dict[str, Any] = {}
        if reward_funcs is not None:
            cfg.rewards = self._reward_specs(reward_funcs)
        if train_dataset is None and eval_dataset is not None:
            raise ValueError(f"{name}(eval_dataset=...) needs a train_dataset too")
        self.args, self._data, self.metrics = cfg, (train_dataset, eval_dataset), {}
        if tools is not None and (not isinstance(tools, (list, tuple)) or not all(callable(t) for t in tools)):
            raise TypeError(f"{name}(tools=...): a list of functions (got {type(tools).__name__})")
        self._tools = list(tools or [])
        if environment_factory is not None and not (callable(environment_factory) or (
                isinstance(environment_factory, dict) and all(callable(f) for f in environment_factory.values()))):
            raise TypeError(f"{name}(environment_factory=...): a class or factory, or a dict of them (got "
                            f"{type(environment_factory).__name__})")
        self._environments = environment_factory
        if environment_factory is not None and reward_funcs is None:
            from seqrl.agents.environments import owns_reward
            from seqrl.rewards.combine import RewardSpec

            if owns_reward(environment_factory) and cfg.rewards == [RewardSpec()]:
                cfg.rewards = []  # TRL's rule: an environment with get_reward is the reward; the default verifier goes

    def _reward_specs(self, reward_funcs: Any) -> list:
        """The config's reward specs for the strings of `reward_funcs` (an import path ``pkg.module:fn``,
        else a reward model's folder, as a string is a reward model in TRL); its functions go to
        `_rewards` under their names (a repeated name gets ``_2``, ``_3``, …)."""
        from seqrl.rewards.combine import RewardSpec
        from seqrl.utils.imports import is_import_path

        specs = []
        for fn in reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]:
            if isinstance(fn, (str, os.PathLike)):
                text = os.fspath(fn)
                specs.append(RewardSpec(text) if is_import_path(text) else RewardSpec("rm", path=text))
            elif callable(fn):
                base = getattr(fn, "__name__", type(fn).__name__)
                key, k = base, 2
                while key in self._rewards:
                    key, k = f"{base}_{k}", k + 1
                self._rewards[key] = fn
            else:
                raise TypeError(f"reward_funcs: expected a function, an import path 'pkg.module:fn' or a reward "
                                f"model folder (got {type(fn).__name__})")
        return specs

    def _run(self) -> dict[str, float]:
        cfg = self.args
        train_dataset, eval_dataset = self._data
        if train_dataset is not None:
            name, kwargs = jsonl_task(type(self).__name__, cfg.run.dir, cfg.run.resume, train_dataset, eval_dataset,
                                      cfg.task.kwargs, ("prompt_field", "answer_field", "answer_format", "test_fraction",
                                                        "config_name"))
            cfg.task = replace(cfg.task, name=name, kwargs=kwargs, n_train=-1, n_test=-1)
        extra = {"tools": self._tools} if self._tools else {}
        if self._environments is not None:
            extra["environment_factory"] = self._environments
        return type(self).train_fn(cfg, self._rewards or None, self._trained, **extra)


def jsonl_task(who: str, run_dir: Path, resume: bool, train: Any, test: Any, task_kwargs: dict,
               keep: tuple[str, ...]) -> tuple[str, dict]:
    """The task spec (``jsonl:<file>``) and kwargs for rows given to a trainer that reads them as a task
    (`GRPOTrainer`, `SFTTrainer`): the rows through `dataset_file`; of the config's own task kwargs the
    names in `keep`, and a user file's own ``split_field``. Without held-out rows the hash rule's
    share is said on stderr (those prompts are not trained on)."""
    import sys

    kwargs = {k: v for k, v in task_kwargs.items() if k in keep}
    path, split = dataset_file(run_dir, "train.jsonl", train, test, resume, task_kwargs.get("split_field"))
    if split is not None:
        kwargs["split_field"] = split
    else:
        share = f"{kwargs['test_fraction']:.0%}" if "test_fraction" in kwargs else "≈ 10%"
        print(f"{who}: no eval_dataset; holding out {share} of the prompts (a stable hash of each) for the held-out "
              "evaluation, not trained on; task.kwargs.test_fraction sets the share", file=sys.stderr)
    return f"jsonl:{path}", kwargs
