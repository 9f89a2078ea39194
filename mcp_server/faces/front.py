"""The stdio front of the MCP server: answer the handshake at once, hand the rest to the real server.

A client (Claude Code, the MCP Inspector) counts a server as connected when it answers
``initialize``; Claude Code gives up after 30 s, and ``claude mcp list`` waits 5 s more for the
tool list. The official SDK alone takes most of a second to import (several on a loaded machine),
and a plugin's first start has no venv at all. The front, standard library only, stands between the
client and the real server (the "backend") and copies JSON-RPC lines both ways, except:

- ``initialize`` may be answered by the front itself. The client's request is then kept and
  replayed to the backend, under an id of the front's own, as the backend's first message; the
  backend's answer to it is dropped. The session the backend holds is the one the client opened,
  and every later line passes through unchanged.
- Lines that arrive before the backend is attached wait in order and are sent when it is.

Two uses:

- ``python -m mcp_server`` (``serve_in_process``): the front runs in threads on the process's
  stdin/stdout while the main thread imports the SDK and serves on pipes put in place of fds 0
  and 1. The front records the SDK's answers to ``initialize`` (per requested protocol version) and
  to ``tools/list`` (per negotiated version) in a per-user cache keyed by a fingerprint of this
  package's sources, the SDK and pydantic (``AnswerCache``). When it holds both for the client's
  request, the front answers them at once, without waiting for the SDK; otherwise (the first start of
  new code) the SDK answers, as without the front, and its answers are recorded. The front never
  makes up an answer: it repeats the SDK's. bench/bench_cold_start.py measures it;
  ``KERNELSCOPE_FRONT=0`` turns it off.
- ``bin/kernelscope-mcp`` when its venv is not ready (``python3 mcp_server/faces/front.py --bootstrap
  LAUNCHER LOG``): the front answers ``initialize`` itself (no tools yet, ``tools.listChanged``
  declared), and ``ping`` and ``tools/list`` (empty) until the backend is attached; it runs
  ``LAUNCHER --install`` (its output to LOG, in a session of its own, so that it goes on when a
  client that only checked the connection has gone), then starts ``LAUNCHER`` as the backend and
  tells the client ``notifications/tools/list_changed``: the tools appear in the same session. An
  install that fails ends the server with the log's tail and its reason on stderr.

A protocol without ``initialize`` (the 2026 ``server/discover`` envelope) is passed through untouched.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, Callable, Optional

#: Protocol versions the ``initialize`` handshake negotiates (the SDK's ``HANDSHAKE_PROTOCOL_VERSIONS``);
#: an unknown request gets the newest. Used by the bootstrap answer only.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: The id under which the client's ``initialize`` is replayed to the backend (its answer is dropped).
REPLAY_ID = "kernelscope-front-initialize"
#: Written to the SDK's stdout when it has stopped: the copier's last line.
_END = b"kernelscope-front-end-of-output\n"

BOOTSTRAP_INSTRUCTIONS = (
    "kernelscope is installing its Python environment (the plugin's first start, a minute or two); "
    "its tools appear in this session when that is done.")


def negotiate(requested: Any) -> str:
    return requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]


def _say(text: str) -> None:
    sys.stderr.write(f"kernelscope-mcp: {text}\n")
    sys.stderr.flush()


def _parse(line: bytes) -> Optional[dict[str, Any]]:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


class Front:
    """Routes lines between the client and a backend that is attached later (see the module doc).

    ``answer_initialize(params)`` is the bootstrap's own answer; ``cache`` the in-process mode's record
    of the SDK's answers."""

    def __init__(self, client_out: IO[bytes],
                 answer_initialize: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None,
                 bootstrap: bool = False, cache: Optional["AnswerCache"] = None):
        self._out = client_out
        self._answer_initialize = answer_initialize
        self._bootstrap = bootstrap
        self._cache = cache
        self._lock = threading.Lock()        # routing state
        self._write_lock = threading.Lock()  # whole lines to the client
        self._send: Optional[Callable[[Optional[bytes]], None]] = None
        self._waiting: list[bytes] = []
        self._handshake = False              # the client's initialize has been seen
        self._version: Optional[str] = None  # the protocol version negotiated with the client
        self._recording: dict[Any, tuple[str, str]] = {}  # request id -> what the backend's answer is
        self._listed_early = False
        self._eof = False
        self._failed: Optional[str] = None

    # ----------------------------------------------------------------- to the client
    def write(self, line: bytes) -> None:
        with self._write_lock:
            try:
                self._out.write(line)
                self._out.flush()
            except (BrokenPipeError, ValueError):  # the client is gone
                pass

    def _respond(self, msg_id: Any, result: dict[str, Any]) -> None:
        self.write(_line({"jsonrpc": "2.0", "id": msg_id, "result": result}))

    def _error(self, msg_id: Any, text: str) -> None:
        self.write(_line({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32603, "message": text}}))

    # ----------------------------------------------------------------- from the client
    def from_client(self, line: bytes) -> None:
        """One line the client sent (``b""`` at end of input)."""
        with self._lock:
            if not line:
                self._eof = True
                if self._send is not None:
                    self._send(None)
                return
            if not self._handshake and b'"initialize"' in line and self._initialize(line):
                return
            if self._version is not None and self._cache is not None and b'"tools/list"' in line \
                    and self._tools_list(line):
                return
            if self._send is not None:
                self._send(line)
                return
            msg = _parse(line)
            if msg is not None and "id" in msg and "method" in msg:
                if self._failed is not None:
                    self._error(msg["id"], self._failed)
                    return
                if self._bootstrap and msg["method"] == "ping":
                    self._respond(msg["id"], {})
                    return
                if self._bootstrap and msg["method"] == "tools/list":
                    self._listed_early = True
                    self._respond(msg["id"], {"tools": []})
                    return
            self._waiting.append(line)

    def _initialize(self, line: bytes) -> bool:
        """The client's handshake: answered here (True) when the front can, else recorded on its way."""
        msg = _parse(line)
        if msg is None or msg.get("method") != "initialize" or "id" not in msg:
            return False
        self._handshake = True
        params = msg.get("params") or {}
        requested = str(params.get("protocolVersion"))
        if self._answer_initialize is not None:
            result: Optional[dict[str, Any]] = self._answer_initialize(params)
        elif self._cache is not None:
            result = self._cache.initialize(requested)
            if result is None or self._cache.tools(str(result.get("protocolVersion"))) is None:
                self._recording[msg["id"]] = ("initialize", requested)  # the SDK answers; keep its answer
                return False
        else:
            return False
        assert result is not None
        self._version = result.get("protocolVersion")
        self._respond(msg["id"], result)
        self._deliver(_line({**msg, "id": REPLAY_ID}))
        return True

    def _tools_list(self, line: bytes) -> bool:
        msg = _parse(line)
        if msg is None or msg.get("method") != "tools/list" or "id" not in msg:
            return False
        if (msg.get("params") or {}).get("cursor"):
            return False
        assert self._cache is not None and self._version is not None
        listed = self._cache.tools(self._version)
        if listed is not None:
            self._respond(msg["id"], listed)
            return True
        self._recording[msg["id"]] = ("tools", self._version)
        return False

    def _deliver(self, line: bytes) -> None:
        if self._send is not None:
            self._send(line)
        else:
            self._waiting.append(line)

    # ----------------------------------------------------------------- the backend
    def attach(self, send: Callable[[Optional[bytes]], None]) -> None:
        """The backend is ready: send what waited (a replayed handshake first), pass everything on from
        now. ``send(None)`` closes the backend's input."""
        with self._lock:
            for line in self._waiting:
                send(line)
            self._waiting.clear()
            self._send = send
            if self._listed_early:
                self.write(_line({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
            if self._eof:
                send(None)

    def from_backend(self, line: bytes) -> None:
        if REPLAY_ID.encode() in line[:120]:
            msg = _parse(line)
            if msg is not None and msg.get("id") == REPLAY_ID and "method" not in msg:
                return  # the backend's answer to the replayed initialize: the client has one already
        if self._recording:
            self._record(line)
        self.write(line)

    def _record(self, line: bytes) -> None:
        msg = _parse(line)
        if msg is None or "method" in msg or msg.get("id") not in self._recording:
            return
        what, version = self._recording.pop(msg["id"])
        result = msg.get("result")
        if not isinstance(result, dict) or self._cache is None:
            return
        if what == "initialize":
            self._version = result.get("protocolVersion")
            self._cache.put("initialize", version, result)
        elif isinstance(result.get("tools"), list) and not result.get("nextCursor"):
            self._cache.put("tools", version, result)

    def fail(self, reason: str) -> None:
        """The backend will never come: answer what waits (and what comes) with ``reason``."""
        with self._lock:
            self._failed = reason
            for line in self._waiting:
                msg = _parse(line)
                if msg is not None and "id" in msg and "method" in msg and msg["id"] != REPLAY_ID:
                    self._error(msg["id"], reason)
            self._waiting.clear()


def _pump(src: IO[bytes], sink: Callable[[bytes], None]) -> None:
    """Every line of ``src`` to ``sink``, then ``b""`` once at its end."""
    try:
        for line in src:
            sink(line)
    except (OSError, ValueError):
        pass
    sink(b"")


def _sender(dst: IO[bytes]) -> Callable[[Optional[bytes]], None]:
    """The front's ``send`` to a backend: each line written and flushed, ``None`` closes ``dst``; a backend
    that has gone is not an error."""

    def send(line: Optional[bytes]) -> None:
        try:
            if line is None:
                dst.close()
            else:
                dst.write(line)
                dst.flush()
        except (BrokenPipeError, ValueError):
            pass

    return send


# --------------------------------------------------------------------------- python -m mcp_server

def _fingerprint() -> str:
    """What the cached answers are made from: this package's sources and the SDK and pydantic that read them."""
    import hashlib
    from importlib.util import find_spec

    pkg = Path(__file__).resolve().parents[1]  # the whole package
    files = sorted(pkg.rglob("*.py"))
    for dep in ("mcp", "mcp_types", "pydantic", "pydantic_core"):
        try:
            spec = find_spec(dep)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            files.append(Path(spec.origin))
    parts = [sys.version]
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        parts.append(f"{f}:{st.st_mtime_ns}:{st.st_size}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


class AnswerCache:
    """The SDK's answers the front repeats (``initialize`` per requested protocol version, ``tools/list``
    per negotiated one), kept per user under ``$XDG_CACHE_HOME/kernelscope`` and per fingerprint of the code
    that makes them. Best effort: an unreadable or unwritable cache only means the SDK answers."""

    def __init__(self, path: Optional[Path] = None):
        if path is None:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            path = Path(base) / "kernelscope" / f"front-{_fingerprint()}.json"
        self.path = path
        self._lock = threading.Lock()
        try:
            data = json.loads(path.read_text())
            self._data: dict[str, Any] = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self._data = {}

    def initialize(self, requested: str) -> Optional[dict[str, Any]]:
        """The SDK's answer to an ``initialize`` that asked for ``requested``."""
        return self._get("initialize", requested)

    def tools(self, version: str) -> Optional[dict[str, Any]]:
        """The SDK's answer to ``tools/list`` under the negotiated ``version``."""
        return self._get("tools", version)

    def _get(self, what: str, key: str) -> Optional[dict[str, Any]]:
        got = (self._data.get(what) or {}).get(key)
        return got if isinstance(got, dict) else None

    def put(self, what: str, key: str, result: dict[str, Any]) -> None:
        self._put({what: {**(self._data.get(what) or {}), key: result}})

    def _put(self, update: dict[str, Any]) -> None:
        with self._lock:
            self._data = {**self._data, **update}
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                for old in self.path.parent.glob("front-*.json"):
                    if old != self.path:
                        old.unlink(missing_ok=True)
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
                tmp.write_text(json.dumps(self._data))
                os.replace(tmp, self.path)
            except OSError:
                pass


def serve_stdio() -> None:
    """``python -m mcp_server`` / ``kernelscope serve``: the MCP server on stdio, behind the front (unless
    ``KERNELSCOPE_FRONT=0``)."""

    def run() -> None:
        from mcp_server.faces.server import main

        main()

    if os.environ.get("KERNELSCOPE_FRONT", "1").lower() not in ("0", "off", "no", "false"):
        serve_in_process(run)
    else:
        run()


def serve_in_process(run_server: Callable[[], None]) -> None:
    """Serve on stdio with the front before ``run_server`` (which imports the SDK and serves on fds 0/1)."""
    client_in = os.fdopen(os.dup(0), "rb")
    client_out = os.fdopen(os.dup(1), "wb")
    to_sdk_r, to_sdk_w = os.pipe()
    from_sdk_r, from_sdk_w = os.pipe()
    os.dup2(to_sdk_r, 0)
    os.dup2(from_sdk_w, 1)
    os.close(to_sdk_r)
    os.close(from_sdk_w)

    front = Front(client_out, cache=AnswerCache())
    threading.Thread(target=_pump, args=(client_in, front.from_client), name="front-in", daemon=True).start()

    def from_sdk() -> None:
        with os.fdopen(from_sdk_r, "rb") as src:
            for line in src:
                if line.endswith(_END):  # after the SDK's last line (or, had it stopped mid-line, the part)
                    if line[: -len(_END)].strip():
                        front.from_backend(line[: -len(_END)] + b"\n")
                    break
                front.from_backend(line)

    out = threading.Thread(target=from_sdk, name="front-out", daemon=True)
    out.start()
    send = _sender(os.fdopen(to_sdk_w, "wb"))
    threading.Thread(target=front.attach, args=(send,), name="front-attach", daemon=True).start()
    try:
        run_server()
    finally:
        # the copier stops at this line, after everything the SDK wrote (worker processes hold fd 1 open,
        # so the pipe's end of file would come only when they have gone)
        try:
            sys.stdout.flush()
            os.write(1, _END)
        except (OSError, ValueError):
            pass
        out.join(timeout=10)


def record(versions: list[str]) -> int:
    """Start the server once per protocol version, as a client would, so that its front records the SDK's
    answers (``bin/kernelscope-mcp --install`` runs this last: the first start after an install then
    answers at once too). Returns how many were recorded."""
    done = 0
    for version in versions:
        p = subprocess.Popen([sys.executable, "-m", "mcp_server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        assert p.stdin is not None and p.stdout is not None
        try:
            for msg in ({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": version, "capabilities": {},
                    "clientInfo": {"name": "kernelscope-record", "version": "1"}}},
                        {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}):
                p.stdin.write(_line(msg))
                p.stdin.flush()
                if "id" in msg and not p.stdout.readline():
                    break
            else:
                done += 1
            p.stdin.close()
            p.wait(timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            p.kill()
            p.wait()
    return done


# --------------------------------------------------------------------------- bin/kernelscope-mcp, first start

def _version_beside() -> str:
    """The package version, read from the checkout's ``mcp_server/__init__.py`` (no import: no venv yet)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "__init__.py").read_text()
    m = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    return m.group(1) if m else "0"


def bootstrap(launcher: str, log: str) -> int:
    """Serve while ``sh LAUNCHER --install`` runs (its output to ``log``, so that it goes on when the client
    has gone), then with ``sh LAUNCHER`` as the backend."""
    version = _version_beside()

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        return {"capabilities": {"tools": {"listChanged": True}}, "instructions": BOOTSTRAP_INSTRUCTIONS,
                "protocolVersion": negotiate(params.get("protocolVersion")),
                "serverInfo": {"name": "kernelscope", "version": version}}

    # the installer starts before the first answer and runs in a session of its own, never killed with the
    # front: a client that stops the server right after the handshake (claude mcp list: SIGINT, then SIGTERM)
    # leaves it to finish, and the launcher's lock keeps a second one out
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    with open(log, "ab") as fh:
        install = subprocess.Popen(["sh", launcher, "--install"], stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                                   start_new_session=True)
    front = Front(sys.stdout.buffer, answer, bootstrap=True)
    threading.Thread(target=_pump, args=(sys.stdin.buffer, front.from_client), name="front-in", daemon=True).start()
    _say(f"installing its environment (first start); the installer writes to {log}")
    if install.wait() != 0:
        reason = f"kernelscope could not install its environment (sh {launcher} --install failed; see {log})"
        try:
            tail = Path(log).read_bytes()[-4000:].decode(errors="replace")
            sys.stderr.write(tail if tail.endswith("\n") else tail + "\n")
        except OSError:
            pass
        _say(reason)
        front.fail(reason)
        return 1
    child = subprocess.Popen(["sh", launcher], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    front.attach(_sender(child.stdin))
    for line in child.stdout:
        front.from_backend(line)
    return child.wait()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--bootstrap":
        code = bootstrap(sys.argv[2], sys.argv[3])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the reader thread may still wait on stdin: no interpreter shutdown around it
    if len(sys.argv) > 2 and sys.argv[1] == "--record":
        sys.exit(0 if record(sys.argv[2:]) == len(sys.argv) - 2 else 1)
    sys.stderr.write("usage: python3 mcp_server/faces/front.py --bootstrap LAUNCHER INSTALL_LOG "
                     "| --record VERSION...\n")
    sys.exit(2)
