"""The task set a run reads, verified when it is used (tamper check before any rollout).

A run spec's `data.tasks` is `demo` (the bundled frozen demo split and its task folders),
`realrepo` (the real-repository tier, built on first use by `forge_data.ensure_task_set`) or a
frozen split folder with its task folders in `<folder>/tasks/`. `verify_task_set` recomputes
the manifest hash, the split files and every task file; any difference is a violation that
names the file, and the caller stops before any rollout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forge_data.bundled._demo import demo_tasks_root
from forge_data.bundled._demo_split import demo_split_root
from forge_data.freeze._manifest import load_manifest
from forge_data.freeze._verify import TASKS_DIR, verify_frozen
from forge_gates import REALREPO, Violation, realrepo_split_dir


@dataclass(frozen=True)
class TaskSetCheck:
    """What was verified: the split folder, its semantic SHA-256, task count, violations."""

    folder: Path
    tasks_root: Path
    sha256: str | None
    n_tasks: int
    violations: list[Violation]

    def fields(self) -> dict[str, object]:
        """The `DATA_SPLIT_VERIFIED` marker's fields."""
        return {"split": str(self.folder), "sha256": self.sha256, "tasks": self.n_tasks}


def task_set_folders(tasks_ref: str) -> tuple[Path, Path]:
    """(frozen split folder, its task folders' root) of a spec's `data.tasks`.

    `demo` (or the shipped demo split's own path) -> the bundled demo tasks; `realrepo` -> the
    real-repository tier's split where it was built (`forge_data.ensure_realrepo` builds it);
    any other folder -> `<folder>/tasks/`.
    """
    if tasks_ref == REALREPO:
        tasks_ref = str(realrepo_split_dir())
    folder = Path(tasks_ref)
    if tasks_ref == "demo" or folder.resolve() == demo_split_root().resolve():
        return demo_split_root(), demo_tasks_root()
    return folder, folder / TASKS_DIR


def verify_task_set(tasks_ref: str) -> TaskSetCheck:
    """Verify the frozen split behind `tasks_ref` and every task file it lists."""
    folder, tasks_root = task_set_folders(tasks_ref)
    violations = verify_frozen(folder, tasks_root=tasks_root)
    sha256, n_tasks = None, 0
    if not any(v.rule.startswith("manifest.") and v.rule != "manifest.sha256" for v in violations):
        manifest = load_manifest(folder)
        sha256, n_tasks = manifest.sha256, len(manifest.tasks)
    return TaskSetCheck(folder, tasks_root, sha256, n_tasks, violations)
