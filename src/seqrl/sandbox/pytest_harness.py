"""pytest where a sandboxed run can import it: the harness packages staged once per process into a
root-owned, read-only folder any uid can traverse, the probe that an unprivileged uid imports them, and
the configuration file pytest would read in a repository."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path


SKIP_COPY = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", "*.pyo", ".pytest_cache")


def find_inifile(repo: Path) -> str | None:
    """The configuration file pytest would use at the snapshot's root (relative name), if any."""
    checks = (("pytest.toml", None), (".pytest.toml", None), ("pytest.ini", None), (".pytest.ini", None),
              ("pyproject.toml", "[tool.pytest"), ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))
    for name, marker in checks:
        f = repo / name
        if f.is_file() and not f.is_symlink():
            if marker is None:
                return name
            try:
                if marker in f.read_text(encoding="utf-8", errors="replace"):
                    return name
            except OSError:
                continue
    return None


def seal(root: Path) -> None:
    """Root-owned, and not writable by anyone else: dirs 0755, files 0644 / 0755 (symlinks untouched)."""
    is_root = os.geteuid() == 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, None]:
            full = dirpath if name is None else os.path.join(dirpath, name)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                continue
            if is_root:
                os.lchown(full, 0, 0)
            mode = 0o755 if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111 else 0o644
            os.chmod(full, mode)


@lru_cache(maxsize=8)
def _probe_pytest(python: str, paths: tuple[str, ...]) -> str:
    """'' when ``python`` imports pytest from ``paths`` as an unprivileged uid, else why not."""
    import subprocess

    code = f"import sys; sys.path[:0] = {list(paths)!r}; import pytest, _pytest.junitxml"
    kw = dict(user=65534, group=65534, extra_groups=[]) if os.geteuid() == 0 else {}
    try:
        r = subprocess.run([python, "-I", "-S", "-B", "-c", code], capture_output=True, timeout=60, cwd="/",
                           env={"PATH": "/usr/bin:/bin"}, **kw)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{python}: {e}"
    return "" if r.returncode == 0 else r.stderr.decode(errors="replace")[-300:]


HARNESS_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py", "exceptiongroup",
                    "tomli")
_staged: dict[tuple[str, ...], str] = {}


_stage_lock = threading.Lock()


def stage_pytest(paths: Sequence[str]) -> tuple[str, ...]:
    """A root-owned, read-only copy of the harness packages (``HARNESS_PACKAGES``) found in ``paths``,
    in a fresh directory under the temp dir that any uid can traverse; made once per process.

    Why: the sandbox's uid must import pytest, and a venv under a private (0700) directory is
    unreachable to it; the copy also gives the run read access to pytest alone, not the whole venv.
    """
    key = tuple(os.fspath(p) for p in paths)
    with _stage_lock:
        hit = _staged.get(key)
        if hit is not None and os.path.isdir(hit):
            return (hit,)
        dest = Path(tempfile.mkdtemp(prefix="seqrl-pytest-"))
        import atexit

        owner = os.getpid()  # a forked child exiting must not remove the parent's copy
        atexit.register(lambda: os.getpid() == owner and shutil.rmtree(dest, ignore_errors=True))
        site = dest / "site"
        site.mkdir()
        for name in HARNESS_PACKAGES:
            for d in key:
                pkg, mod = Path(d) / name, Path(d) / f"{name}.py"
                if pkg.is_dir() and (pkg / "__init__.py").is_file():
                    shutil.copytree(pkg, site / name, symlinks=False, ignore=SKIP_COPY)
                    break
                if mod.is_file():
                    shutil.copyfile(mod, site / mod.name)
                    break
        seal(dest)
        _staged[key] = str(site)
        return (str(site),)


def default_pytest_path() -> tuple[str, ...]:
    """Directories holding pytest and its dependencies for this interpreter (the trainer's venv)."""
    import importlib.util

    dirs = []
    for mod in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments"):
        spec = importlib.util.find_spec(mod)
        if spec is None or not spec.origin:
            continue
        d = str(Path(spec.origin).resolve().parent.parent)
        if d not in dirs:
            dirs.append(d)
    return tuple(dirs)
