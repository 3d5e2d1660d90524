"""seqrl: reinforcement learning with transformer sequence models as policies."""

__version__ = "0.1.0"
