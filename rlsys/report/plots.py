"""The report's learning curves: which metrics are drawn, and each as an inline SVG line plot against the
iterations, the env steps or the time spent, for one run or for several overlaid (one colour per run).
Nothing here reads a run folder."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlsys.driver.metrics import RUN_CLOCK  # runs recorded before it have no wall clock
from rlsys.report.page import esc, is_number

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
MAIN_COLOR = "#111111"
MAX_PLOT_POINTS = 800  # a longer series keeps each bucket's min and max
MARKER_LIMIT = 60  # points per series up to which each point gets a marker with a tooltip
RATES = ("eval/success_rate", "train/success_rate")  # and their per-task keys, RATE/TASK
TIME_NOTE = (
    "a run recorded without time/run_s has no clock: its time is the sum of time/iteration_s, the time spent "
    "collecting and updating (evaluations and checkpoints left out)"
)


# ---------------------------------------------------------------------------------------------- x axes


@dataclass
class Axes:
    """The x axes the curves can be drawn against: those some run's metrics give, in the order offered."""

    captions: dict[str, str]  # axis -> the caption under it
    at: dict[str, str]  # axis -> a point's place in a tooltip, with {} for the number
    runs: list[dict[str, list[float]]]  # per run: axis -> the x of each of its records
    time_note: str = ""  # what the time axis counts, where it is not every run's wall clock


def record_xs(records: list[dict]) -> dict[str, list[float]]:
    """Each record's x on every axis its metrics give: its iteration; the env steps collected so far (the
    trainer's running count `env_steps`, or where a record lacks it, the count before it plus that iteration's
    `time/env_steps_per_s` x `time/iteration_s`); the run's wall clock `time/run_s`, or for runs recorded before it,
    the seconds spent so far (the sum of `time/iteration_s`).
    A record that adds nothing (an evaluation before training) sits where the one before it ended."""
    xs = {"iteration": [float(r["iteration"]) for r in records]}
    steps = seconds = 0.0
    steps_at, seconds_at, counted, timed = [], [], False, False
    for r in records:
        if is_number(r.get("env_steps")):
            steps, counted = float(r["env_steps"]), True
        elif is_number(r.get("time/env_steps_per_s")) and is_number(r.get("time/iteration_s")):
            steps, counted = steps + round(r["time/env_steps_per_s"] * r["time/iteration_s"]), True
        if is_number(r.get(RUN_CLOCK)):
            seconds, timed = float(r[RUN_CLOCK]), True
        elif is_number(r.get("time/iteration_s")):
            seconds, timed = seconds + r["time/iteration_s"], True
        steps_at.append(steps)
        seconds_at.append(seconds)
    if counted:
        xs["env_steps"] = steps_at
    if timed:
        xs["time"] = seconds_at
    return xs


def axes_of(runs_records: list[list[dict]]) -> Axes:
    """The axes of one run, or of several drawn together (time in one unit for all of them)."""
    runs = [record_xs(records) for records in runs_records]
    longest = max((max(xs["time"], default=0.0) for xs in runs if "time" in xs), default=0.0)
    unit, scale = ("s", 1) if longest < 180 else ("min", 60) if longest < 3 * 3600 else ("h", 3600)
    for xs in runs:
        if "time" in xs:
            xs["time"] = [x / scale for x in xs["time"]]
    captions, at = {"iteration": "iteration"}, {"iteration": "iteration {}"}
    if any("env_steps" in xs for xs in runs):
        captions["env_steps"], at["env_steps"] = "env steps (training)", "{} env steps"
    clockless = any(records and not any(is_number(r.get(RUN_CLOCK)) for r in records) for records in runs_records)
    if any("time" in xs for xs in runs):
        what = "time collecting and updating" if clockless else "wall-clock time"
        captions["time"], at["time"] = f"{what} ({unit})", "{} " + unit
    return Axes(captions, at, runs, TIME_NOTE if clockless and "time" in captions else "")


# ---------------------------------------------------------------------------------------------- plots


@dataclass
class Series:
    label: str
    points: dict[str, list[tuple[float, float]]]  # axis -> [(x, value)]
    color: str = ""  # "": by its place in the plot


@dataclass
class PlotSpec:
    title: str
    series: list[Series]  # the first may be `main`
    percent: bool = False
    main_first: bool = False  # draw the first series (the overall rate) bold and dark
    key: str = ""  # the metric a test or a reader finds the plot by
    legend: bool = False  # a legend even for one line (a comparison names each run)


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
    """Round-numbered ticks covering [lo, hi]. A range the floats cannot split (a metric constant but for
    rounding, 0.78867363459767870 to ...89) is widened as an empty one is: a step below the values' resolution
    would add nothing to them."""
    if hi - lo <= 1e-9 * max(abs(lo), abs(hi)):
        hi = lo + (abs(lo) or 1)
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    if integer:
        step = max(1, round(step))
    start = math.floor(lo / step) * step
    last = math.ceil((hi - start) / step - 1e-9)  # the first tick at or above hi
    return [round(start + i * step, 12) for i in range(last + 1)]


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


def drawn(spec: PlotSpec) -> tuple[list[Series], list[str], bool]:
    """The series with a point on some axis, the colour of each, and whether the first is the main one (a plot
    without its overall line has none)."""
    main = bool(spec.main_first and spec.series and any(spec.series[0].points.values()))
    kept = [s for s in spec.series if any(s.points.values())]
    palette = lambda i: MAIN_COLOR if main and i == 0 else PALETTE[(i - main) % len(PALETTE)]
    colors = [s.color or palette(i) for i, s in enumerate(kept)]
    return kept, colors, main


def line_plot(spec: PlotSpec, axes: Axes, axis: str, width: int = 460, height: int = 250) -> str:
    """One SVG line plot of `spec` against `axis`, with its axes, ticks and labels; hidden unless `axis` is the
    first (the page's axis switch shows another)."""
    kept, colors, main_first = drawn(spec)
    series = [(s.label, decimate(sorted(s.points.get(axis, []))), c, i) for i, (s, c) in enumerate(zip(kept, colors))]
    series = [s for s in series if s[1]]
    hidden = "" if axis == next(iter(axes.captions)) else ' style="display:none"'
    if not series:
        return f'<p class="plot-x empty" data-x="{axis}"{hidden}>No values against {esc(axes.captions[axis])}.</p>'
    xs = [x for _, pts, _, _ in series for x, _ in pts]
    ys = [y for _, pts, _, _ in series for _, y in pts]
    left, right, top, bottom = 56, 14, 12, 38
    integer = axis != "time"
    x_ticks = nice_ticks(min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1, 6, integer=integer)
    if spec.percent:
        y_ticks = [0, 0.25, 0.5, 0.75, 1.0]
    else:
        lo, hi = min(ys), max(ys)
        lo = 0.0 if 0 <= lo <= 0.3 * hi else lo
        y_ticks = nice_ticks(lo, hi, 5)  # widens a range the floats cannot split, an empty one included
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    sx = lambda x: left + (x - x0) / (x1 - x0) * (width - left - right)
    sy = lambda y: height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)
    parts = [
        f'<svg class="plot-svg plot-x" data-x="{axis}" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{esc(spec.title)}"{hidden}>',
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
        parts.append(
            f'<text class="tick" x="{x:.1f}" y="{height - bottom + 15}" text-anchor="middle">{format_number(t)}</text>'
        )
    parts.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}"/>')
    parts.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{height - bottom}"/>')
    parts.append(
        f'<text class="label" x="{(left + width - right) / 2:.1f}" y="{height - 4}" '
        f'text-anchor="middle">{esc(axes.captions[axis])}</text>'
    )
    for label, points, color, i in series:
        main = main_first and i == 0
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        parts.append(f'<g class="series{" main" if main else ""}" data-s="{i}" style="--c:{color}">')
        parts.append(f'<polyline points="{coords}"/>')
        if len(points) <= MARKER_LIMIT:
            for x, y in points:
                at = axes.at[axis].format(f"{x:g}" if integer else f"{x:.3g}")
                parts.append(
                    f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{3 if main else 2.3}">'
                    f"<title>{esc(label)} at {at}: {format_number(y, spec.percent)}</title></circle>"
                )
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def figure(spec: PlotSpec, axes: Axes, width: int = 460, height: int = 250) -> str:
    """A plot against each axis (one shown at a time) and an HTML legend below them."""
    kept, colors, _ = drawn(spec)
    legend = ""
    if len(kept) > 1 or spec.legend:
        legend = "".join(
            f'<span class="lg" data-s="{i}"><i style="background:{c}"></i>{esc(s.label)}</span>'
            for i, (s, c) in enumerate(zip(kept, colors))
        )
    plots = "".join(line_plot(spec, axes, axis, width, height) for axis in axes.captions)
    return (
        f'<figure class="plot" data-key="{esc(spec.key)}"><figcaption>{esc(spec.title)}</figcaption>'
        f'{plots}<div class="legend">{legend}</div></figure>'
    )


def axis_switch(axes: Axes) -> str:
    """Radio buttons choosing the x axis of every plot, where the metrics give more than iterations."""
    if len(axes.captions) < 2:
        return ""
    buttons = "".join(
        f'<label><input type="radio" name="x-axis" id="x-{axis}" value="{axis}"{" checked" if k == 0 else ""}> '
        f"{esc(caption)}</label>"
        for k, (axis, caption) in enumerate(axes.captions.items())
    )
    note = f'<span class="note">{esc(axes.time_note)}</span>' if axes.time_note else ""
    return f'<div class="axis-switch">x axis: {buttons}{note}</div>'


def plots_section(specs: list[PlotSpec], others: list[PlotSpec], axes: Axes) -> str:
    """The curves, or nothing where there are none."""
    if not specs and not others:
        return ""
    grid = "".join(figure(s, axes) for s in specs)
    more = ""
    if others:
        more = (
            f'<details class="more"><summary>Every other numeric metric ({len(others)})</summary>'
            f'<div class="plots small">{"".join(figure(s, axes, 340, 200) for s in others)}</div></details>'
        )
    switch = axis_switch(axes)
    return f'<section id="curves"><h2>Learning curves</h2>{switch}<div class="plots">{grid}</div>{more}</section>'


# ---------------------------------------------------------------------------------------------- which curves


@dataclass
class Curve:
    title: str
    keys: list[str]
    percent: bool = False
    rate: bool = False  # an overall success rate (keys[0]) with its per-task rates


def numeric_keys(records: list[dict]) -> list[str]:
    return sorted({k for r in records for k, v in r.items() if is_number(v) and k != "iteration"})


def series(records: list[dict], key: str, xs: dict[str, list[float]]) -> dict[str, list[tuple[float, float]]]:
    """The values of `key` against each axis."""
    values = [(i, float(r[key])) for i, r in enumerate(records) if is_number(r.get(key))]
    return {axis: [(at[i], v) for i, v in values] for axis, at in xs.items()}


def curves(keys: list[str]) -> tuple[list[Curve], list[str]]:
    """The named plots in the page's order (those with no metric left out), and every other numeric metric."""
    named = [
        Curve("Evaluation success", [RATES[0]] + sorted(k for k in keys if k.startswith(RATES[0] + "/")), True, True),
        Curve("Training success", [RATES[1]] + sorted(k for k in keys if k.startswith(RATES[1] + "/")), True, True),
    ]
    named += [Curve(k, [k]) for k in keys if "loss" in k]
    named += [
        Curve("Env steps per second", [k for k in keys if k == "time/env_steps_per_s"]),
        Curve("Policy lag of the trained-on data (versions)", [k for k in keys if k.startswith("train/policy_lag")]),
        Curve("Replay buffer size (trajectories)", [k for k in keys if k == "replay/size"]),
        Curve("Judge calls", [k for k in keys if k.endswith("judge_calls_per_trajectory") or k == "judge/calls"]),
        Curve("Judge unknown rate", [k for k in keys if k == "judge/unknown_rate"], percent=True),
        Curve("Episodes without a verdict", [k for k in keys if k in ("train/unknown", "eval/unknown")]),
    ]
    named = [c for c in named if c.rate or c.keys]
    used = {k for c in named for k in c.keys} | {k for k in keys if k.startswith(RATES)}
    return named, [k for k in keys if k not in used]


def has_data(spec: PlotSpec) -> bool:
    return any(points for s in spec.series for points in s.points.values())


def plot_specs(records: list[dict], xs: dict[str, list[float]]) -> tuple[list[PlotSpec], list[PlotSpec]]:
    """One run's named learning curves, and a small plot of every other numeric metric; plots with no data are
    left out."""
    named, rest = curves(numeric_keys(records))
    specs = []
    for c in named:
        labels = ["overall"] + [k[len(c.keys[0]) + 1 :] for k in c.keys[1:]] if c.rate else c.keys
        lines = [Series(label, series(records, k, xs)) for label, k in zip(labels, c.keys)]
        specs.append(PlotSpec(c.title, lines, percent=c.percent, main_first=c.rate, key=c.keys[0]))
    others = [PlotSpec(k, [Series(k, series(records, k, xs))], key=k) for k in rest]
    return [s for s in specs if has_data(s)], [s for s in others if has_data(s)]


def compare_specs(runs: list[tuple[str, list[dict]]], axes: Axes) -> tuple[list[PlotSpec], list[PlotSpec]]:
    """Several runs' curves, each metric in a plot of its own with one line per run in the run's colour: the
    named ones first (an overall success rate without its per-task lines, which join every other metric)."""
    keys = sorted({k for _, records in runs for k in numeric_keys(records)})
    named, rest = curves(keys)

    def plot(title: str, key: str, percent: bool) -> PlotSpec:
        lines = [
            Series(name, series(records, key, xs), PALETTE[i % len(PALETTE)])
            for i, ((name, records), xs) in enumerate(zip(runs, axes.runs))
        ]
        return PlotSpec(title, lines, percent=percent, key=key, legend=True)

    specs = []
    for c in named:
        if c.rate:
            rest += c.keys[1:]
        for key in c.keys[:1] if c.rate else c.keys:
            specs.append(plot(c.title if len(c.keys) == 1 or c.rate else f"{c.title}: {key}", key, c.percent))
    others = [plot(k, k, k.startswith(RATES)) for k in sorted(rest)]
    return [s for s in specs if has_data(s)], [s for s in others if has_data(s)]
