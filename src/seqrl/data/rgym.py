"""Any reasoning-gym dataset as a `Task` (`ReasoningGymTask`).

reasoning-gym's ``score_answer`` gives partial credit (a wrong answer that contains the right one
scores ``len(gold) / len(answer)``), so by default the score is thresholded: 1.0 only for full
credit. Its items carry no worked solution, so problems have no steps.

Splits are disjoint by question text: every generated item goes to the split its question hashes
into (`split_of`), so train and test never share a question. Generation is cached per
(dataset, config, seed, size) — some generators are slow (countdown takes ~14 ms an item).
"""

from __future__ import annotations

import difflib
import functools
import json

from seqrl.data.splits import check_split, split_of, stable_hash
from seqrl.types import Problem, RewardResult, Task, extract_answer


def dataset_names() -> list[str]:
    """The names reasoning-gym can create (its factory's registry), sorted."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


@functools.lru_cache(maxsize=64)
def _dataset(dataset: str, config_json: str, seed: int, size: int):
    """A reasoning-gym dataset object (items are generated on access)."""
    import reasoning_gym

    return reasoning_gym.create_dataset(dataset, seed=seed, size=size, **json.loads(config_json))


@functools.lru_cache(maxsize=64)
def _generate(dataset: str, config_json: str, seed: int, size: int) -> tuple[dict, ...]:
    """All `size` items of the dataset generated with `seed`."""
    return tuple(_dataset(dataset, config_json, seed, size))


class ReasoningGymTask(Task):
    """A reasoning-gym dataset with its own verifier (``score_answer``).

    dataset: a reasoning-gym dataset name, e.g. "basic_arithmetic" (see `dataset_names`).
    binary:  score 1.0 only for full credit (else 0.0 with the partial score in the reason);
             False passes reasoning-gym's score through.
    size:    items generated per chunk; `problems` filters chunks (seeds ``base + k * size``) by
             split, drops repeated questions, and gives up with ValueError after
             ``1 + 20 * n // size`` chunks.
    config:  extra reasoning-gym config fields (e.g. ``{"min_terms": 2}``).
    name:    defaults to ``"rg:<dataset>"``.
    """

    def __init__(
        self,
        dataset: str,
        binary: bool = True,
        size: int = 200,
        config: dict | None = None,
        name: str | None = None,
    ):
        names = dataset_names()
        if dataset not in names:
            close = difflib.get_close_matches(dataset, names, n=5)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ValueError(
                f"unknown reasoning-gym dataset {dataset!r}{hint}; {len(names)} valid names, "
                f"e.g. {', '.join(names[:12])}"
            )
        if size < 1:
            raise ValueError(f"rg.size must be >= 1 (got {size})")
        config = dict(config or {})
        if {"seed", "size"} & set(config):
            raise ValueError("rg.config must not set 'seed' or 'size' (the task sets them)")
        self.dataset, self.binary, self.size = dataset, binary, size
        self.name = name or f"rg:{dataset}"
        self._config_json = json.dumps(config, sort_keys=True)

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        check_split(split)
        if n < 0:
            raise ValueError(f"n must be >= 0 (got {n})")
        if n == 0:
            return []
        base = stable_hash(f"{self.name}:{split}:{seed}") % 2**31
        chunks = 1 + 20 * n // self.size
        out: list[Problem] = []
        seen: set[str] = set()
        for k in range(chunks):
            chunk_seed = base + k * self.size
            for index, entry in enumerate(
                _generate(self.dataset, self._config_json, chunk_seed, self.size)
            ):
                question = entry["question"]
                if question in seen or split_of(question) != split:
                    continue
                seen.add(question)
                out.append(
                    Problem(
                        prompt=question,
                        answer=str(entry["answer"]),
                        metadata={"entry": entry},
                        uid=f"{self.name}/{chunk_seed + index}",
                    )
                )
                if len(out) == n:
                    return out
        raise ValueError(
            f"{self.name}: found only {len(out)} distinct {split} problems of {n} in "
            f"{chunks * self.size} generated items; the dataset may be too small"
        )

    def verify(self, problem: Problem, completion: str) -> RewardResult:
        """reasoning-gym's score of the ``<answer>`` content, thresholded at 1.0 when `binary`."""
        answer = extract_answer(completion)
        if answer is None:
            return RewardResult(0.0, "no answer found")
        try:
            scorer = _dataset(self.dataset, self._config_json, 0, 1)
            score = float(scorer.score_answer(answer, problem.metadata["entry"]))
        except Exception as err:  # reasoning-gym scorers are third-party code run on model output
            return RewardResult(0.0, f"score_answer raised {type(err).__name__}: {err}")
        if score >= 1.0:
            return RewardResult(1.0)
        if not score > 0.0:  # also NaN
            return RewardResult(0.0, f"wrong answer (score_answer gave {score:g})")
        if self.binary:
            return RewardResult(0.0, f"partial credit {score:.3g} treated as wrong")
        return RewardResult(score, f"partial credit {score:.3g}")
