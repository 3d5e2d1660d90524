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
