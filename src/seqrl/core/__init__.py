"""Pure tensor and counting math: no state, no I/O, no config."""
