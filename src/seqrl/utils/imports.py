"""Objects named by import path (``package.module:attribute``): users' rewards and tasks.

The working directory comes first on the import path, as ``python -m`` has it, so a ``my_rewards.py``
beside the config is found. Every failure is a ValueError naming the config field.
"""

from __future__ import annotations

import importlib
import os
import re
import sys

_PATH_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def is_import_path(name: object) -> bool:
    """Whether `name` has the form ``package.module:attribute``.

    >>> is_import_path("my_pkg.rewards:has_answer"), is_import_path("data/train.jsonl"), is_import_path("math")
    (True, False, False)
    """
    return isinstance(name, str) and bool(_PATH_RE.match(name))


def import_object(path: str, field: str):
    """The object at ``module:attribute`` (dotted attributes allowed); ValueError naming `field`."""
    if not is_import_path(path):
        raise ValueError(f"{field} {path!r} is not an import path of the form 'package.module:name'")
    module_name, _, attr = path.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise ValueError(f"{field} {path!r}: no module named {e.name!r} (searched the working directory "
                             f"{cwd} and the installed packages)") from None
        raise ValueError(f"{field} {path!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    except Exception as e:  # noqa: BLE001 — the user's module raised while importing
        raise ValueError(f"{field} {path!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    missing = object()
    for part in attr.split("."):
        obj = getattr(obj, part, missing)
        if obj is missing:
            raise ValueError(f"{field} {path!r}: module {module_name!r} has no attribute {attr!r}")
    return obj
