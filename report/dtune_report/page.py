"""The report as a list of blocks, rendered twice: report.md (Markdown) and report.html (one
self-contained page, figures embedded as PNG). Blocks:

    ("h", level, text, anchor)         a heading with an id to link to
    ("p", inline)                      a paragraph
    ("ul", [inline, ...])              a list
    ("table", DataFrame, caption)      values already formatted as text
    ("copy", text, caption)            a block to paste into a shell (class "copy")
    ("pre", text)                      a preformatted file (nccl_tuner.conf)
    ("figure", key, path, caption)     a PNG with its caption

Inline text is a list of parts: a str, ("b", text), ("code", text) or ("a", text, "#anchor").
Recorded values are data: Markdown escapes them (tables.md_text), HTML escapes them."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from .tables import md_code, md_text


def _md_inline(parts) -> str:
    out = []
    for p in [parts] if isinstance(parts, str) else parts:
        if isinstance(p, str):
            out.append(md_text(p))
        elif p[0] == "b":
            out.append(f"**{md_text(p[1])}**")
        elif p[0] == "code":
            ticks = "`" * (max((len(m) for m in re.findall(r"`+", p[1])), default=0) + 1)
            pad = " " if p[1].startswith("`") or p[1].endswith("`") else ""
            out.append(f"{ticks}{pad}{p[1]}{pad}{ticks}")
        elif p[0] == "a":
            out.append(f"[{md_text(p[1])}]({p[2]})")
    return "".join(out)


def _html_inline(parts) -> str:
    out = []
    for p in [parts] if isinstance(parts, str) else parts:
        if isinstance(p, str):
            out.append(html.escape(p))
        elif p[0] == "b":
            out.append(f"<b>{html.escape(p[1])}</b>")
        elif p[0] == "code":
            out.append(f"<code>{html.escape(p[1])}</code>")
        elif p[0] == "a":
            out.append(f"<a href='{html.escape(p[2])}'>{html.escape(p[1])}</a>")
    return "".join(out)


def _md_table(df) -> list:
    if df.empty:
        return ["(none)", ""]
    lines = ["| " + " | ".join(map(md_text, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(md_text(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return lines + [""]


def render_md(blocks) -> str:
    out = []
    for b in blocks:
        kind = b[0]
        if kind == "h":
            out += [f"<a id='{b[3]}'></a>" if b[3] else "", f"{'#' * b[1]} {md_text(b[2])}", ""]
        elif kind == "p":
            out += [_md_inline(b[1]), ""]
        elif kind == "ul":
            out += [f"- {_md_inline(i)}" for i in b[1]] + [""]
        elif kind == "table":
            out += ([f"*{md_text(b[2])}*", ""] if b[2] else []) + _md_table(b[1])
        elif kind in ("copy", "pre"):
            out += ([f"*{md_text(b[2])}*", ""] if kind == "copy" and b[2] else []) + md_code(b[1]) + [""]
        elif kind == "figure":
            out += [f"![{b[1]}]({Path(b[2]).name})", "", f"*{md_text(b[3])}*", ""]
    return "\n".join(line for line in out if line is not None)


_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 12px;line-height:1.4}"
    "table{border-collapse:collapse;display:block;max-width:100%;overflow-x:auto}"
    "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left}"
    "pre{background:#f4f4f4;padding:6px;white-space:pre-wrap;overflow-wrap:anywhere;max-width:100%}"
    "pre.copy{border-left:4px solid #4a7}code{background:#f4f4f4;overflow-wrap:anywhere}"
    "img{max-width:100%;height:auto}figcaption,.caption{font-size:13px;color:#444}"
    "#summary{background:#f7faf7;border:1px solid #cdc;padding:4px 16px}"
)


def render_html(blocks, title: str = "dtune report") -> str:
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<meta name='viewport' content='width=device-width'><style>{_STYLE}</style></head><body>",
    ]
    open_div = False
    for b in blocks:
        kind = b[0]
        if kind == "h":
            if b[1] <= 2 and open_div:
                parts.append("</div>")
                open_div = False
            if b[1] == 2 and b[3]:
                parts.append(f"<div class='section' id='{html.escape(b[3])}'>")
                open_div = True
                parts.append(f"<h2>{html.escape(b[2])}</h2>")
            else:
                anchor = f" id='{html.escape(b[3])}'" if b[3] else ""
                parts.append(f"<h{b[1]}{anchor}>{html.escape(b[2])}</h{b[1]}>")
        elif kind == "p":
            parts.append(f"<p>{_html_inline(b[1])}</p>")
        elif kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{_html_inline(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            caption = f"<caption class='caption'>{html.escape(b[2])}</caption>" if b[2] else ""
            head = "".join(f"<th>{html.escape(str(c))}</th>" for c in b[1].columns)
            body = "".join(
                "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                for row in b[1].itertuples(index=False)
            )
            parts.append(f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "copy":
            if b[2]:
                parts.append(f"<p class='caption'>{html.escape(b[2])}</p>")
            parts.append(f"<pre class='copy'>{html.escape(b[1])}</pre>")
        elif kind == "pre":
            parts.append(f"<pre>{html.escape(b[1])}</pre>")
        elif kind == "figure":
            data = base64.b64encode(Path(b[2]).read_bytes()).decode()
            parts.append(
                f"<figure><img id='{html.escape(b[1])}' alt='{html.escape(b[1])}' "
                f"src='data:image/png;base64,{data}'><figcaption>{html.escape(b[3])}</figcaption></figure>"
            )
    if open_div:
        parts.append("</div>")
    # For headless checks: after load, record in the DOM each image's decoded size, the sections,
    # the elements wider than the page, and the text of every copy block.
    parts.append(
        "<script>window.addEventListener('load',()=>{const W=document.documentElement.clientWidth;"
        "const d=document.body.dataset;"
        "d.images=JSON.stringify([...document.images].map(i=>[i.id,i.complete,i.naturalWidth,i.naturalHeight]));"
        "d.sections=JSON.stringify([...document.querySelectorAll('.section')].map(s=>s.id));"
        "d.wide=JSON.stringify([...document.body.querySelectorAll('*')].filter(e=>"
        "e.getBoundingClientRect().right>W+1).map(e=>e.tagName+'#'+e.id));"
        "d.copies=JSON.stringify([...document.querySelectorAll('pre.copy')].map(p=>p.textContent));});</script>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)
