"""The work trees: throwaway sealed copies of a snapshot (``.git`` and byte-code left out), listings, capped
reads."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from seqrl.sandbox.pytest_harness import SKIP_COPY, seal


def _fresh_copy(snapshot: Path) -> tuple[Path, Path]:
    """``(base, base/repo)``: a throwaway directory any uid can traverse, holding a sealed copy of the
    snapshot (``.git`` and byte-code left out). The caller removes `base`."""
    base = Path(tempfile.mkdtemp(prefix="seqrl-agent-"))
    try:
        os.chmod(base, 0o711)
        work = base / "repo"
        shutil.copytree(snapshot, work, symlinks=True, ignore=SKIP_COPY)
        seal(work)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return base, work


def _walk_files(root: Path, skip: bool = True) -> dict[str, os.stat_result]:
    """relpath → lstat of every non-directory entry (symlinks not followed, not entered). ``skip``:
    leave out what the copy leaves out (``.git``, ``__pycache__``, ``.pytest_cache``, byte-code)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if skip:
            dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__", ".pytest_cache")]
            filenames = [f for f in filenames if not f.endswith((".pyc", ".pyo"))]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root).replace(os.sep, "/")] = os.lstat(full)
    return out


def _same_file(a: Path, b: Path) -> bool:
    import filecmp

    return filecmp.cmp(a, b, shallow=False)


def _read_capped(path: Path, cap: int) -> bytes | None:
    """Read a regular file without following a symlink; None when it is not one or exceeds ``cap``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        chunks, got = [], 0
        while got <= cap:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            chunks.append(b)
            got += len(b)
        return b"".join(chunks) if got <= cap else None
    finally:
        os.close(fd)


def _ensure_dir(root: Path, rel_dir: str) -> None:
    """Make ``root/rel_dir`` a real directory, replacing any file that sits on the way."""
    cur = root
    for part in [p for p in rel_dir.split("/") if p]:
        cur = cur / part
        if cur.is_symlink() or (cur.exists() and not cur.is_dir()):
            cur.unlink()
        if not cur.exists():
            cur.mkdir(mode=0o755)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


"""Top-level packages/modules pytest needs at run time: staged for the sandbox, and names a patch may not add."""
