"""Readable plain-text tables: the default output of every command."""

from __future__ import annotations

from collections.abc import Sequence

from forge_eval._audit import HackAudit
from forge_eval._compare import Comparison
from forge_eval._score import PanelScore, Rate, Report
from forge_eval._select import Selection


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell (cells shown with `str`); first column left-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[object]) -> str:
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_rate(rate: Rate) -> str:
    if rate.pass_at_1 is None:
        return "-"
    return f"{rate.pass_at_1:.3f} [{rate.wilson_low:.3f}, {rate.wilson_high:.3f}]"


def fmt_mean(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def fmt_audit(audit: HackAudit | None) -> str:
    """A run's flagged share: `0.053 (2/38 episodes)`, or "no audit" (never a 0 unaudited)."""
    if audit is None:
        return "no audit"
    if audit.flagged_share is None:
        return "no audit (0 episodes with a trajectory)"
    return f"{audit.flagged_share:.3f} ({audit.flagged}/{audit.episodes} episodes)"


def audit_line(audit: HackAudit | None, limit: int = 10) -> str:
    """A job's hack audit in one line: the flagged share, then the rules and trials that fired."""
    line = f"hack audit, flagged share: {fmt_audit(audit)}"
    if audit is None or not audit.flagged:
        return line
    rules = ", ".join(f"{k}={v}" for k, v in audit.by_rule.items() if v)
    trials = ", ".join(audit.flagged_trials[:limit])
    more = f", ... ({audit.flagged} in all)" if audit.flagged > limit else ""
    return f"{line}; by rule: {rules}; flagged: {trials}{more}"


PANEL_HEADERS = [
    "panel",
    "tasks",
    "attempts",
    "solved",
    "benchmark pass@1 [95% CI]",
    "n",
    "scoreable pass@1 [95% CI]",
    "infra",
    "agent",
    "timeouts",
    "in tok",
    "out tok",
    "steps",
]


def panel_row(p: PanelScore) -> list[object]:
    """One panel's cells, in PANEL_HEADERS order (shared by the text table and the HTML)."""
    return [
        p.panel,
        p.n_tasks,
        p.n_attempts,
        p.solved,
        fmt_rate(p.benchmark),
        p.scoreable.n,
        fmt_rate(p.scoreable),
        p.infra_errors,
        p.agent_errors,
        p.timeouts,
        fmt_mean(p.mean_input_tokens),
        fmt_mean(p.mean_output_tokens),
        fmt_mean(p.mean_agent_steps),
    ]


def render_report(report: Report) -> str:
    """The `score` table: one row per panel, then exceptions, pass@k, the hack audit and
    warnings."""
    rows = [panel_row(p) for p in report.panels]
    headers = PANEL_HEADERS
    out = [
        f"job {report.job_name} ({report.job})",
        f"protocol sha256 {report.protocol_sha256}",
        "",
        table(headers, rows),
    ]
    for p in report.panels:
        if p.exceptions:
            counts = ", ".join(f"{k}={v}" for k, v in p.exceptions.items())
            out.append(f"exceptions [{p.panel}]: {counts}")
        if len(p.pass_at_k) > 1:
            ks = ", ".join(
                f"pass@{k} {v:.3f}±{fmt(p.pass_at_k_se[k])}" for k, v in p.pass_at_k.items()
            )
            hats = ", ".join(
                f"pass^{k} {v:.3f}±{fmt(p.pass_hat_k_se[k])}" for k, v in p.pass_hat_k.items()
            )
            out += [f"[{p.panel}] {ks}", f"[{p.panel}] {hats}  (± task-clustered SE)"]
    out.append(audit_line(report.hack_audit))
    out += [f"warning: {w}" for w in report.warnings]
    return "\n".join(out)


def render_comparison(comparison: Comparison) -> str:
    """The `compare` table: each run's hack audit, one row per panel, then the discordant
    tasks and warnings."""
    a, b = comparison.runs
    rows = [
        [
            p.panel,
            p.n_tasks,
            fmt(p.pass_at_1_a),
            fmt(p.pass_at_1_b),
            p.wins,
            p.ties,
            p.losses,
            f"{p.b}/{p.c}",
            fmt(p.mcnemar_p, 4),
            f"{p.delta:+.3f} [{p.delta_low:+.3f}, {p.delta_high:+.3f}]",
        ]
        for p in comparison.panels
    ]
    headers = [
        "panel",
        "tasks",
        f"pass@1 {a.name}",
        f"pass@1 {b.name}",
        "wins",
        "ties",
        "losses",
        "b/c",
        "McNemar p",
        f"delta {b.name}-{a.name} [95% Newcombe]",
    ]
    subject = ", ".join(
        f"{k} {v[0]!r} -> {v[1]!r}" for k, v in comparison.subject.items() if v[0] != v[1]
    )
    out = [
        f"{a.name} = {a.job}",
        f"{b.name} = {b.job}",
        f"shared protocol sha256 {comparison.comparison_protocol_sha256}",
        f"subject: {subject or 'identical'}",
        f"hack audit, flagged share: {a.name} {fmt_audit(a.hack_audit)}, "
        f"{b.name} {fmt_audit(b.hack_audit)}",
        "",
        table(headers, rows),
    ]
    for p in comparison.panels:
        changed = [f"{t.task} ({t.result})" for t in p.per_task if t.result != "tie"]
        if changed:
            out.append(f"[{p.panel}] discordant: " + ", ".join(changed))
        out += [f"warning [{p.panel}]: {w}" for w in p.warnings]
    return "\n".join(out)


def render_selection(selection: Selection) -> str:
    """The `select` table: one row per validation step, the best marked with *."""
    rows = [
        [
            f"{c.step}{' *' if c.step == selection.best_step else ''}"
            f"{'' if c.has_checkpoint else ' (no ckpt)'}",
            fmt(c.success_rate_all),
            c.n_solved,
            fmt(c.jaccard_prev),
            len(c.gained),
            len(c.lost),
        ]
        for c in selection.checkpoints
    ]
    headers = ["step", "success", "solved", "jaccard prev", "gained", "lost"]
    return "\n".join(
        [
            f"source {selection.source}",
            "",
            table(headers, rows),
            "",
            f"best step {selection.best_step} (success {fmt(selection.best_success_rate)}; "
            "ties go to the earlier step)",
            f"patience: {selection.hint}",
            *([f"note: {selection.note}"] if selection.note else []),
        ]
    )
