"""What a run writes as it goes: metrics.jsonl, TensorBoard events, `<phase>-update.json`
(`smoke-update.json`, `soak-update.json`, `formal-update.json`), plots, progress lines.

Every JSON file is written atomically (`metrics.jsonl` is appended one whole, fsynced line per
step, so a crash leaves whole lines). Plots are PNGs of reward, success, EV, losses and the
validation success rate per step (integer step ticks).

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

PLOTTED = {
    "reward": "rollout/reward_mean",
    "success": "rollout/success_rate",
    "validation success": "val/success_rate_all",
    "explained variance": "critic/observability/ev",
    "actor loss": "actor/pg_loss",
    "critic loss": "critic/vf_loss",
}
TRAIN_LINE = (
    ("reward", "rollout/reward_mean"),
    ("success", "rollout/success_rate"),
    ("pg_loss", "actor/pg_loss"),
    ("vf_loss", "critic/vf_loss"),
    ("approx_kl", "actor/ppo_kl"),
    ("ref_kl", "actor/kl_loss"),
    ("clipfrac", "actor/pg_clipfrac"),
    ("vf_clipfrac", "critic/vf_clipfrac"),
    ("ev", "critic/observability/ev"),
    ("tokens/s", "perf/tokens_per_s"),
)
"""`[train step N/M]` line: (label, metric); a metric the update did not log is left out."""


def update_file_name(phase: str) -> str:
    """`smoke-update.json` (the smoke contract's name), `soak-update.json`, `formal-update.json`."""
    return f"{phase}-update.json"


def train_line(step: int, total: int, metrics: dict[str, float]) -> str:
    """`[train step 3/8] reward=0.500 success=0.500 pg_loss=... tokens/s=...` for the console."""
    parts = [
        f"{label}={metrics[key]:.4g}"
        for label, key in TRAIN_LINE
        if isinstance(metrics.get(key), int | float) and math.isfinite(metrics[key])
    ]
    return " ".join([f"[train step {step}/{total}]", *parts])


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
    """Appends per-step metrics and keeps `<phase>-update.json` current."""

    def __init__(self, run_dir: Path, phase: str, curves: Curves = "auto") -> None:
        self.run_dir = run_dir
        self.phase = phase
        self.updates_path = run_dir / update_file_name(phase)
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
        """Record one update in `<phase>-update.json` (rewritten atomically)."""
        self.updates.append(entry)
        atomic_write_json(
            self.updates_path,
            {
                "schema": f"forge-ppo/{self.phase}-update@1",
                "phase": self.phase,
                "updates": self.updates,
            },
        )

    def train_line(self, step: int, total: int, metrics: dict[str, float]) -> str:
        """The console line of one update (see `train_line`)."""
        return train_line(step, total, metrics)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()

    def plot(self) -> Path | None:
        """curves.png: one panel per plotted metric over steps (None when nothing to draw)."""
        if not self.history or not self.curves:
            return None
        import matplotlib.pyplot as plt  # optional extra (see the module docstring)

        fig = self.figure()
        path = self.run_dir / "curves.png"
        tmp = path.with_name(".curves.png.tmp")
        fig.savefig(tmp, dpi=90, format="png")
        plt.close(fig)
        os.replace(tmp, path)
        return path

    def figure(self) -> Any:
        """The matplotlib figure of `plot`: integer step ticks, the validation success rate
        (`val/success_rate_all`, logged at validation steps) beside the training curves."""
        import matplotlib  # optional extra (see the module docstring)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        fig, axes = plt.subplots(1, len(PLOTTED), figsize=(4 * len(PLOTTED), 3.2))
        steps = [h["step"] for h in self.history if "step" in h] or [1]
        # half a step of margin: one update alone would otherwise get 0.945 ... 1.050 ticks
        span = (min(steps) - 0.5, max(steps) + 0.5)
        for ax, (title, key) in zip(axes, PLOTTED.items(), strict=True):
            points = [(h["step"], h[key]) for h in self.history if key in h]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o")
            else:
                ax.text(0.5, 0.5, "not defined", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(title)
            ax.set_xlabel("update")
            ax.set_xlim(*span)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6, min_n_ticks=1))
            ax.grid(alpha=0.3)
        fig.tight_layout()
        return fig
