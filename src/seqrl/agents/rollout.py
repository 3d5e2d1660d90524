"""The multi-turn rollout: the policy writes a turn, its tool calls run, their results join the episode,
and the policy goes on from there — until a turn with no call, ``max_turns``, ``max_tool_calls`` or the
token budget.

An episode is one token sequence after its prompt: the policy's tokens (``mask`` 1, with the sampler's
log-probs) and the tool turns' tokens (``mask`` 0: the template's end of the assistant turn, the tool
turn with the result, the next generation prompt). Every turn is sampled from exactly the tokens of the
episode so far, so the sampler's log-probs at the policy's tokens are what the trainer recomputes on the
whole episode (tested); the loss, KL and entropy read the policy's tokens only.

Where the chat template renders a ``tool`` turn, the results go back in it (one per call); where it
renders none (the tiny presets' template), they go inline in the policy's own turn:
``<tool_response>RESULT</tool_response>`` after the call, and the policy continues its turn.

The engine keeps each episode's keys and values from one turn to the next: a turn that stops at a
tool call leaves them in a `PrefixCache`, and the next turn prefills only the tool turn's tokens (and the
call's closing token), not the prompt and the earlier turns again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from seqrl.agents.tools import CALL_CLOSE, AgentError, Toolbox, ToolCall, ToolResult, run_episode_calls
from seqrl.prompts import build_messages, render
from seqrl.rollout.engine import Rollouts, SamplingParams, generate
from seqrl.rollout.lean import PrefixCache

INLINE_OPEN, INLINE_CLOSE = "<tool_response>", "</tool_response>"
COMPACT_RESULT = "=> "  # an inline result in the compact syntax
ENDS = ("answer", "length", "done", "tool_timeout", "max_turns", "max_tool_calls", "max_tokens")
"""How an episode ended: a turn without a call (``answer``), a turn cut by the sampler's
``max_new_tokens`` without a call (``length``), its environment ``done`` after a turn's calls, a call of
its environment abandoned past its timeout (``tool_timeout``: the call may still run on the instance),
or a limit of the rollout."""


@dataclass
class Episode:
    """One prompt's multi-turn trajectory."""

    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    """Every token after the prompt: the policy's turns and the tool turns, in order."""
    mask: list[int] = field(default_factory=list)
    """Per token of `ids`: 1 where the policy sampled it (the loss reads these), 0 for tool tokens."""
    logprobs: list[float] = field(default_factory=list)
    """Per token of `ids`: the sampler's log-prob (under ``log_softmax(logits / temperature)``); 0 where mask is 0."""
    messages: list[dict] = field(default_factory=list)
    """The turns as chat messages: ``assistant`` (its text, ``tool_calls``), then one ``tool`` per call."""
    calls: Counter = field(default_factory=Counter)
    """Calls run, by tool name (a malformed call, which names no tool, is counted in `errors` only)."""
    errors: Counter = field(default_factory=Counter)
    """Failed calls, by kind (`seqrl.agents.tools.ERRORS`)."""
    truncated_results: int = 0
    """Tool results cut to the toolbox's ``max_result_chars``."""
    turns: int = 0
    end: str = ""
    env: Any = field(default=None, repr=False, compare=False)
    """The episode's environment instance (TRL's ``environment_factory``), None without one."""

    @property
    def tool_calls(self) -> int:
        """Calls made: those run and the malformed ones (both count against ``max_tool_calls``)."""
        return sum(self.calls.values()) + self.errors["malformed"]

    def _add(self, tokens: Sequence[int], logprobs: Sequence[float] | None) -> None:
        self.ids += list(tokens)
        self.mask += [1 if logprobs is not None else 0] * len(tokens)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(tokens)


def _render_after(tokenizer, mark: str, tools: list[str]) -> str | None:
    """What the chat template renders after an assistant turn `mark` followed by tool turns `tools` and
    the generation prompt; None where it refuses or does not show each tool text once."""
    messages = [{"role": "user", "content": "?"}, {"role": "assistant", "content": mark}]
    messages += [{"role": "tool", "content": t} for t in tools]
    try:
        full = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 — a template that refuses tool turns
        return None
    if not isinstance(full, str) or full.count(mark) != 1 or any(full.count(t) != 1 for t in tools):
        return None
    return full[full.index(mark) + len(mark):]


def tool_framing(tokenizer) -> tuple[str, str, str] | None:
    """``(head, between, tail)`` the chat template puts around tool results after a policy turn — the
    end of the assistant turn and the first tool turn's opening, what separates two results (one turn
    each, or grouped as the template groups them), the last one's end and the next generation prompt —
    read off the template around probe texts; None where it renders no ``tool`` turn."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    mark, a, b = "\x00turn\x00", "\x00first\x00", "\x00second\x00"
    one, two = _render_after(tokenizer, mark, [a]), _render_after(tokenizer, mark, [a, b])
    if one is None or two is None:
        return None
    head, tail = one.split(a)
    middle = two[len(head) + len(a):two.index(b)]
    return (head, middle, tail) if two == head + a + middle + b + tail else None


def tool_turn_text(results: Sequence[ToolResult], framing: tuple[str, str, str] | None,
                   syntax: str = "hermes") -> tuple[str, bool]:
    """The text that follows a policy turn whose calls gave `results`: ``(text, inline)`` — the results in
    the template's tool turns (`framing`: `tool_framing` of the tokenizer), or inline in the policy's own
    turn where the template renders none (`framing` None): ``<tool_response>R</tool_response>``, or in the
    compact syntax ``=> R``, a line each."""
    if framing is not None:
        head, middle, tail = framing
        return head + middle.join(r.content for r in results) + tail, False
    if syntax == "compact":
        return "".join(f"\n{COMPACT_RESULT}{r.content}" for r in results) + "\n", True
    return "".join(f"\n{INLINE_OPEN}{r.content}{INLINE_CLOSE}" for r in results) + "\n", True


@dataclass
class Sampled:
    """One turn as the sampler gave it: its tokens, their log-probs and how it ended (``eos``,
    ``stop_string`` or ``length``)."""

    tokens: list[int]
    logprobs: list[float]
    ended_by: str


def engine_sampler(policy, params: SamplingParams, cache_bytes: int = 1 << 30, call_close: str = CALL_CLOSE
                   ) -> Callable[[list[list[int]], int, int | None], list[Sampled]]:
    """The lean engine as the rollout's sampler: ``(contexts, max_new_tokens, seed) → [Sampled]``, each
    context sampled once, stopping at EOS, a stop string of `params` or a closed call (`call_close`). A turn that
    stops at a call keeps its keys and values (up to `cache_bytes`, 0: none), and the next turn of that
    episode prefills only the tool turn's tokens (`PrefixCache`); the lean decoder only."""
    stops = tuple(dict.fromkeys((*params.stop, call_close)))
    cache = PrefixCache(cache_bytes, single_use=True) if cache_bytes > 0 else None

    def sample(contexts: list[list[int]], max_new: int, seed: int | None) -> list[Sampled]:
        r = generate(policy, contexts, n=1, params=replace(params, stop=stops, max_new_tokens=max_new, seed=seed),
                     prefix_cache=cache)
        out = []
        for i in range(len(contexts)):
            k = int(r.completion_mask[i].sum())
            out.append(Sampled(r.completion_ids[i, :k].tolist(), r.logprobs[i, :k].tolist(), r.ended_by[i]))
        return out

    sample.cache = cache  # its hits and misses: how often a turn continued without re-prefilling
    return sample


def multi_turn_rollout(policy, prompt_ids: Sequence[Sequence[int]], toolbox: Toolbox | Sequence[Toolbox],
                       params: SamplingParams, n: int = 1, max_turns: int = 4, max_tool_calls: int = 8,
                       max_episode_tokens: int = 1024, sampler: Callable | None = None,
                       envs: Sequence | None = None, cache_bytes: int = 1 << 30) -> list[Episode]:
    """`n` episodes per prompt (episode i belongs to prompt i // n), each turn of all the live episodes
    sampled together and their calls run together (`run_episode_calls`: an episode's in order, the
    episodes' at once).

    A turn's text is parsed for calls (`Toolbox.parse`); without one the episode ends (``answer``, or
    ``length`` where the sampler's ``max_new_tokens`` cut it). Calls past ``max_tool_calls`` are not run
    and end the episode; ``max_turns`` policy turns end it; ``max_episode_tokens`` (and the model's
    context) bound ``len(ids)``: a turn or a tool turn that would pass it is cut there and the episode
    ends (``max_tokens``). `sampler`: ``(contexts, max_new_tokens, seed) → [Sampled]`` (with a true
    ``takes_envs`` attribute it also gets each context's environment instance; default: the
    engine, `engine_sampler`, keeping each episode's keys and values across its turns within `cache_bytes`);
    turn t samples with seed ``params.seed + 104729·t`` where a seed is given.

    `toolbox`: one for every episode, or one per episode (an environment instance's tools, `envs` those
    instances): an episode's calls of a turn run in order, the episodes' at once (`run_episode_calls`); an
    episode whose environment is ``done`` after a turn's calls ends there (``done``)."""
    for name, v in (("n", n), ("max_turns", max_turns), ("max_episode_tokens", max_episode_tokens)):
        if v < 1:
            raise ValueError(f"multi_turn_rollout: {name} must be >= 1 (got {v})")
    if max_tool_calls < 0:
        raise ValueError(f"multi_turn_rollout: max_tool_calls must be >= 0 (got {max_tool_calls})")
    tok = policy.tokenizer
    episodes = [Episode(list(p)) for p in prompt_ids for _ in range(n)]
    boxes = [toolbox] * len(episodes) if isinstance(toolbox, Toolbox) else list(toolbox)
    syntax = boxes[0].syntax if boxes else "hermes"
    sample = sampler or engine_sampler(policy, params, cache_bytes, boxes[0].call_close if boxes else CALL_CLOSE)
    if len(boxes) != len(episodes) or (envs is not None and len(envs) != len(episodes)):
        raise ValueError(f"multi_turn_rollout: {len(episodes)} episodes, {len(boxes)} toolboxes, "
                         f"{'no' if envs is None else len(envs)} environments (one each, or one toolbox for all)")
    index = {id(e): i for i, e in enumerate(episodes)}
    context = policy.max_seq_len
    framing = tool_framing(tok)  # the template's tool turns: the same for every episode and turn

    def left(e: Episode) -> int:  # tokens the episode may still add (its budget, the model's context)
        return min(max_episode_tokens - len(e.ids), context - 1 - len(e.prompt_ids) - len(e.ids))

    longest = max((len(p) for p in prompt_ids), default=0)
    if longest >= context - 1:
        raise AgentError(f"multi_turn_rollout: a prompt of {longest} tokens (the tools told in it: agent.tool_prompt) "
                         f"leaves no room in the model's context of {context} tokens; shorten it, tell the tools "
                         f"in fewer tokens (agent.tool_prompt: compact or none) or use a longer-context model")

    live = list(episodes)
    for turn in range(max_turns):
        if not live:
            break
        room = {id(e): left(e) for e in live}
        for e in [e for e in live if room[id(e)] < 1]:
            e.end = "max_tokens"
        live = [e for e in live if not e.end]
        if not live:
            break
        widest = max(room[id(e)] for e in live)
        args = ([e.prompt_ids + e.ids for e in live], min(params.max_new_tokens, widest),
                None if params.seed is None else params.seed + 104_729 * turn)
        if getattr(sample, "takes_envs", False):  # an expert that reads its episode's environment
            args += ([envs[index[id(e)]] if envs is not None else None for e in live],)
        got = sample(*args)
        pending: list[tuple[Episode, list]] = []
        for e, s in zip(live, got):
            cut = len(s.tokens) > room[id(e)] or (s.ended_by == "length" and len(s.tokens) >= room[id(e)])
            tokens, lps = s.tokens[: room[id(e)]], s.logprobs[: room[id(e)]]
            e._add(tokens, lps)
            e.turns += 1
            text = tok.decode(tokens, skip_special_tokens=True)
            parsed, any_call = boxes[index[id(e)]].parse(text) if s.ended_by != "eos" else ([], False)  # EOS: final
            calls = [c for c in parsed if isinstance(c, ToolCall)]
            e.messages.append({"role": "assistant", "content": text,
                               "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in calls]})
            if cut:
                e.end = "max_tokens"
            elif not any_call:
                e.end = "answer" if s.ended_by != "length" else "length"
            elif e.tool_calls + len(parsed) > max_tool_calls:
                e.end = "max_tool_calls"
            else:
                pending.append((e, parsed))
        workers = max(b.max_workers for b in boxes)
        done = run_episode_calls([(boxes[index[id(e)]], parsed) for e, parsed in pending], workers)
        for (e, parsed), mine in zip(pending, done):
            for r in mine:
                if r.error != "malformed":
                    e.calls[r.name] += 1
                if r.error:
                    e.errors[r.error] += 1
                e.truncated_results += r.truncated
                e.messages.append({"role": "tool", "name": r.name, "content": r.content, "error": r.error})
            text, _inline = tool_turn_text(mine, framing, syntax)
            ids = tok.encode(text, add_special_tokens=False)
            fits = left(e)
            e._add(ids[: max(fits, 0)], None)
            if len(ids) >= fits:  # the next turn would have no room
                e.end = "max_tokens"
            elif envs is not None and any(r.error == "timeout" for r in mine):
                e.end = "tool_timeout"
            elif envs is not None and getattr(envs[index[id(e)]], "done", False):
                e.end = "done"
        live = [e for e in live if not e.end]
    for e in live:
        e.end = e.end or "max_turns"
    return episodes


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Means per episode — turns, tool calls (all and by tool), failed calls by kind, results cut, policy
    and tool tokens — and the share of episodes per end (`ENDS`)."""
    m = max(len(episodes), 1)
    out = {"agent/turns": sum(e.turns for e in episodes) / m,
           "agent/tool_calls": sum(e.tool_calls for e in episodes) / m,
           "agent/policy_tokens": sum(sum(e.mask) for e in episodes) / m,
           "agent/tool_tokens": sum(len(e.mask) - sum(e.mask) for e in episodes) / m,
           "agent/truncated_results": sum(e.truncated_results for e in episodes) / m}
    for name in sorted({k for e in episodes for k in e.calls}):
        out[f"agent/calls/{name}"] = sum(e.calls[name] for e in episodes) / m
    for kind in sorted({k for e in episodes for k in e.errors}):
        out[f"agent/errors/{kind}"] = sum(e.errors[kind] for e in episodes) / m
    for end in ENDS:
        out[f"agent/end/{end}"] = sum(e.end == end for e in episodes) / m
    return out


def template_renders_tools(tokenizer, toolbox: Toolbox) -> bool:
    """Whether the chat template writes the tools' schemas into the prompt (``tools=``)."""
    if not getattr(tokenizer, "chat_template", None) or not toolbox.schemas:
        return False
    probe = [{"role": "user", "content": "?"}]
    try:
        with_tools = tokenizer.apply_chat_template(probe, tools=toolbox.schemas, tokenize=False,
                                                   add_generation_prompt=True)
        plain = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 — a template that refuses tools
        return False
    name = toolbox.schemas[0]["function"]["name"]
    return name in with_tools and name not in plain


def encode_prompts(policy, problems, toolbox: Toolbox | Sequence[Toolbox], mode: str = "auto",
                   added: Sequence[str | None] | None = None) -> list[list[int]]:
    """Token ids of each problem's prompt with the tools told (`AgentConfig.tool_prompt`): the chat
    template's ``tools`` (auto, where it renders them), else the tools in the system message (full: the
    schemas; compact: a line each), or not at all (none). `toolbox`: one for all, or one per problem
    (its environment's); `added`: per problem, text appended to the last user message (an
    environment's ``reset``) or None."""
    tok = policy.tokenizer
    boxes = [toolbox] * len(problems) if isinstance(toolbox, Toolbox) else list(toolbox)
    out = []
    for i, problem in enumerate(problems):
        box = boxes[i]
        how = mode if mode != "auto" else ("template" if template_renders_tools(tok, box) else "full")
        messages = build_messages(problem, policy.prompt)
        if added is not None and added[i]:
            last = max((k for k, m in enumerate(messages) if m["role"] == "user"), default=None)
            if last is None:
                messages.append({"role": "user", "content": added[i]})
            else:
                messages[last] = {**messages[last], "content": f"{messages[last]['content']}{added[i]}"}
        if how == "template":
            text = tok.apply_chat_template(messages, tools=box.schemas, tokenize=False, add_generation_prompt=True)
        else:
            if how in ("full", "compact"):
                told = box.system_prompt() if how == "full" else box.compact_prompt()
                if messages and messages[0]["role"] == "system":
                    messages[0] = {"role": "system", "content": f"{messages[0]['content']}\n\n{told}"}
                else:
                    messages.insert(0, {"role": "system", "content": told})
            text = render(tok, messages)
        out.append(tok.encode(text, add_special_tokens=not tok.chat_template))
    return out


def policy_text(episode: Episode) -> str:
    """The policy's own turns of an episode, joined by newlines: what a text reward reads (a tool's
    result is not the policy's answer)."""
    return "\n".join(m["content"] for m in episode.messages if m["role"] == "assistant")


def as_rollouts(episodes: Sequence[Episode], n: int, pad_id: int) -> Rollouts:
    """Episodes (n per prompt, in order) as the sampled batch the trainers read: ``completion_ids`` the
    episode's tokens, ``completion_mask`` its policy mask (tool tokens 0: no loss, KL or entropy there),
    the sampler's log-probs, ``texts`` the policy's turns (`policy_text`), ``finish_reasons`` "length" for
    an episode a token budget ended, ``ended_by`` its end."""
    width = max((len(e.ids) for e in episodes), default=0)
    ids = torch.full((len(episodes), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(episodes), width), dtype=torch.float32)
    lps = torch.zeros((len(episodes), width), dtype=torch.float32)
    for i, e in enumerate(episodes):
        k = len(e.ids)
        ids[i, :k] = torch.tensor(e.ids, dtype=torch.long)
        mask[i, :k] = torch.tensor(e.mask, dtype=torch.float32)
        lps[i, :k] = torch.tensor(e.logprobs, dtype=torch.float32)
    prompts = [episodes[i].prompt_ids for i in range(0, len(episodes), n)]
    return Rollouts(prompt_ids=prompts, n=n, completion_ids=ids, completion_mask=mask, logprobs=lps,
                    finish_reasons=["length" if e.end in ("length", "max_tokens") else "stop" for e in episodes],
                    texts=[policy_text(e) for e in episodes], ended_by=[e.end for e in episodes],
                    num_prompt_tokens=sum(len(p) for p in prompts))
