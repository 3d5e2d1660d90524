"""One readable training loop per method: each `<Algo>Config` dataclass plus `train(cfg)`."""
