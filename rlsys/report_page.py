"""How `rlsys.report` draws its page: SVG line plots, the tables, and the HTML shell with its inline CSS
and JavaScript. Nothing here reads a run folder; everything on the page is inline, so it opens from disk
with no request of any kind."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, replace

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
MAIN_COLOR = "#111111"
MAX_PLOT_POINTS = 800  # a longer series keeps each bucket's min and max
MARKER_LIMIT = 60  # points per series up to which each point gets a marker with a tooltip


@dataclass
class PlotSpec:
    title: str
    series: list[tuple[str, list[tuple[float, float]]]]  # (label, [(iteration, value)]); the first may be `main`
    percent: bool = False
    main_first: bool = False  # draw the first series (the overall rate) bold and dark
    key: str = ""  # the metric a test or a reader finds the plot by


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def json_text(data) -> str:
    """Compact JSON with `<` escaped, so no text inside can close the script block that holds it."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def json_block(element_id: str, text: str, css_class: str = "") -> str:
    """Data for the page's script (`json_text`), inert until the script parses it."""
    cls = f' class="{css_class}"' if css_class else ""
    return f'<script type="application/json" id="{esc(element_id)}"{cls}>{text}</script>'


# ---------------------------------------------------------------------------------------------- plots


def format_number(value: float, percent: bool = False) -> str:
    if percent:
        return f"{100 * value:.0f}%" if abs(value * 100 - round(value * 100)) < 1e-9 else f"{100 * value:.1f}%"
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:.3g}k"
    return f"{value:.3g}"


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round-numbered ticks covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    if integer:
        step = max(1, round(step))
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 12))
    return ticks


def decimate(points: list[tuple[float, float]], limit: int = MAX_PLOT_POINTS) -> list[tuple[float, float]]:
    """At most ~`limit` points: each bucket keeps its lowest and highest value, in x order."""
    if len(points) <= limit:
        return points
    size = math.ceil(len(points) / (limit // 2))
    out = []
    for i in range(0, len(points), size):
        bucket = points[i : i + size]
        low, high = min(bucket, key=lambda p: p[1]), max(bucket, key=lambda p: p[1])
        out.extend(sorted({low, high}))
    return out


def series_color(spec: PlotSpec, i: int) -> str:
    return MAIN_COLOR if spec.main_first and i == 0 else PALETTE[(i - spec.main_first) % len(PALETTE)]


def line_plot(spec: PlotSpec, width: int = 460, height: int = 250) -> str:
    """One figure: an SVG line plot with axes, ticks, labels, and an HTML legend below it."""
    main_kept = spec.main_first and bool(spec.series[0][1])  # a plot without its overall line has no main one
    spec = replace(spec, series=[(lb, pts) for lb, pts in spec.series if pts], main_first=main_kept)
    series = [(label, decimate(sorted(points))) for label, points in spec.series]
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    left, right, top, bottom = 56, 14, 12, 38
    x_ticks = nice_ticks(min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1, 6, integer=True)
    if spec.percent:
        y_ticks = [0, 0.25, 0.5, 0.75, 1.0]
    else:
        lo, hi = min(ys), max(ys)
        lo = 0.0 if 0 <= lo <= 0.3 * hi else lo
        y_ticks = nice_ticks(lo, hi if hi > lo else lo + (abs(lo) or 1), 5)
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    sx = lambda x: left + (x - x0) / (x1 - x0) * (width - left - right)
    sy = lambda y: height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)
    parts = [
        f'<svg class="plot-svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(spec.title)}">',
        f'<rect class="plot-bg" x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}"/>',
    ]
    for t in y_ticks:
        y = sy(t)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{left - 5}" y="{y + 3.5:.1f}" text-anchor="end">'
            f"{format_number(t, spec.percent)}</text>"
        )
    for t in x_ticks:
        x = sx(t)
        parts.append(
            f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{height - bottom}" y2="{height - bottom + 4}"/>'
        )
        parts.append(f'<text class="tick" x="{x:.1f}" y="{height - bottom + 15}" text-anchor="middle">{t:g}</text>')
    parts.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}"/>')
    parts.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{height - bottom}"/>')
    parts.append(
        f'<text class="label" x="{(left + width - right) / 2:.1f}" y="{height - 4}" '
        f'text-anchor="middle">iteration</text>'
    )
    for i, (label, points) in enumerate(series):
        main = spec.main_first and i == 0
        color = series_color(spec, i)
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        parts.append(f'<g class="series{" main" if main else ""}" data-s="{i}" style="--c:{color}">')
        parts.append(f'<polyline points="{coords}"/>')
        if len(points) <= MARKER_LIMIT:
            for x, y in points:
                parts.append(
                    f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{3 if main else 2.3}">'
                    f"<title>{esc(label)} at iteration {x:g}: {format_number(y, spec.percent)}</title>"
                    "</circle>"
                )
        parts.append("</g>")
    parts.append("</svg>")
    legend = (
        "".join(
            f'<span class="lg" data-s="{i}"><i style="background:{series_color(spec, i)}"></i>{esc(label)}</span>'
            for i, (label, _) in enumerate(series)
        )
        if len(series) > 1
        else ""
    )
    return (
        f'<figure class="plot" data-key="{esc(spec.key)}"><figcaption>{esc(spec.title)}</figcaption>'
        f'{"".join(parts)}<div class="legend">{legend}</div></figure>'
    )


def plots_section(specs: list[PlotSpec], others: list[PlotSpec]) -> str:
    if not specs and not others:
        return '<section id="curves"><h2>Learning curves</h2><p class="empty">No metrics yet.</p></section>'
    grid = "".join(line_plot(s) for s in specs)
    more = ""
    if others:
        more = (
            f'<details class="more"><summary>Every other numeric metric ({len(others)})</summary>'
            f'<div class="plots small">{"".join(line_plot(s, 340, 200) for s in others)}</div></details>'
        )
    return f'<section id="curves"><h2>Learning curves</h2><div class="plots">{grid}</div>{more}</section>'


# ---------------------------------------------------------------------------------------------- which curves


def numeric_keys(records: list[dict]) -> list[str]:
    keys = {
        k
        for r in records
        for k, v in r.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "iteration"
    }
    return sorted(keys)


def series(records: list[dict], key: str) -> list[tuple[float, float]]:
    return [
        (r["iteration"], float(r[key]))
        for r in records
        if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool) and math.isfinite(r[key])
    ]


def rate_plot(records: list[dict], title: str, overall: str, keys: list[str]) -> PlotSpec:
    per_task = sorted(k for k in keys if k.startswith(overall + "/"))
    lines = [("overall", series(records, overall))] + [(k[len(overall) + 1 :], series(records, k)) for k in per_task]
    return PlotSpec(title, lines, percent=True, main_first=True, key=overall)


def plot_specs(records: list[dict]) -> tuple[list[PlotSpec], list[PlotSpec]]:
    """The named learning curves, and a small plot of every other numeric metric; plots with no data are left out."""
    keys = numeric_keys(records)
    used: set[str] = set()

    def plot(title: str, chosen: list[str], percent: bool = False) -> PlotSpec:
        used.update(chosen)
        return PlotSpec(
            title, [(k, series(records, k)) for k in chosen], percent=percent, key=chosen[0] if chosen else ""
        )

    named = [
        rate_plot(records, "Evaluation success", "eval/success_rate", keys),
        rate_plot(records, "Training success", "train/success_rate", keys),
    ]
    used.update(k for k in keys if k.startswith(("eval/success_rate", "train/success_rate")))
    named += [plot(k, [k]) for k in keys if "loss" in k]
    named += [
        plot("Env steps per second", [k for k in keys if k == "time/env_steps_per_s"]),
        plot("Policy lag of the trained sample (versions)", [k for k in keys if k.startswith("train/policy_lag")]),
        plot("Replay buffer size (trajectories)", [k for k in keys if k == "replay/size"]),
        plot("Judge calls", [k for k in keys if k.endswith("judge_calls_per_trajectory") or k == "judge/calls"]),
        plot("Judge unknown rate", [k for k in keys if k == "judge/unknown_rate"], percent=True),
        plot("Episodes without a verdict", [k for k in keys if k in ("train/unknown", "eval/unknown")]),
    ]
    others = [PlotSpec(k, [(k, series(records, k))], key=k) for k in keys if k not in used]
    has_data = lambda spec: any(points for _, points in spec.series)
    return [s for s in named if has_data(s)], [s for s in others if has_data(s)]


def eval_rows(records: list[dict]) -> tuple[list[dict], list[str]]:
    rows = [r for r in records if "eval/success_rate" in r or "eval/episodes" in r]
    tasks = sorted({k[len("eval/success_rate/") :] for r in rows for k in r if k.startswith("eval/success_rate/")})
    return rows, tasks


# ---------------------------------------------------------------------------------------------- tables


def percent_cell(value, task: str) -> str:
    if value is None:
        return f'<td class="num na" data-task="{esc(task)}">—</td>'
    hue = 120 * max(0.0, min(1.0, value))
    return f'<td class="num" data-task="{esc(task)}" style="background:hsl({hue:.0f},60%,88%)">{100 * value:.1f}%</td>'


def eval_table_section(rows: list[dict], tasks: list[str]) -> str:
    if not rows:
        return '<section id="eval"><h2>Evaluation per task</h2><p class="empty">No evaluation results.</p></section>'
    head = "".join(
        f"<th>{esc(t)}</th>"
        for t in ["iteration", "policy version", "episodes", "no verdict", "env errors", "overall"] + tasks
    )
    body = []
    for r in rows:
        counts = ("iteration", "policy_version", "eval/episodes", "eval/unknown", "eval/env_errors")
        cells = [f'<td class="num">{"" if r.get(k) is None else esc(r[k])}</td>' for k in counts]
        cells.append(percent_cell(r.get("eval/success_rate"), "overall"))
        cells += [percent_cell(r.get(f"eval/success_rate/{t}"), t) for t in tasks]
        body.append(f'<tr data-iteration="{esc(r["iteration"])}">{"".join(cells)}</tr>')
    return (
        f'<section id="eval"><h2>Evaluation per task</h2><div class="scroll"><table id="eval-table">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        '<p class="note">Success rates count judged episodes only: episodes without a verdict and env errors '
        "are counted beside them, never as failures.</p></section>"
    )


def image_block(number: int, thumb: dict) -> str:
    """One embedded screenshot, inert until a step that shows it is opened."""
    return (
        f'<script type="text/plain" class="img" id="i-{number}" data-w="{thumb["w"]}" data-h="{thumb["h"]}" '
        f'data-tw="{thumb["tw"]}" data-th="{thumb["th"]}">{thumb["src"]}</script>'
    )


def key_value_table(items: dict) -> str:
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(v if isinstance(v, str) else json.dumps(v))}</td></tr>"
        for k, v in items.items()
    )
    return f'<table class="kv">{rows}</table>'


# ---------------------------------------------------------------------------------------------- the page


CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"  # nothing leaves


def page(title: str, body: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<link rel="icon" href="data:,">
<title>{esc(title)}</title>
<style>{CSS}</style></head>
<body>
{body}
<div id="zoom" hidden></div>
<script>{JS}</script>
</body></html>
"""


def browser_section(marks_burnt: bool) -> str:
    """The trajectory browser: filters, a paginated list, and the opened trajectory (drawn by the script)."""
    selects = "".join(
        f'<label>{label} <select id="f-{name}"><option value="">all</option></select></label>'
        for name, label in (("split", "split"), ("iteration", "iteration"), ("task", "task"), ("outcome", "outcome"))
    )
    checked = "" if marks_burnt else " checked"
    return f"""<section id="browser"><h2>Trajectories</h2>
<div class="filters">{selects}<label>search <input id="f-search" type="search" placeholder="instruction or id"></label>
<label title="element boxes from the observation, drawn over the screenshot">
<input id="marks-toggle" type="checkbox"{checked}> draw element boxes</label></div>
<div class="listbar"><span id="traj-count"></span><span class="pager">
<button id="prev" type="button">&larr; prev</button>
<span id="page-label"></span><button id="next" type="button">next &rarr;</button></span></div>
<div class="scroll"><table id="traj-list"><thead><tr>
<th>#</th><th>split</th><th>iteration</th><th>task</th><th>outcome</th>
<th>steps</th><th>reward</th><th>instruction</th></tr></thead><tbody></tbody></table></div>
<div id="traj-detail"><p class="empty">Select a trajectory to see its steps.</p></div>
</section>"""


CSS = """
:root{--fg:#1b1f24;--muted:#5b6470;--line:#d7dce2;--bg:#f6f7f9;--card:#fff;--accent:#1f6feb}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
  color:var(--fg);background:var(--bg)}
header,section{background:var(--card);margin:12px;padding:12px 18px;border:1px solid var(--line);border-radius:8px}
h1{font-size:22px;margin:4px 0 8px}h2{font-size:18px;margin:4px 0 10px}h3{font-size:15px;margin:8px 0}
.meta{color:var(--muted)}.note{color:var(--muted);font-size:12px}.empty{color:var(--muted);font-style:italic}
.problem{color:#a11;background:#fdecec;border:1px solid #f3c1c1;border-radius:6px;padding:6px 10px;margin:6px 0}
.problem code{font-weight:600}
.notice{background:#fff7e0;border:1px solid #f0d98a;border-radius:6px;padding:6px 10px;margin:6px 0}
.stats{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.stat{background:var(--bg);border:1px solid var(--line);border-radius:6px;padding:4px 10px}
.stat b{font-size:16px;display:block}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(470px,1fr));gap:10px}
.plots.small{grid-template-columns:repeat(auto-fill,minmax(350px,1fr))}
.plot{margin:0;padding:6px;border:1px solid var(--line);border-radius:6px;background:#fff}
.plot figcaption{font-weight:600;margin:0 0 2px 4px}.plot-svg{max-width:100%;height:auto;display:block}
.plot-bg{fill:#fbfcfd}.grid{stroke:#e6e9ed;stroke-width:1}.axis{stroke:#7a828c;stroke-width:1}
.tick{font-size:10px;fill:#4d5560}.label{font-size:11px;fill:#4d5560}
.series polyline{fill:none;stroke:var(--c);stroke-width:1.6;stroke-linejoin:round}.series circle{fill:var(--c)}
.series.main polyline{stroke-width:2.8}.plot.hl .series{opacity:.12}.plot.hl .series.on{opacity:1}
.legend{display:flex;flex-wrap:wrap;gap:2px 10px;font-size:12px;max-height:86px;overflow:auto;padding:2px 4px}
.lg{cursor:default;white-space:nowrap}
.lg i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid var(--line);padding:3px 7px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.na{color:var(--muted)}
.scroll{overflow:auto;max-width:100%}.kv th{width:1%;white-space:nowrap}
pre{margin:0;white-space:pre-wrap;word-break:break-word;
  font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.filters{display:flex;flex-wrap:wrap;gap:6px 16px;align-items:center;margin-bottom:8px}
select,input[type=search]{font:inherit;padding:2px 4px}
.listbar{display:flex;justify-content:space-between;align-items:center;margin:6px 0}.pager button{margin:0 6px}
#traj-list tbody tr{cursor:pointer}#traj-list tbody tr:hover{background:#eef4ff}
#traj-list tbody tr.sel{background:#dbe8ff}
#traj-list td.instr{max-width:520px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.o{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;color:#fff;background:#888}
.o-success{background:#1a7f37}.o-failure{background:#cf222e}.o-timeout{background:#bf8700}
.o-env_error{background:#8250df}.o-unknown{background:#6e7781}
#traj-detail{margin-top:12px}.step{display:flex;gap:14px;border-top:1px solid var(--line);padding:10px 0}
.shot{position:relative;flex:0 0 auto;width:320px;align-self:flex-start}
.shot img{display:block;width:100%;height:auto;border:1px solid var(--line);cursor:zoom-in}
.shot .missing{width:320px;padding:20px;border:1px dashed var(--line);color:var(--muted);text-align:center}
.marks{position:absolute;left:0;top:0;width:100%;height:100%;pointer-events:none;display:none}
body.show-marks .marks{display:block}
.marks rect{fill:none;stroke:#e6194b;stroke-width:2;vector-effect:non-scaling-stroke}
.marks text{fill:#e6194b;font-weight:700}
.fields{flex:1;min-width:0}.fields table{width:100%}.fields th{width:130px}
.err{color:#a11;font-weight:600}.ok{color:#1a7f37;font-weight:600}
table.cands td.best{background:#e6f6ea;font-weight:600}
#zoom{position:fixed;inset:0;background:rgba(0,0,0,.8);display:flex;align-items:center;justify-content:center;
  z-index:10;cursor:zoom-out}
#zoom[hidden]{display:none}#zoom .shot{width:min(90vw,calc(85vh * var(--ar,1.33)))}#zoom .shot img{cursor:zoom-out}
details.more,details.config{margin-top:8px}summary{cursor:pointer;font-weight:600}
"""

JS = r"""
(function () {
  'use strict';
  var $ = function (id) { return document.getElementById(id); };
  var indexEl = $('traj-index');
  if (!indexEl) return;
  var rows = JSON.parse(indexEl.textContent), shown = rows, page = 0, PAGE = 50, selected = null;

  function el(tag, attrs) {
    var node = document.createElement(tag);
    for (var k in (attrs || {})) {
      if (k === 'text') node.textContent = attrs[k];
      else if (k === 'cls') node.className = attrs[k];
      else node.setAttribute(k, attrs[k]);
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return node;
  }
  function svgEl(tag, attrs) {
    var node = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    return node;
  }
  function iterLabel(r) { return r.iteration === null ? '—' : String(r.iteration) + (r.inferred ? '*' : ''); }
  function badge(outcome) { return el('span', {cls: 'o o-' + outcome, text: outcome}); }
  function fmt(v) { return typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v); }

  // ------------------------------------------------------------------ filters and the list
  var FILTERS = {split: 'split', iteration: 'iteration', task: 'group', outcome: 'outcome'};
  Object.keys(FILTERS).forEach(function (name) {
    var key = FILTERS[name], seen = {};
    rows.forEach(function (r) { seen[r[key] === null ? '' : String(r[key])] = r[key]; });
    var values = Object.keys(seen).filter(function (v) { return v !== ''; });
    values.sort(function (a, b) { return name === 'iteration' ? Number(b) - Number(a) : a.localeCompare(b); });
    values.forEach(function (v) { $('f-' + name).appendChild(el('option', {value: v, text: v})); });
    $('f-' + name).addEventListener('change', applyFilters);
  });
  $('f-search').addEventListener('input', applyFilters);

  function applyFilters() {
    var want = {}, q = $('f-search').value.trim().toLowerCase();
    Object.keys(FILTERS).forEach(function (name) { want[FILTERS[name]] = $('f-' + name).value; });
    shown = rows.filter(function (r) {
      for (var key in want) if (want[key] !== '' && String(r[key]) !== want[key]) return false;
      return !q || (r.instruction + ' ' + r.id + ' ' + r.task_id).toLowerCase().indexOf(q) >= 0;
    });
    page = 0;
    renderList();
  }

  function renderList() {
    var body = $('traj-list').tBodies[0], pages = Math.max(1, Math.ceil(shown.length / PAGE));
    body.textContent = '';
    shown.slice(page * PAGE, (page + 1) * PAGE).forEach(function (r) {
      var tr = el('tr', {'data-k': r.k, 'data-outcome': r.outcome, 'data-task': r.group},
        el('td', {cls: 'num', text: String(r.k + 1)}), el('td', {text: r.split}),
        el('td', {cls: 'num', text: iterLabel(r)}), el('td', {text: r.group}), el('td', {}, badge(r.outcome)),
        el('td', {cls: 'num', text: String(r.steps)}), el('td', {cls: 'num', text: fmt(r.reward)}),
        el('td', {cls: 'instr', title: r.instruction, text: r.instruction}));
      if (r.k === selected) tr.className = 'sel';
      tr.addEventListener('click', function () { openTrajectory(r.k); });
      body.appendChild(tr);
    });
    $('traj-count').textContent = shown.length + ' of ' + rows.length + ' trajectories';
    $('page-label').textContent = 'page ' + (page + 1) + ' / ' + pages;
    $('prev').disabled = page === 0;
    $('next').disabled = page + 1 >= pages;
  }
  $('prev').addEventListener('click', function () { if (page > 0) { page--; renderList(); } });
  $('next').addEventListener('click', function () { if ((page + 1) * PAGE < shown.length) { page++; renderList(); } });

  // ------------------------------------------------------------------ one trajectory
  function shot(obs) {
    var box = el('div', {cls: 'shot'}), block = obs.img === null ? null : $('i-' + obs.img);
    if (!block) return el('div', {cls: 'shot'}, el('div', {cls: 'missing', text: obs.img_note || 'no screenshot'}));
    var img = {w: +block.dataset.w, h: +block.dataset.h};
    var image = el('img', {src: block.textContent, alt: 'screenshot',
                           width: block.dataset.tw, height: block.dataset.th});
    box.appendChild(image);
    box.style.setProperty('--ar', img.w / img.h);
    if (obs.boxes && obs.boxes.length) {
      var svg = svgEl('svg', {'class': 'marks', viewBox: '0 0 ' + img.w + ' ' + img.h, preserveAspectRatio: 'none'});
      var size = Math.max(14, Math.round(img.w / 50));
      obs.boxes.forEach(function (b, i) {
        svg.appendChild(svgEl('rect', {x: b[0], y: b[1], width: b[2], height: b[3]}));
        var t = svgEl('text', {x: b[0] + 2, y: b[1] + size, 'font-size': size});
        t.textContent = String(i);
        svg.appendChild(t);
      });
      box.appendChild(svg);
    }
    image.addEventListener('click', function (ev) {
      if (box.parentNode && box.parentNode.id === 'zoom') return;
      ev.stopPropagation();
      var zoom = $('zoom');
      zoom.textContent = '';
      zoom.appendChild(box.cloneNode(true));
      zoom.hidden = false;
    });
    return box;
  }
  $('zoom').addEventListener('click', function () { $('zoom').hidden = true; $('zoom').textContent = ''; });

  function row(table, label, value, cls) {
    if (value === null || value === undefined || value === '') return;
    var cell = el('td', {cls: cls || ''});
    cell.appendChild(typeof value === 'string' ? el('pre', {text: value}) : value);
    table.appendChild(el('tr', {}, el('th', {text: label}), cell));
  }
  function json(v) { return JSON.stringify(v, null, 1); }

  function verdictNode(v) {
    var ok = v.success === true ? 'success' : v.success === false ? 'failure' : 'no verdict';
    var text = ok + (v.source ? ' (' + v.source + ')' : '') + (v.reason ? ': ' + v.reason : '') +
      (v.error ? ' [error: ' + v.error + ']' : '');
    return el('pre', {cls: v.success === true ? 'ok' : 'err', text: text});
  }

  function candidatesTable(dq) {
    var c = dq.candidates || [], q = dq.q || [], a = dq.advantage || [];
    var t = el('table', {cls: 'cands'}, el('tr', {}, el('th', {text: '#'}), el('th', {text: 'candidate action'}),
      el('th', {text: 'Q'}), el('th', {text: 'A = Q − V'})));
    c.forEach(function (text, i) {
      var best = dq.best === i, cls = best ? 'best' : '';
      var label = String(i) + (i === 0 ? ' (data)' : '');
      t.appendChild(el('tr', {cls: best ? 'best-row' : ''}, el('td', {cls: 'num ' + cls, text: label}),
        el('td', {cls: cls}, el('pre', {text: typeof text === 'string' ? text : json(text)})),
        el('td', {cls: 'num ' + cls, text: q[i] === undefined ? '' : fmt(q[i])}),
        el('td', {cls: 'num ' + cls, text: a[i] === undefined ? '' : fmt(a[i])})));
    });
    var wrap = el('div', {});
    if (dq.v !== undefined && dq.v !== null) wrap.appendChild(el('div', {cls: 'vline', text: 'V(s) = ' + fmt(dq.v) +
      (dq.best !== undefined && dq.best !== null ? ', best candidate #' + dq.best : '')}));
    wrap.appendChild(t);
    return wrap;
  }

  function stepNode(d, s) {
    var t = el('table', {});
    row(t, 'action text', s.action_text);
    row(t, 'parsed action', s.action === null ? 'none (did not parse)' : json(s.action));
    row(t, 'error', s.error, 'err');
    row(t, 'feedback', s.feedback, 'err');
    row(t, 'reward', fmt(s.reward) + (s.done ? '  (done)' : ''));
    row(t, 'policy version', s.policy_version === null ? '' : String(s.policy_version) +
      (s.logprob === null ? '' : ', log-prob ' + fmt(s.logprob)));
    if (s.verdict) row(t, 'verdict', verdictNode(s.verdict));
    if (s.judge) row(t, 'judge', json(s.judge));
    if (s.digiq) {
      row(t, 'Digi-Q', candidatesTable(s.digiq));
      if (s.digiq.rest) row(t, 'Digi-Q (other)', json(s.digiq.rest));
    }
    if (s.digirl) row(t, 'DigiRL', json(s.digirl));
    if (s.info) row(t, 'info', json(s.info));
    row(t, 'location', s.location);
    if (s.ui_text) row(t, 'ui text', el('details', {}, el('summary', {text: s.ui_text.split('\n').length + ' lines'}),
      el('pre', {text: s.ui_text})));
    if (s.timings) row(t, 'timings', json(s.timings));
    return el('div', {cls: 'step', 'data-step': s.i}, shot(s),
      el('div', {cls: 'fields'}, el('h3', {text: 'step ' + s.i}), t));
  }

  function openTrajectory(k) {
    selected = k;
    renderList();
    var d = JSON.parse($('d-' + k).textContent), box = $('traj-detail');
    box.textContent = '';
    var head = el('table', {cls: 'kv'});
    row(head, 'task', d.task.instruction);
    row(head, 'task id', d.task.id + '  (' + d.task.suite + ', ' + d.group + ')');
    row(head, 'outcome', badge(d.outcome));
    row(head, 'error', d.error, 'err');
    row(head, 'split / iteration', d.split + ' / ' + iterLabel(d));
    row(head, 'steps / reward', d.steps.length + ' / ' + fmt(d.reward));
    row(head, 'trajectory id', d.id);
    row(head, 'env / runner', [d.env_id, d.runner_id].filter(Boolean).join(' / '));
    if (d.judge) row(head, 'judge', json(d.judge));
    box.appendChild(el('h3', {text: 'Trajectory #' + (k + 1)}));
    box.appendChild(head);
    d.steps.forEach(function (s) { box.appendChild(stepNode(d, s)); });
    if (d.final) {
      var f = el('table', {});
      row(f, 'location', d.final.location);
      row(f, 'feedback', d.final.feedback, 'err');
      box.appendChild(el('div', {cls: 'step final'}, shot(d.final),
        el('div', {cls: 'fields'}, el('h3', {text: 'final observation (what the last action led to)'}), f)));
    }
    if (location.hash !== '#t-' + k) history.replaceState(null, '', '#t-' + k);
  }

  // ------------------------------------------------------------------ plots and toggles
  Array.prototype.forEach.call(document.querySelectorAll('.plot'), function (fig) {
    Array.prototype.forEach.call(fig.querySelectorAll('.lg'), function (lg) {
      lg.addEventListener('mouseenter', function () {
        fig.classList.add('hl');
        var s = fig.querySelector('.series[data-s="' + lg.getAttribute('data-s') + '"]');
        if (s) s.classList.add('on');
      });
      lg.addEventListener('mouseleave', function () {
        fig.classList.remove('hl');
        Array.prototype.forEach.call(fig.querySelectorAll('.series.on'), function (s) { s.classList.remove('on'); });
      });
    });
  });
  function syncMarks() { document.body.classList.toggle('show-marks', $('marks-toggle').checked); }
  $('marks-toggle').addEventListener('change', syncMarks);
  syncMarks();
  renderList();
  var m = /^#t-(\d+)$/.exec(location.hash);
  if (m && $('d-' + m[1])) openTrajectory(Number(m[1]));
})();
"""
