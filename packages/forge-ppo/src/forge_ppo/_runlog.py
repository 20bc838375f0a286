"""What a run writes as it goes: metrics.jsonl, TensorBoard events, smoke-update.json, plots.

Every JSON file is written atomically (`metrics.jsonl` is appended one whole, fsynced line per
step, so a crash leaves whole lines). Plots are PNGs of reward, success, EV and losses per step.

TensorBoard events and `curves.png` need the `curves` extra (tensorboard, matplotlib):
`curves="auto"` writes them when it is installed and says so when not; `"on"` refuses to start
without it (`check_curves`, before any run folder exists); `"off"` writes neither.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path
from typing import Any, Literal

from forge_gates import Violation, append_jsonl, atomic_write_json

Curves = Literal["auto", "on", "off"]
CURVES_MODULES = ("tensorboard", "matplotlib")
CURVES_INSTALL = "pip install 'forge-ppo[curves]' (nox installs every extra)"

SMOKE_UPDATE_SCHEMA = "forge-ppo/smoke-update@1"
PLOTTED = {
    "reward": "rollout/reward_mean",
    "success": "rollout/success_rate",
    "explained variance": "critic/observability/ev",
    "actor loss": "actor/pg_loss",
    "critic loss": "critic/vf_loss",
}


def missing_curves_modules() -> list[str]:
    """Which of the `curves` extra's modules are not importable here."""
    return [m for m in CURVES_MODULES if importlib.util.find_spec(m) is None]


def check_curves(curves: Curves) -> list[Violation]:
    """`curves="on"` without the extra installed is refused, with the install command."""
    missing = missing_curves_modules() if curves == "on" else []
    return (
        [
            Violation(
                rule="preflight.curves",
                expected="tensorboard and matplotlib importable (curves=on)",
                found=f"missing {', '.join(missing)}",
                fix=f"{CURVES_INSTALL}, or run with --curves off",
            )
        ]
        if missing
        else []
    )


def all_finite(metrics: dict[str, float]) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) for v in metrics.values())


class RunLog:
    """Appends per-step metrics and keeps smoke-update.json current."""

    def __init__(self, run_dir: Path, phase: str, curves: Curves = "auto") -> None:
        self.run_dir = run_dir
        self.phase = phase
        self.updates: list[dict[str, Any]] = []
        self.history: list[dict[str, Any]] = []
        self._tb: Any = None
        missing = missing_curves_modules() if curves != "off" else list(CURVES_MODULES)
        self.curves = curves != "off" and not missing
        if curves == "auto" and missing:
            print(
                f"[run] no TensorBoard events or curves.png: {', '.join(missing)} not installed "
                f"(metrics.jsonl has every value); to get them: {CURVES_INSTALL}",
                file=sys.stderr,
                flush=True,
            )
        if self.curves:
            # optional extra: imported only when the run asked for curves and it is installed
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def metrics(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
        append_jsonl(self.run_dir / "metrics.jsonl", {"step": step, "metrics": clean}, fsync=True)
        self.history.append({"step": step, **metrics})
        if self._tb is not None:
            for name, value in metrics.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    self._tb.add_scalar(name, value, step)
            self._tb.flush()

    def update(self, entry: dict[str, Any]) -> None:
        """Record one update in smoke-update.json (rewritten atomically)."""
        self.updates.append(entry)
        atomic_write_json(
            self.run_dir / "smoke-update.json",
            {"schema": SMOKE_UPDATE_SCHEMA, "phase": self.phase, "updates": self.updates},
        )

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()

    def plot(self) -> Path | None:
        """curves.png: one panel per plotted metric over steps (None when nothing to draw)."""
        if not self.history or not self.curves:
            return None
        import matplotlib  # optional extra (see the module docstring)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(PLOTTED), figsize=(4 * len(PLOTTED), 3.2))
        for ax, (title, key) in zip(axes, PLOTTED.items(), strict=True):
            points = [(h["step"], h[key]) for h in self.history if key in h]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o")
            else:
                ax.text(0.5, 0.5, "not defined", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(title)
            ax.set_xlabel("update")
            ax.grid(alpha=0.3)
        fig.tight_layout()
        path = self.run_dir / "curves.png"
        tmp = path.with_name(".curves.png.tmp")
        fig.savefig(tmp, dpi=90, format="png")
        plt.close(fig)
        os.replace(tmp, path)
        return path
