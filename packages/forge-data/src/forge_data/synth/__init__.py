"""forge_data.synth: SWE-smith-style task synthesis from real Python projects (`forge-data
synth`), every test run in the sandbox, every task validated by Forge's own NOP / oracle::

    from forge_data.synth import SynthConfig, synth
    report = synth(SynthConfig(source="inflection==0.5.1", out=Path("tasks"), seed=7))

This layer imports `forge_data.bulk` (sandbox jobs), `forge_data.curation`, `forge_data._errors`,
forge-gates, and swesmith's procedural modifiers (the `synth` extra) when candidates are made.
"""

from forge_data.synth._bugs import Candidate, is_test_path, source_files
from forge_data.synth._command import (
    add_realrepo_parser,
    add_synth_parser,
    cmd_synth,
    render_table,
)
from forge_data.synth._report_plugin import ReportedTest, read_ctrf
from forge_data.synth._statement import problem_statement
from forge_data.synth._synth import REPORT_NAME, SynthConfig, SynthReport, synth
from forge_data.synth._tier import (
    REALREPO_TIER,
    TierSpec,
    build_realrepo,
    ensure_realrepo,
    ensure_task_set,
    realrepo_ready,
)

__all__ = [
    "REALREPO_TIER",
    "REPORT_NAME",
    "TierSpec",
    "build_realrepo",
    "ensure_realrepo",
    "ensure_task_set",
    "realrepo_ready",
    "Candidate",
    "SynthConfig",
    "SynthReport",
    "ReportedTest",
    "add_realrepo_parser",
    "add_synth_parser",
    "cmd_synth",
    "is_test_path",
    "problem_statement",
    "read_ctrf",
    "render_table",
    "source_files",
    "synth",
]
