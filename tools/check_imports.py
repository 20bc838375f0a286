"""The import contract of DESIGN §1, checked on the source (run by `nox -s lint`).

Three rules, each a list of `file:line` findings with the fix:

1. **public names only**: no module of one package imports another package's private module
   (`forge_rollout.traces._samples`); use what its `__init__` (or a public submodule such as
   `forge_rollout.rows`) exports. Applies to sources, tests, benches and scripts.
2. **one-way layering**: a package's sources import only the packages below it
   (`forge-gates <- forge-data, forge-eval, forge-sandbox <- forge-rollout <- forge-ppo`) and
   only packages its pyproject declares, with no exception (the P0 pipeline, which drives
   rollouts, is a recipe of forge-ppo, not part of forge-eval).
3. **visible dependencies**: no first-party import inside a function except in a package's
   face (`__init__.py`, `cli.py`), which may stay lazy to keep `import forge_x` light; a
   third-party import inside a function only for an optional or heavy module listed in
   `LAZY_THIRD_PARTY` with its reason.

Usage: `python tools/check_imports.py [ROOT]` exits 1 and lists every finding.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

# DESIGN §1: what each package's sources may import (besides itself)
ALLOWED: dict[str, frozenset[str]] = {
    "forge_gates": frozenset(),
    "forge_data": frozenset({"forge_gates"}),
    "forge_sandbox": frozenset({"forge_gates"}),
    "forge_eval": frozenset({"forge_gates"}),
    "forge_rollout": frozenset({"forge_gates", "forge_data", "forge_sandbox"}),
    "forge_ppo": frozenset(
        {"forge_gates", "forge_data", "forge_sandbox", "forge_eval", "forge_rollout"}
    ),
}
FACES = ("__init__.py", "cli.py")
# third-party modules a function may import lazily, with the reason
LAZY_THIRD_PARTY: dict[str, str] = {
    "pyarrow": "optional `parquet` extra of forge-data",
    "swesmith": "optional `synth` extra of forge-data: its modules import every language's "
    "tree-sitter grammar, needed only when `forge-data synth` makes candidates",
    "datasets": "optional: Hugging Face datasets rows, only when a user passes them",
    "torch.utils.tensorboard": "optional `curves` extra of forge-ppo",
    "matplotlib": "optional `curves` extra of forge-ppo",
    "transformers": "heavy (seconds): the gateway and CLIs load it only when a model is needed",
    "tokenizers": "heavy: only the tiny-model builder trains a tokenizer",
    "peft": "heavy: only runtime LoRA loading needs it",
    "torch": "heavy: CLIs that print help or talk HTTP must not load it",
    "safetensors": "only the adapter inspection command reads weights",
    "verl": "forge-ppo's verl plugin runs inside verl's own import and touches verl's modules "
    "only when VERL_PLATFORM=cpu asks for the CPU platform",
    "ray": "optional `verl` extra of forge-ppo: the pipeline reads the trainer's Ray cluster "
    "(actor table, actor environments) only when the trainer started or joined one",
    "gguf": "optional `smollm2` extra of forge-rollout: only the SmolLM2 conversion reads the "
    "GGUF's metadata",
    "uvloop": "not installed on Windows (its marker in forge-rollout): servers fall back to "
    "asyncio's loop where it is missing, and FORGE_EVENT_LOOP=asyncio skips it",
}
# first-party modules a function may import lazily (an optional engine), with the reason
LAZY_FIRST_PARTY: dict[str, str] = {
    "forge_ppo.verl": "optional `verl` extra of forge-ppo: only a verl spec imports verl + Ray",
    "forge_sandbox.kubernetes": "optional `kubernetes` extra of forge-sandbox: only a Kubernetes "
    "backend (open_backend, the k8s CLI commands) imports the official client",
    "forge_sandbox.docker": "optional `docker` extra of forge-sandbox: only a Docker backend "
    "(open_backend, the docker CLI commands) imports the Docker SDK",
}
STDLIB_LAZY = {"os", "warnings", "json", "importlib"}  # faces set env vars before heavy imports


@dataclass(frozen=True)
class Finding:
    where: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: [{self.rule}] {self.message}"


def _package_of(path: Path, packages_dir: Path) -> tuple[str, str, str]:
    """(distribution folder, import package, part: src|tests|other) of a file."""
    rel = path.relative_to(packages_dir).parts
    dist = rel[0]
    part = rel[1] if rel[1] in ("src", "tests") else "other"
    return dist, dist.replace("-", "_"), part


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST, module: str) -> list[tuple[ast.stmt, str, bool]]:
    """(node, imported module, inside a function) for every import; relative ones resolved."""
    found: list[tuple[ast.stmt, str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((child, alias.name, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".")[: -child.level or None]
                    name = ".".join([*base, child.module] if child.module else base)
                else:
                    name = child.module or ""
                found.append((child, name, in_function))
                # `from forge_x import _private` names a private module too
                for alias in child.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append((child, f"{name}.{alias.name}", in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Line numbers of imports under `if TYPE_CHECKING:` (never executed)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                for inner in ast.walk(sub):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        lines.add(inner.lineno)
    return lines


def _declared(dist_dir: Path) -> set[str]:
    """Sibling packages a distribution declares (dependencies and extras)."""
    project = tomllib.loads((dist_dir / "pyproject.toml").read_text())["project"]
    specs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    names = set()
    for spec in specs:
        name = spec.split(";")[0].split("[")[0]
        for sep in "=<>!~ ":
            name = name.split(sep)[0]
        names.add(name.strip().replace("-", "_"))
    return names


def check_tree(root: Path) -> list[Finding]:
    """Every finding of the three rules under `root/packages`."""
    packages_dir = root / "packages"
    first_party = set(ALLOWED)
    findings: list[Finding] = []
    for path in sorted(packages_dir.glob("*/**/*.py")):
        skipped = ("demo_tasks", "demo_split", "easy_tasks", "mutants")
        if any(part in skipped for part in path.parts):
            continue
        dist, package, part = _package_of(path, packages_dir)
        where_file = path.relative_to(root)
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
        src = packages_dir / dist / "src"
        module = _module_name(path, src) if part == "src" else ""
        guarded = _type_checking_only(tree)
        declared = _declared(packages_dir / dist) if part == "src" else set()
        for node, name, in_function in _imports(tree, module):
            where = f"{where_file}:{node.lineno}"
            top = name.split(".")[0]
            # 1. public names only
            private = [p for p in name.split(".")[1:] if p.startswith("_") and p[:2] != "__"]
            if top in first_party and top != package and private:
                findings.append(
                    Finding(
                        where,
                        "private-import",
                        f"expected {top}'s public names; found an import of {name}; fix: "
                        f"import it from {top} (add it to {top}/__init__.py's exports)",
                    )
                )
            # 2. layering, sources only
            if part == "src" and top in first_party and top != package:
                if top not in ALLOWED[package]:
                    below = ", ".join(sorted(ALLOWED[package])) or "none"
                    findings.append(
                        Finding(
                            where,
                            "layering",
                            f"expected {package} to import only {below} (DESIGN §1); found "
                            f"{name}; fix: move the code to the lower package or invert the call",
                        )
                    )
                elif top not in declared:
                    findings.append(
                        Finding(
                            where,
                            "undeclared",
                            f"expected {top.replace('_', '-')} in {dist}/pyproject.toml "
                            f"dependencies; found an import of {name} without it; fix: declare it",
                        )
                    )
            # 3. visible dependencies
            if part == "src" and in_function and node.lineno not in guarded:
                if path.name in FACES:
                    continue
                if name in LAZY_FIRST_PARTY:
                    continue
                if top in first_party:
                    findings.append(
                        Finding(
                            where,
                            "local-import",
                            f"expected first-party imports at module top; found {name} inside "
                            "a function; fix: import it at the top (only __init__/cli may be lazy)",
                        )
                    )
                elif top not in STDLIB_LAZY and not any(
                    name == lazy or name.startswith(lazy + ".") for lazy in LAZY_THIRD_PARTY
                ):
                    findings.append(
                        Finding(
                            where,
                            "local-import",
                            f"expected third-party imports at module top; found {name} inside a "
                            "function; fix: import it at the top, or list it in "
                            "tools/check_imports.py LAZY_THIRD_PARTY with the reason",
                        )
                    )
    return findings


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    findings = check_tree(root)
    for finding in findings:
        print(finding)
    if findings:
        print(f"IMPORT_CONTRACT: {len(findings)} finding(s)", file=sys.stderr)
        return 1
    print("IMPORT_CONTRACT_PASSED rules=private-import,layering,undeclared,local-import")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
