"""transformers without its console output: load reports and weight-loading/saving progress bars.

seqrl reports what matters itself (a fresh head is expected when a scorer starts from a causal LM);
transformers' own report is a coloured table with raw ANSI codes in log files, and its progress bars
print on every load and save, also when seqrl is used as a library.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["from_pretrained", "quiet"]


@contextmanager
def quiet() -> Iterator[None]:
    """transformers' logging at error level and its progress bars off inside the block; the caller's
    settings are restored after it."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def from_pretrained(auto_cls, where, *, fresh: tuple[str, ...] = (), **kwargs):
    """`auto_cls.from_pretrained(where, **kwargs)` quietly. Weights the checkpoint lacks are expected
    when their names start with one of `fresh` (a new head); any other missing weight is named on
    stderr in one line, since the model then runs with random values there."""
    with quiet():
        model, info = auto_cls.from_pretrained(where, output_loading_info=True, **kwargs)
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(fresh))
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        print(f"seqrl: {where} lacks {len(missing)} weight(s) of {type(model).__name__}, initialised at random: "
              f"{shown}", file=sys.stderr)
    return model
