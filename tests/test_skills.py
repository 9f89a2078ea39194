"""The skills as an agent reads them: every tool call, parameter, CLI verb and flag, and data path a
SKILL.md or one of its references names exists in the code; allowed-tools grants what each skill asks
for; every warning code has guidance in some skill. Checked statically against the request models,
the generated CLI parser and the package data, so a renamed parameter or a new warning code cannot
leave the skills stale (docs/ARCHITECTURE.md, "Skills")."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from mcp_server.core.operation import Operation
from mcp_server.core.vocab import WarningCode
from mcp_server.faces import cli
from mcp_server.faces.registry import operations

ROOT = Path(__file__).resolve().parent.parent
SKILLS = sorted(p.parent for p in (ROOT / "skills").glob("*/SKILL.md"))
MCP_PREFIXES = ("mcp__kernelscope__", "mcp__plugin_kernelscope_kernelscope__")
#: Options every verb takes besides its request's fields (cli.add_operation).
COMMON_FLAGS = {"--json", "--width", "--max-memory", "--time-limit", "--help", "-h"}
#: A body of at most ~5k tokens (Agent Skills guidance), at ~4 characters a token.
MAX_BODY_CHARS = 20_000


@lru_cache(maxsize=None)
def ops() -> dict[str, Operation]:
    return {op.tool: op for op in operations()}


@lru_cache(maxsize=None)
def verb_flags() -> dict[str, set[str]]:
    """Every CLI verb path ("ncu run") -> the option strings its parser accepts."""
    flags: dict[str, set[str]] = {}
    for op in operations():
        probe = cli._Probe(add_help=True)
        p = cli.add_operation(probe.add_subparsers(), op, op.verb.split()[-1])
        flags[op.verb] = set(p._option_string_actions)
    by_verb = {op.verb: op for op in operations()}
    for op in operations():  # `kernelscope analyze DIR` routes to `traceset analyze`: both verbs' flags
        if op.takes_over:
            flags[op.takes_over] = flags[op.takes_over] | flags[op.verb]
            assert op.takes_over in by_verb
    for op in operations():  # `kernelscope repro TRACE` is `kernelscope repro make TRACE`
        if op.default_action:
            flags[op.verb.split()[0]] = flags[op.verb]
    flags["serve"] = {"--help", "-h"}
    return flags


def frontmatter(skill: Path) -> tuple[dict, str]:
    text = (skill / "SKILL.md").read_text()
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m, f"{skill.name}: SKILL.md has no frontmatter"
    return yaml.safe_load(m.group(1)), m.group(2)


def documents(skill: Path) -> Iterator[Path]:
    yield skill / "SKILL.md"
    yield from sorted(p for p in skill.rglob("*.md") if p.name != "SKILL.md")


def all_documents() -> list[Path]:
    return [d for s in SKILLS for d in documents(s)]


def code_spans(text: str) -> list[str]:
    """Fenced blocks (line by line) and inline `code` spans."""
    spans: list[str] = []
    fenced = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
    for m in fenced.finditer(text):
        spans.extend(m.group(1).splitlines())
    rest = fenced.sub("", text)
    spans.extend(re.findall(r"`([^`\n]+)`", rest))
    return spans


def _top_level_split(args: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in args:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def tool_calls(text: str) -> Iterator[tuple[str, list[str], dict[str, str]]]:
    """(tool, parameter names, keyword=value pairs) for every call written as ``tool(a=1, b?)``,
    ``tool a=1 b=2`` or ``tool {"a": 1}`` in the text."""
    names = "|".join(sorted(ops(), key=len, reverse=True))
    for m in re.finditer(rf"\b({names})\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        params, values = [], {}
        for part in _top_level_split(text[m.end(): i - 1]):
            km = re.match(r"^(\w+)\s*(\?|=\s*(.*))?$", part, re.S)
            if km:
                params.append(km.group(1))
                if km.group(3) is not None:
                    values[km.group(1)] = km.group(3).strip()
            elif part not in ("...", "…"):
                raise AssertionError(f"unreadable argument {part!r} in a call of {m.group(1)}")
        yield m.group(1), params, values
    for m in re.finditer(rf"\b({names})((?:[ \t]+\w+=\S+)+)", text):
        pairs = dict(re.findall(r"(\w+)=(\S+)", m.group(2)))
        yield m.group(1), list(pairs), pairs
    for m in re.finditer(rf"\b({names})\s+\{{(.*?)\}}", text):
        keys = re.findall(r'"(\w+)"\s*:', m.group(2))
        yield m.group(1), keys, {}


def cli_commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """(verb path, flags) for every ``kernelscope VERB ...`` command in the code of the text."""
    verbs = sorted(verb_flags(), key=lambda v: -len(v))
    for span in code_spans(text):
        for m in re.finditer(r"(?:^|[\s(])kernelscope\s+([a-z][\w-]*(?:\s+[a-z][\w-]*)?)(.*)", span):
            words, tail = m.group(1), m.group(2)
            verb = next((v for v in verbs if (words + " ").startswith(v + " ")), None)
            assert verb, f"`kernelscope {words}`: no such verb (verbs: {sorted(verb_flags())})"
            rest = (words[len(verb):] + tail).split(" #")[0].split("|")[0].split("&&")[0]
            rest = rest.split(" -- ")[0]  # the target's own arguments follow `--`
            flags = [f.split("=")[0].strip("[]()") for f in re.findall(r"(?<![\w-])--[a-z][\w-]*(?:=\S*)?", rest)]
            yield verb, flags


def test_skills_exist() -> None:
    assert {s.name for s in SKILLS} == {"compare-kernels", "kernel-timeline-analysis", "kernel-compass"}


@pytest.mark.parametrize("skill", SKILLS, ids=lambda p: p.name)
def test_frontmatter_and_arguments(skill: Path) -> None:
    meta, body = frontmatter(skill)
    assert meta["name"] == skill.name
    assert meta.get("argument-hint"), f"{skill.name}: no argument-hint for slash-command use"
    assert "$ARGUMENTS" in body, f"{skill.name}: the body never reads $ARGUMENTS"
    assert "AskUserQuestion" in body, f"{skill.name}: does not say to ask for missing inputs"
    assert len(body) <= MAX_BODY_CHARS, f"{skill.name}: body {len(body)} chars; move detail to references/"
    for tool in str(meta["metadata"]["tools"]).replace(",", " ").split():
        assert tool in ops(), f"{skill.name}: metadata.tools names {tool!r}, not a tool"


@pytest.mark.parametrize("doc", all_documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_tool_calls_use_real_parameters(doc: Path) -> None:
    text = doc.read_text()
    n = 0
    for tool, params, values in tool_calls(text):
        n += 1
        fields = set(ops()[tool].request.model_fields)
        unknown = [p for p in params if p not in fields]
        assert not unknown, f"{doc.name}: {tool} has no parameter(s) {unknown} (it takes {sorted(fields)})"
        required = [f for f, info in ops()[tool].request.model_fields.items() if info.is_required()]
        if values:  # a full example call (not a signature): every required field is there
            assert not [f for f in required if f not in params], f"{doc.name}: {tool} call lacks {required}"
    if doc.name == "SKILL.md":
        assert n, f"{doc}: names no tool call"


@pytest.mark.parametrize("doc", all_documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_cli_commands_use_real_verbs_and_flags(doc: Path) -> None:
    for verb, flags in cli_commands(doc.read_text()):
        known = verb_flags()[verb] | COMMON_FLAGS
        bad = [f for f in flags if f not in known]
        assert not bad, f"{doc.name}: `kernelscope {verb}` has no option(s) {bad}"


PATH_RE = re.compile(r"(?<![\w./-])((?:_shared|mcp_server|examples|bench|tools|docs|tests|references)/[\w./-]*\w)")


@pytest.mark.parametrize("doc", all_documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_data_paths_exist(doc: Path) -> None:
    skill = next(s for s in SKILLS if doc.is_relative_to(s))
    for path in set(PATH_RE.findall(doc.read_text())):
        base = doc.parent if path.startswith("references/") else ROOT
        if path.startswith("references/") and not (base / path).exists():
            base = skill
        assert (base / path).exists(), f"{doc.relative_to(ROOT)} names {path}, which does not exist"


@pytest.mark.parametrize("skill", SKILLS, ids=lambda p: p.name)
def test_allowed_tools_grant_what_the_skill_asks(skill: Path) -> None:
    meta, _ = frontmatter(skill)
    allowed = str(meta["allowed-tools"]).split()
    granted_mcp = {a for a in allowed if a.startswith("mcp__")}
    for a in granted_mcp:
        name = next((a[len(p):] for p in MCP_PREFIXES if a.startswith(p)), None)
        assert name in ops(), f"{skill.name}: allowed-tools grants {a}, which is no tool"
    text = "\n".join(d.read_text() for d in documents(skill))
    used = {tool for tool, _, _ in tool_calls(text)}
    for tool in used:
        for p in MCP_PREFIXES:
            assert p + tool in granted_mcp, f"{skill.name}: calls {tool} but allowed-tools lacks {p + tool}"
    bash = {m for a in allowed for m in re.findall(r"^Bash\((\S+?):\*\)$", a)}
    for line in _shell_lines(text):
        cmd = line.split()[0]
        assert cmd in bash, f"{skill.name}: runs `{line[:60]}` but allowed-tools grants no Bash({cmd}:*)"
    if "AskUserQuestion" in text:
        assert "AskUserQuestion" in allowed
    if re.search(r"\bwrite (the|a|an|its) [\w ]*(spec|file|patch|proposals)", text, re.I):
        assert {"Write", "Edit"} <= set(allowed), f"{skill.name}: asks to write files without Write/Edit"


def _shell_lines(text: str) -> Iterator[str]:
    """Command lines of the ```bash blocks."""
    for m in re.finditer(r"^```(?:bash|sh|shell)\n(.*?)^```", text, re.S | re.M):
        for line in m.group(1).splitlines():
            line = line.strip()
            if line and not line.startswith("#") and not line.startswith(("-", "[")):
                yield line


def test_every_warning_code_has_guidance() -> None:
    """Each warning code an answer can carry is named, with what to do, in some skill's documents."""
    text = "\n".join(d.read_text() for d in all_documents())
    missing = [w.value for w in WarningCode if not re.search(rf"`{re.escape(w.value)}`", text)]
    assert not missing, f"warning codes without guidance in any skill: {missing}"


def test_checker_catches_known_mistakes() -> None:
    """The checks above fail on the mistakes they exist for (a stale flag, a missing candidate_id)."""
    bad_flag = "```\nkernelscope compare a b --labels X Y --colour\n```"
    assert [f for v, fl in cli_commands(bad_flag) for f in fl if f not in verb_flags()[v] | COMMON_FLAGS] \
        == ["--colour"]
    (tool, params, values), = list(tool_calls("`record_decision decision=reverted by=me why=x`"))
    required = [f for f, info in ops()[tool].request.model_fields.items() if info.is_required()]
    assert [f for f in required if f not in params] == ["candidate_id"]
    (_, params, _), = list(tool_calls("diff_modules(a=\"x\", b=\"y\", phse=\"decode\")"))
    assert "phse" not in ops()["diff_modules"].request.model_fields and "phse" in params
    with pytest.raises(AssertionError):
        list(cli_commands("`kernelscope frobnicate x`"))


@pytest.mark.parametrize("tool", ["record_experiment", "record_profile", "record_candidate", "record_validation",
                                  "record_decision"])
def test_a_record_without_what_its_kind_needs_is_refused_before_the_ledger_opens(tool: str, tmp_path: Path) -> None:
    """Each record tool's schema requires exactly what its kind of record needs (the skills' calls are checked
    against it above); a call without it is refused by the request model, naming each missing field."""
    from mcp_server.core.errors import InputError

    required = [f for f, info in ops()[tool].request.model_fields.items() if info.is_required()]
    assert required == {"record_experiment": ["target"], "record_profile": ["experiment_id"],
                        "record_candidate": ["experiment_id"], "record_validation": ["candidate_id"],
                        "record_decision": ["candidate_id", "decision", "by", "why"]}[tool]
    with pytest.raises(InputError) as exc:
        ops()[tool].engine_fn()(ledger=str(tmp_path / "l.db"))
    assert str(exc.value) == f"{tool}: invalid argument(s): " + "; ".join(f"{f}: Field required" for f in required)
    assert not (tmp_path / "l.db").exists()  # refused before the ledger is opened


def test_reference_validator_passes() -> None:
    """tools/validate_skills.py: the Agent Skills reference validator on every skill (argument-hint,
    a Claude Code field, checked apart) finds nothing."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("validate_skills", ROOT / "tools" / "validate_skills.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for skill in SKILLS:
        assert mod.validate(skill) == [], skill.name
    bad = ROOT / "skills" / "compare-kernels"
    meta, _ = frontmatter(bad)
    assert "argument-hint" in meta  # the field the wrapper takes apart is really there


@pytest.mark.skipif(not __import__("shutil").which("claude"), reason="Claude Code CLI not installed")
def test_claude_code_loads_the_skills(tmp_path: Path) -> None:
    """The real Claude Code CLI (no API key needed to load skills): inside a clean clone the three
    skills load from .claude/skills (plain /compare-kernels), and installed as a plugin from that
    clone they load as kernelscope:* skills."""
    import os
    import subprocess

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=60)
    # the plugin's server may start installing its venv: keep that offline so it fails fast, not downloads
    env = {**os.environ, "HOME": str(tmp_path / "home"), "KERNELSCOPE_PIP_ARGS": "--no-index"}
    env.pop("ANTHROPIC_API_KEY", None)
    run = dict(cwd=clone, env=env, capture_output=True, text=True, timeout=120)
    subprocess.run(["claude", "plugin", "marketplace", "add", str(clone)], check=True, **run)
    subprocess.run(["claude", "plugin", "install", "kernelscope@kernelscope"], check=True, **run)
    details = subprocess.run(["claude", "plugin", "details", "kernelscope"], check=True, **run).stdout
    assert "Skills (3)" in details and "kernel-timeline-analysis" in details
    log = tmp_path / "debug.log"
    subprocess.run(["claude", "-p", "hi", "--debug-file", str(log)], **run)  # fails at login: skills load first
    text = log.read_text()
    assert re.search(r"Loaded 3 unique skills .*project: 3", text), "the .claude/skills links did not load"
    assert "Total plugin skills loaded: 3" in text
    for name in ("compare-kernels", "kernel-compass", "kernel-timeline-analysis"):
        assert f'"kernelscope:{name}"' in text
