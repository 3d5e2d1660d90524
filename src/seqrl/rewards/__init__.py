"""Verifiable rewards: plain functions returning one `RewardResult` per completion."""

from seqrl.rewards.base import RewardResult

__all__ = ["RewardResult"]
