"""Pre-started, confined worker processes that score model output in bounded time.

A reward or verifier that parses or evaluates model output (math-verify, sympy, reasoning-gym's
``score_answer``) can hang, allocate without bound, or — where a scorer calls ``eval`` — execute the
output. `WorkerPool` runs such calls in worker processes instead of the trainer:

- **started once, reused**: workers fork from multiprocessing's forkserver (a clean process that
  imported the ``preload`` modules once; never a fork of the trainer and its torch threads), and
  serve call after call;
- **bounded**: each call has a wall-clock limit; a worker that misses it is killed (its whole
  process group) and replaced, and the call reports ``timeout``; RLIMIT_AS caps each worker's memory;
- **confined** before the first call, with the sandbox's layers where the machine has them: a new
  process group, no core dumps, no file writes (RLIMIT_FSIZE 0), its own network namespace and a
  mount namespace with every mount read-only (root), an unprivileged uid with RLIMIT_NPROC at its thread count so it cannot start processes (root,
  when the interpreter is readable by that uid), ``no_new_privs``, seccomp and Landlock (read-only
  system, interpreter and library paths; nothing writable; no TCP);
- **untrusting replies**: requests go to the worker pickled (trusted → worker), replies come back as
  size-capped JSON checked field by field — a worker that ran model code cannot inject objects.

Functions and arguments must pickle (module-level functions, dataclass instances); a function is
sent once per worker and cached there.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import math
import multiprocessing as mp
import os
import pickle
import queue
import secrets
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from seqrl.types import RewardResult

IN_WORKER = False
"""True inside a worker process (code that would dispatch to a pool calls directly instead)."""

FIRST_CALL_ALLOWANCE_S = 2.0
"""Added to the limit of the first item of a new worker that is not warm (`WorkerPool.warm`): its first
call loads what the warm-up would have. A timeout is the item's own verdict, never the price of a fresh
worker's start."""
WARM_FIRST_CALL_ALLOWANCE_S = 0.5
"""The same for a warm worker: its first call still touches pages its parent never used, slow on a loaded
machine; small, since each timeout's replacement gets it (a batch of bombs costs its limit + this each)."""

MAX_REPLY_BYTES = 4 << 20
MAX_REASON_CHARS = 2000
DEFAULT_PRELOAD = ("seqrl.sandbox.workers", "seqrl.rewards.math", "seqrl.rewards.format", "seqrl.rewards.code",
                   "seqrl.data.rgym", "seqrl.sandbox._warmup",
                   *(["reasoning_gym"] if importlib.util.find_spec("reasoning_gym") else []))


@dataclass
class Outcome:
    """One call's result: ``status`` is ok, timeout, error or budget; ``value`` the reply on ok,
    ``reason`` says why otherwise."""

    status: str
    value: object = None
    reason: str = ""


# ----------------------------------------------------------------------------- worker side
def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _vm_bytes() -> int:
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _confine_self(spec: dict) -> list[str]:
    """Apply the layers ``spec`` asks for to this process; returns their names. Raises OSError when a
    requested layer fails (the worker then never serves)."""
    import resource

    from seqrl.sandbox import _driver

    layers = []
    os.setsid()  # its own process group: a timeout kills everything it started
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    mem = _vm_bytes() + (int(spec["memory_mb"]) << 20)
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    layers.append("rlimits")
    if spec.get("netns"):
        sys_ = _driver._Sys()
        sys_(272, 0x40000000 | 0x00020000 | 0x08000000)  # unshare(CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC)
        layers.append("netns")
        _read_only_mounts(sys_)
        layers.append("mountns_ro")
    if spec.get("uid") is not None:
        _driver._drop_privileges(int(spec["uid"]), _thread_count())
        layers.append("setuid")
    elif os.geteuid() == 0 and _drop_capabilities():
        layers.append("no_capabilities")
    else:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        except Exception:  # noqa: BLE001 — seccomp/Landlock then fail below if they needed it
            pass
    layers += _driver.confine(spec.get("confine"))
    return layers


_SYSCALLS = {"x86_64": {"prctl": 157, "capset": 126}, "aarch64": {"prctl": 167, "capset": 91}}


def _drop_capabilities() -> bool:
    """A root worker that keeps uid 0 (an unprivileged uid could not read its interpreter): empty the
    capability bounding set and every capability set, and set ``no_new_privs`` — it can no longer
    raise its limits, mount, configure the network, trace or override file permissions. False
    where this architecture's syscall numbers are unknown."""
    nr = _SYSCALLS.get(os.uname().machine)
    if nr is None:
        return False
    from seqrl.sandbox import _driver

    sys_ = _driver._Sys()
    for cap in range(64):
        try:
            sys_(nr["prctl"], 24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
        except OSError:
            break  # past the last capability this kernel knows
    header = sys_.buf((0x20080522).to_bytes(4, "little") + (0).to_bytes(4, "little"))  # version 3, this process
    sys_(nr["capset"], header, sys_.buf(bytes(24)))
    sys_(nr["prctl"], 38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    return True


_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18


def _read_only_mounts(sys_) -> None:
    """In this process's new mount namespace: every mount private, then remounted read-only (so
    even a root worker writes no file where Landlock is missing). Raises OSError when "/" stays
    writable."""
    root = sys_.buf(b"/\0")
    sys_(165, None, root, None, _MS_REC | _MS_PRIVATE, None)  # mount(NULL, "/", NULL, MS_REC|MS_PRIVATE)
    with open("/proc/self/mountinfo", "rb") as f:
        points = [line.split()[4] for line in f.read().splitlines() if len(line.split()) > 4]
    for mp in sorted(set(points), key=len):
        path = mp.replace(b"\\040", b" ")
        try:
            sys_(165, None, sys_.buf(path + b"\0"), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
        except OSError:
            if path == b"/":
                raise


def _plain_reply(value) -> dict:
    if isinstance(value, RewardResult):
        parts = {str(k): float(v) for k, v in (value.parts or {}).items()}
        return {"score": float(value.score), "reason": str(value.reason)[:MAX_REASON_CHARS], "parts": parts}
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return {"value": value}  # json.dumps refuses what JSON cannot hold: reported as an error
    return {"value": repr(value)[:MAX_REASON_CHARS]}


def _serve(conn, spec: dict) -> None:
    """The worker's main loop: confine, then answer requests until the pipe closes."""
    global IN_WORKER
    IN_WORKER = True
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # scorers print (math-verify's timeout messages): not into the trainer's log
        os.dup2(devnull, fd)
    import importlib

    for mod in spec.get("preload", ()):
        try:
            importlib.import_module(mod)
        except Exception:  # noqa: BLE001 — the call that needs it reports the error
            pass
    try:
        layers = _confine_self(spec)
    except OSError as e:
        conn.send_bytes(json.dumps({"ready": False, "error": f"sandbox layer failed: {e}"}).encode())
        return
    warm = sys.modules.get("seqrl.sandbox._warmup")  # preloaded: whether math-verify's parser is loaded
    conn.send_bytes(json.dumps({"ready": True, "layers": layers,
                                "warm": None if warm is None else bool(warm.WARM),
                                "warm_error": "" if warm is None else str(warm.ERROR)}).encode())
    fns: dict[str, object] = {}
    while True:
        try:
            req = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if "fn" in req:
            try:
                fns[req["key"]] = pickle.loads(req["fn"])
            except BaseException as e:  # noqa: BLE001
                fns[req["key"]] = _Raise(f"{type(e).__name__}: {e}")
        fn = fns.get(req["key"]) or _Raise("function not sent")
        for args in req["batch"]:  # one reply per item, sent as soon as it is ready
            try:
                reply = _plain_reply(fn(*args))
            except BaseException as e:  # noqa: BLE001 — model output made the function fail: report it
                reply = {"error": f"{type(e).__name__}: {e}"[:MAX_REASON_CHARS]}
            try:
                data = json.dumps(reply).encode()
            except (TypeError, ValueError) as e:
                data = json.dumps({"error": f"unserialisable reply: {e}"}).encode()
            conn.send_bytes(data)


class _Raise:
    def __init__(self, why: str):
        self.why = why

    def __call__(self, *args):
        raise RuntimeError(self.why)


# ----------------------------------------------------------------------------- trainer side
def _interpreter_readable_by_others() -> bool:
    """Whether an unprivileged uid could import from this interpreter's library (every directory
    on the way searchable by others)."""
    path = os.path.dirname(os.path.realpath(os.__file__))
    while path and path != "/":
        try:
            if not os.stat(path).st_mode & 0o001:
                return False
        except OSError:
            return False
        path = os.path.dirname(path)
    return True


def _layer_spec(memory_mb: int, confine: bool) -> dict:
    spec: dict = {"memory_mb": memory_mb}
    if not confine or not sys.platform.startswith("linux"):
        return spec
    from seqrl.sandbox import runner

    root = os.geteuid() == 0
    spec["netns"] = root
    if root and _interpreter_readable_by_others():
        spec["uid"] = 300_000 + secrets.randbelow(60_000)
    conf = runner._confine_support(sys.executable)
    confine_spec: dict = {}
    if conf["seccomp"]:
        confine_spec["seccomp"] = True
    if conf["landlock"]:
        here = os.path.realpath(os.getcwd())
        lib = [os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)]
        lib = [p for p in lib if p != here and p != "/"]
        confine_spec["landlock"] = {"read": [*runner.LANDLOCK_READ, *conf["paths"], *lib], "write": [],
                                    "devices": list(runner.LANDLOCK_DEVICES)}
    spec["confine"] = confine_spec or None
    return spec


_ENV_LOCK = threading.Lock()


def _start_forkserver() -> None:
    """Start multiprocessing's forkserver with this process's ``sys.path`` (Python 3.11's forkserver
    ignores the path it is handed, so it travels in PYTHONPATH for the server's start only)."""
    from multiprocessing import forkserver

    with _ENV_LOCK:
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            forkserver.ensure_running()
        finally:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old


def _start_without_main(proc) -> None:
    """``proc.start()`` with the parent's ``__main__`` hidden: a forkserver child otherwise re-runs
    the user's script (multiprocessing's main-module fix-up), which without an
    ``if __name__ == "__main__":`` guard builds another trainer inside the worker. Workers need
    nothing from ``__main__``: their functions live in importable modules (`build_reward` checks)."""
    import types

    with _ENV_LOCK:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            proc.start()
        finally:
            if main is not None:
                sys.modules["__main__"] = main


class _Worker:
    def __init__(self, ctx, spec: dict, start_timeout_s: float):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_serve, args=(child, spec), daemon=True, name="seqrl-reward-worker")
        _start_without_main(self.proc)
        child.close()
        self.known: set[str] = set()
        self.layers: list[str] = []
        self.served = False  # whether it has answered an item (its first gets FIRST_CALL_ALLOWANCE_S more)
        if not self.conn.poll(start_timeout_s):
            self.kill()
            raise RuntimeError(f"reward worker did not start within {start_timeout_s} s")
        hello = json.loads(self.conn.recv_bytes(MAX_REPLY_BYTES))
        if not hello.get("ready"):
            self.kill()
            raise RuntimeError(f"reward worker failed to start: {hello.get('error')}")
        self.layers = [str(x) for x in hello.get("layers", [])]
        self.warm = hello.get("warm")
        self.warm_error = str(hello.get("warm_error", ""))[:300]

    def kill(self) -> None:
        pid = self.proc.pid
        if pid is not None:
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except OSError:
                    pass
        self.proc.join(timeout=5)
        self.conn.close()


class WorkerPool:
    """``workers`` confined worker processes; `map` scores items in parallel, each within ``timeout_s``.

    memory_mb: RLIMIT_AS headroom of each worker above its size after start-up.
    preload:   modules imported once by the forkserver (and by each worker before it is confined).
    confine:   apply the sandbox's layers (False only for tests of the pool itself).
    """

    def __init__(self, workers: int = 2, memory_mb: int = 1024, preload: tuple[str, ...] = DEFAULT_PRELOAD,
                 confine: bool = True, start_timeout_s: float = 60.0):
        if workers < 1:
            raise ValueError(f"WorkerPool: workers must be >= 1 (got {workers})")
        if memory_mb < 64:
            raise ValueError(f"WorkerPool: memory_mb must be >= 64 (got {memory_mb})")
        self.n, self.start_timeout_s = workers, start_timeout_s
        self.owner = os.getpid()  # only this process closes it at exit (not a child forked from it)
        self.preload = tuple(preload)
        self.spec = {**_layer_spec(memory_mb, confine), "preload": list(self.preload)}
        self.ctx = mp.get_context("forkserver")
        # never '__main__': the user's script must not run in the forkserver or the workers
        self.ctx.set_forkserver_preload(list(self.preload))
        _start_forkserver()
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self.replaced = 0
        self._fn_bytes: dict[int, tuple[str, bytes, object]] = {}
        for _ in range(workers):
            self._idle.put(self._start())
        first = self._idle.queue[0]
        if first is not None and first.warm is False:  # scoring still works; first answers may time out
            print(f"seqrl: reward workers start cold (math-verify not preloaded): {first.warm_error}", file=sys.stderr)

    @property
    def layers(self) -> list[str]:
        """Layers the workers run under (as reported by one at start)."""
        w = self._acquire()
        try:
            return list(w.layers)
        finally:
            self._idle.put(w)

    @property
    def warm(self) -> bool | None:
        """Whether a worker (one, asked now) holds math-verify's parser loaded by the warm-up; None when
        the preload has no warm-up (`seqrl.sandbox._warmup`)."""
        w = self._acquire()
        try:
            return w.warm
        finally:
            self._idle.put(w)

    def _start(self) -> _Worker:
        return _Worker(self.ctx, self.spec, self.start_timeout_s)

    def _key(self, fn) -> tuple[str, bytes]:
        with self._lock:
            hit = self._fn_bytes.get(id(fn))
            if hit is None or hit[2] is not fn:
                data = pickle.dumps(fn)
                hit = (hashlib.sha1(data).hexdigest(), data, fn)
                self._fn_bytes[id(fn)] = hit
            return hit[0], hit[1]

    def _send(self, w: _Worker, key: str, data: bytes, batch: list[tuple]) -> None:
        req = {"key": key, "batch": batch}
        if key not in w.known:
            req["fn"] = data
        w.conn.send_bytes(pickle.dumps(req))
        w.known.add(key)

    @staticmethod
    def _receive(w: _Worker, timeout_s: float) -> tuple[Outcome, bool]:
        """The next reply of ``w`` within ``timeout_s``; returns the outcome and whether ``w`` is
        still usable."""
        try:
            if not w.conn.poll(timeout_s):
                return Outcome("timeout", reason=f"timeout after {timeout_s:g} s"), False
            raw = w.conn.recv_bytes(MAX_REPLY_BYTES)
        except (EOFError, OSError) as e:
            return Outcome("error", reason=f"error: worker died ({type(e).__name__}: {e})"[:300]), False
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            return Outcome("error", reason="error: malformed worker reply"), False
        if "error" in reply:
            return Outcome("error", reason=f"error: {str(reply['error'])[:MAX_REASON_CHARS]}"), True
        return Outcome("ok", reply), True

    def _run_chunk(self, key: str, data: bytes, chunk: list[tuple], timeout_s: float,
                   deadline: float | None) -> list[Outcome]:
        """Score ``chunk`` on one worker, item by item, each within ``timeout_s``; after a timeout the
        worker is replaced and the rest of the chunk goes to the new one."""
        out: list[Outcome] = []
        while len(out) < len(chunk):
            if deadline is not None and time.monotonic() >= deadline:
                out += [Outcome("budget", reason="batch budget exhausted")] * (len(chunk) - len(out))
                break
            w = self._acquire()
            usable = True
            try:
                self._send(w, key, data, chunk[len(out):])
                sent = len(chunk) - len(out)
                for _ in range(sent):
                    first = 0.0 if w.served else FIRST_CALL_ALLOWANCE_S if not w.warm else WARM_FIRST_CALL_ALLOWANCE_S
                    o, usable = self._receive(w, timeout_s + first)
                    w.served = True
                    out.append(o)
                    if not usable:
                        break
            except (OSError, ValueError) as e:  # the pipe broke while sending
                out.append(Outcome("error", reason=f"error: worker died ({type(e).__name__}: {e})"[:300]))
                usable = False
            except BaseException:
                self._replace(w)
                raise
            if usable:
                self._idle.put(w)
            else:
                self._replace(w)
        return out

    def call(self, fn, args: tuple, timeout_s: float) -> Outcome:
        """``fn(*args)`` in a worker within ``timeout_s`` seconds (a timed-out worker is replaced)."""
        return self.map(fn, [args], timeout_s)[0]

    def _acquire(self) -> _Worker:
        """An idle worker; a slot whose worker could not be restarted (None) tries again here."""
        w = self._idle.get()
        if w is None:
            try:
                w = self._start()
            except BaseException:
                self._idle.put(None)
                raise
        return w

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self.replaced += 1
        try:
            self._idle.put(self._start())
        except BaseException:  # the slot stays; the next call that takes it starts a worker again
            self._idle.put(None)

    def map(self, fn, arg_list: list[tuple], timeout_s: float, deadline: float | None = None,
            chunk: int | None = None) -> list[Outcome]:
        """``fn(*args)`` for every args, results in order: chunks of ``chunk`` items (default: enough
        for four per worker, at most 32) go to the workers in parallel; every item has its own
        ``timeout_s``. Items not started by ``deadline`` (``time.monotonic()``) get status ``budget``."""
        if self._closed:
            raise RuntimeError("WorkerPool is closed")
        if not arg_list:
            return []
        key, data = self._key(fn)
        size = chunk or max(1, min(32, -(-len(arg_list) // (4 * self.n))))
        chunks = [arg_list[i:i + size] for i in range(0, len(arg_list), size)]
        if self.n == 1 or len(chunks) == 1:
            parts = [self._run_chunk(key, data, c, timeout_s, deadline) for c in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(self.n, len(chunks))) as ex:
                parts = list(ex.map(lambda c: self._run_chunk(key, data, c, timeout_s, deadline), chunks))
        return [o for part in parts for o in part]

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                w = self._idle.get_nowait()
            except queue.Empty:
                return
            if w is not None:
                w.kill()


_POOLS: dict[tuple, WorkerPool] = {}
_POOLS_LOCK = threading.Lock()


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def shared_pool(workers: int | None = None, memory_mb: int = 1024,
                preload: tuple[str, ...] = DEFAULT_PRELOAD) -> WorkerPool:
    """The process-wide pool for these settings (started on first use, closed at exit)."""
    key = (workers or default_workers(), memory_mb, tuple(preload))
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool._closed:
            pool = _POOLS[key] = WorkerPool(key[0], memory_mb, key[2])
        return pool


def _disown_children_after_fork() -> None:
    """In a process forked with ``os.fork`` (a user's reward that forks): the trainer's multiprocessing
    children — its reward workers — are not this process's, yet multiprocessing's exit hook would
    SIGTERM every daemon child it lists (the same pids). Forget them, as multiprocessing does in the
    children it starts itself."""
    from multiprocessing import process

    process._children.clear()


os.register_at_fork(after_in_child=_disown_children_after_fork)


@atexit.register
def _close_pools() -> None:
    """At the trainer's exit, stop its workers. Not in a process forked from it (a user's reward that
    forks, whose child exits through atexit): the pids it would kill are the trainer's workers."""
    for pool in list(_POOLS.values()):
        if pool.owner == os.getpid():
            pool.close()


def reward_from_reply(reply: dict) -> RewardResult:
    """A `RewardResult` from a worker's reply, checked field by field (NaN stays NaN: the caller
    counts it as an error)."""
    if "score" in reply:
        score = reply["score"]
        if not isinstance(score, (int, float)) or isinstance(score, bool):
            return RewardResult(float("nan"), "error: malformed score from worker")
        parts = reply.get("parts") or {}
        if not isinstance(parts, dict):
            parts = {}
        clean = {str(k)[:100]: float(v) for k, v in list(parts.items())[:64]
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        return RewardResult(float(score), str(reply.get("reason", ""))[:MAX_REASON_CHARS], clean)
    value = reply.get("value")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return RewardResult(float(value))
    return RewardResult(float("nan"), f"error: worker returned {str(value)[:100]!r}, not a reward")
