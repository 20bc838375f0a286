"""One self-contained HTML page (no scripts, no external files) with tables and inline SVG."""

from __future__ import annotations

from html import escape

from forge_eval._compare import Comparison, PanelComparison
from forge_eval._score import Report
from forge_eval._tables import PANEL_HEADERS, audit_line, fmt, fmt_audit, fmt_rate, panel_row

HTML_SCHEMA = "forge-eval/report-html@1"
COLORS = {"solved": "#2e7d32", "failed": "#cfd8dc", "infra": "#ef6c00"}
_CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}
.warn{color:#8a4b00}.refused{border:2px solid #b00020;padding:.5em 1em;white-space:pre-wrap}
code{font-size:12px}"""


def _table(headers: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def pass_at_1_plot(runs: list[tuple[str, Report]]) -> str:
    """Dot-and-whisker SVG: benchmark Pass@1 (filled) and scoreable (hollow), Wilson 95%."""
    rows = [(name, p) for name, report in runs for p in report.panels]
    left = max(120, 7 * max(len(f"{name} · {p.panel}") for name, p in rows) + 20)
    width, row_h, top = 420, 26, 24
    height = top + row_h * len(rows) + 30

    def x(v: float) -> float:
        return left + v * width

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 30}" '
        f'height="{height}" role="img" aria-label="Pass@1 with Wilson 95% intervals">'
    ]
    for tick in range(0, 11, 2):
        v = tick / 10
        parts.append(
            f'<line x1="{x(v)}" y1="{top - 6}" x2="{x(v)}" y2="{height - 24}" '
            'stroke="#e0e0e0"/>'
            f'<text x="{x(v)}" y="{height - 8}" font-size="11" text-anchor="middle">'
            f"{v:.1f}</text>"
        )
    parts.append(
        f'<text x="{left}" y="14" font-size="12">Pass@1, Wilson 95% (filled: benchmark, '
        "hollow: scoreable)</text>"
    )
    for i, (name, p) in enumerate(rows):
        y = top + row_h * i + row_h / 2
        parts.append(
            f'<text x="{left - 8}" y="{y + 4}" font-size="12" text-anchor="end">'
            f"{escape(name)} · {escape(p.panel)}</text>"
        )
        for rate, dy, fill in ((p.benchmark, -4, "#1f4e79"), (p.scoreable, 5, "white")):
            if rate.pass_at_1 is None:
                continue
            parts.append(
                f"<g><title>{escape(name)} {escape(p.panel)}: {fmt_rate(rate)}</title>"
                f'<line x1="{x(rate.wilson_low or 0):.1f}" y1="{y + dy}" '
                f'x2="{x(rate.wilson_high or 0):.1f}" y2="{y + dy}" stroke="#1f4e79" '
                f'stroke-width="2"/><circle cx="{x(rate.pass_at_1):.1f}" cy="{y + dy}" r="4" '
                f'fill="{fill}" stroke="#1f4e79" stroke-width="1.5"/></g>'
            )
    parts.append("</svg>")
    return "".join(parts)


def outcome_grid(panel: PanelComparison, names: tuple[str, str], per_row: int = 50) -> str:
    """Per-task outcome grid: a row of cells per run, a win/loss mark below each task."""
    cell, left = 14, 7 * max(len(n) for n in names) + 10
    bands = [panel.per_task[i : i + per_row] for i in range(0, len(panel.per_task), per_row)]
    band_h = cell * 3 + 12
    width = left + cell * min(per_row, max(1, len(panel.per_task))) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{band_h * len(bands) + 4}" role="img" aria-label="per-task outcomes">'
    ]
    for j, band in enumerate(bands):
        y0 = j * band_h
        for r, name in enumerate(names):
            parts.append(
                f'<text x="0" y="{y0 + cell * r + 11}" font-size="11">{escape(name)}</text>'
            )
        for i, pair in enumerate(band):
            x = left + i * cell
            for r, outcome in enumerate((pair.outcome_a, pair.outcome_b)):
                parts.append(
                    f'<rect x="{x}" y="{y0 + cell * r}" width="{cell - 2}" height="{cell - 2}" '
                    f'fill="{COLORS[outcome]}"><title>{escape(pair.task)}: {escape(names[r])} '
                    f"{outcome}</title></rect>"
                )
            mark = {"win": ("▲", "#2e7d32"), "loss": ("▼", "#b00020")}.get(pair.result)
            if mark:
                parts.append(
                    f'<text x="{x + 1}" y="{y0 + cell * 2 + 11}" font-size="11" '
                    f'fill="{mark[1]}"><title>{escape(pair.task)}: {pair.result} for '
                    f"{escape(names[1])}</title>{mark[0]}</text>"
                )
    parts.append("</svg>")
    return "".join(parts)


def render_html(
    runs: list[tuple[str, Report]],
    comparison: Comparison | None = None,
    refusal: str | None = None,
) -> str:
    """The whole page: per-run tables, the Pass@1 plot, and the comparison when there is one."""
    body = ["<h1>forge-eval report</h1>", "<h2>Pass@1 per run and panel</h2>", pass_at_1_plot(runs)]
    for name, report in runs:
        body.append(
            f"<h2>{escape(name)}: {escape(report.job_name)}</h2>"
            f"<p><code>{escape(report.job)}</code><br>protocol sha256 "
            f"<code>{report.protocol_sha256}</code></p>"
        )
        body.append(
            _table(
                [*PANEL_HEADERS, "exceptions"],
                [
                    [*panel_row(p), ", ".join(f"{k}={v}" for k, v in p.exceptions.items()) or "-"]
                    for p in report.panels
                ],
            )
        )
        body.append(f"<p>{escape(audit_line(report.hack_audit))}</p>")
        body += [f'<p class="warn">warning: {escape(w)}</p>' for w in report.warnings]
    if refusal:
        body.append(f'<h2>Comparison refused</h2><div class="refused">{escape(refusal)}</div>')
    if comparison:
        body.append(_comparison_section(comparison))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="generator" content="{HTML_SCHEMA}">'
        f"<title>forge-eval report</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def _comparison_section(comparison: Comparison) -> str:
    a, b = comparison.runs
    names = (a.name, b.name)
    out = [
        f"<h2>Paired comparison: {escape(b.name)} vs {escape(a.name)}</h2>",
        f"<p>shared protocol sha256 <code>{comparison.comparison_protocol_sha256}</code><br>"
        f"hack audit, flagged share: {escape(a.name)} {escape(fmt_audit(a.hack_audit))}, "
        f"{escape(b.name)} {escape(fmt_audit(b.hack_audit))}</p>",
        _table(
            [
                "panel",
                "tasks",
                f"pass@1 {a.name}",
                f"pass@1 {b.name}",
                "wins",
                "ties",
                "losses",
                "b",
                "c",
                "McNemar p",
                "delta [95% Newcombe]",
            ],
            [
                [
                    p.panel,
                    p.n_tasks,
                    fmt(p.pass_at_1_a),
                    fmt(p.pass_at_1_b),
                    p.wins,
                    p.ties,
                    p.losses,
                    p.b,
                    p.c,
                    fmt(p.mcnemar_p, 4),
                    f"{p.delta:+.3f} [{p.delta_low:+.3f}, {p.delta_high:+.3f}]",
                ]
                for p in comparison.panels
            ],
        ),
    ]
    legend = " ".join(f'<span style="color:{c}">■</span> {k}' for k, c in COLORS.items())
    for p in comparison.panels:
        out.append(
            f"<h3>{escape(p.panel)}: per-task outcomes</h3><p>{legend} · ▲ win for "
            f"{escape(b.name)}, ▼ loss</p>{outcome_grid(p, names)}"
        )
        out += [f'<p class="warn">warning: {escape(w)}</p>' for w in p.warnings]
    return "\n".join(out)
