"""forge-eval: honest scoring of agent evaluations, on Harbor's own result files.

Per panel (never mixed across panels): benchmark and scoreable Pass@1 with Wilson 95%
intervals, infrastructure vs agent errors from one table, token and step means, pass@k and
pass^k with task-clustered standard errors; paired comparisons with exact McNemar p and a
Newcombe interval; a protocol hash that refuses unlike comparisons; checkpoint selection.
Depends on pydantic and forge-gates (pydantic-only) alone: no torch, no numpy.

Usage::

    from forge_eval import read_job, score_job, compare_jobs, wilson_interval

    report = score_job(read_job("jobs/run-a"))
    for panel in report.panels:
        print(panel.panel, panel.benchmark.pass_at_1, panel.benchmark.wilson_low)
    print(report.hack_audit)  # <job>/hack-audit.json summarised; None: not audited
    comparison = compare_jobs(read_job("jobs/run-a"), read_job("jobs/run-b"))
    print(render_comparison(comparison))  # the text table; render_html(...) the page
    wilson_interval(6, 38)  # (0.0744..., 0.3041...)

Command line: `forge-eval score|compare|select|report --help`.

Names resolve on first use: `import forge_eval` costs milliseconds; the first name touched
loads what it needs (pydantic models, never torch or numpy).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below resolve lazily (see __getattr__)
    from forge_eval._audit import HackAudit
    from forge_eval._compare import (
        Comparison,
        PanelComparison,
        TaskPair,
        compare_jobs,
    )
    from forge_eval._errors import (
        ForgeEvalError,
        NotComparableError,
    )
    from forge_eval._html import render_html
    from forge_eval._outcomes import (
        ERROR_TABLE,
        ErrorRule,
        Outcome,
        classify,
    )
    from forge_eval._protocol import (
        Protocol,
        protocol_of,
        protocol_sha256,
    )
    from forge_eval._reader import (
        Attempt,
        Job,
        read_job,
    )
    from forge_eval._score import (
        PanelScore,
        Report,
        score_job,
        score_path,
    )
    from forge_eval._select import (
        Checkpoint,
        Selection,
        select_checkpoint,
    )
    from forge_eval._stats import (
        Z_95,
        clustered_mean,
        jaccard,
        mcnemar_exact_p,
        newcombe_paired_interval,
        pass_at_k,
        pass_hat_k,
        wilson_interval,
    )
    from forge_eval._tables import render_comparison, render_report

__version__ = "0.1.0"

_LAZY = {
    "ERROR_TABLE": "forge_eval._outcomes",
    "Z_95": "forge_eval._stats",
    "Attempt": "forge_eval._reader",
    "Checkpoint": "forge_eval._select",
    "Comparison": "forge_eval._compare",
    "ErrorRule": "forge_eval._outcomes",
    "ForgeEvalError": "forge_eval._errors",
    "HackAudit": "forge_eval._audit",
    "Job": "forge_eval._reader",
    "NotComparableError": "forge_eval._errors",
    "Outcome": "forge_eval._outcomes",
    "PanelComparison": "forge_eval._compare",
    "PanelScore": "forge_eval._score",
    "Protocol": "forge_eval._protocol",
    "Report": "forge_eval._score",
    "Selection": "forge_eval._select",
    "TaskPair": "forge_eval._compare",
    "classify": "forge_eval._outcomes",
    "clustered_mean": "forge_eval._stats",
    "compare_jobs": "forge_eval._compare",
    "jaccard": "forge_eval._stats",
    "mcnemar_exact_p": "forge_eval._stats",
    "newcombe_paired_interval": "forge_eval._stats",
    "pass_at_k": "forge_eval._stats",
    "pass_hat_k": "forge_eval._stats",
    "protocol_of": "forge_eval._protocol",
    "protocol_sha256": "forge_eval._protocol",
    "read_job": "forge_eval._reader",
    "render_comparison": "forge_eval._tables",
    "render_html": "forge_eval._html",
    "render_report": "forge_eval._tables",
    "score_job": "forge_eval._score",
    "score_path": "forge_eval._score",
    "select_checkpoint": "forge_eval._select",
    "wilson_interval": "forge_eval._stats",
}

__all__ = [
    "ERROR_TABLE",
    "Z_95",
    "Attempt",
    "Checkpoint",
    "Comparison",
    "ErrorRule",
    "ForgeEvalError",
    "HackAudit",
    "Job",
    "NotComparableError",
    "Outcome",
    "PanelComparison",
    "PanelScore",
    "Protocol",
    "Report",
    "Selection",
    "TaskPair",
    "__version__",
    "classify",
    "clustered_mean",
    "compare_jobs",
    "jaccard",
    "mcnemar_exact_p",
    "newcombe_paired_interval",
    "pass_at_k",
    "pass_hat_k",
    "protocol_of",
    "protocol_sha256",
    "read_job",
    "render_comparison",
    "render_html",
    "render_report",
    "score_job",
    "score_path",
    "select_checkpoint",
    "wilson_interval",
]


def __getattr__(name: str) -> Any:
    """Import on first use, so `import forge_eval` stays light (a test keeps it under 0.3 s)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'forge_eval' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
