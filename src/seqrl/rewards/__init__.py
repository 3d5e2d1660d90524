"""Verifiable rewards: plain functions returning one `RewardResult` per completion.

`RewardResult` lives in `seqrl.types`; the reward functions are re-exported lazily (PEP 562) so that
importing the package does not import the sandbox before it is needed.
"""

from importlib import import_module

from seqrl.types import RewardResult

_LAZY = {
    "extract_final_answer": "seqrl.rewards.math",
    "find_boxed": "seqrl.rewards.math",
    "make_math_reward": "seqrl.rewards.math",
    "math_answer_reward": "seqrl.rewards.math",
    "math_reward": "seqrl.rewards.math",
    "format_partial_reward": "seqrl.rewards.format",
    "format_reward": "seqrl.rewards.format",
    "think_answer_format": "seqrl.rewards.format",
    "think_answer_partial": "seqrl.rewards.format",
    "length_penalty": "seqrl.rewards.length",
    "make_length_reward": "seqrl.rewards.length",
    "make_soft_overlong_reward": "seqrl.rewards.length",
    "soft_overlong_reward": "seqrl.rewards.length",
    "CodeAgentReward": "seqrl.rewards.code_agent",
    "CodeAgentRewardFunction": "seqrl.rewards.code_agent",
    "score_code_agent": "seqrl.rewards.code_agent",
}

__all__ = ["RewardResult", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'seqrl.rewards' has no attribute {name!r}")
