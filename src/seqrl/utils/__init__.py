"""Run plumbing shared by every training loop: seeding, distributed helpers, checkpoints, metrics,
plots and progress bars. Import the submodules directly (``from seqrl.utils.checkpoint import
save_checkpoint``); this package imports nothing on its own."""
