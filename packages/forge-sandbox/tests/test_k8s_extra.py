"""The `kubernetes` extra stays optional: `import forge_sandbox` (and its CLI) never loads it,
and asking for the Kubernetes backend without it fails once, typed, with the install command."""

from __future__ import annotations

import json
import subprocess
import sys

EXTRA = ("kubernetes", "kubernetes_validate", "yaml", "aiohttp", "websocket")


def python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter (this one may already have loaded the extra)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_import_forge_sandbox_and_its_cli_load_nothing_of_the_extra() -> None:
    done = python(
        "import json, sys, forge_sandbox, forge_sandbox.cli, forge_sandbox.images\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {EXTRA!r}"
        " or m.startswith('forge_sandbox.kubernetes'))))"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_backend_without_the_extra_is_refused_with_the_install_command() -> None:
    for missing in ("kubernetes", "kubernetes_validate", "yaml"):
        done = python(
            f"import sys; sys.modules[{missing!r}] = None\n"  # what an absent package looks like
            "import forge_sandbox\n"
            "from forge_sandbox.kubernetes import KubernetesUnavailableError\n"
        )
        assert done.returncode != 0
        assert "KubernetesUnavailableError" in done.stderr, done.stderr
        assert f"{missing} not installed" in done.stderr
        assert "pip install 'forge-sandbox[kubernetes]'" in done.stderr
        done = python(
            f"import sys; sys.modules[{missing!r}] = None\n"
            "import forge_sandbox\n"
            "try:\n"
            "    forge_sandbox.open_backend('kubernetes')\n"
            "except forge_sandbox.SandboxError as exc:\n"
            "    print(type(exc).__name__, [v.rule for v in exc.violations])\n"
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["KubernetesUnavailableError", "['k8s.client']"]
