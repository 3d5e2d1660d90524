"""The one prompt renderer: what the model receives for a problem, in SFT, sampling and evaluation.

A problem becomes chat messages, then text through the tokenizer's chat template:

1. the user turn is the problem's question, or ``prompt.template`` formatted over the question and
   the row's columns (``"{question} Give the answer in {unit}."``); a conversational row (a prompt
   that is a list of ``{role, content}`` messages, `Problem.messages`) is used as it is;
2. ``prompt.system`` (text, or a preset name from `SYSTEM_PRESETS`) goes in a system turn where the
   chat template renders one, and is prepended to the first user turn where it does not (the tiny
   presets' template, Gemma's); a conversational row that has its own system turn keeps it;
3. the chat template renders the messages with the generation prompt; a tokenizer without a chat
   template gets the contents joined by blank lines.

The default (no system prompt, no template) renders the question alone in a user turn, as the tiny
presets are trained. Torch-free: config validation imports this before any model exists.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from seqrl.types import Problem

SYSTEM_PRESETS: dict[str, str] = {
    # The instruction of DeepSeek-R1-Zero's training template (DeepSeek-AI 2025, Table 1), in our words:
    # reason inside <think>, then give the final answer inside <answer> — the house format.
    "r1": ("The assistant solves the user's problem by reasoning first and answering after. It writes its "
           "reasoning inside <think> </think> tags and then its final answer inside <answer> </answer> tags, "
           "like this: <think> reasoning here </think> <answer> final answer here </answer>."),
}
QUESTION = "question"
"""The template field that holds the problem's question."""


@dataclass
class PromptConfig:
    """How a problem is turned into the text the model receives (SFT, sampling and evaluation alike)."""

    system: str | None = None
    """System prompt: text, or a preset name (r1: think in <think>, answer in <answer>); None: none."""
    template: str | None = None
    """User turn as a format string over {question} and the row's columns (e.g. "{question} Units: {unit}");
    None: the question alone. Not applied to conversational rows."""

    def __post_init__(self) -> None:
        if self.system is not None and not isinstance(self.system, str):
            raise ValueError(f"prompt.system must be text or a preset name {sorted(SYSTEM_PRESETS)} "
                             f"(got {type(self.system).__name__})")
        if self.template is not None:
            template_fields(self.template)  # raises on a malformed format string

    @property
    def system_text(self) -> str | None:
        """The system prompt with a preset name resolved."""
        if self.system is None:
            return None
        return SYSTEM_PRESETS.get(self.system, self.system)


def template_fields(template: str) -> set[str]:
    """The column names a template uses; ValueError naming ``prompt.template`` when it is malformed.

    >>> sorted(template_fields("{question} in {unit}"))
    ['question', 'unit']
    """
    if not isinstance(template, str):
        raise ValueError(f"prompt.template must be text (got {type(template).__name__})")
    names = set()
    try:
        for _, name, spec, conv in string.Formatter().parse(template):
            if name is None:
                continue
            if not name.isidentifier():
                raise ValueError(f"field {{{name}}} is not a column name (positional or indexed fields are not "
                                 f"allowed)")
            names.add(name)
    except ValueError as e:
        raise ValueError(f"prompt.template {template!r}: {e}") from None
    return names


def check_template(cfg: PromptConfig, problems: list[Problem]) -> None:
    """Every column the template names is present in each problem (a text prompt); ValueError naming
    ``prompt.template``, the column and the problem otherwise. Run before the model is loaded."""
    if cfg.template is None:
        return
    wanted = template_fields(cfg.template) - {QUESTION}
    for p in problems:
        if p.messages:
            continue
        missing = sorted(wanted - set(p.metadata or {}))
        if missing:
            have = sorted(k for k in (p.metadata or {}) if isinstance(k, str))
            raise ValueError(f"prompt.template names column {missing[0]!r}, which problem {p.uid or p.prompt[:40]!r} "
                             f"does not have (its columns: {', '.join(have) or 'none'})")


def build_messages(problem: Problem | str, cfg: PromptConfig | None = None) -> list[dict[str, str]]:
    """The chat messages of a problem (or a bare question) before the chat template.

    >>> build_messages("1+2=?")
    [{'role': 'user', 'content': '1+2=?'}]
    >>> build_messages(Problem("1+2=?", "3", metadata={"unit": "apples"}),
    ...                PromptConfig(system="Be brief.", template="{question} ({unit})"))
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '1+2=? (apples)'}]
    """
    cfg = cfg or PromptConfig()
    if isinstance(problem, str):
        problem = Problem(problem, "")
    if problem.messages:
        messages = [{"role": m["role"], "content": m["content"]} for m in problem.messages]
    else:
        text = problem.prompt
        if cfg.template is not None:
            columns = {k: v for k, v in (problem.metadata or {}).items() if isinstance(k, str)}
            try:
                text = cfg.template.format_map({**columns, QUESTION: problem.prompt})
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"prompt.template {cfg.template!r} on problem {problem.uid or problem.prompt[:40]!r}: "
                                 f"{type(e).__name__}: {e}") from None
        messages = [{"role": "user", "content": text}]
    system = cfg.system_text
    if system is not None and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system}, *messages]
    return messages


def supports_system(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders a system turn (some raise, some drop it)."""
    marker = "\x1fseqrl-system-probe\x1f"
    try:
        text = tokenizer.apply_chat_template([{"role": "system", "content": marker}, {"role": "user", "content": "x"}],
                                             tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 — templates reject an unsupported role by raising
        return False
    return marker in text


def render(tokenizer, messages: list[dict[str, str]]) -> str:
    """The prompt text of `messages`: the chat template with the generation prompt (a system turn
    folded into the first user turn where the template has none); no template: contents joined."""
    if not getattr(tokenizer, "chat_template", None):
        return "\n\n".join(m["content"] for m in messages)
    if messages and messages[0]["role"] == "system" and not _cached_supports_system(tokenizer):
        system, rest = messages[0]["content"], [dict(m) for m in messages[1:]]
        first_user = next((m for m in rest if m["role"] == "user"), None)
        if first_user is None:
            rest.insert(0, {"role": "user", "content": system})
        else:
            first_user["content"] = f"{system}\n\n{first_user['content']}"
        messages = rest
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


_SYSTEM_SUPPORT: dict[str, bool] = {}


def _cached_supports_system(tokenizer) -> bool:
    """`supports_system`, once per chat template (it depends on the template text alone)."""
    key = str(tokenizer.chat_template)
    if key not in _SYSTEM_SUPPORT:
        _SYSTEM_SUPPORT[key] = supports_system(tokenizer)
    return _SYSTEM_SUPPORT[key]


def render_prompt(tokenizer, problem: Problem | str, cfg: PromptConfig | None = None) -> str:
    """`build_messages` then `render`: the exact text the model receives for `problem`."""
    return render(tokenizer, build_messages(problem, cfg))


def saved_run_config(checkpoint: str) -> dict:
    """The config.yaml of the run that wrote `checkpoint` (its folder's parent), as a mapping; ``{}``
    when there is none or it does not read (a model folder, a hub id)."""
    from pathlib import Path

    import yaml

    run_config = Path(str(checkpoint)).parent / "config.yaml"
    if not run_config.is_file():
        return {}
    try:
        saved = yaml.safe_load(run_config.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    return saved if isinstance(saved, dict) else {}


def saved_prompt(checkpoint: str) -> PromptConfig:
    """The prompt section of the run that wrote `checkpoint`, so a policy is asked the way it was
    trained; the default rendering when there is none."""
    prompt = saved_run_config(checkpoint).get("prompt")
    if not isinstance(prompt, dict):
        return PromptConfig()
    return PromptConfig(**{k: prompt.get(k) for k in ("system", "template")})
