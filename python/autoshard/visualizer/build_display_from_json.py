"""`generate_visualization_html(data)`: the self-contained HTML page of a plan.

`data` is what `ShardingOptimizer.get_json()` returns.  That dict remembers its optimizer, so
the page is autoshard's full report (src/report: graph per layer group, strategy tables, step
timeline, memory, hotspots), the same page as `autoshard plan -o DIR`'s report.html.  A dict
without its optimizer (plan.json read back from a file, or any dict in AutoParallel's get_json
schema: ../shared/reference/formats.md) gets a smaller page built here from its fields: the
summary, the mesh and a searchable node table with placements and costs.  Both pages are
self-contained (inline style and script, no network access).
"""
from __future__ import annotations

import html
import json
from typing import Any, Mapping

__all__ = ["generate_visualization_html"]


def generate_visualization_html(data: Mapping[str, Any]) -> str:
    """The HTML page (text) of a plan from its get_json() dict (see the module doc)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"generate_visualization_html: expected the dict get_json() returns, "
                        f"got {type(data).__name__}")
    render = getattr(data, "render_html", None)
    if callable(render):
        page = render()
        if page is not None:
            return page
    if not isinstance(data.get("nodes"), list):
        raise ValueError("generate_visualization_html: the dict has no 'nodes' list "
                         "(pass what ShardingOptimizer.get_json() returns)")
    return _summary_page(data)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}"
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


_STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:left}
th{background:#f3f3f3;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px}
.card b{display:block;font-size:18px}input{margin:8px 0;padding:4px;width:320px}.muted{color:#777}"""

_SCRIPT = """document.getElementById('q').addEventListener('input',function(e){
var q=e.target.value.toLowerCase();document.querySelectorAll('#nodes tbody tr').forEach(function(r){
r.style.display=r.textContent.toLowerCase().indexOf(q)<0?'none':'';});});"""


def _summary_page(data: Mapping[str, Any]) -> str:
    esc = html.escape
    mesh = data.get("mesh") or {}
    summary = data.get("summary") or {}
    title = f"plan: {data.get('graph', 'model')}"
    cards = "".join(f'<div class="card">{esc(str(k))}<b>{esc(_fmt(v))}</b></div>'
                    for k, v in summary.items() if not isinstance(v, (dict, list)))
    cols = ["name", "op", "phase", "placement", "compute_cost", "transition_cost", "comm_cost",
            "module_path"]
    rows = []
    for n in data["nodes"]:
        if not isinstance(n, Mapping):
            continue
        comm = n.get("comm_cost")
        if comm is None and isinstance(n.get("inputs"), list):
            comm = sum(float(i.get("comm_cost") or 0) for i in n["inputs"] if isinstance(i, Mapping))
        values = {**n, "comm_cost": comm,
                  "module_path": n.get("module_path", n.get("module", ""))}
        cells = "".join(
            f'<td class="num">{esc(_fmt(values.get(c)))}</td>' if isinstance(values.get(c), (int, float))
            else f"<td>{esc(_fmt(values.get(c)))}</td>" for c in cols)
        rows.append(f"<tr>{cells}</tr>")
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    mesh_text = f"mesh {_fmt(mesh.get('shape'))} {_fmt(mesh.get('dim_names'))}"
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<link rel="icon" href="data:,">\n<title>{esc(title)}</title>\n'
            f"<style>{_STYLE}</style>\n</head>\n<body>\n<h1>{esc(title)}</h1>\n"
            f'<div class="muted">{esc(mesh_text)}; costs in µs. Built from the JSON fields only; '
            f"ShardingOptimizer.get_json() of a live or loaded optimizer gives the full report."
            f"</div>\n<div class=\"cards\">{cards}</div>\n"
            f'<input id="q" placeholder="filter nodes"><table id="nodes"><thead><tr>{head}</tr>'
            f"</thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>\n"
            f"<script>{_SCRIPT}</script>\n"
            f'<script type="application/json" id="data">'
            + json.dumps(summary).replace("</", "<\\/") + "</script>\n</body>\n</html>\n")
