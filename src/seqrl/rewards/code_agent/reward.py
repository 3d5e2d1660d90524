"""`CodeAgentReward`: the stages in order — screen, pristine run (cached), apply in the sandbox, sanitise,
restore the harness, rewrite the checks, run, tally."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import secrets
import shlex
import shutil
import stat
import tempfile
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from seqrl.sandbox import SandboxUnavailable, run_command
from seqrl.sandbox import runner as _runner
from seqrl.sandbox.pytest_harness import (
    SKIP_COPY, _probe_pytest, default_pytest_path, find_inifile, seal, stage_pytest)
from seqrl.types import Problem, RewardResult

from .checks import CorruptObservations, Expect, _UNEQUAL, parse_observations
from .rewrite import (
    _class_qualnames, _conventional_test, externalize_asserts, function_defs, helper_bindings, snapshot_dataclasses,
    stdlib_uses)
from .tree import _ensure_dir, _fresh_copy, _read_capped, _remove, _same_file, _walk_files
from .screens import (
    HARNESS_FILES, TEST_DIRS, TEST_FILE_PATTERNS, _COMPILED, _HARNESS_REF, _SUSPECT, _coding_cookie, _count_actions,
    _screen_diff, is_protected, parse_test_cmd, scan_diff, shadowing_names)
from .protect import _ident, edited_doctests, pristine_protections
from .records import Outside, Pristine
from .junit import _junit_key, tally, uncounted_tests


ENTRY = Path(_runner.__file__).with_name("_pytest_entry.py")
CODEC = Path(_runner.__file__).with_name("value_codec.py")


GIT = "/usr/bin/git"


PARTS = ("applies", "tests", "pass_frac", "passed", "total", "size", "changed_lines", "parses", "actions",
         "action_penalty", "test_files_touched", "harness_refs", "suspect_refs", "outside")


@dataclass
class CodeAgentReward:
    """Code-agent trajectory reward; an instance is also a reward function ``(problems, completions)``.

    See the module docstring for the procedure and the formula.
    """

    w_tests: float = 1.0
    """Weight of the test reward (1 when all pristine tests pass, else partial_credit · fraction)."""
    partial_credit: float = 0.5
    """Factor of the passed fraction when not every test passes."""
    w_size: float = 0.1
    """Weight of the size part."""
    w_parses: float = 0.1
    """Weight of the fraction of changed (non-test) Python files that parse."""
    action_penalty: float = 0.01
    """Subtracted per action of the trajectory."""
    max_action_penalty: float = 0.2
    """Cap of the total action penalty."""
    test_edit_penalty: float = 0.0
    """Weight (≤ 0 to punish) of the indicator that the patch touched protected (test) paths."""
    size_free_lines: int = 40
    """Changed lines (outside tests) at or below which size = 1."""
    size_zero_lines: int = 400
    """Changed lines at which size reaches 0."""
    suspect_penalty: float = 0.25
    """Subtracted when added non-test lines match ``_SUSPECT`` (frame inspection, ``sys.modules``/
    ``meta_path``, ``/dev/fd``, ``os._exit``, reading test files …); the files are counted in
    ``parts["suspect_refs"]`` and named in the reason."""
    forbid_harness_refs: bool = True
    """No test reward when added non-test lines mention pytest/_pytest/pluggy/junit/conftest."""
    timeout_s: float = 60.0
    """Sandbox wall-clock limit of one pytest run (collection or tests)."""
    apply_timeout_s: float = 20.0
    """Sandbox wall-clock limit of ``git apply``."""
    memory_mb: int = 2048
    """RLIMIT_AS per process of the pytest run."""
    max_procs: int = 32
    """Processes the tests may start (pids cgroup / RLIMIT_NPROC)."""
    max_patch_bytes: int = 1_000_000
    """Diffs larger than this (UTF-8) score 0."""
    max_report_bytes: int = 8 << 20
    """A JUnit report larger than this earns no test reward."""
    max_tree_files: int = 20_000
    """A patched tree with more files is rejected."""
    max_source_bytes: int = 2_000_000
    """Changed Python files larger than this count as not parsing."""
    git_apply_args: tuple[str, ...] = ("--recount", "--whitespace=nowarn")
    """Extra ``git apply`` options (``--recount``: ignore hunk-header line counts, which models get wrong)."""
    test_dirs: tuple[str, ...] = TEST_DIRS
    """Directory names whose contents are protected (restored from the snapshot)."""
    test_file_patterns: tuple[str, ...] = TEST_FILE_PATTERNS
    """File-name patterns that are protected anywhere."""
    harness_files: tuple[str, ...] = HARNESS_FILES
    """Root-level files that are protected (pytest configuration)."""
    python: str | None = None
    """Interpreter for pytest in the sandbox (default: the sandbox's stdlib interpreter)."""
    python_path: tuple[str, ...] | None = None
    """Directories with pytest and its dependencies (default: this venv's); their harness packages are
    copied to a directory the sandbox uid can read (`stage_pytest`), so they may be private."""
    verdict: str = "outside"
    """``outside``: every ``assert EXPR == LITERAL`` of the pristine test functions is rewritten to hand
    the observed value out, and compared here with the literal, which never enters the sandbox (a test
    passes only when pytest says so *and* its observations match); ``inside``: pytest's report alone."""
    max_workers: int = 2
    """Trajectories scored at once by the batch interface."""
    allow_unconfined: bool = False
    """Run with rlimits only when the sandbox namespaces are unavailable (weak: see docs/sandbox.md)."""

    def __post_init__(self) -> None:
        if self.size_zero_lines <= self.size_free_lines:
            raise ValueError(f"code-agent reward: size_zero_lines must be > size_free_lines "
                             f"(got {self.size_zero_lines} <= {self.size_free_lines})")
        for name in ("timeout_s", "apply_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"code-agent reward: {name} must be > 0 (got {getattr(self, name)})")
        if self.max_workers < 1:
            raise ValueError(f"code-agent reward: max_workers must be >= 1 (got {self.max_workers})")
        if self.verdict not in ("outside", "inside"):
            raise ValueError(f"code-agent reward: verdict must be 'outside' or 'inside' (got {self.verdict!r})")
        if not 0 <= self.partial_credit <= 1:
            raise ValueError(f"code-agent reward: partial_credit must be in [0, 1] (got {self.partial_credit})")
        self.__name__ = "code_agent"
        self._lock = threading.Lock()
        self._collected: dict[tuple, Pristine | tuple] = {}  # pristine runs; hidden-test overlays

    # ------------------------------------------------------------------ reward-function interface
    def __call__(self, problems: list[Problem], completions: list) -> list[RewardResult]:
        """``problem.metadata``: ``repo`` (snapshot dir), ``test_cmd``; ``problem.prompt`` is the issue.
        A completion is the final diff (str) or a mapping ``{"diff": str, "actions": list | int}``."""
        if len(problems) != len(completions):
            raise ValueError(f"code-agent reward: {len(problems)} problems for {len(completions)} completions")
        jobs = []
        for p, c in zip(problems, completions):
            md = p.metadata or {}
            for key in ("repo", "test_cmd"):
                if not md.get(key):
                    raise ValueError(f"code-agent reward: problem {p.uid!r} has no {key!r} in its metadata")
            if isinstance(c, Mapping):
                diff, actions = c.get("diff"), c.get("actions", ())
            else:
                diff, actions = c, ()
            jobs.append((md["repo"], p.prompt, actions, diff, md["test_cmd"], md.get("hidden_tests")))
        if len(jobs) == 1 or self.max_workers == 1:
            return [self.score(*j) for j in jobs]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(jobs))) as ex:
            return list(ex.map(lambda j: self.score(*j), jobs))

    # ------------------------------------------------------------------ one trajectory
    def score(self, repo, issue: str, actions, diff, test_cmd: str, hidden_tests=None) -> RewardResult:
        """Score one trajectory. Raises only on a bad *task* (snapshot, test command, environment).

        ``hidden_tests``: a folder of files (paths relative to the repository root) the policy never saw —
        fail-to-pass and pass-to-pass tests, as SWE-bench judges — laid over the repository after the
        patch is applied (replacing whatever the patch put at those paths) and part of the pristine run."""
        pytest_args = parse_test_cmd(test_cmd)
        snapshot = Path(repo)
        if not snapshot.is_dir():
            raise ValueError(f"code-agent reward: repo {str(repo)!r} is not a directory")
        visible, hidden = snapshot, ()
        if hidden_tests is not None:
            snapshot, hidden = self._with_hidden(snapshot, Path(hidden_tests))
        python, paths = self._interpreter()
        n_actions = _count_actions(actions)
        parts = dict.fromkeys(PARTS, 0.0)
        parts["actions"] = float(n_actions)
        text, why = _screen_diff(diff, self.max_patch_bytes)
        if why:
            return RewardResult(0.0, why, parts)
        collected = self._pristine_tests(snapshot, pytest_args, python, paths)
        try:
            return self._score_patch(snapshot, text, pytest_args, python, paths, collected, parts, visible, hidden)
        except SandboxUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 — model output must never crash the trainer
            return RewardResult(0.0, f"could not score the patch: {type(e).__name__}: {str(e)[:200]}", parts)

    def _with_hidden(self, repo: Path, hidden: Path) -> tuple[Path, tuple[str, ...]]:
        """The repository with the hidden tests laid over it (a root-owned copy, made once per contents
        and removed at exit) and the hidden files' relative paths."""
        if not hidden.is_dir():
            raise ValueError(f"code-agent reward: hidden_tests {str(hidden)!r} is not a directory")
        files = _walk_files(hidden)
        bad = [r for r, st in files.items() if not stat.S_ISREG(st.st_mode)]
        if bad or not files:
            raise ValueError(f"code-agent reward: hidden_tests {str(hidden)!r} must hold regular files only "
                             f"(and at least one): {bad[:3]}")
        h = hashlib.sha256()
        for root in (repo, hidden):
            for rel, st in sorted(_walk_files(root).items()):
                h.update(f"{root}\0{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
        key = ("hidden", h.hexdigest())
        with self._lock:
            hit = self._collected.get(key)
            if hit is None or not hit[0].is_dir():
                import atexit

                base = Path(tempfile.mkdtemp(prefix="seqrl-hidden-"))
                owner = os.getpid()
                atexit.register(lambda: os.getpid() == owner and shutil.rmtree(base, ignore_errors=True))
                combined = base / "repo"
                shutil.copytree(repo, combined, symlinks=True, ignore=SKIP_COPY)
                for rel in files:
                    _ensure_dir(combined, rel.rsplit("/", 1)[0] if "/" in rel else "")
                    _remove(combined / rel)
                    shutil.copyfile(hidden / rel, combined / rel)
                seal(base)
                hit = self._collected[key] = (combined, tuple(sorted(files)))
        return hit

    def _interpreter(self) -> tuple[str, tuple[str, ...]]:
        if not os.access(GIT, os.X_OK):  # else every patch would score 0 as "does not apply"
            raise SandboxUnavailable(f"code-agent reward: {GIT} is missing (git applies the patches)")
        python = self.python or _runner._sandbox_python()
        paths = stage_pytest(tuple(self.python_path) if self.python_path is not None else default_pytest_path())
        why = _probe_pytest(python, paths)
        if why:
            raise SandboxUnavailable(f"code-agent reward: pytest is not importable by an unprivileged uid with "
                                     f"{python} and the staged python_path={list(paths)} (pass python= an "
                                     f"interpreter any uid can run, python_path= dirs holding pytest): {why}")
        return python, paths

    def _protected(self, rel: str) -> bool:
        return is_protected(rel, self.test_dirs, self.test_file_patterns, self.harness_files)

    def _sandbox_kw(self) -> dict:
        return dict(allow_unconfined=self.allow_unconfined)

    # ------------------------------------------------------------------ pristine collection (cached)
    def _pristine_tests(self, snapshot: Path, pytest_args: list[str], python: str, paths) -> Pristine:
        """The pristine snapshot's tests (cached per contents and command): run once in ``pristine``
        mode (collection, function identities, where failing assertions were raised, files read); if
        that run does not finish, collected only."""
        files = _walk_files(snapshot)
        h = hashlib.sha256()
        for rel in sorted(files):
            st = files[rel]
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
        key = (str(snapshot.resolve()), tuple(pytest_args), python, paths, h.hexdigest())
        with self._lock:
            hit = self._collected.get(key)
        if hit is not None:
            return hit
        data = None
        for mode in ("pristine", "collect"):
            base, work = _fresh_copy(snapshot)
            try:
                run = self._pytest(base, work, mode, pytest_args, python, paths, snapshot)
            finally:
                shutil.rmtree(base, ignore_errors=True)
            tail = (run.stdout[-600:] + run.stderr[-300:]).strip()
            try:
                data = json.loads(run.report) if run.status == "ok" else None
            except ValueError:
                data = None
            if data is not None and (mode == "collect" or run.returncode in (0, 1, 2)):
                break  # a pristine run that ends otherwise (timeout, internal error): collect only
        if run.status != "ok":
            raise ValueError(f"code-agent reward: collecting the tests of {snapshot} failed ({run.status}: "
                             f"{run.reason}): {tail}")
        try:
            rows = [(str(r[0]), str(r[1]), str(r[2]), str(r[3]), _ident(r[4]), _ident(r[5]),
                     r[6] if len(r) > 6 and isinstance(r[6], str) else None) for r in data["items"]]
            errors = [(str(i), str(pfx)) for i, pfx in data["errors"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"code-agent reward: collecting the tests of {snapshot} gave no usable list "
                             f"(pytest exit {run.returncode}): {tail}") from e
        if run.returncode not in (0, 1, 2):
            raise ValueError(f"code-agent reward: `pytest {shlex.join(pytest_args)}` fails on the snapshot "
                             f"{snapshot} (exit {run.returncode}): {tail}")
        if not rows and not errors:
            raise ValueError(f"code-agent reward: `pytest {shlex.join(pytest_args)}` collects no tests in "
                             f"{snapshot}")
        protect, doctests = pristine_protections(snapshot, rows, errors, data, self._protected)
        result = Pristine(
            items=[(c, n) for _, c, n, *_ in rows], nodeids=[r[0] for r in rows],
            errors=[pfx for _, pfx in errors], error_ids=[i for i, _ in errors],
            identities={r[0]: list(r[4]) for r in rows if r[4]}, defs={r[0]: r[5] for r in rows if r[5]},
            modules=sorted(str(m) for m in data.get("modules", []) or []),
            module_files={str(k): str(v) for k, v in (data.get("module_files") or {}).items()
                          if isinstance(k, str) and isinstance(v, str)},
            defs_files=sorted({r[5][0] for r in rows if r[5]} | {r[0].split("::", 1)[0] for r in rows}),
            doctests=doctests, doctest_ids=[r[0] for r in rows if r[3] == "DoctestItem"],
            doctest_digests={r[0]: r[6] for r in rows if r[6]}, protect=protect, ran=bool(data.get("ran")),
            inifile=find_inifile(snapshot), dataclass_fields=snapshot_dataclasses(snapshot, files),
            conftests=sorted(r for r in files if r.rsplit("/", 1)[-1] == "conftest.py"),
            guard=[str(p) for p in data.get("guard") or [] if isinstance(p, str)],
            outcomes={str(k): str(v) for k, v in (data.get("outcomes") or {}).items()} if data.get("ran") else {})
        with self._lock:
            self._collected[key] = result
        return result

    def _pytest(self, base: Path, work: Path, mode: str, pytest_args, python, paths, snapshot: Path,
                nonce: str = "", conftests=(), observe: list | None = None, identities: dict | None = None,
                doctests: dict | None = None, own_files: list | None = None, own_names: dict | None = None,
                watch: dict | None = None, dataclasses_: dict | None = None, baseline=()):
        entry = base / "entry.py"
        if not entry.exists():
            for src, dst in ((ENTRY, entry), (CODEC, base / "value_codec.py")):  # the entry loads the codec beside it
                shutil.copyfile(src, dst)
                os.chmod(dst, 0o644)
        ini = find_inifile(snapshot)
        if ini is None:
            ini_path = base / "empty-pytest.ini"
            ini_path.write_text("[pytest]\n")
            os.chmod(ini_path, 0o644)
        else:
            ini_path = work / ini
        cfg = {"mode": mode, "paths": list(paths), "nonce": nonce, "conftests": list(conftests)}
        if identities:
            cfg["identities"] = identities
        if doctests:
            cfg["doctests"] = doctests
        if own_files:
            cfg["own_files"], cfg["own_names"] = own_files, own_names or {}
        if watch:
            cfg["watch"] = watch
        if baseline:
            cfg["baseline"] = list(baseline)
        if dataclasses_:
            cfg["dataclass_fields"] = dataclasses_
        writable = []
        if nonce or identities:  # a file the entry reads and unlinks before the project runs: never in argv
            secret = Path(tempfile.mkdtemp(prefix="cfg-", dir=base))
            if observe is not None:
                cfg["observe"] = str(secret / "observations")
                observe.append(secret / "observations")
            cfg = json.dumps(cfg)
            (secret / "cfg.json").write_text(cfg)
            os.chmod(secret / "cfg.json", 0o600)
            cfg, writable = f"@{secret / 'cfg.json'}", [secret]
        cfg = cfg if isinstance(cfg, str) else json.dumps(cfg)
        # -s -P -S rather than -I: -I implies -E, which would drop PYTHONHASHSEED (the environment is the
        # sandbox's scrubbed one plus `env`): a fixed seed keeps parametrize ids drawn from sets the same
        # in the pristine and the patched run
        argv = [python, "-s", "-P", "-S", "-B", str(entry), cfg, "-p", "no:cacheprovider",
                "--continue-on-collection-errors", f"--rootdir={work}", f"--confcutdir={work}", "-c", str(ini_path),
                "-o", "junit_family=xunit2", "-o", "junit_logging=no", *pytest_args]
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "120",
               "PYTHONHASHSEED": "0"}
        return run_command(argv, cwd=work, timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                           max_file_bytes=8 * self.max_report_bytes,  # the observation file of a long check loop
                           max_procs=self.max_procs, env=env, report=True, max_report_bytes=self.max_report_bytes,
                           max_output_bytes=32_000, read_paths=[base, *paths], writable=writable,
                           **self._sandbox_kw())

    @staticmethod
    def _watched_modules(collected: Pristine, protected) -> dict[str, str]:
        """Module name → file on the snapshot (relative in the tree, else absolute) of the modules whose
        resolution the run may not change: test-side files and everything outside the tree."""
        return {name: f for name, f in collected.module_files.items()
                if os.path.isabs(f) or protected(f) or f in collected.defs_files}

    # ------------------------------------------------------------------ outside verdicts
    def _externalize(self, work: Path, collected: Pristine, protected=None) -> Outside | None:
        """Rewrite the (restored, pristine) functions the collected items run — found by the pristine
        collection's identity of each, so an inherited or aliased test is checked where it is defined
        — and every test function of the files that did not collect on the snapshot; the checks per
        node id, and per open file the pristine tree to match its tests to their definitions."""
        wanted: dict[str, set[str]] = {}
        for rel, qual in collected.defs.values():
            wanted.setdefault(rel, set()).add(qual)
        open_files = {}
        for nodeid, prefix in zip(collected.error_ids, collected.errors):
            rel = nodeid.split("::", 1)[0]
            if rel.endswith(".py"):
                open_files[prefix] = rel
        expected: dict[int, Expect] = {}
        tests: dict[tuple[str, str], list[int]] = {}
        must: set[int] = set()
        trees: dict[str, ast.Module] = {}
        helpers = {m for m in collected.modules if protected is not None and protected(m)}
        for rel in sorted(set(wanted) | set(open_files.values()) | helpers):  # helpers: tests/helpers.py, conftest
            if not rel.endswith(".py") or not (work / rel).is_file() or (work / rel).is_symlink():
                continue
            try:
                text = (work / rel).read_text(encoding="utf-8")
                tree = ast.parse(text)
                only = set(wanted.get(rel, ()))
                if rel in open_files.values():
                    only |= {q for q in function_defs(tree) if _conventional_test(q)}
                src, exp, by_test, top = externalize_asserts(text, len(expected), only, helpers=True)
            except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
                continue
            trees[rel] = tree
            if not exp:
                continue
            (work / rel).write_text(src, encoding="utf-8")
            expected.update(exp)
            must |= top
            tests.update({(rel, q): ks for q, ks in by_test.items()})
        seal(work)
        per_node: dict[str, tuple[list[int], list[int]]] = {}
        for nodeid in collected.nodeids:
            ident = collected.defs.get(nodeid)
            ks = tests.get(tuple(ident), []) if ident else []
            per_node[nodeid] = (ks, [k for k in ks if k in must])
        covered = sum(1 for ks, m in per_node.values() if m)
        opened = {pfx: (rel, trees.get(rel)) for pfx, rel in open_files.items()}
        own = sorted(r for r in set(wanted) | set(open_files.values()) | helpers if r.endswith(".py"))
        own_names, own_trees = {}, {}
        for rel in own:  # the classes each test-side file's own source defines (what the run may record)
            try:
                tree = trees.get(rel) or ast.parse((work / rel).read_bytes())
            except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
                continue
            own_names[rel] = sorted(_class_qualnames(tree))
            own_trees[rel] = tree
        uses = sorted({tuple(u) for tree in own_trees.values() for u in stdlib_uses(tree)})
        return Outside(expected=expected, per_node=per_node, tests=tests, must=must, open=opened, own_files=own,
                       own_names=own_names, bindings=helper_bindings(own_trees), stdlib_uses=[list(u) for u in uses],
                       covered=covered / len(per_node) if per_node else 0.0)

    def _verdict_run(self, base: Path, work: Path, snapshot: Path, collected: Pristine, protected,
                     pytest_args, python, paths, void: Mapping[str, str]) -> tuple:
        """The tests on `work` under the guard, with the outside checks where ``verdict='outside'``:
        ``(run, nonce, outside, how many observed values were not plain data)``, the observations read
        into ``outside``."""
        nonce = secrets.token_hex(16)
        outside = self._externalize(work, collected, protected) if self.verdict == "outside" else None
        obs_file: list = []
        run = self._pytest(base, work, "run", pytest_args, python, paths, snapshot, nonce,
                           collected.conftests, obs_file if outside else None,
                           identities=collected.identities,
                           own_files=outside.own_files if outside else None,
                           own_names=outside.own_names if outside else None,
                           watch={"bindings": outside.bindings if outside else {},
                                  "stdlib_uses": outside.stdlib_uses if outside else [],
                                  "module_files": self._watched_modules(collected, protected)},
                           dataclasses_=collected.dataclass_fields, baseline=collected.guard,
                           doctests={n: d for n, d in collected.doctest_digests.items() if n not in void})
        opaque = 0
        if outside:
            cap = 8 * self.max_report_bytes
            data = _read_capped(obs_file[0], cap) if obs_file else None
            try:
                if data is None:
                    raise CorruptObservations(f"the observation file is missing, not a regular file or "
                                              f"larger than {cap} bytes (8 × max_report_bytes)")
                observed = parse_observations(data, outside.expected, nonce)
            except CorruptObservations as e:
                observed = {}
                outside.corrupt = f"observations rejected: {e}"
            outside.by_node, outside.by_junit = {}, {}
            for k, pairs in observed.items():
                for node, value in pairs:
                    outside.by_node.setdefault(node, []).append((k, value))
            for node, pairs in outside.by_node.items():
                if node:
                    outside.by_junit.setdefault(_junit_key(node), []).extend(pairs)
            opaque = sum(v is _UNEQUAL for pairs in observed.values() for _, v in pairs)
        return run, nonce, outside, opaque

    def _uncounted(self, snapshot: Path, collected: Pristine, pytest_args, python, paths) -> dict[str, str]:
        """`uncounted_tests` of the unpatched snapshot, run once per pristine collection (cached on it)."""
        with self._lock:
            if collected.uncounted is not None:
                return collected.uncounted
            if not collected.outcomes:  # collected only (the pristine run did not finish): every test counts
                collected.uncounted = {}
                return collected.uncounted
        extra = collected.protect
        base, work = _fresh_copy(snapshot)
        try:
            run, nonce, outside, _ = self._verdict_run(
                base, work, snapshot, collected, lambda rel: self._protected(rel) or rel in extra,
                pytest_args, python, paths, {})
            found, _why = uncounted_tests(run, nonce, collected, outside)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        with self._lock:
            if collected.uncounted is None:
                collected.uncounted = found
            return collected.uncounted

    # ------------------------------------------------------------------ the patch
    def _score_patch(self, snapshot: Path, diff: str, pytest_args, python, paths, collected: Pristine,
                     parts: dict, visible: Path | None = None, hidden: Sequence[str] = ()) -> RewardResult:
        extra = collected.protect

        def protected(rel: str) -> bool:
            return self._protected(rel) or rel in extra

        base, work = _fresh_copy(snapshot)
        try:
            for rel in hidden:  # the patch applies to what the policy saw
                _remove(work / rel)
                if visible is not None and (visible / rel).is_file() and not (visible / rel).is_symlink():
                    shutil.copyfile(visible / rel, work / rel)
            patch = base / "patch.diff"
            patch.write_bytes(diff.encode("utf-8", "surrogateescape"))
            os.chmod(patch, 0o644)
            # ---- 1. git apply, in the sandbox, as an unprivileged uid that owns the copy for the run
            env = {"GIT_CEILING_DIRECTORIES": str(base), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                   "GIT_TERMINAL_PROMPT": "0"}
            ap = run_command([GIT, "apply", *self.git_apply_args, str(patch)], cwd=work, writable=[work], env=env,
                             timeout_s=self.apply_timeout_s, memory_mb=1024, max_procs=8, max_output_bytes=16_000,
                             max_file_bytes=10_000_000, read_paths=[base], **self._sandbox_kw())
            if ap.status != "ok" or ap.returncode != 0:
                msg = (ap.stderr.strip() or ap.stdout.strip() or ap.reason)[-300:]
                return RewardResult(0.0, f"patch does not apply: {msg}" if ap.status == "ok"
                                    else f"patch does not apply: git apply {ap.status}: {ap.reason}", parts)
            parts["applies"] = 1.0
            for rel in hidden:  # then the hidden tests, over whatever the patch put there
                _remove(work / rel)
                _ensure_dir(work, rel.rsplit("/", 1)[0] if "/" in rel else "")
                shutil.copyfile(snapshot / rel, work / rel)
            # ---- 2. sanitise (nothing runs in the tree now)
            pristine = _walk_files(snapshot)
            patched = _walk_files(work, skip=False)  # everything the patch created counts
            if len(patched) > self.max_tree_files:
                return RewardResult(0.0, f"patch rejected: {len(patched)} files in the patched tree "
                                         f"(> {self.max_tree_files})", parts)
            for rel, st in sorted(patched.items()):
                if stat.S_ISLNK(st.st_mode):
                    same = rel in pristine and stat.S_ISLNK(pristine[rel].st_mode) and \
                        os.readlink(work / rel) == os.readlink(snapshot / rel)
                    if not same:
                        return RewardResult(0.0, f"patch rejected: it creates a symlink ({rel})", parts)
                elif not stat.S_ISREG(st.st_mode):
                    return RewardResult(0.0, f"patch rejected: {rel} is not a regular file", parts)
                elif _COMPILED.search(rel):
                    return RewardResult(0.0, f"patch rejected: it adds a compiled file ({rel})", parts)
            seal(work)
            changed = sorted(r for r in set(pristine) | set(patched)
                             if r not in pristine or r not in patched
                             or not (stat.S_ISLNK(patched[r].st_mode) or _same_file(snapshot / r, work / r)))
            if not changed:
                return RewardResult(0.0, "patch changes nothing", parts)
            shadow = shadowing_names(changed, pristine, patched, work, protected)
            if shadow:
                return RewardResult(0.0, f"patch rejected: it adds a module named after a standard-library or test "
                                         f"harness module ({', '.join(shadow[:3])})", parts)
            for rel in changed:
                cookie = _coding_cookie(work / rel) if rel.endswith(".py") and rel in patched else None
                if cookie and cookie != (_coding_cookie(snapshot / rel) if rel in pristine else None):
                    return RewardResult(0.0, f"patch rejected: {rel} declares a source encoding other than "
                                             f"UTF-8 ({cookie}); the screens read UTF-8", parts)
            touched = [r for r in changed if protected(r)]
            source = [r for r in changed if not protected(r)]
            parts["test_files_touched"] = float(len(touched))
            if not source:
                return RewardResult(0.0, "patch only changes test files (restored from the snapshot): "
                                         + ", ".join(touched[:5]), parts)
            # ---- 3. restore the test harness from the snapshot
            for rel in touched:
                _remove(work / rel)
                if rel in pristine:
                    _ensure_dir(work, rel.rsplit("/", 1)[0] if "/" in rel else "")
                    if stat.S_ISLNK(pristine[rel].st_mode):
                        os.symlink(os.readlink(snapshot / rel), work / rel)
                    else:
                        shutil.copy2(snapshot / rel, work / rel)
            seal(work)
            # ---- 4. patch quality (here: parsing executes nothing)
            scanned = scan_diff(diff)
            lines = sum(len(a) + len(r) for p, (a, r) in scanned.items() if not protected(p))
            parts["changed_lines"] = float(lines)
            over = max(0, lines - self.size_free_lines)
            parts["size"] = max(0.0, 1.0 - over / (self.size_zero_lines - self.size_free_lines))
            py = [r for r in source if r.endswith(".py") and r in patched]
            ok = 0
            bad_file = ""
            for rel in py:
                data = _read_capped(work / rel, self.max_source_bytes)
                try:
                    if data is None:
                        raise ValueError("too large or not a regular file")
                    ast.parse(data, rel)
                    ok += 1
                except Exception as e:  # noqa: BLE001 — SyntaxError, ValueError (NUL), RecursionError, MemoryError
                    bad_file = bad_file or f"{rel} does not parse: {type(e).__name__}: {getattr(e, 'msg', e)}"
            parts["parses"] = ok / len(py) if py else 1.0
            scanned = {p: ([unicodedata.normalize("NFKC", x) for x in a], r) for p, (a, r) in scanned.items()}
            refs = [p for p, (added, _) in scanned.items() if not protected(p)
                    and any(_HARNESS_REF.search(line) for line in added)]
            parts["harness_refs"] = float(len(refs))
            suspect = {p: m.group(0) for p, (added, _) in scanned.items() if not protected(p)
                       for m in [next(filter(None, map(_SUSPECT.search, added)), None)] if m}
            parts["suspect_refs"] = float(len(suspect))
            reasons = []
            if touched:
                reasons.append(f"test files restored from the snapshot: {', '.join(touched[:5])}")
            if bad_file:
                reasons.append(bad_file[:200])
            # ---- 5. the tests
            if refs and self.forbid_harness_refs:
                reasons.insert(0, f"no test reward: the patch references the test harness outside tests "
                                  f"({', '.join(refs[:3])})")
            else:
                void = edited_doctests(snapshot, work, collected)
                run, nonce, outside, opaque = self._verdict_run(base, work, snapshot, collected, protected,
                                                                pytest_args, python, paths, void)
                if outside:
                    parts["outside"] = outside.covered
                if opaque:
                    reasons.append(f"{opaque} compared value(s) were not plain data and count as unequal "
                                   f"(a suite comparing its own objects needs verdict='inside')")
                if void:
                    reasons.append(f"doctest examples edited in {', '.join(sorted(set(void.values()))[:3])}: "
                                   f"those doctests count as failed")
                uncounted = self._uncounted(snapshot, collected, pytest_args, python, paths)
                if uncounted:
                    first = sorted(uncounted)[0]
                    reasons.append(f"{len(uncounted)} test(s) not counted (skipped on the unpatched snapshot, or "
                                   f"passing there without the outside checks confirming it), e.g. {first}: "
                                   f"{uncounted[first]}")
                passed, total, why, failing = tally(run, nonce, collected, outside, void, uncounted)
                parts["passed"], parts["total"] = float(passed), float(total)
                parts["pass_frac"] = passed / total if total else 0.0
                if why:
                    reasons.insert(0, why)
                elif total and passed == total:
                    parts["tests"] = 1.0
                else:
                    parts["tests"] = self.partial_credit * parts["pass_frac"]
                    reasons.insert(0, f"{passed}/{total} tests passed; failing: {', '.join(failing[:3])}"
                                      + (" …" if len(failing) > 3 else ""))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        if lines > self.size_free_lines:
            reasons.append(f"{lines} changed lines (free up to {self.size_free_lines})")
        penalty = min(self.action_penalty * parts["actions"], self.max_action_penalty)
        parts["action_penalty"] = penalty
        if penalty:
            reasons.append(f"{int(parts['actions'])} actions (−{penalty:.3g})")
        if suspect and self.suspect_penalty:
            reasons.append(f"suspicious references to the harness (−{self.suspect_penalty:.3g}): "
                           + ", ".join(f"{p}: {w!r}" for p, w in list(suspect.items())[:3]))
        total_score = (self.w_tests * parts["tests"] + self.w_size * parts["size"] + self.w_parses * parts["parses"]
                       - penalty + self.test_edit_penalty * float(bool(touched))
                       - self.suspect_penalty * float(bool(suspect)))
        return RewardResult(round(total_score, 12), "; ".join(reasons), parts)


def score_code_agent(repo, diff, test_cmd: str, actions=(), issue: str = "",
                     reward: CodeAgentReward | None = None, hidden_tests=None) -> RewardResult:
    """Score one trajectory with `CodeAgentReward` (default weights unless ``reward`` is given)."""
    return (reward or CodeAgentReward()).score(repo, issue, actions, diff, test_cmd, hidden_tests)


CodeAgentRewardFunction = CodeAgentReward  # the seed's name
