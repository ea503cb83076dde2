"""How `rlsys.report.run_report` draws its page: the tables, and the HTML shell with its inline CSS and JavaScript (the
curves are `rlsys.report.plots`). Nothing here reads a run folder; everything on the page is inline, so it opens
from disk with no request of any kind."""

from __future__ import annotations

import html
import json
import math


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def json_text(data) -> str:
    """Compact JSON with `<` escaped, so no text inside can close the script block that holds it."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def json_block(element_id: str, text: str, css_class: str = "") -> str:
    """Data for the page's script (`json_text`), inert until the script parses it."""
    cls = f' class="{css_class}"' if css_class else ""
    return f'<script type="application/json" id="{esc(element_id)}"{cls}>{text}</script>'


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
        return ""
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


def browser_section(marks_burnt: bool, policy_kind: str | None) -> str:
    """The trajectory browser: filters, a paginated list, and the opened trajectory (drawn by the script)."""
    selects = "".join(
        f'<label>{label} <select id="f-{name}"><option value="">all</option></select></label>'
        for name, label in (("split", "split"), ("iteration", "iteration"), ("task", "task"), ("outcome", "outcome"))
    )
    checked = "" if marks_burnt else " checked"
    return f"""<section id="browser" data-policy="{esc(policy_kind or "")}"><h2>Trajectories</h2>
<div class="filters">{selects}<label>search <input id="f-search" type="search" placeholder="instruction or id"></label>
<label title="element boxes from the observation, drawn over the screenshot">
<input id="marks-toggle" type="checkbox"{checked}> draw element boxes</label>
<label title="the step's action drawn over its screenshot: the element acted on, the click or tap point, the typed
text, a scroll or swipe arrow"><input id="acts-toggle" type="checkbox" checked> draw actions</label></div>
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
.axis-switch{display:flex;flex-wrap:wrap;gap:4px 14px;align-items:center;margin:0 0 8px}
.axis-switch .note{flex-basis:100%}
.acts{position:absolute;left:0;top:0;width:100%;height:100%;pointer-events:none;overflow:visible;
  filter:drop-shadow(0 0 1.5px #fff)}
body.hide-acts .acts,body.hide-acts .act-label{display:none}
.acts .act-box{fill:rgba(255,0,170,.1);stroke:#ff00aa;stroke-width:3;vector-effect:non-scaling-stroke}
.acts .act-point{fill:#ffe600;stroke:#ff00aa;stroke-width:3;vector-effect:non-scaling-stroke}
.acts .act-arrow{stroke:#ff00aa;stroke-width:4;vector-effect:non-scaling-stroke}.acts .act-head{fill:#ff00aa}
.acts .act-text{fill:#a0006c;font-weight:700;paint-order:stroke;stroke:#fff;stroke-width:4px;
  stroke-linejoin:round}
.act-label{position:absolute;left:4px;top:4px;max-width:calc(100% - 8px);background:rgba(190,0,128,.92);
  color:#fff;font:600 11px/1.3 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;padding:1px 5px;
  border-radius:4px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;pointer-events:none}
.input-note{color:var(--muted);font-size:12px;margin:4px 0}
pre.prompt{white-space:pre-wrap;max-height:24em;overflow:auto;border-left:3px solid var(--muted);padding-left:6px}
"""

JS = r"""
(function () {
  'use strict';
  var $ = function (id) { return document.getElementById(id); };
  var each = function (selector, fn) { Array.prototype.forEach.call(document.querySelectorAll(selector), fn); };

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
  function svgEl(tag, attrs, text) {
    var node = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ------------------------------------------------------------------ plots: legends and the x axis
  each('.plot', function (fig) {
    Array.prototype.forEach.call(fig.querySelectorAll('.lg'), function (lg) {
      lg.addEventListener('mouseenter', function () {
        fig.classList.add('hl');
        Array.prototype.forEach.call(fig.querySelectorAll('.series[data-s="' + lg.getAttribute('data-s') + '"]'),
          function (s) { s.classList.add('on'); });
      });
      lg.addEventListener('mouseleave', function () {
        fig.classList.remove('hl');
        Array.prototype.forEach.call(fig.querySelectorAll('.series.on'), function (s) { s.classList.remove('on'); });
      });
    });
  });
  each('input[name="x-axis"]', function (radio) {
    radio.addEventListener('change', function () {
      each('.plot-x', function (p) { p.style.display = p.getAttribute('data-x') === radio.value ? '' : 'none'; });
    });
  });

  var indexEl = $('traj-index');
  if (!indexEl) return;
  var rows = JSON.parse(indexEl.textContent), shown = rows, page = 0, PAGE = 50, selected = null;
  var policyKind = $('browser').getAttribute('data-policy');

  function iterLabel(r) { return r.iteration === null ? '—' : String(r.iteration) + (r.inferred ? '*' : ''); }
  function badge(outcome) { return el('span', {cls: 'o o-' + outcome, text: outcome}); }
  function fmt(v) { return typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v); }
  function duration(s) {
    if (typeof s !== 'number') return String(s);
    return Math.abs(s) < 1 ? Number((s * 1000).toPrecision(3)) + ' ms' : Number(s.toPrecision(3)) + ' s';
  }

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
  function marksLayer(boxes, w, h) {
    var svg = svgEl('svg', {'class': 'marks', viewBox: '0 0 ' + w + ' ' + h, preserveAspectRatio: 'none'});
    var size = Math.max(14, Math.round(w / 50));
    boxes.forEach(function (b, i) {
      svg.appendChild(svgEl('rect', {x: b[0], y: b[1], width: b[2], height: b[3]}));
      svg.appendChild(svgEl('text', {x: b[0] + 2, y: b[1] + size, 'font-size': size}, String(i)));
    });
    return svg;
  }

  // the step's action over its screenshot, in the screenshot's pixels (computed by the report from the action)
  function actionLayer(a, w, h) {
    var svg = svgEl('svg', {'class': 'acts', viewBox: '0 0 ' + w + ' ' + h, preserveAspectRatio: 'none'});
    var unit = Math.max(w, h) / 100;
    if (a.box) svg.appendChild(svgEl('rect', {'class': 'act-box', x: a.box[0], y: a.box[1],
                                              width: a.box[2], height: a.box[3]}));
    if (a.arrow) {
      var x0 = a.arrow[0], y0 = a.arrow[1], x1 = a.arrow[2], y1 = a.arrow[3];
      var len = Math.max(Math.hypot(x1 - x0, y1 - y0), 1e-9), ux = (x1 - x0) / len, uy = (y1 - y0) / len;
      var head = Math.min(3 * unit, len / 2);
      svg.appendChild(svgEl('line', {'class': 'act-arrow', x1: x0, y1: y0, x2: x1 - ux * head, y2: y1 - uy * head}));
      svg.appendChild(svgEl('polygon', {'class': 'act-head', points: [
        [x1, y1], [x1 - ux * head - uy * head / 2, y1 - uy * head + ux * head / 2],
        [x1 - ux * head + uy * head / 2, y1 - uy * head - ux * head / 2]].map(function (p) {
          return p[0].toFixed(1) + ',' + p[1].toFixed(1); }).join(' ')}));
    }
    if (a.point) svg.appendChild(svgEl('circle', {'class': 'act-point', cx: a.point[0], cy: a.point[1],
                                                  r: Math.max(2 * unit, 5)}));
    if (a.text) {
      var size = Math.max(12, Math.round(w / 28)), at;
      if (a.box) at = {x: a.box[0], y: Math.min(a.box[1] + a.box[3] + size, h - 4), 'text-anchor': 'start'};
      else at = {x: w / 2, y: h - size, 'text-anchor': 'middle'};
      at['class'] = 'act-text';
      at['font-size'] = size;
      svg.appendChild(svgEl('text', at, a.text));
    }
    return svg;
  }

  function shot(obs) {
    var box = el('div', {cls: 'shot'}), block = obs.img === null ? null : $('i-' + obs.img);
    if (!block) return el('div', {cls: 'shot'}, el('div', {cls: 'missing', text: obs.img_note || 'no screenshot'}));
    var w = +block.dataset.w, h = +block.dataset.h;
    var image = el('img', {src: block.textContent, alt: 'screenshot',
                           width: block.dataset.tw, height: block.dataset.th});
    box.appendChild(image);
    box.style.setProperty('--ar', w / h);
    if (obs.boxes && obs.boxes.length) box.appendChild(marksLayer(obs.boxes, w, h));
    if (obs.overlay) {
      box.appendChild(actionLayer(obs.overlay, w, h));
      box.appendChild(el('div', {cls: 'act-label', title: obs.overlay.label, text: obs.overlay.label}));
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

  function locationNode(o) {
    if (!o.location) return null;
    return el('pre', {cls: 'location', title: o.location, text: o.location_shown || o.location});
  }

  function timingsText(t) {
    return Object.keys(t).map(function (k) {
      return /_s$/.test(k) ? k.slice(0, -2) + ' ' + duration(t[k]) : k + ' ' + fmt(t[k]);
    }).join(' · ');
  }

  // what the policy was given: the prompt as the model read it where the policy has one (it is stored with the
  // step), and its inputs, each labelled
  function inputNode(s) {
    var inp = s.input || {}, earlier = inp.earlier || [], t = el('table', {cls: 'kv input'});
    var lines = s.ui_text ? s.ui_text.split('\n').length : 0;
    row(t, 'instruction', inp.instruction);
    row(t, 'page', s.location);
    row(t, 'earlier actions', earlier.length ? earlier.map(function (a, i) { return (i + 1) + '. ' + a; })
      .join('\n') : 'none');
    row(t, 'feedback on the last action', inp.feedback, 'err');
    row(t, 'element list', s.ui_text ? s.ui_text + (s.ui_text_cut ? '\n… (cut for the report)' : '') : null);
    var summary = (s.prompt ? 'prompt, ' : '') + 'instruction, screenshot, ' +
      (lines ? lines + ' element lines, ' : '') + earlier.length + ' earlier action' +
      (earlier.length === 1 ? '' : 's') + (inp.feedback ? ', feedback' : '');
    var note = s.prompt ? 'The prompt as the model read it (after truncation, in its chat format), then what the ' +
      'policy built it from.' : 'This step has no stored prompt (the policy' + (policyKind ? ', ' + policyKind +
      ',' : '') + ' reads these without one, or the run predates stored prompts): the policy built its input ' +
      'from these.';
    var shown = el('details', {cls: 'input'}, el('summary', {text: summary}),
      el('div', {cls: 'input-note', text: note}));
    if (s.prompt) shown.appendChild(el('pre', {cls: 'prompt', text: s.prompt}));
    shown.appendChild(t);
    return shown;
  }

  function stepNode(d, s) {
    var t = el('table', {});
    row(t, 'model output', s.action_text);
    row(t, 'parsed action', s.action === null ? 'none (did not parse)' : JSON.stringify(s.action));
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
    row(t, 'location', locationNode(s));
    row(t, 'policy input', inputNode(s));
    if (s.timings) row(t, 'timings', timingsText(s.timings));
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
      row(f, 'location', locationNode(d.final));
      row(f, 'feedback', d.final.feedback, 'err');
      box.appendChild(el('div', {cls: 'step final'}, shot(d.final),
        el('div', {cls: 'fields'}, el('h3', {text: 'final observation (what the last action led to)'}), f)));
    }
    if (location.hash !== '#t-' + k) history.replaceState(null, '', '#t-' + k);
  }

  // ------------------------------------------------------------------ toggles
  function syncMarks() { document.body.classList.toggle('show-marks', $('marks-toggle').checked); }
  function syncActs() { document.body.classList.toggle('hide-acts', !$('acts-toggle').checked); }
  $('marks-toggle').addEventListener('change', syncMarks);
  $('acts-toggle').addEventListener('change', syncActs);
  syncMarks();
  syncActs();
  renderList();
  var m = /^#t-(\d+)$/.exec(location.hash);
  if (m && $('d-' + m[1])) openTrajectory(Number(m[1]));
})();
"""
