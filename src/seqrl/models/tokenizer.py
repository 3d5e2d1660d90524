"""A character-level tokenizer built locally and saved as a Hugging Face fast tokenizer.

Every printable ASCII character is one token; the blank line `STEP_SEP` (``"\\n\\n"``) and the task
markers (``<think>``, ``</think>``, ``<answer>``, ``</answer>``) are single tokens, so a tiny model
emits a marker in one step. It carries a chat template, so prompts are built the same way for the
tiny presets and for any Hugging Face chat model: ``tokenizer.apply_chat_template(...)``.
"""

from __future__ import annotations

import string

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from seqrl.types import MARKERS, STEP_SEP

PAD, EOS, USER, ASSISTANT, UNK = "<|pad|>", "<|endoftext|>", "<|user|>", "<|assistant|>", "<|unk|>"
SPECIAL_TOKENS = (PAD, EOS, USER, ASSISTANT, UNK)

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}" + USER + "{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}" + ASSISTANT + "{{ m['content'] }}" + EOS + ""
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)


def _characters() -> list[str]:
    """Printable ASCII plus newline (tabs and other control whitespace map to unk)."""
    return [c for c in string.printable if c not in "\t\r\x0b\x0c"]


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """The house character-level tokenizer (106 tokens).

    >>> tok = build_char_tokenizer()
    >>> ids = tok.encode("<think>1+2=3</think><answer>3</answer>")
    >>> len(ids), tok.decode(ids)
    (10, '<think>1+2=3</think><answer>3</answer>')
    """
    vocab: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS, *MARKERS, STEP_SEP, *_characters()):
        vocab.setdefault(token, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    # The blank line first, then any single character (newlines included).
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"\n\n|[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(t, normalized=False, special=False) for t in MARKERS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK, model_max_length=4096
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok
