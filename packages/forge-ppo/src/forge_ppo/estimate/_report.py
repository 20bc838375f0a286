"""The readable table of an estimate (`forge-ppo estimate` without --json)."""

from __future__ import annotations

from forge_ppo.estimate._estimate import Estimate
from forge_ppo.estimate._roles import FITS_FRACTION

VERDICT_MARK = {"fits": "ok", "at_risk": "!!", "oom": "XX", "refused": "--"}


def render_table(result: Estimate, *, title: str) -> str:
    """Roles with their parts and reasons, the largest budget that fits, the assumptions."""
    gpu = result.gpu_memory_gb
    lines = [
        title,
        f"GPU memory {gpu:.2f} GB per card; fits <= {FITS_FRACTION} x = {FITS_FRACTION * gpu:.2f} "
        "GB, at_risk <= the card, oom above; refused = an exact check failed",
        "",
        f"{'role':<10} {'gpus':>4} {'peak GB':>9}  verdict",
    ]
    for role in result.roles:
        mark = VERDICT_MARK[role.verdict]
        lines.append(
            f"{role.role:<10} {role.gpus:>4} {role.peak_gb:>9.2f}  {role.verdict} [{mark}]"
        )
        for name, gb in role.parts.items():
            lines.append(f"    {name:<22} {gb:>9.2f}")
        for reason in role.reasons:
            lines.append(f"    - {reason}")
    budget = result.largest_budget_that_fits
    lines += [
        "",
        "largest token budget per GPU with actor and critic 'fits': "
        + (f"{budget} tokens" if budget is not None else "none (no trainer role fits)"),
        "",
        "assumptions (--json adds each one's source):",
    ]
    lines += [f"    {a.name} = {a.value}" for a in result.assumptions]
    return "\n".join(lines)
