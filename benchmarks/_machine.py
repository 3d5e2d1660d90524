"""The machine a benchmark ran on, for its JSON line: results differ between AVX2 and AVX-512/BF16 CPUs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def machine_info() -> dict:
    """CPU model, the capabilities torch reports (those that decide fp32 vs bf16 speed), the core count
    and the load average now."""
    import torch

    caps = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        model = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "")
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cpu_model": model, "cpu_name": caps.get("cpu_name", ""),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "avx512_bf16": bool(caps.get("avx512_bf16", False)), "amx_bf16": bool(caps.get("amx_bf16", False)),
            "avx2": bool(caps.get("avx2", False)), "cpu_count": os.cpu_count(),
            "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()]}


def proc_status_kib(key: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS: now; VmHWM: peak resident set size so far)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def run_event_worker(cmd: list[str], prefix: str, threads: int, log_path: Path, cwd: Path,
                     on_step=None) -> tuple[int, list[dict], dict, float]:
    """Run a benchmark worker process with `threads` BLAS/OpenMP threads and the hub offline; its stdout
    lines that start with `prefix` are JSON events (``{"event": "step" | "result", ...}``), every other
    line and its stderr go to `log_path`. `on_step(event)` is called on each step event as it arrives.
    Returns (exit code, step events, the result event or {}, wall seconds)."""
    import json
    import time

    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1", "PYTHONUNBUFFERED": "1"}
    steps: list[dict] = []
    result: dict = {}
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=cwd)
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith(prefix):
                log.write(line)
                continue
            event = json.loads(line[len(prefix):])
            if event["event"] == "step":
                steps.append(event)
                if on_step is not None:
                    on_step(event)
            elif event["event"] == "result":
                result = event
        code = proc.wait()
    return code, steps, result, time.perf_counter() - t0
