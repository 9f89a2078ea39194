"""The stdio front (mcp_server/faces/front.py): the handshake answered at once and equal to the SDK's, the
session handed to the real server intact, and a plugin's first start served while it installs."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from mcp_server.faces import front

ROOT = Path(__file__).resolve().parent.parent
EAGER = str(ROOT / "tests" / "fixtures" / "traces" / "llama_prefill_eager.json.gz")


def _init(version: str = "2025-11-25", msg_id=0) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def _line(obj) -> bytes:
    return (json.dumps(obj) + "\n").encode()


class _Server:
    """A server process spoken to in raw JSON-RPC lines, as a client would."""

    def __init__(self, argv, env=None, cwd=None):
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env, cwd=cwd)

    def send(self, obj) -> None:
        self.p.stdin.write(_line(obj))
        self.p.stdin.flush()

    def read(self) -> dict:
        line = self.p.stdout.readline()
        assert line, self.p.stderr.read().decode()[-2000:]
        return json.loads(line)

    def close(self) -> tuple[int, float]:
        self.p.stdin.close()
        rc = self.p.wait(timeout=60)
        self.p.stdout.close()
        self.p.stderr.close()
        return rc, time.perf_counter() - self.t0


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("KERNELSCOPE_FRONT", "KERNELSCOPE_BOOTSTRAP")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


# --------------------------------------------------------------------------- the answers equal the SDK's

def test_the_bootstrap_negotiates_as_the_sdk():
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

    assert front.HANDSHAKE_VERSIONS == tuple(HANDSHAKE_PROTOCOL_VERSIONS)
    assert front.negotiate("1999-01-01") == LATEST_HANDSHAKE_VERSION
    assert front.negotiate("2025-06-18") == "2025-06-18"


def test_the_front_repeats_what_the_sdk_answered(tmp_path):
    """A cold cache: the handshake and the tool list pass to the backend and its answers are kept; the
    next session's front answers both itself, under that session's ids, and replays the handshake."""
    cache = front.AnswerCache(tmp_path / "front-x.json")
    out, backend = io.BytesIO(), _Backend()
    f = front.Front(out, cache=cache)
    f.attach(backend)
    f.from_client(_line(_init(msg_id=1)))
    f.from_backend(_line({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25", "x": 1}}))
    f.from_client(_line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    f.from_backend(_line({"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "t"}]}}))
    assert [m["id"] for m in backend.got] == [1, 2]  # both went to the backend
    out2, backend2 = io.BytesIO(), _Backend()
    f2 = front.Front(out2, cache=front.AnswerCache(tmp_path / "front-x.json"))
    f2.from_client(_line(_init(msg_id=10)))
    f2.from_client(_line({"jsonrpc": "2.0", "id": 11, "method": "tools/list"}))
    f2.from_client(_line({"jsonrpc": "2.0", "id": 12, "method": "tools/list", "params": {"cursor": "c"}}))
    f2.attach(backend2)
    assert [json.loads(x) for x in out2.getvalue().splitlines()] == [
        {"jsonrpc": "2.0", "id": 10, "result": {"protocolVersion": "2025-11-25", "x": 1}},
        {"jsonrpc": "2.0", "id": 11, "result": {"tools": [{"name": "t"}]}}]
    assert [m["id"] for m in backend2.got] == [front.REPLAY_ID, 12]  # a later page is the backend's
    f3 = front.Front(io.BytesIO(), cache=front.AnswerCache(tmp_path / "front-x.json"))
    f3.attach(_Backend())
    f3.from_client(_line(_init("2024-11-05", msg_id=20)))  # another version: not recorded yet
    assert f3._recording == {20: ("initialize", "2024-11-05")}


def test_the_fronts_initialize_answer_is_the_sdks(tmp_path):
    """Over stdio, with the front (a cold cache, then a warm one) and without it: the same answers to
    initialize and tools/list, and the session the SDK serves afterwards is the client's (a tool called
    under the client's id)."""
    answers, lists = [], []
    for mode in ("1", "1", "0"):
        s = _Server([sys.executable, "-m", "mcp_server"], env=_env(KERNELSCOPE_FRONT=mode,
                                                                    XDG_CACHE_HOME=str(tmp_path)))
        s.send(_init(msg_id=7))
        answers.append(s.read())
        s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        s.send({"jsonrpc": "2.0", "id": 8, "method": "tools/list"})
        listed = s.read()
        assert listed["id"] == 8 and len(listed["result"]["tools"]) > 15
        lists.append(listed)
        if mode == "1":
            s.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"name": "budget", "arguments": {"a": EAGER, "b": EAGER}}})
            called = s.read()
            assert called["id"] == 9 and called["result"]["isError"] is False
        rc, took = s.close()
        assert rc == 0 and took < 30, (rc, took)  # stdin closed: the server ends, workers and all
    assert answers[0] == answers[1] == answers[2]
    assert lists[0] == lists[1] == lists[2]  # the second, from the cache, is the SDK's list
    assert answers[0]["id"] == 7 and answers[0]["result"]["protocolVersion"] == "2025-11-25"
    cached = json.loads(next(tmp_path.glob("kernelscope/front-*.json")).read_text())
    assert cached["tools"]["2025-11-25"] == lists[2]["result"]  # the warm start answered from the cache


# --------------------------------------------------------------------------- routing

class _Backend:
    def __init__(self):
        self.got: list = []

    def __call__(self, line):
        self.got.append(None if line is None else json.loads(line))


def test_lines_wait_in_order_and_the_replayed_answer_is_dropped():
    out = io.BytesIO()
    f = front.Front(out, lambda p: {"protocolVersion": front.negotiate(p.get("protocolVersion"))})
    f.from_client(_line(_init(msg_id=1)))
    f.from_client(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    f.from_client(_line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    assert [json.loads(x) for x in out.getvalue().splitlines()] == [
        {"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25"}}]
    backend = _Backend()
    f.attach(backend)
    assert [m.get("id") for m in backend.got] == [front.REPLAY_ID, None, 2]
    assert backend.got[0]["params"] == _init()["params"]
    f.from_backend(_line({"jsonrpc": "2.0", "id": front.REPLAY_ID, "result": {"protocolVersion": "x"}}))
    f.from_backend(_line({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}))
    f.from_client(_line({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
    f.from_client(b"")
    assert [m and m.get("id") for m in backend.got[3:]] == [3, None]
    sent = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [m["id"] for m in sent] == [1, 2]  # the replayed handshake's answer never reaches the client


def test_bootstrap_answers_ping_and_an_empty_list_then_announces_the_tools():
    out = io.BytesIO()
    f = front.Front(out, lambda p: {"capabilities": {"tools": {"listChanged": True}}}, bootstrap=True)
    for msg in (_init(msg_id=1), {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {"jsonrpc": "2.0", "id": 3, "method": "ping"},
                {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "budget"}}):
        f.from_client(_line(msg))
    sent = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [(m["id"], m["result"]) for m in sent[1:]] == [(2, {"tools": []}), (3, {})]
    backend = _Backend()
    f.attach(backend)
    assert [m.get("id") for m in backend.got] == [front.REPLAY_ID, None, 4]  # the call waited for the server
    assert json.loads(out.getvalue().splitlines()[-1]) == {"jsonrpc": "2.0",
                                                           "method": "notifications/tools/list_changed"}


def test_a_failed_install_answers_what_waits_with_its_reason():
    out = io.BytesIO()
    f = front.Front(out, lambda p: {}, bootstrap=True)
    f.from_client(_line({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {}}))
    f.fail("could not install")
    f.from_client(_line({"jsonrpc": "2.0", "id": 6, "method": "resources/list"}))
    sent = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [(m["id"], m["error"]["message"]) for m in sent] == [(5, "could not install"), (6, "could not install")]


# --------------------------------------------------------------------------- a plugin's first start

def _launcher(tmp_path: Path, install: str) -> Path:
    """A launcher like bin/kernelscope-mcp whose install step is ``install`` (a shell snippet)."""
    script = tmp_path / "launcher"
    script.write_text(f"""#!/bin/sh
if [ "${{1:-}}" = --install ]; then echo installing >&2; {install}; exit $?; fi
exec "{sys.executable}" -m mcp_server
""")
    return script


def test_first_start_serves_at_once_and_hands_over_when_installed(tmp_path):
    s = _Server([sys.executable, str(ROOT / "mcp_server" / "faces" / "front.py"), "--bootstrap",
                 str(_launcher(tmp_path, "sleep 3")), str(tmp_path / "install.log")], env=_env())
    s.send(_init(msg_id=1))
    first = s.read()
    answered = time.perf_counter() - s.t0
    assert first["result"]["capabilities"]["tools"]["listChanged"] is True and answered < 2.5, answered
    assert "installing" in first["result"]["instructions"]
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert s.read() == {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}
    assert s.read() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}  # after the install
    s.send({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    tools = s.read()["result"]["tools"]
    assert "analyze_trace" in {t["name"] for t in tools}
    s.send({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "budget",
                                                                       "arguments": {"a": EAGER, "b": EAGER}}})
    assert s.read()["result"]["isError"] is False
    assert s.close()[0] == 0


def test_first_start_whose_install_fails_says_why_and_ends(tmp_path):
    s = _Server([sys.executable, str(ROOT / "mcp_server" / "faces" / "front.py"), "--bootstrap",
                 str(_launcher(tmp_path, "sleep 1; false")), str(tmp_path / "install.log")], env=_env())
    s.send(_init(msg_id=1))
    s.read()
    s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "budget", "arguments": {}}})
    err = s.read()
    assert err["id"] == 2 and "could not install its environment" in err["error"]["message"]
    assert s.p.wait(timeout=30) == 1
    assert "installing" in (tmp_path / "install.log").read_text()
    assert "installing" in s.p.stderr.read().decode()  # the log's tail, with the reason
    s.p.stdin.close()


def test_the_install_goes_on_when_the_client_stops_the_server(tmp_path):
    """`claude mcp list` connects, then stops the server (SIGINT, SIGTERM): the first install finishes anyway."""
    done = tmp_path / "installed"
    s = _Server([sys.executable, str(ROOT / "mcp_server" / "faces" / "front.py"), "--bootstrap",
                 str(_launcher(tmp_path, f"sleep 2; touch {done}")), str(tmp_path / "install.log")], env=_env())
    s.send(_init(msg_id=1))
    assert s.read()["id"] == 1
    s.p.send_signal(2)
    s.p.terminate()
    s.p.wait(timeout=30)
    for _ in range(100):
        if done.exists():
            break
        time.sleep(0.1)
    assert done.exists()


def test_recording_after_an_install_fills_the_cache(tmp_path):
    """bin/kernelscope-mcp --install ends with `python -m mcp_server.faces.front --record VERSIONS`."""
    out = subprocess.run([sys.executable, "-m", "mcp_server.faces.front", "--record", "2025-06-18"], timeout=180,
                         env=_env(XDG_CACHE_HOME=str(tmp_path)), capture_output=True)
    assert out.returncode == 0 and out.stdout == b""
    cached = json.loads(next(tmp_path.glob("kernelscope/front-*.json")).read_text())
    assert cached["initialize"]["2025-06-18"]["protocolVersion"] == "2025-06-18"
    assert {t["name"] for t in cached["tools"]["2025-06-18"]["tools"]} >= {"analyze_trace", "budget"}
