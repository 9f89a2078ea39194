"""Results sized for an agent's context: the summary every tool answers by default.

``trim(result, top_n)`` keeps the first ``top_n`` rows of every top-level list
of the result and the first ``nested_rows(top_n)`` rows of lists inside those
rows (engines sort their lists largest-first, so the first rows are the ones
that matter), rounds floats to 6 significant digits, shortens names longer
than ``MAX_TEXT`` characters inside list rows (templated C++ kernel names run
to 800; messages and paths are never cut), and appends one
``summary_truncated`` warning that names each trimmed list with how many rows
it held. A result model may define ``summary_view(top_n) -> (model, note | None)``, applied first, for
a cut the generic rule cannot make (a trace set's per-rank maps keep only the ranks the summary shows);
its note joins the warning. Lists an agent needs whole to read the rest (warnings, labels,
advice) are never trimmed. The full result is one ``detail=true`` away, and
the files an operation writes always hold every row. See
docs/ARCHITECTURE.md, "Result size".
"""
from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from mcp_server.core.models import Warning_
from mcp_server.core.vocab import WarningCode

M = TypeVar("M", bound=BaseModel)

#: List fields kept whole: they are small and the rest of the answer refers to them.
KEEP_WHOLE = frozenset({
    "warnings", "event_names", "labels", "outcomes", "unanswered", "phases_present", "reasons", "checks",
    "evidence", "advice", "duration_ns", "module_types", "kernels_involved", "fits", "does_not_fit",
})


#: Strings longer than this are shortened in a summary (the full text is one detail=true away).
MAX_TEXT = 100


def nested_rows(top_n: int) -> int:
    """Rows kept in a list that sits inside a row of another list."""
    return max(3, top_n // 2)


def trim(result: M, top_n: int, label: str = "summary") -> M:
    """A copy of ``result`` cut to a summary, with a warning saying what was cut (its text starts with
    ``label``)."""
    cut: dict[str, list[int]] = {}
    trimmed = _trim_model(result, top_n, "", cut)
    if not cut or "warnings" not in type(result).model_fields:
        return trimmed
    parts = []
    for path, sizes in cut.items():
        if path.startswith("<note>"):
            parts.append(path.removeprefix("<note>"))
            continue
        if path == "<text>":
            parts.append(f"{len(sizes)} strings shortened to {MAX_TEXT} characters")
            continue
        kept = top_n if "[*]" not in path else nested_rows(top_n)
        if len(sizes) == 1:
            parts.append(f"{path}: {kept} of {sizes[0]}")
        else:
            parts.append(f"{path}: {kept} of up to {max(sizes)} in {len(sizes)} lists")
    warning = Warning_(
        code=WarningCode.summary_truncated,
        message=(label + " (top_n=" + str(top_n) + "): " + "; ".join(parts)
                 + "; pass detail=true (CLI --detail) or a larger top_n for every row"),
    )
    return trimmed.model_copy(update={"warnings": [*trimmed.warnings, warning]})  # type: ignore[attr-defined]


def _is_name(path: str) -> bool:
    """Kernel and module names (``name``, ``a_name``, ``kernel``, ``kernels[*]``, ``top_kernel``): the long strings."""
    leaf = path.rsplit(".", 1)[-1].replace("[*]", "")
    return "name" in leaf or "kernel" in leaf


def _trim_model(model: M, top_n: int, path: str, cut: dict[str, list[int]]) -> M:
    hook = getattr(model, "summary_view", None)
    if callable(hook):  # a result that knows a narrower summary of its own (e.g. rank maps of a trace set)
        model, note = hook(top_n)
        if note:
            cut.setdefault(f"<note>{path or 'result'}: {note}", []).append(0)
    update: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        sub = f"{path}.{name}" if path else name
        new = _trim_value(value, top_n, sub, cut, keep=name in KEEP_WHOLE)
        if new is not value:
            update[name] = new
    return model.model_copy(update=update) if update else model


def _trim_value(value: Any, top_n: int, path: str, cut: dict[str, list[int]], *, keep: bool) -> Any:
    if isinstance(value, BaseModel):
        return value if keep else _trim_model(value, top_n, path, cut)
    if isinstance(value, float):
        return float(f"{value:.6g}")  # 6 significant digits: 33.254999999999995 -> 33.255
    if isinstance(value, str):
        # only text inside list rows (kernel names); paths and top-level text stay whole
        if keep or len(value) <= MAX_TEXT or "[*]" not in path or not _is_name(path):
            return value
        cut.setdefault("<text>", []).append(len(value))
        return value[: MAX_TEXT - 1] + "…"
    if isinstance(value, list):
        rows = value
        limit = top_n if "[*]" not in path else nested_rows(top_n)
        if not keep and len(rows) > limit:
            cut.setdefault(path, []).append(len(rows))
            rows = rows[:limit]
        inner = [_trim_value(v, top_n, f"{path}[*]", cut, keep=keep) for v in rows]
        if len(inner) != len(value) or any(a is not b for a, b in zip(inner, value)):
            return inner
        return value
    if isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
        new = {k: _trim_model(v, top_n, f"{path}[{k}]", cut) for k, v in value.items()}
        return new if any(new[k] is not value[k] for k in value) else value
    return value


# --------------------------------------------------------------------------- the message a client receives

#: What one default ``tools/call`` answer may weigh as the client receives it: the JSON-RPC message with
#: the structured content and the text block together (bench/bench_answer_size.py measures it).
ANSWER_BUDGET = 16 * 1024
#: The JSON-RPC wrapper around the two (``jsonrpc``, ``id``, ``result``, ``content``, ``isError``, ...).
ENVELOPE = 320

TEXT_VIEW = "text view, narrower than the structured content"


def compact_json(data: Any) -> str:
    import json

    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _wire(text: str) -> int:
    """Bytes of ``text`` sent as a JSON string (quotes and escapes included)."""
    import json

    return len(json.dumps(text, ensure_ascii=False).encode())


def text_content(answer: BaseModel, structured: dict[str, Any], top_n: int | None, detail: bool) -> str:
    """The text block sent beside the structured content of a tool's answer.

    The MCP specification asks a tool that returns structured content to also return it serialized as
    JSON in a text block, for clients that read only text; clients that read ``structuredContent``
    (Claude Code does, and then ignores the text) would get every byte twice. So the text is the
    compact JSON of the answer when the whole message stays within ``ANSWER_BUDGET`` (or when the call
    asked for ``detail``: everything, as asked); otherwise the compact JSON of the same answer cut to a
    smaller ``top_n``, with a ``summary_truncated`` warning that says it is the text view; failing
    that, one line pointing at the structured content."""
    text = compact_json(structured)
    room = ANSWER_BUDGET - ENVELOPE - len(text.encode())
    if detail or _wire(text) <= room:
        return text
    n = top_n or 10
    while n > 1:
        n = max(1, n // 2)
        view = trim(answer, n, label=TEXT_VIEW)
        text = compact_json(view.model_dump(mode="json", by_alias=True))
        if _wire(text) <= room:
            return text
    size = len(compact_json(structured).encode()) / 1024
    return (f"The answer is in this result's structured content ({size:.1f} KB): a second copy as text would "
            f"take the message past its {ANSWER_BUDGET // 1024} KB budget.")
