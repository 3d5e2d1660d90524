"""Code-agent trajectory reward: apply the agent's final diff to a repository snapshot in the
sandbox, run the snapshot's own tests there, score tests + patch quality − an action penalty.

Inputs (`CodeAgentReward.score`): a repository snapshot (a directory, never modified), the issue
text, the agent's actions (a list, or their count), the final unified diff, and the test command
(``pytest ARGS`` or ``python -m pytest ARGS``). Steps, each in a fresh throwaway directory:

1. **Screen the diff** in this process (never raises): text, at most ``max_patch_bytes``, not
   empty, no NUL bytes, no ``GIT binary patch``, has a file header. Anything else scores 0 with
   the reason.
2. **Run the pristine tests** once per (snapshot contents, test command), in the sandbox: the
   collected node ids are the tests that count (a test the patched run does not report has
   failed), each with the identity of the function it runs; failing assertions' raise sites and
   the files the tests opened say which other files are test sources (`pristine_protections`). A
   run that does not finish falls back to ``pytest --collect-only``.
3. **Apply** the diff with ``git apply`` *inside the sandbox* (an unprivileged uid, no network) on
   a fresh copy (``.git`` and byte-code left out); it does not apply → 0 with git's message.
4. **Sanitise** (here, as root, with nothing running in the tree): a patch that creates a symlink
   or a compiled file (``*.pyc``, ``*.so``, ``__pycache__``) is rejected (0); every file is made
   root-owned and not writable by the sandbox uid.
5. **Restore the test harness**: every *protected* path — files under ``tests/``, ``test/``,
   ``testing/`` directories, ``test_*.py``, ``*_test.py``, any ``conftest.py``, the root
   configuration files pytest reads (``pytest.ini``, ``pyproject.toml``, ``tox.ini``,
   ``setup.cfg`` …), and the test sources the pristine run found elsewhere — that the patch added,
   changed or deleted is put back as it is in the snapshot (added ones are removed). Test edits are
   thereby worthless, not punished: an agent that writes a reproduction test loses nothing, and a
   patch that only edits tests scores the snapshot's own (failing) tests. ``test_edit_penalty`` can
   punish them as well. Edited doctest examples fail their doctests.
6. **Run the tests** in the sandbox on the patched copy: the trusted entry script
   (`seqrl/sandbox/_pytest_entry.py`) runs pytest with plugin autoloading off, the snapshot's
   config file, ``--rootdir``/``--confcutdir`` pinned to the copy, and the JUnit XML report on a
   pipe (fd 3). The report is parsed **here**, as untrusted data: size cap, no DOCTYPE/entities,
   exactly one suite, the guard's ``seqrl_integrity`` stamp with this run's nonce, pytest's exit
   status consistent with the outcomes, and counts taken over the pristine collection only.
   With ``verdict="outside"`` (default) every ``assert A == B`` / ``A != B`` of the functions the
   pristine tests run is first rewritten to hand the non-literal sides out as plain values; the
   literals stay here and the comparison is made here (the process under test never holds them,
   and an object whose ``__eq__`` always says True is compared by its plain value).

Score (weights are fields)::

    tests   = 1.0 if every pristine test passed else partial_credit · passed / total
    size    = 1 if changed_lines ≤ size_free_lines, linear to 0 at size_zero_lines
    parses  = fraction of the changed (non-test) Python files that parse (1 when none)
    total   = w_tests·tests + w_size·size + w_parses·parses
              − min(action_penalty · n_actions, max_action_penalty) + test_edit_penalty·[tests touched]

``changed_lines`` counts the diff's ``+``/``-`` lines outside protected paths. A patch that
references the harness (``pytest``, ``_pytest``, ``pluggy``, ``junit``, ``conftest``, ``seqrl``;
lines read after NFKC) in lines it adds outside protected paths gets no test reward (``forbid_harness_refs``; a heuristic, see
``docs/sandbox.md``); added lines that inspect frames, the import system, other fds or the test
files cost ``suspect_penalty``. A patch adding a module named after a stdlib or harness module
scores 0. Every part is in ``RewardResult.parts``; the reason names the first failure.
"""

from .checks import (  # noqa: F401
    CorruptObservations, Expect, MAX_PARSED, MAX_VALUE_TEXT, OBSERVE, Verdict, _parse_value, _untag,
    parse_observations)
from .rewrite import (  # noqa: F401
    MAX_TABLE_TEXT, dataclass_fields, externalize_asserts, function_defs, helper_bindings, literal_tables,
    resolve_test, snapshot_dataclasses, stdlib_uses)
from seqrl.sandbox.pytest_harness import HARNESS_PACKAGES, default_pytest_path, find_inifile, stage_pytest  # noqa: F401
from .screens import (  # noqa: F401
    HARNESS_FILES, TEST_DIRS, TEST_FILE_PATTERNS, is_protected, parse_test_cmd, scan_diff, shadowing_names)
from .protect import TEST_FRAMEWORKS, edited_doctests, pristine_protections  # noqa: F401
from .junit import JUnitReport, parse_junit  # noqa: F401
from .records import Outside, Pristine  # noqa: F401
from .reward import CodeAgentReward, CodeAgentRewardFunction, ENTRY, GIT, PARTS, score_code_agent  # noqa: F401
