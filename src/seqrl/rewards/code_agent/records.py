"""The typed records the stages pass to each other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Pristine:
    """What the pristine run (or, if it does not finish, the collection) found on a snapshot."""

    items: list[tuple[str, str]]
    """JUnit ``(classname, name)`` of every collected test, in order: the tests that count."""
    nodeids: list[str]
    errors: list[str]
    """JUnit prefixes of the test files that do not collect on the snapshot."""
    error_ids: list[str]
    identities: dict[str, list[str]]
    """node id → ``[file, co_qualname]`` of the function the item runs, as collected."""
    defs: dict[str, tuple[str, str]]
    """node id → ``(file, co_qualname)`` of the function it runs, unwrapped (where its checks are)."""
    modules: list[str]
    module_files: dict[str, str]
    """module name → its file (relative in the tree, else absolute) at the end of the run."""
    defs_files: list[str]
    doctests: dict[str, list[str]]
    doctest_ids: list[str]
    doctest_digests: dict[str, str]
    protect: dict[str, str]
    """path → why: files outside the protected names that belong to the tests."""
    ran: bool
    inifile: str | None
    dataclass_fields: dict[str, list[str]]
    conftests: list[str]
    guard: list[str] = field(default_factory=list)
    """What the guard found on the pristine run (the snapshot's own code: a package that installs an import
    hook at import, a test wrapped by a decorator from outside the tree): not held against a patch."""
    outcomes: dict[str, str] = field(default_factory=dict)
    """node id → ``passed`` / ``failed`` / ``skipped`` under pytest alone on the snapshot (empty where only
    collected)."""
    uncounted: dict[str, str] | None = None
    """node id → why, of the tests that count for no patch (`junit.uncounted_tests` of the unpatched
    snapshot's run); None until that run is made."""


@dataclass
class Outside:
    """The checks decided here for one run: the rewritten files' expectations and, once the run is read,
    its observations."""

    expected: dict
    """k → `Expect`."""
    per_node: dict[str, tuple[list[int], list[int]]]
    """node id → (its checks, those it must report)."""
    tests: dict[tuple[str, str], list[int]]
    must: set[int]
    open: dict
    """JUnit prefix of a file that does not collect on the snapshot → (file, its pristine tree)."""
    own_files: list[str]
    own_names: dict[str, list[str]]
    bindings: dict[str, dict[str, list]]
    stdlib_uses: list[list[str]]
    covered: float
    corrupt: str = ""
    """Why the observations were rejected (the run then earns no test reward)."""
    by_node: dict = field(default_factory=dict)
    by_junit: dict = field(default_factory=dict)
