"""Experiences as plain text (terminal, pipes) and as HTML (the web viewer).

In HTML each response token is a box with its logprob underneath, shaded by its
probability ``exp(logprob)``: green near 1, red near 0; tokens outside ``action_mask``
are struck through, and hovering shows id, logprob, probability and advantage. A row
that is not a stored experience is shown in its place as its one-line problem.
"""

from __future__ import annotations

import html
import json
import math
from urllib.parse import urlencode

from trinity.view.records import ExperienceView, Row, RowProblem, json_safe


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


# ---- plain text ----


def experience_text(view: ExperienceView, token_limit: int | None = None) -> str:
    """A few lines per experience; tokens as ``text(logprob)``."""
    head = (
        f"#{view.index}  eid {view.eid}  model_version {view.model_version}  "
        f"reward {fmt(view.reward)}  mean logprob {fmt(view.mean_logprob)}"
    )
    lines = [head, "prompt:", _indent(view.prompt), "response:", _indent(view.response)]
    if view.images:
        lines.append(f"images: {', '.join(_clip(ref, 60) for ref in view.images)}")
    shown = view.tokens if token_limit is None else view.tokens[:token_limit]
    if shown:
        cells = [f"{t.text!r}({fmt(t.logprob, 2)}){'' if t.trained else '*'}" for t in shown]
        more = len(view.tokens) - len(shown)
        tail = f" ... {more} more" if more > 0 else ""
        lines += ["tokens (text(logprob), * = not trained):", _indent(" ".join(cells) + tail)]
    if view.metrics:
        lines.append(f"metrics: {json.dumps(json_safe(view.metrics), sort_keys=True)}")
    return "\n".join(lines)


def page_text(rows: list[Row], total: int, source: str) -> str:
    if not rows:
        return f"{source}: {total} experiences; nothing at this offset\n"
    first, last = rows[0].index, rows[-1].index
    header = f"{source}: experiences {first}-{last} of {total}"
    texts = [
        f"#{r.index}  {r.message}"
        if isinstance(r, RowProblem)
        else experience_text(r, token_limit=64)
        for r in rows
    ]
    return "\n\n".join([header, *texts]) + "\n"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in (text or "").splitlines() or [""])


# ---- HTML ----

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
td.text { max-width: 32em; white-space: pre-wrap; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; background: #f6f6f6; padding: 8px; overflow-wrap: anywhere; }
.tok { display: inline-block; padding: 1px 3px; margin: 1px; border-radius: 3px;
       font-family: ui-monospace, monospace; white-space: pre; text-align: center; }
.tok .lp { display: block; font-size: 70%; color: #555; }
.untrained { text-decoration: line-through; opacity: 0.6; }
.nav a { margin-right: 1em; }
.problem { color: #a00; }
"""


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )


def _shade(logprob: float | None) -> str:
    if logprob is None or math.isnan(logprob):
        return "#e0e0e0"
    p = min(1.0, max(0.0, math.exp(logprob)))
    # hue 0 (red) at p = 0 to 120 (green) at p = 1
    return f"hsl({120 * p:.0f}, 70%, 80%)"


def token_html(view: ExperienceView) -> str:
    spans = []
    for t in view.tokens:
        prob = "-" if t.logprob is None else fmt(math.exp(t.logprob), 4)
        tip = (
            f"id {t.id} | logprob {fmt(t.logprob, 4)} | p {prob} | advantage {fmt(t.advantage, 4)}"
        )
        cls = "tok" if t.trained else "tok untrained"
        spans.append(
            f"<span class='{cls}' style='background:{_shade(t.logprob)}' "
            f"title='{html.escape(tip, quote=True)}'>{html.escape(t.text)}"
            f"<span class='lp'>{fmt(t.logprob, 2)}</span></span>"
        )
    return "".join(spans)


def list_html(views: list[Row], total: int, offset: int, limit: int, source: str) -> str:
    rows = []
    for v in views:
        if isinstance(v, RowProblem):
            rows.append(
                f"<tr><td>{v.index}</td>"
                f"<td class='problem' colspan='6'>{html.escape(v.message)}</td></tr>"
            )
            continue
        rows.append(
            "<tr>"
            f"<td><a href='/experience/{v.index}'>{v.index}</a></td>"
            f"<td>{html.escape(v.eid)}</td><td>{v.model_version}</td><td>{fmt(v.reward)}</td>"
            f"<td>{fmt(v.mean_logprob)}</td>"
            f"<td class='text'>{html.escape(_clip(v.prompt))}</td>"
            f"<td class='text'>{html.escape(_clip(v.response))}</td>"
            "</tr>"
        )
    nav = []
    if offset > 0:
        nav.append(
            f"<a href='/?{urlencode({'offset': max(0, offset - limit), 'limit': limit})}'>previous</a>"
        )
    if offset + limit < total:
        nav.append(f"<a href='/?{urlencode({'offset': offset + limit, 'limit': limit})}'>next</a>")
    shown = f"{offset}-{offset + len(views) - 1}" if views else "none"
    body = (
        f"<h1>Experiences</h1><p>{html.escape(source)}: {total} experiences, showing {shown}</p>"
        f"<p class='nav'>{''.join(nav)}</p>"
        "<table><tr><th>#</th><th>eid</th><th>model_version</th><th>reward</th>"
        "<th>mean logprob</th><th>prompt</th><th>response</th></tr>"
        f"{''.join(rows)}</table>"
    )
    return _page("trinity view", body)


def detail_html(view: Row, total: int) -> str:
    if isinstance(view, RowProblem):
        body = f"<p class='problem'>{html.escape(view.message)}</p>"
        return _page(f"experience {view.index}", _detail_nav(view.index, total) + body)
    facts = (
        f"eid {html.escape(view.eid)} &middot; model_version {view.model_version} &middot; "
        f"reward {fmt(view.reward)} &middot; mean logprob {fmt(view.mean_logprob)} &middot; "
        f"{len(view.tokens)} response tokens"
    )
    body = (
        f"{_detail_nav(view.index, total)}<h1>Experience {view.index}</h1><p>{facts}</p>"
        f"{images_html(view.images)}"
        f"<h2>Prompt</h2><pre>{html.escape(view.prompt)}</pre>"
        f"<h2>Response</h2><pre>{html.escape(view.response)}</pre>"
        "<h2>Response tokens</h2><p>shade: probability of the token under the rollout policy "
        "(green 1, red 0); struck through: not trained on (action_mask)</p>"
        f"<div>{token_html(view)}</div>"
        f"<h2>Metrics</h2><pre>{html.escape(json.dumps(json_safe(view.metrics), indent=2, sort_keys=True))}</pre>"
        f"<h2>Info</h2><pre>{html.escape(json.dumps(json_safe(view.info), indent=2, sort_keys=True))}</pre>"
    )
    return _page(f"experience {view.index}", body)


def images_html(images: list[str]) -> str:
    """The prompt's images: a PNG/JPEG data URL as an image, a path or URL as text (the
    viewer serves no files of its own machine)."""
    if not images:
        return ""
    shown = []
    for ref in images:
        if ref.startswith(("data:image/png;base64,", "data:image/jpeg;base64,")):
            shown.append(f"<img class='prompt-image' src='{html.escape(ref, quote=True)}'>")
        else:
            shown.append(f"<code>{html.escape(_clip(ref))}</code>")
    return f"<h2>Images</h2><p>{' '.join(shown)}</p>"


def _detail_nav(index: int, total: int) -> str:
    nav = []
    if index > 0:
        nav.append(f"<a href='/experience/{index - 1}'>previous</a>")
    nav.append(f"<a href='/?offset={index}'>list</a>")
    if index + 1 < total:
        nav.append(f"<a href='/experience/{index + 1}'>next</a>")
    return f"<p class='nav'>{''.join(nav)}</p>"


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
