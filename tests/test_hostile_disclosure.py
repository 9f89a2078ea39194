"""Disclosure (issue 21): a caller-named file that is not what the tool reads, or a registry pointing at an
environment variable, never gets its content or the variable's value into an answer or an error, on either
face (CLI here, the MCP server over stdio), and the server keeps serving after each call. Reproducers come
from tools/make_hostile_inputs.py ("disclosure and bounds")."""
from __future__ import annotations

import sys

import pytest
from conftest import TRACES
from hostile_faces import HOSTILE, ROOT, blob, cli, cli_error, mcp_session

from mcp_server.core.errors import CategoriesError, InputError, redact

sys.path.insert(0, str(ROOT / "tools"))
from make_hostile_inputs import SECRET_MARK  # noqa: E402

SDPA = str(TRACES / "llama_prefill_sdpa.json.gz")
PROBE = str(ROOT / "tests" / "fixtures" / "timeline" / "balanced_probe.bin")
AWS_VALUE = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
SECRET_ENV = {"AWS_SECRET_ACCESS_KEY": AWS_VALUE, "KS_HOSTILE_CHECKOUT": f"/tmp/{SECRET_MARK}-not-a-checkout"}
SECRETS = (SECRET_MARK, AWS_VALUE)


def _clean(text: str) -> None:
    for s in SECRETS:
        assert s not in text, f"{s} in {text[:300]}"


# (CLI args, MCP call, words the one-line error must hold); None: the call answers (no error)
CASES = {
    "blocks_passwd": (["compare", SDPA, SDPA, "--blocks", str(HOSTILE / "categories_passwd.csv")],
                      ("diff_modules", {"a": SDPA, "b": SDPA, "blocks": str(HOSTILE / "categories_passwd.csv")}),
                      ("categories_passwd.csv", "line 1: not a header naming the columns 'pattern', 'block'")),
    "blocks_bad_regex": (["compare", SDPA, SDPA, "--blocks", str(HOSTILE / "blocks_bad_regex.csv")],
                         ("diff_modules", {"a": SDPA, "b": SDPA, "blocks": str(HOSTILE / "blocks_bad_regex.csv")}),
                         ("line 4, column 22: bad regex: missing ), unterminated subpattern",)),
    "blocks_short_row": (["compare", SDPA, SDPA, "--blocks", str(HOSTILE / "blocks_short_row.csv")],
                         ("diff_modules", {"a": SDPA, "b": SDPA, "blocks": str(HOSTILE / "blocks_short_row.csv")}),
                         ("line 3: 1 field(s)",)),
    "categories_passwd": (["analyze", SDPA, "--categories", str(HOSTILE / "categories_passwd.csv")],
                          ("analyze_trace", {"trace_path": SDPA,
                                             "categories": str(HOSTILE / "categories_passwd.csv")}),
                          ("line 1: not a header naming the columns 'category', 'pattern'",)),
    "events_passwd": (["timeline", "analyze", PROBE, "--event-names", str(HOSTILE / "events_passwd.events")],
                      ("analyze_timeline", {"buffer_path": PROBE,
                                            "event_names": str(HOSTILE / "events_passwd.events")}),
                      ("events_passwd.events", "line 1 is not an event name")),
    "spec_secret_value": (["validate", str(HOSTILE / "spec_secret_value.toml")],
                          ("validate_candidate", {"spec_path": str(HOSTILE / "spec_secret_value.toml")}),
                          ("'mode' must be one of ab, aa, got a string of 21 character(s)",)),
    "overhead_secret_value": (["timeline", "analyze", PROBE, "--overhead-path",
                               str(HOSTILE / "overhead_secret_value.json")],
                              ("analyze_timeline", {"buffer_path": PROBE,
                                                    "overhead_path": str(HOSTILE / "overhead_secret_value.json")}),
                              ("not a probe overhead file (a value that is not a finite number)",)),
    "registry_secret_env": (["refs", "moe_sorting", "--registry", str(HOSTILE / "registry_env_secret.md")],
                            ("find_references", {"keyword": "moe_sorting",
                                                 "registry": str(HOSTILE / "registry_env_secret.md")}),
                            ("registry_env_secret.md:5", "env AWS_SECRET_ACCESS_KEY names a credential variable")),
    "registry_plain_env": (["refs", "moe_sorting", "--registry", str(HOSTILE / "registry_env_plain.md"), "--json",
                            "--no-cache", "--timeout", "10"],
                           ("find_references", {"keyword": "moe_sorting", "no_cache": True, "timeout_s": 10,
                                                "registry": str(HOSTILE / "registry_env_plain.md")}),
                           None),
}


@pytest.fixture
def secret_env(monkeypatch):
    for k, v in SECRET_ENV.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("name", list(CASES))
def test_cli_never_echoes_the_file_or_the_variable(name, secret_env, capsys):
    args, _, words = CASES[name]
    if words is None:
        code, out, err = cli(args, capsys)
        assert code == 0, err
        _clean(out + err)
        assert "KS_HOSTILE_CHECKOUT does not name a git checkout" in out
        return
    msg = cli_error(args, capsys)
    _clean(msg)
    for w in words:
        assert w in msg, msg


def test_mcp_never_echoes_the_file_or_the_variable_and_keeps_serving():
    got = mcp_session([CASES[n][1] for n in CASES], env=SECRET_ENV)
    for name, (is_error, text, data) in zip(CASES, got):
        _clean(blob(text, data))
        words = CASES[name][2]
        if words is None:
            assert not is_error, text
            assert data["sections"][0]["reason"] == "KS_HOSTILE_CHECKOUT does not name a git checkout"
            continue
        assert is_error and "\n" not in text, (name, text)
        for w in words:
            assert w in text, (name, text)


def test_same_error_text_on_both_faces(secret_env, capsys):
    """The CLI's line (after ``error: ``) is the MCP tool error's text, for a disclosure case."""
    args, call, _ = CASES["blocks_bad_regex"]
    line = cli_error(args, capsys)
    ((is_error, text, _),) = mcp_session([call])
    assert is_error and text == line


def test_regex_errors_name_line_and_column_never_the_pattern(tmp_path):
    from mcp_server.core.categories import load_categories

    p = tmp_path / "cats.csv"
    p.write_text(f'category,pattern\ngemm,gemm\n"quoted,{SECRET_MARK}",a){SECRET_MARK}\n')
    with pytest.raises(CategoriesError) as ei:
        load_categories(p)
    msg = str(ei.value)
    assert "line 3, character 2 of the pattern: bad regex: unbalanced parenthesis" in msg and SECRET_MARK not in msg


def test_gpu_spec_values_are_never_echoed(monkeypatch, tmp_path):
    from mcp_server.core.gpu_specs import GpuSpecError, load_gpu_specs

    (tmp_path / "gpu_specs.toml").write_text((HOSTILE / "gpu_specs_token.toml").read_text())
    with pytest.raises(GpuSpecError) as ei:
        load_gpu_specs(tmp_path / "gpu_specs.toml")
    assert str(ei.value).endswith("[registry] token is not a number (a str) (values are plain numbers in the unit "
                                  "their name says)")
    assert SECRET_MARK not in str(ei.value)


def test_jira_site_variable_value_is_never_shown(monkeypatch, tmp_path):
    from mcp_server.refs import find_references

    reg = tmp_path / "reg.md"
    reg.write_text("| key | kind | repo | env | package | jql_project | enabled |\n|---|---|---|---|---|---|---|\n"
                   "| j | jira | | KS_HOSTILE_SITE | | | yes |\n")
    monkeypatch.setenv("KS_HOSTILE_SITE", f"ftp://{SECRET_MARK}")
    sec = find_references("moe", registry=str(reg), timeout_s=5).sections[0]
    assert sec.reason == "KS_HOSTILE_SITE is not an http(s) URL" and SECRET_MARK not in sec.model_dump_json()
    with pytest.raises(InputError, match="JIRA_EMAIL names a credential variable"):
        reg.write_text(reg.read_text().replace("KS_HOSTILE_SITE", "JIRA_EMAIL"))
        find_references("moe", registry=str(reg), timeout_s=5)


# ----------------------------------------------------------------------------- redaction keeps prose


def test_a_file_named_token_keeps_its_error_words_on_both_faces(tmp_path, capsys):
    """A spec file named ``token`` that is not TOML: "token: not valid TOML" used to read "token: *** valid TOML"."""
    spec = tmp_path / "token"
    spec.write_text("this is [not toml\n")
    line = cli_error(["validate", str(spec)], capsys)
    assert f"{spec}: not valid TOML" in line and "***" not in line
    ((is_error, text, _),) = mcp_session([("validate_candidate", {"spec_path": str(spec)})])
    assert is_error and text == line


# ----------------------------------------------------------------------------- the CLI's error line


@pytest.mark.parametrize("name", ["[bold]x:x:.json", ":x: [red]boom[/red].json", "a\nb.json", "esc\x1b[31m.json"])
def test_error_line_is_plain_text_and_one_line(tmp_path, name, capsys):
    p = tmp_path / name
    line = cli_error(["analyze", str(p)], capsys)
    shown = str(p).replace("\n", "\\n").replace("\x1b", "\\x1b")
    assert shown in line, line  # markup and emoji codes printed as they are, controls escaped
    assert "❌" not in line and "\x1b" not in line


def test_mcp_error_with_a_newline_in_the_path_is_one_line(tmp_path):
    p = tmp_path / "a\nb.json"
    ((is_error, text, _),) = mcp_session([("analyze_trace", {"trace_path": str(p)})])
    assert is_error and "\n" not in text and str(p).replace("\n", "\\n") in text


def test_redaction_applies_to_the_error_line(monkeypatch, capsys):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_VALUE)
    line = cli_error(["analyze", f"/nonexistent/{AWS_VALUE}.json"], capsys)
    assert AWS_VALUE not in line and "/nonexistent/***.json" in line
    assert redact("not valid TOML") == "not valid TOML"


def test_text_views_print_names_as_they_are(tmp_path, capsys):
    """A trace named with an emoji code and markup: the rendered view shows the name, not an emoji."""
    import shutil

    p = tmp_path / "t :x: [bold].json.gz"
    shutil.copy(SDPA, p)
    for args in (["analyze", str(p)], ["compare", str(p), SDPA]):
        code, out, err = cli([*args, "--width", "200"], capsys)
        assert code == 0, err
        assert str(p) in out and "❌" not in out
