"""Supervised fine-tuning pieces several trainers share (SFT, STaR): example encoding, collation,
gradient accumulation and a plain fine-tuning loop. Below `algos/`: it imports no trainer."""

from seqrl.training.finetune import accumulate_gradients, collate, encode_examples, encode_pairs, finetune

__all__ = ["accumulate_gradients", "collate", "encode_examples", "encode_pairs", "finetune"]
