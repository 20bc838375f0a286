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
    comparison = compare_jobs(read_job("jobs/run-a"), read_job("jobs/run-b"))
    wilson_interval(6, 38)  # (0.0744..., 0.3041...)

Command line: `forge-eval score|compare|select|report --help`.
"""

from forge_eval._compare import Comparison, PanelComparison, TaskPair, compare_jobs
from forge_eval._errors import ForgeEvalError, NotComparableError
from forge_eval._outcomes import ERROR_TABLE, ErrorRule, Outcome, classify
from forge_eval._protocol import Protocol, protocol_of, protocol_sha256
from forge_eval._reader import Attempt, Job, read_job
from forge_eval._score import PanelScore, Report, score_job, score_path
from forge_eval._select import Checkpoint, Selection, select_checkpoint
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

__version__ = "0.1.0"

__all__ = [
    "ERROR_TABLE",
    "Z_95",
    "Attempt",
    "Checkpoint",
    "Comparison",
    "ErrorRule",
    "ForgeEvalError",
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
    "score_job",
    "score_path",
    "select_checkpoint",
    "wilson_interval",
]
