"""Ledger exports: JSON (every record) and markdown (the experiment log a person reads)."""
from __future__ import annotations

import json
from typing import Any, Iterable, Optional

from mcp_server.ledger.models import CandidateView, LedgerShowResult, ProfileRow
from mcp_server.ledger.store import now_utc


def to_json(ledger: str, schema_version: int, shows: Iterable[LedgerShowResult]) -> str:
    doc = {"ledger": ledger, "schema_version": schema_version, "exported_at": now_utc(),
           "experiments": [s.model_dump(mode="json", exclude={"ledger", "warnings"}) for s in shows]}
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def _cell(text: Any, limit: int = 80) -> str:
    s = "" if text is None else str(text)
    s = " ".join(s.split()).replace("|", "\\|")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _code(text: Any) -> str:
    s = "" if text is None else str(text)
    return f"`{s.replace('`', '')}`" if s else ""


def _speedup(summary: Optional[dict[str, Any]]) -> str:
    if not summary:
        return ""
    med, lo, hi = summary.get("median"), summary.get("ci_low"), summary.get("ci_high")
    if not isinstance(med, (int, float)):
        return ""
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        conf = summary.get("confidence")
        c = f" ({conf:.0%})" if isinstance(conf, (int, float)) else ""
        return f"{med:.3f}× [{lo:.3f}, {hi:.3f}]{c}"
    return f"{med:.3f}×"


def _kernel_rows(classification: Any) -> list[dict[str, Any]]:
    """Per-kernel (name, class, limiter, l2_resident, confidence, share) from the shapes the loop and the
    ncu tools record: ``{"kernels": [{"name", "class"|"bottleneck": {...}, ...}]}``."""
    if not isinstance(classification, dict) or not isinstance(classification.get("kernels"), list):
        return []
    rows = []
    for k in classification["kernels"]:
        if not isinstance(k, dict):
            continue
        b: dict[str, Any] = k["bottleneck"] if isinstance(k.get("bottleneck"), dict) else k
        rows.append({"name": k.get("short_name") or k.get("name"), "class": b.get("class"),
                     "limiter": b.get("limiter"), "l2_resident": b.get("l2_resident"),
                     "confidence": b.get("confidence"), "share": k.get("share")})
    return rows


def _profile(p: ProfileRow, out: list[str], base: Optional[str] = None) -> None:
    rel = _rel(p.report_path, base)
    name = (rel if rel != p.report_path else p.report_path.rsplit("/", 1)[-1]) if p.report_path else "(no report)"
    out += [f"### Profile {p.id}: {_code(name)}", ""]
    meta = [p.created_at]
    if p.report_sha256:
        meta.append(f"sha256 `{p.report_sha256[:16]}`")
    if p.note:
        meta.append(_cell(p.note, 200))
    out += [" · ".join(meta), ""]
    cls = p.classification
    rows = _kernel_rows(cls)
    if isinstance(cls, dict) and cls.get("cache_control") is not None:
        out += [f"Profiled with `--cache-control {cls['cache_control']}`"
                + (" (warm: residency verdicts valid)." if cls["cache_control"] == "none"
                   else " (cold: residency unknown)."), ""]
    if rows:
        out.append("| kernel | class | limiter | L2-resident | confidence | time share |")
        out.append("|---|---|---|---|---|---|")
        for r in rows:
            res = {True: "yes", False: "no"}.get(r["l2_resident"], "unknown")
            conf = f"{r['confidence']:.2f}" if isinstance(r["confidence"], (int, float)) else ""
            share = f"{r['share']:.1%}" if isinstance(r["share"], (int, float)) else ""
            out.append(f"| {_code(_cell(r['name'], 60))} | {_cell(r['class'])} | {_cell(r['limiter'])} | {res} "
                       f"| {conf} | {share} |")
        out.append("")
    if isinstance(cls, dict) and cls.get("candidate"):
        out += [f"Selected: {_code(cls['candidate'])}"
                + (f": {_cell(cls.get('diagnosis'), 300)}" if cls.get("diagnosis") else ""), ""]
        for label, key in (("Changes that fit", "fits"), ("Changes that do not", "does_not_fit")):
            kinds = cls.get(key)
            if isinstance(kinds, list) and kinds:
                out += [f"{label}: " + "; ".join(_cell(k, 160) for k in kinds) + ".", ""]
    elif cls is not None and not rows:
        text = json.dumps(cls, indent=1)
        if len(text) > 2000:
            text = text[:2000] + "\n…"
        out += ["```json", text, "```", ""]


def _rel(path: Optional[str], base: Optional[str]) -> Optional[str]:
    """A path under the experiment's directory, shown relative to it."""
    if not path or not base:
        return path
    b = base.rstrip("/") + "/"
    return path[len(b):] if path.startswith(b) else path


def _candidate(v: CandidateView, out: list[str], base: Optional[str] = None) -> None:
    c = v.candidate
    title = f"### Candidate {c.id}: {_code(c.proposal_id) or 'proposal'}"
    if c.kernel:
        title += f" on {_code(_cell(c.kernel, 80))}"
    out += [title, ""]
    if c.proposal:
        out += ["> " + line for line in c.proposal.strip().splitlines()] + [""]
    if c.diagnosis:
        out.append(f"- diagnosis: {_cell(c.diagnosis, 600)}")
    if c.change_kind == "file":
        out.append(f"- change: file swap of {_code(_rel(c.change_target, base))} with "
                   f"{_code(_rel(c.change_path, base))}"
                   + (f" (sha256 `{c.change_sha256[:16]}`)" if c.change_sha256 else ""))
    elif c.change_kind == "patch":
        out.append(f"- change: git patch {_code(_rel(c.change_path, base))}"
                   + (f" (sha256 `{c.change_sha256[:16]}`)" if c.change_sha256 else "")
                   + (f" on {_code(_rel(c.change_target, base))}" if c.change_target else ""))
    else:
        out.append("- change: none applied (the candidate spec names the new kernel)")
    if c.spec is not None:
        spec = _rel(c.spec, base) if isinstance(c.spec, str) else json.dumps(c.spec, sort_keys=True)
        out.append(f"- spec: {_code(_cell(spec, 300))}")
    for val in v.validations:
        r = val.result if isinstance(val.result, dict) else {}
        corr = r.get("correctness") or {}
        parts = [f"**{val.verdict}**"]
        sp = _speedup(r.get("speedup"))
        if sp:
            parts.append(f"speedup {sp}")
        if corr.get("passed") is not None:
            parts.append("correct" if corr.get("passed") else "INCORRECT")
        if isinstance(corr.get("max_abs_err"), (int, float)):
            parts.append(f"max abs err {corr['max_abs_err']:.3g}")
        timing = r.get("timing") or {}
        for k in ("cache", "samples", "rounds"):
            if timing.get(k) is not None:
                parts.append(f"{k} {timing[k]}")
        out.append(f"- validation {val.id} ({val.created_at}): " + ", ".join(parts))
        for reason in (r.get("reasons") or [])[:6]:
            out.append(f"  - {_cell(reason, 300)}")
    for d in v.decisions:
        out.append(f"- decision: **{d.decision}** by {_cell(d.by, 40)} ({d.created_at}): {_cell(d.why, 400)}")
    if not v.decisions:
        out.append("- decision: *pending* (the loop stopped before deciding; it resumes here)")
    if c.change_text:
        lines = c.change_text.splitlines()
        shown = "\n".join(lines[:60]) + ("\n… (%d more lines)" % (len(lines) - 60) if len(lines) > 60 else "")
        out += ["", "<details><summary>patch</summary>", "", "```diff", shown, "```", "", "</details>"]
    out.append("")


def _env_line(env: dict[str, Any]) -> str:
    return ", ".join(f"{k} {env[k]}" for k in ("python", "torch", "triton", "ncu", "kernelscope") if env.get(k))


def experiment_markdown(s: LedgerShowResult) -> list[str]:
    e, sm = s.experiment, s.summary
    out = [f"## Experiment {e.id}: {_code(' '.join(e.target))}", ""]
    out += ["| | |", "|---|---|", f"| started | {e.created_at} |"]
    if e.repo or e.git_rev:
        dirty = {True: " (uncommitted changes)", False: " (clean)", None: ""}[e.git_dirty]
        out.append(f"| repository | {_code(e.repo)} at `{(e.git_rev or '?')[:12]}`{dirty} |")
    gpu = e.env.get("gpu")
    if gpu or e.env.get("driver"):
        out.append(f"| GPU | {_cell(gpu) or 'unknown'}" + (f", driver {e.env['driver']}" if e.env.get("driver") else "")
                   + " |")
    else:
        out.append(f"| GPU | none found ({_cell(e.env.get('gpu_source'))}) |")
    out.append(f"| versions | {_env_line(e.env)} |")
    out.append(f"| outcome | {sm.accepted} accepted, {sm.reverted} reverted, {sm.abandoned} abandoned, "
               + (f"{sm.error} error, " if sm.error else "") + f"{sm.pending} pending |")
    if e.note:
        out.append(f"| note | {_cell(e.note, 300)} |")
    out.append("")
    if s.candidates:
        out += ["| candidate | proposal | kernel | verdict | speedup [CI] | decision | why |",
                "|---|---|---|---|---|---|---|"]
        for v in s.candidates:
            val = v.validations[-1] if v.validations else None
            r = val.result if val and isinstance(val.result, dict) else {}
            why = v.decisions[-1].why if v.decisions else ""
            c = v.candidate
            out.append(f"| {c.id} | {_code(c.proposal_id)} | {_code(_cell(c.kernel, 50))} "
                       f"| {val.verdict if val else ''} | {_speedup(r.get('speedup'))} | {v.status} "
                       f"| {_cell(why, 100)} |")
        out.append("")
    # records in the order they were written
    events: list[tuple[str, int, Any]] = [(p.created_at, 0, p) for p in s.profiles]
    events += [(v.candidate.created_at, 1, v) for v in s.candidates]
    for _, _, item in sorted(events, key=lambda t: (t[0], t[1])):
        if isinstance(item, ProfileRow):
            _profile(item, out, e.cwd)
        else:
            _candidate(item, out, e.cwd)
    return out


def to_markdown(ledger: str, shows: list[LedgerShowResult]) -> str:
    out = ["# Experiment log", "",
           f"Ledger `{ledger}`, {len(shows)} experiment{'s' if len(shows) != 1 else ''}, exported {now_utc()} "
           "by `kernelscope ledger export`.", "",
           "Each experiment is one target; each candidate one proposed change, validated by "
           "`validate_candidate` (correct on fresh inputs, faster with the speedup's confidence interval above "
           "the threshold) and then accepted, or reverted so the baseline stays in place.", ""]
    for s in shows:
        out += experiment_markdown(s)
    return "\n".join(out).rstrip() + "\n"
