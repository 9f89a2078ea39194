"""The ledger file: schema, migrations and the transactions (stdlib ``sqlite3``).

Durability and concurrency, the two promises the loop relies on:

* **WAL mode, ``synchronous=FULL``**, one transaction per record: a record is on disk
  when its insert returns, so a process killed at any point loses at most the record it
  was writing (SQLite rolls the unfinished transaction back on the next open).
* **Concurrent writers** (two agents, the CLI and the server) wait for each other:
  every write is ``BEGIN IMMEDIATE`` (takes the write lock up front, so no
  read-then-upgrade deadlock) under a busy timeout.
* **Keys**: a record may carry a unique ``key``; inserting a second record with the
  same key returns the first one (``created=False``). The loop keys every record it
  writes, so a resumed loop never duplicates one.

The schema version lives in ``PRAGMA user_version``; ``MIGRATIONS[n]`` takes a file
from version ``n - 1`` to ``n`` inside one write transaction, so two processes opening
an old file at once migrate it once.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from mcp_server.core import envvars
from mcp_server.core.atomic import check_confined
from mcp_server.core.errors import LedgerError, redact_data
from mcp_server.core.limits import loads_json

#: Schema version this code writes; files with a higher version are refused.
SCHEMA_VERSION = 2
#: Seconds a writer waits for another writer's lock before giving up.
BUSY_TIMEOUT_S = 30.0

DEFAULT_PATH = Path(".kernelscope") / "ledger.db"
ENV_VAR = "KERNELSCOPE_LEDGER"

#: ``MIGRATIONS[n]``: statements taking the schema from version n-1 to n.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
        """CREATE TABLE experiments (
            id INTEGER PRIMARY KEY,
            key TEXT UNIQUE,
            target_key TEXT NOT NULL,
            created_at TEXT NOT NULL,
            target TEXT NOT NULL,
            cwd TEXT,
            repo TEXT,
            git_rev TEXT,
            git_dirty INTEGER,
            env TEXT NOT NULL,
            note TEXT
        )""",
        """CREATE INDEX experiments_target ON experiments(target_key)""",
        """CREATE TABLE profiles (
            id INTEGER PRIMARY KEY,
            experiment_id INTEGER NOT NULL REFERENCES experiments(id),
            key TEXT UNIQUE,
            created_at TEXT NOT NULL,
            report_path TEXT,
            report_sha256 TEXT,
            classification TEXT,
            note TEXT
        )""",
        """CREATE INDEX profiles_experiment ON profiles(experiment_id)""",
        """CREATE TABLE candidates (
            id INTEGER PRIMARY KEY,
            experiment_id INTEGER NOT NULL REFERENCES experiments(id),
            profile_id INTEGER REFERENCES profiles(id),
            key TEXT UNIQUE,
            created_at TEXT NOT NULL,
            proposal_id TEXT,
            fingerprint TEXT,
            kernel TEXT,
            diagnosis TEXT,
            proposal TEXT,
            change_kind TEXT NOT NULL CHECK (change_kind IN ('file', 'patch', 'none')),
            change_path TEXT,
            change_target TEXT,
            change_sha256 TEXT,
            base_sha256 TEXT,
            change_text TEXT,
            spec TEXT
        )""",
        """CREATE INDEX candidates_experiment ON candidates(experiment_id)""",
        """CREATE INDEX candidates_fingerprint ON candidates(fingerprint)""",
        """CREATE TABLE validations (
            id INTEGER PRIMARY KEY,
            candidate_id INTEGER NOT NULL REFERENCES candidates(id),
            key TEXT UNIQUE,
            created_at TEXT NOT NULL,
            verdict TEXT NOT NULL,
            accepted INTEGER NOT NULL,
            result TEXT NOT NULL
        )""",
        """CREATE INDEX validations_candidate ON validations(candidate_id)""",
        """CREATE TABLE decisions (
            id INTEGER PRIMARY KEY,
            candidate_id INTEGER NOT NULL REFERENCES candidates(id),
            key TEXT UNIQUE,
            created_at TEXT NOT NULL,
            decision TEXT NOT NULL CHECK (decision IN ('accepted', 'reverted', 'abandoned')),
            by TEXT NOT NULL,
            why TEXT NOT NULL
        )""",
        """CREATE INDEX decisions_candidate ON decisions(candidate_id)""",
    ),
    # 2: the 'error' decision (a change that could not be applied, a spec validate_candidate refused)
    2: (
        """CREATE TABLE decisions_v2 (
            id INTEGER PRIMARY KEY,
            candidate_id INTEGER NOT NULL REFERENCES candidates(id),
            key TEXT UNIQUE,
            created_at TEXT NOT NULL,
            decision TEXT NOT NULL CHECK (decision IN ('accepted', 'reverted', 'abandoned', 'error')),
            by TEXT NOT NULL,
            why TEXT NOT NULL
        )""",
        """INSERT INTO decisions_v2 (id, candidate_id, key, created_at, decision, by, why)
           SELECT id, candidate_id, key, created_at, decision, by, why FROM decisions""",
        """DROP TABLE decisions""",
        """ALTER TABLE decisions_v2 RENAME TO decisions""",
        """CREATE INDEX decisions_candidate ON decisions(candidate_id)""",
    ),
}

#: Decisions a candidate can end in (``error``: its change could not be applied or its spec was refused).
DECISIONS = ("accepted", "reverted", "abandoned", "error")

TABLES = ("experiments", "profiles", "candidates", "validations", "decisions")
#: Columns stored as given, never redacted: keys and hashes the ledger matches on, paths the loop acts on.
_VERBATIM = {"id", "key", "target_key", "fingerprint", "report_sha256", "change_sha256", "base_sha256", "created_at",
             "experiment_id", "profile_id", "candidate_id", "change_path", "change_target", "report_path", "cwd",
             "repo", "git_rev", "git_dirty", "accepted"}
_JSON_COLUMNS = {"target", "env", "classification", "spec", "result"}
#: the JSON type a column always holds when kernelscope wrote it (spec and classification take any JSON)
_JSON_SHAPES: dict[str, tuple[type, str]] = {"target": (list, "array of strings"), "env": (dict, "object"),
                                             "result": (dict, "object")}


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def resolve_path(ledger: Optional[str] = None) -> Path:
    """The ledger file: ``ledger`` if given, else ``$KERNELSCOPE_LEDGER``, else ``./.kernelscope/ledger.db``."""
    if ledger:
        return Path(ledger).expanduser()
    env = envvars.env(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return DEFAULT_PATH


def _check_header(path: Path, *, allow_empty: bool) -> None:
    """Refuse a file that is not SQLite (read from its first 100 bytes, nothing opened)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise LedgerError(f"cannot read the ledger: {exc.strerror or exc}", path=path) from None
    if not head:
        if allow_empty:
            return
        raise LedgerError("an empty file, not a kernelscope ledger", path=path,
                          hint="point --ledger / KERNELSCOPE_LEDGER at a ledger file")
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise LedgerError("not a kernelscope ledger (not an SQLite file)", path=path,
                          hint="point --ledger / KERNELSCOPE_LEDGER at a ledger file or a new path")


def _sqlite_why(exc: BaseException) -> str:
    """What SQLite said, without any text of the file: its decode error quotes the cell ("Could not decode to
    UTF-8 column 'note' with text '...'"), so that one is reworded."""
    import re

    if isinstance(exc, UnicodeDecodeError) or str(exc).startswith("Could not decode"):
        m = re.search(r"column '(\w{1,64})'", str(exc))
        return "a text record is not UTF-8" + (f" (column {m.group(1)})" if m else "")
    return str(exc).split(" with text ", 1)[0][:200]


def _decode(row: sqlite3.Row, path: Optional[Path] = None) -> dict[str, Any]:
    out = dict(row)
    for k in _JSON_COLUMNS & out.keys():
        if out[k] is not None:
            try:
                out[k] = loads_json(out[k], f"the ledger's {k} record", path=path)
            except ValueError:  # not JSON: written by something else (what it holds is never shown)
                raise LedgerError(f"the ledger's {k} record is not JSON", path=path,
                                  hint="the file was changed outside kernelscope; restore it from a copy") from None
            want = _JSON_SHAPES.get(k)
            if want is not None and (not isinstance(out[k], want[0])
                                     or (k == "target" and not all(isinstance(a, str) for a in out[k]))):
                raise LedgerError(f"the ledger's {k} record is not a JSON {want[1]}", path=path,
                                  hint="the file was changed outside kernelscope; restore it from a copy")
    return out


def _refuse_newer(version: int, path: Path) -> None:
    if version > SCHEMA_VERSION:
        raise LedgerError(f"written by a newer kernelscope (schema {version}, this one reads up to "
                          f"{SCHEMA_VERSION})", path=path, hint="upgrade kernelscope")


def _not_versioned(path: Path) -> LedgerError:
    return LedgerError("an SQLite file that is not a kernelscope ledger (it has tables but no schema version)",
                       path=path, hint="choose another path")


class Ledger:
    """An open ledger file. Use as a context manager; every ``add_*`` is one committed transaction."""

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self._conn = conn
        self._depth = 0

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, ledger: Optional[str | os.PathLike] = None, *, create: bool = True) -> "Ledger":
        """Open (and, with ``create``, make and migrate) the ledger file.

        ``create=False`` (the read operations) opens the file read-only and changes nothing on disk: a
        missing file, an empty one, one that is not SQLite or an SQLite file that is not a ledger is refused
        as it is (no WAL switch, no schema), and an older schema is read as it is."""
        path = resolve_path(str(ledger) if ledger is not None else None)
        if path.is_dir():
            raise LedgerError("the ledger path is a directory, expected a file", path=path,
                              hint="give a file name such as .kernelscope/ledger.db")
        if not create:
            return cls._open_read_only(path)
        check_confined(path, "the ledger")  # over MCP the default path (cwd, $KERNELSCOPE_LEDGER) too
        if path.exists():
            _check_header(path, allow_empty=True)
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LedgerError(f"cannot create the ledger directory: {exc.strerror or exc}",
                                  path=path.parent) from None
        if path.exists() and path.stat().st_size:
            with cls._open_read_only(path, check_tables=False):  # a foreign SQLite file is refused unchanged
                pass
        return cls._connect(path, str(path), cls._set_up_writer,
                            hint="point --ledger / KERNELSCOPE_LEDGER at a ledger file or a new path")

    def _set_up_writer(self) -> None:
        conn = self._conn
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise LedgerError(f"the ledger cannot use WAL mode (journal_mode={mode})", path=self.path,
                              hint="put it on a local file system")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    @classmethod
    def _connect(cls, path: Path, target: str, set_up: Callable[["Ledger"], None], *, hint: str,
                 uri: bool = False) -> "Ledger":
        """Connect to ``target`` (a path or a ``file:`` URI) and run ``set_up`` on the open ledger; a damaged or
        foreign file is a LedgerError (with ``hint``) and leaves no connection open."""
        try:
            conn = sqlite3.connect(target, uri=uri, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open the ledger: {exc}", path=path) from None
        conn.row_factory = sqlite3.Row
        led = cls(path, conn)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            set_up(led)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # a damaged page or text cell
            conn.close()
            raise LedgerError(f"not a kernelscope ledger ({_sqlite_why(exc)})", path=path, hint=hint) from None
        except BaseException:
            conn.close()
            raise
        return led

    @classmethod
    def _open_read_only(cls, path: Path, *, check_tables: bool = True) -> "Ledger":
        """A read-only connection (``mode=ro``): refuses a missing, empty or foreign file without touching it."""
        if not path.exists():
            raise LedgerError("no ledger here", path=path,
                              hint="run `kernelscope loop` or record_experiment first, or pass --ledger / "
                              "set KERNELSCOPE_LEDGER")
        _check_header(path, allow_empty=False)
        with open(path, "rb") as fh:
            wal_format = fh.read(20)[18:20] == b"\x02\x02"
        from urllib.parse import quote

        # a WAL file with no writer left (no -wal beside it) is read as immutable: a read-only connection would
        # otherwise create the -wal and -shm files and leave them behind; with a writer about, mode=ro shares
        # its -shm (which exists)
        quiet = wal_format and not Path(f"{path}-wal").exists()
        flags = "mode=ro&immutable=1" if quiet else "mode=ro"

        def check(led: Ledger) -> None:
            conn = led._conn
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])  # the header's may sit in the WAL
            _refuse_newer(version, path)
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if check_tables and version == 0:
                raise LedgerError("an SQLite file that is not a kernelscope ledger (no schema version)", path=path,
                                  hint="point --ledger / KERNELSCOPE_LEDGER at a ledger file")
            if version == 0 and tables:
                raise _not_versioned(path)
            if check_tables and version > 0 and not set(TABLES) <= tables:
                raise LedgerError(f"an SQLite file that is not a kernelscope ledger (schema version {version} but "
                                  f"no {', '.join(sorted(set(TABLES) - tables))} table)", path=path,
                                  hint="choose another path")

        return cls._connect(path, f"file:{quote(str(path.resolve()))}?{flags}", check, uri=True,
                            hint="point --ledger / KERNELSCOPE_LEDGER at a ledger file")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        if self.schema_version == SCHEMA_VERSION:
            return
        with self.write() as c:
            version = int(c.execute("PRAGMA user_version").fetchone()[0])  # another process may have migrated
            _refuse_newer(version, self.path)
            if version == 0 and c.execute(
                    "SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0]:
                raise _not_versioned(self.path)
            for v in range(version + 1, SCHEMA_VERSION + 1):
                for stmt in MIGRATIONS[v]:
                    c.execute(stmt)
                c.execute(f"PRAGMA user_version = {v}")
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('migrated_at', ?)", (now_utc(),))

    # -- transactions ----------------------------------------------------------------------
    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken with ``BEGIN IMMEDIATE`` (waits for other writers).

        Nested ``write()`` blocks (and the ``add``/``insert`` calls inside them) join the
        outer transaction: several records committed together, or none.
        """
        c = self._conn
        if self._depth:  # nested: part of the enclosing transaction
            yield c
            return
        try:
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise LedgerError(f"the ledger stayed locked for {BUSY_TIMEOUT_S:.0f} s ({exc})", path=self.path,
                              hint="another process holds a write lock; retry") from None
        self._depth += 1
        try:
            yield c
        except BaseException:
            c.execute("ROLLBACK")
            raise
        else:
            c.execute("COMMIT")
        finally:
            self._depth -= 1

    def insert(self, table: str, row: dict[str, Any]) -> tuple[int, bool]:
        """Insert ``row``; with a ``key`` already present, return that record's id and ``False``."""
        assert table in TABLES
        # tokens never reach the file (a candidate's error text, a note): every other column is redacted
        row = {k: v if k in _VERBATIM else redact_data(v) for k, v in row.items()}
        vals = {k: (json.dumps(v, sort_keys=True, default=str) if k in _JSON_COLUMNS and v is not None else v)
                for k, v in row.items()}
        vals.setdefault("created_at", now_utc())
        cols = ", ".join(vals)
        marks = ", ".join("?" for _ in vals)
        with self.write() as c:
            key = vals.get("key")
            if key is not None:
                hit = c.execute(f"SELECT id FROM {table} WHERE key = ?", (key,)).fetchone()
                if hit is not None:
                    return int(hit[0]), False
            try:
                cur = c.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(vals.values()))
            except sqlite3.IntegrityError as exc:
                raise LedgerError(f"{table}: record refused ({exc})", path=self.path) from None
            return int(cur.lastrowid or 0), True

    # -- reads -----------------------------------------------------------------------------
    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        try:
            rows = self._conn.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:  # a damaged page found only when read ("disk image is malformed")
            raise LedgerError(f"the ledger cannot be read ({_sqlite_why(exc)})", path=self.path,
                              hint="restore it from a copy, or start a new ledger at another path") from None
        except UnicodeDecodeError:  # a damaged text cell
            raise LedgerError("the ledger cannot be read (a text record is not UTF-8)", path=self.path,
                              hint="restore it from a copy, or start a new ledger at another path") from None
        return [_decode(r, self.path) for r in rows]

    def get(self, table: str, rid: int) -> Optional[dict[str, Any]]:
        assert table in TABLES
        rows = self.query(f"SELECT * FROM {table} WHERE id = ?", (rid,))
        return rows[0] if rows else None

    def require(self, table: str, rid: Optional[int], field: str) -> dict[str, Any]:
        """The record ``rid`` of ``table``, or a LedgerError naming the request field."""
        if rid is None:
            raise LedgerError(f"{field} is required for this record", path=self.path)
        row = self.get(table, rid)
        if row is None:
            raise LedgerError(f"{field}={rid}: no such record in {table}", path=self.path,
                              hint="`kernelscope ledger list` shows the ids")
        return row

    def by_key(self, table: str, key: str) -> Optional[dict[str, Any]]:
        assert table in TABLES
        rows = self.query(f"SELECT * FROM {table} WHERE key = ?", (key,))
        return rows[0] if rows else None

    def experiments(self) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM experiments ORDER BY id")

    def profiles(self, experiment_id: int) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM profiles WHERE experiment_id = ? ORDER BY id", (experiment_id,))

    def candidates(self, experiment_id: int) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM candidates WHERE experiment_id = ? ORDER BY id", (experiment_id,))

    def validations(self, candidate_id: int) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM validations WHERE candidate_id = ? ORDER BY id", (candidate_id,))

    def decisions(self, candidate_id: int) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM decisions WHERE candidate_id = ? ORDER BY id", (candidate_id,))

    def status(self, candidate_id: int) -> str:
        """``pending`` (no decision yet) or the latest decision."""
        rows = self.query("SELECT decision FROM decisions WHERE candidate_id = ? ORDER BY id DESC LIMIT 1",
                          (candidate_id,))
        return "pending" if not rows else str(rows[0]["decision"])
