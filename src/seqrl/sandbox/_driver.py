"""In-sandbox driver: the trusted half of a sandboxed run (stdlib only, no seqrl imports).

Executed by path as ``python -I -S _driver.py RESULT_FD LIMITS CGROUP_PROCS`` inside the sandbox's
namespaces (a compiled copy, see ``runner._driver_file``). It first applies the rlimits, then:

1. reads the *boot* message (solution source, uid, process limit) from fd 0 — exact-length
   framing, nothing read ahead;
2. forks the **solution child**; the child closes fd 0 and the result fd, drops to an
   unprivileged uid, sets ``no_new_privs`` and ``RLIMIT_NPROC``, imports the solution and then
   answers call requests (``name(*args)``) with plain-data outputs over a private pipe pair;
3. only *after* the fork reads the *job* message (nonce, io-case arguments or assert-style test
   code), so none of it is in the child's copy of memory;
4. asks the child for each output, validates it by decoding it (JSON + tags → only plain
   Python types exist afterwards), and writes nonce-stamped JSON records to ``RESULT_FD``, which the
   child never holds. Io cases are compared with their expected values in the *parent* (the
   expected values never enter the sandbox); assert-style test code (its asserts rewritten by the
   parent, so this file never imports ``ast``) runs here, in the trusted
   process, against proxies whose calls are answered by the child.

The driver never executes solution code itself. The plain-data codec below is shared with the
parent (``seqrl.sandbox.runner`` imports it).

**Command mode** (``run_command``): when *boot* holds ``argv``, the child drops privileges the same
way and ``execve``s the command in ``cwd`` with the given environment (stdin ``/dev/null``; an
optional report pipe as fd 3); the driver reaps every process that reparents to it (it is PID 1)
until the command exits, then writes one nonce-stamped ``exec`` record (exit code or signal, or
why ``execve`` failed). The command's output is data the caller treats as untrusted.
"""

from __future__ import annotations

import builtins
import os
import sys
import time

# ----------------------------------------------------------------------------- JSON without `json`
# `import json` costs ≈ 17 ms of a sandbox launch here (it pulls in `re` and `enum`); its C
# accelerator `_json` — the scanner and encoder json.loads / json.dumps use — costs < 1 ms. The same
# C code decodes untrusted input either way; `json` is the fallback where `_json` is missing.
try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None


class _ScanContext:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


def _raise_unserialisable(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


if _json is not None:
    _scan_once = _json.make_scanner(_ScanContext())

    def json_loads(data):
        """``json.loads`` for one UTF-8 document (bytes or str); ValueError on anything malformed."""
        s = (data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data).strip(" \t\n\r")
        try:
            obj, end = _scan_once(s, 0)
        except StopIteration as e:
            raise ValueError(f"Expecting value: char {e.value}") from None
        if end != len(s):
            raise ValueError(f"Extra data: char {end}")
        return obj

    def json_dumps(obj) -> str:
        """``json.dumps(obj)`` (ASCII, NaN/Infinity allowed, circular references refused)."""
        enc = _json.make_encoder({}, _raise_unserialisable, _json.encode_basestring_ascii, None, ": ", ", ",
                                 False, False, True)
        return "".join(enc(obj, 0))
else:  # pragma: no cover
    import json

    json_loads, json_dumps = json.loads, json.dumps

# ----------------------------------------------------------------------------- plain-data codec
# JSON natives: None, bool, int, float, str, list. Everything else is a one-key tagged object:
# {"t": [...]} tuple, {"d": [[k, v], ...]} dict, {"s": [...]} set, {"f": [...]} frozenset,
# {"b": "hex"} bytes, {"c": [re, im]} complex. Exact types only: subclasses (an int subclass with
# an always-true __eq__, a str subclass, ...) are rejected, so no custom behaviour survives.

_MAX_DEPTH = 200


def encode_plain(x, _depth: int = 0):
    """Plain Python data → JSON-able tagged form; raises TypeError on anything else."""
    if _depth > _MAX_DEPTH:
        raise TypeError("output nested too deeply")
    t = type(x)
    if x is None or t is bool or t is int or t is str or t is float:
        return x
    d = _depth + 1
    if t is list:
        return [encode_plain(v, d) for v in x]
    if t is tuple:
        return {"t": [encode_plain(v, d) for v in x]}
    if t is dict:
        return {"d": [[encode_plain(k, d), encode_plain(v, d)] for k, v in x.items()]}
    if t is set:
        return {"s": [encode_plain(v, d) for v in x]}
    if t is frozenset:
        return {"f": [encode_plain(v, d) for v in x]}
    if t is bytes:
        return {"b": x.hex()}
    if t is complex:
        return {"c": [x.real, x.imag]}
    raise TypeError(f"not plain data: {t.__name__}")


def decode_plain(o, _depth: int = 0):
    """Inverse of :func:`encode_plain` on ``json.loads`` output; raises ValueError on malformed."""
    if _depth > _MAX_DEPTH:
        raise ValueError("nested too deeply")
    t = type(o)
    if o is None or t is bool or t is int or t is str or t is float:
        return o
    d = _depth + 1
    if t is list:
        return [decode_plain(v, d) for v in o]
    if t is dict and len(o) == 1:
        (tag, v), = o.items()
        if tag == "t" and type(v) is list:
            return tuple(decode_plain(e, d) for e in v)
        if tag == "d" and type(v) is list:
            out = {}
            for kv in v:
                if type(kv) is not list or len(kv) != 2:
                    raise ValueError("bad dict item")
                out[decode_plain(kv[0], d)] = decode_plain(kv[1], d)
            return out
        if tag == "s" and type(v) is list:
            return {decode_plain(e, d) for e in v}
        if tag == "f" and type(v) is list:
            return frozenset(decode_plain(e, d) for e in v)
        if tag == "b" and type(v) is str:
            return bytes.fromhex(v)
        if tag == "c" and type(v) is list and len(v) == 2:
            return complex(float(v[0]), float(v[1]))
    raise ValueError(f"malformed plain-data value of type {t.__name__}")


# ----------------------------------------------------------------------------- framing
def _read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            raise EOFError("short read")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_msg(fd: int):
    n = int.from_bytes(_read_exact(fd, 8), "big")
    return json_loads(_read_exact(fd, n))


def frame(obj) -> bytes:
    data = json_dumps(obj).encode()
    return len(data).to_bytes(8, "big") + data


class _LineReader:
    """Unbuffered-enough line reader over a raw fd (caps a line at ``limit`` bytes)."""

    def __init__(self, fd: int, limit: int = 64 << 20):
        self.fd, self.buf, self.limit = fd, b"", limit

    def readline(self) -> bytes:
        while b"\n" not in self.buf:
            if len(self.buf) > self.limit:
                raise ValueError("line too long")
            b = os.read(self.fd, 1 << 16)
            if not b:
                out, self.buf = self.buf, b""
                return out
            self.buf += b
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# ----------------------------------------------------------------------------- solution child
def _drop_privileges(uid: int, nproc: int | None) -> None:
    """No groups, gid = uid = ``uid`` (unprivileged), RLIMIT_NPROC, ``no_new_privs``."""
    import resource

    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    if not _no_new_privs():  # the parent sets it for the whole tree; ctypes (≈ 6 ms) only if it did not
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        except Exception:
            pass


def _no_new_privs() -> bool:
    try:
        with open("/proc/self/status", "rb") as f:
            return b"\nNoNewPrivs:\t1\n" in f.read()
    except OSError:
        return False


def _child_main(boot: dict, req_r: int, resp_w: int) -> None:
    """Runs in the forked child. Everything before ``exec(code, ...)`` is trusted set-up."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the job message still waits in the stdin pipe: never let the child read it
    os.close(devnull)
    if boot.get("uid") is not None:
        _drop_privileges(boot["uid"], boot.get("nproc"))
    reader = _LineReader(req_r)

    def send(obj) -> None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        _write_all(resp_w, (json_dumps(obj) + "\n").encode())

    def describe(e: BaseException) -> str:
        try:
            return f"{type(e).__name__}: {str(e)[:500]}"
        except BaseException:
            return "exception (unprintable)"

    source = boot["solution"]
    boot.clear()
    g = {"__name__": "solution", "__builtins__": builtins}
    try:
        code = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes
        send({"import": "error", "kind": "SyntaxError", "msg": describe(e)})
        return
    try:
        exec(code, g)
    except MemoryError as e:
        send({"import": "error", "kind": "MemoryError", "msg": describe(e)})
        return
    except BaseException as e:  # SystemExit included: exiting at import is a failure, not a pass
        send({"import": "error", "kind": type(e).__name__, "msg": describe(e)})
        return
    names = [k for k, v in list(g.items()) if type(k) is str and not k.startswith("__") and callable(v)]
    send({"import": "ok", "names": names})
    while True:
        line = reader.readline()
        if not line:
            return
        req = json_loads(line)
        fn = g.get(req["name"])
        if not callable(fn):
            send({"err": f"NameError: no callable named {req['name']!r} in the solution", "kind": "NameError"})
            continue
        try:
            args = decode_plain(req["args"])
            out = fn(*args)
        except MemoryError as e:
            send({"err": describe(e), "kind": "MemoryError"})
            continue
        except BaseException as e:
            send({"err": describe(e), "kind": type(e).__name__})
            continue
        try:
            enc = encode_plain(out)
        except BaseException as e:
            send({"err": f"output is not plain data ({describe(e)})", "kind": "TypeError"})
            continue
        send({"ok": enc})


# ----------------------------------------------------------------------------- trusted side
class CandidateDied(Exception):
    """The solution process is gone; every later call fails with this."""


class _Channel:
    def __init__(self, pid: int, req_w: int, resp_r: int):
        self.pid, self.req_w, self.reader = pid, req_w, _LineReader(resp_r)
        self.dead: str | None = None
        self.exit: dict | None = None

    def _reap(self) -> str:
        if self.exit is None:
            _, status = os.waitpid(self.pid, 0)
            if os.WIFSIGNALED(status):
                self.exit = {"signal": os.WTERMSIG(status)}
            else:
                self.exit = {"code": os.WEXITSTATUS(status)}
        if "signal" in self.exit:
            return f"solution process killed by signal {self.exit['signal']}"
        return f"solution process exited (code {self.exit['code']})"

    def recv(self) -> dict:
        if self.dead:
            raise CandidateDied(self.dead)
        line = self.reader.readline()
        if not line:
            self.dead = self._reap()
            raise CandidateDied(self.dead)
        msg = json_loads(line)
        if type(msg) is not dict:
            raise ValueError("protocol error: not an object")
        return msg

    def call(self, name: str, args: list) -> dict:
        if self.dead:
            raise CandidateDied(self.dead)
        try:
            _write_all(self.req_w, (json_dumps({"name": name, "args": encode_plain(list(args))}) + "\n").encode())
        except BrokenPipeError:
            self.dead = self._reap()
            raise CandidateDied(self.dead) from None
        return self.recv()


class CandidateError(Exception):
    """The solution raised; carries the exception's type name and message."""


class _Proxy:
    """What assert-style test code sees as ``candidate``: forwards calls to the child."""

    def __init__(self, chan: _Channel, name: str):
        self._chan, self._name = chan, name
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError("keyword arguments to the candidate are not supported by the sandbox")
        resp = self._chan.call(self._name, list(args))
        if "ok" in resp:
            return decode_plain(resp["ok"])
        kind = str(resp.get("kind", ""))
        msg = str(resp.get("err", "error"))
        exc = getattr(builtins, kind, None)
        if isinstance(exc, type) and issubclass(exc, Exception) and kind not in ("StopIteration",):
            try:
                raise exc(msg)
            except TypeError:
                pass
        raise CandidateError(msg)


REPORT_FD = 3  # where a command run with a report pipe finds it (``/dev/fd/3``)


def _exec_main(boot: dict, result_fd: int) -> int:
    """Command mode: fork, drop privileges, ``execve``; reap until it exits; one ``exec`` record."""
    import fcntl

    report_fd = boot.get("report_fd")
    # exec-failure pipe, close-on-exec and above the report fd number: empty read == exec worked
    err_r0, err_w0 = os.pipe()
    err_r = fcntl.fcntl(err_r0, fcntl.F_DUPFD_CLOEXEC, 10)
    err_w = fcntl.fcntl(err_w0, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(err_r0)
    os.close(err_w0)
    pid = os.fork()
    if pid == 0:  # ---- the command
        try:
            os.close(result_fd)
            os.close(err_r)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)  # the job message still waits in the stdin pipe
            os.close(devnull)
            if report_fd is not None:
                if report_fd != REPORT_FD:
                    os.dup2(report_fd, REPORT_FD)  # dup2 makes it inheritable
                    os.close(report_fd)
                else:
                    os.set_inheritable(REPORT_FD, True)
            if boot.get("uid") is not None:
                _drop_privileges(boot["uid"], boot.get("nproc"))
            os.chdir(boot["cwd"])
            argv = boot["argv"]
            os.execve(argv[0], argv, boot["env"])
        except BaseException as e:
            try:
                os.write(err_w, f"{type(e).__name__}: {e}".encode("utf-8", "replace")[:2000])
            finally:
                os._exit(127)
    # ---- trusted driver
    boot.clear()
    if report_fd is not None:
        os.close(report_fd)
    os.close(err_w)
    job = read_msg(0)
    nonce = job["nonce"]
    exec_err = b""
    while chunk := os.read(err_r, 4096):
        exec_err += chunk
    os.close(err_r)
    status = None
    while status is None:  # PID 1: reap whatever reparents to us until the command itself exits
        try:
            p, st = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if p == pid:
            status = st
    rec = {"type": "exec", "ok": not exec_err, "nonce": nonce}
    if exec_err:
        rec["msg"] = exec_err.decode("utf-8", "replace")
    if status is not None:
        if os.WIFSIGNALED(status):
            rec["signal"] = os.WTERMSIG(status)
        else:
            rec["code"] = os.WEXITSTATUS(status)
    _write_all(result_fd, (json_dumps(rec) + "\n").encode())
    return 0


def _apply_limits(spec: str) -> None:
    """``CPU,AS,FSIZE,NOFILE,NPROC`` from the parent, applied to this process before anything else
    (every process of the tree inherits them; NPROC 0 = unset). CORE is always 0."""
    import resource

    cpu, mem, fsize, nofile, nproc = (int(x) for x in spec.split(","))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _join_cgroup(procs: str) -> None:
    """Be in the pids cgroup ``procs`` (its ``cgroup.procs`` file) before forking anything: the parent
    normally moved us already; if not, join now (we are root). Raises when that fails — then no
    solution or command is ever started."""
    want = b"/" + os.path.basename(os.path.dirname(procs)).encode()
    try:
        with open("/proc/self/cgroup", "rb") as f:
            for line in f.read().splitlines():
                _, ctrls, path = line.split(b":", 2)
                if b"pids" in ctrls.split(b",") and path == want:
                    return
    except (OSError, ValueError):
        pass
    fd = os.open(procs, os.O_WRONLY)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    result_fd = int(argv[1])
    if len(argv) > 2:
        _apply_limits(argv[2])
    boot = read_msg(0)
    if len(argv) > 3 and argv[3] != "-":
        _join_cgroup(argv[3])
    if boot.get("argv") is not None:
        return _exec_main(boot, result_fd)
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # ---- solution child
        try:
            os.close(result_fd)
            os.close(req_w)
            os.close(resp_r)
            _child_main(boot, req_r, resp_w)
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(0)
    # ---- trusted driver
    boot.clear()
    os.close(req_r)
    os.close(resp_w)
    job = read_msg(0)
    nonce = job["nonce"]

    def emit(rec: dict) -> None:
        rec["nonce"] = nonce
        _write_all(result_fd, (json_dumps(rec) + "\n").encode())

    chan = _Channel(pid, req_w, resp_r)
    try:
        first = chan.recv()
    except CandidateDied as e:
        emit({"type": "import", "ok": False, "kind": "exit", "msg": str(e), "exit": chan.exit})
        emit({"type": "done"})
        return 0
    except ValueError as e:
        emit({"type": "import", "ok": False, "kind": "protocol", "msg": str(e)})
        emit({"type": "done"})
        return 0
    if first.get("import") != "ok":
        emit({"type": "import", "ok": False, "kind": str(first.get("kind")), "msg": str(first.get("msg", ""))[:2000]})
        emit({"type": "done"})
        return 0
    names = first.get("names")
    names = [n for n in names if type(n) is str] if type(names) is list else []
    emit({"type": "import", "ok": True})

    entry = job.get("entry_point")
    if job.get("io") is not None:
        for i, args in enumerate(job["io"]):
            t0 = time.perf_counter()
            try:
                resp = chan.call(entry, args)
                if "ok" in resp:
                    value = resp["ok"]
                    decode_plain(value)  # validate: only well-formed plain data leaves the sandbox
                    rec = {"type": "io", "i": i, "out": value}
                else:
                    rec = {"type": "io", "i": i, "err": str(resp.get("err"))[:2000], "kind": str(resp.get("kind"))}
            except CandidateDied as e:
                rec = {"type": "io", "i": i, "err": str(e), "kind": "died"}
            except (ValueError, TypeError, KeyError) as e:
                rec = {"type": "io", "i": i, "err": f"protocol error: {e}", "kind": "protocol"}
            rec["elapsed"] = time.perf_counter() - t0
            emit(rec)
    if job.get("tests") is not None:
        _run_asserts(job, entry, names, chan, emit)
    if chan.exit is not None:
        emit({"type": "child_exit", **chan.exit})
    emit({"type": "done"})
    return 0


def _run_asserts(job: dict, entry: str | None, names: list[str], chan: _Channel, emit) -> None:
    """Run the test code the parent rewrote (``job["tests"]``: every ``assert`` already turned into a
    ``__seqrl_assert__`` call, see ``runner.prepare_tests``; ``job["test_names"]``: the names it loads)."""
    counts: dict[int, int] = {}

    def record(name: str, passed: bool, reason: str, t0: float) -> None:
        emit({"type": "assert", "name": name, "passed": passed, "reason": reason[:2000],
              "elapsed": time.perf_counter() - t0})

    def seqrl_assert(line: int, test, msg) -> None:
        counts[line] = counts.get(line, 0) + 1
        name = f"assert@{line}" + (f"#{counts[line]}" if counts[line] > 1 else "")
        t0 = time.perf_counter()
        try:
            ok = bool(test())
        except BaseException as e:
            record(name, False, f"{type(e).__name__}: {e}", t0)
            return
        reason = ""
        if not ok:
            try:
                m = msg()
            except BaseException:
                m = None
            reason = "assertion failed" + (f": {m}" if m is not None else "")
        record(name, ok, reason, t0)

    t0 = time.perf_counter()
    if job.get("tests_error"):
        record("tests", False, str(job["tests_error"]), t0)
        return
    loaded = {n for n in job.get("test_names") or () if type(n) is str}
    ns: dict = {"__name__": "__tests__", "__builtins__": builtins}
    # Proxies only for solution callables the tests name that are not builtins: a solution that
    # defines ``abs`` or ``isinstance`` must not change what the test code's own builtins do.
    builtin_names = set(dir(builtins))
    for n in names:
        if n in loaded and (n not in builtin_names or n == entry):
            ns[n] = _Proxy(chan, n)
    ns["__seqrl_assert__"] = seqrl_assert
    try:
        exec(compile(job["tests"], "tests.py", "exec"), ns)
        check = ns.get("check")
        if entry and callable(check) and not isinstance(check, _Proxy):
            check(_Proxy(chan, entry))
    except BaseException as e:
        record("tests", False, f"test code raised {type(e).__name__}: {e}", t0)


if __name__ == "__main__":
    # Every record went out with os.write; skip interpreter finalisation (a few ms per run).
    os._exit(main(sys.argv))
