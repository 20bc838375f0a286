"""The smoke with `backends.sandbox = "kubernetes"` (config smoke-k8s-local), reduced to fit
`nox -s tests`: every trial runs in a pod of the in-process API server (official client, real
wire protocol, pods as bubblewrap sandboxes), the ledger verifies, and no pod or NetworkPolicy
is left. Without $FORGE_KUBERNETES_CONFIG the run is refused before any run folder exists."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="install forge-sandbox[kubernetes]")
pytest.importorskip("aiohttp", reason="install forge-sandbox[kubernetes]")

import forge_data
from forge_gates import GateError, load_spec, read_config, read_ledger, verify_run
from forge_ppo.cli import apply_overrides
from forge_ppo.recipes.train import train
from forge_sandbox.testing.kubernetes_api import FakeApiServer, images_for

REDUCED = [
    "ppo.batch_size=1",
    "ppo.actor_mini_batch_size=1",
    "ppo.critic_mini_batch_size=1",
    'data.task_ids=["statkit-median-even"]',
    "agent.step_limit=2",
    "agent.max_tokens=48",
    "checkpoint.min_free_disk_gib=0.1",
]
OWNER = "ppo-k8s-test"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeApiServer, Path]]:
    """The in-process API server with every demo task's image (refs as the image plan gives
    them: content-addressed, so a copy of the demo tasks names the pipeline's own tasks)."""
    tasks = tmp_path_factory.mktemp("demo") / "tasks"
    forge_data.write_demo_tasks(tasks)
    images = images_for(tasks)
    with FakeApiServer({ref: workspace for ref, workspace in images.values()}) as fake:
        table = "\n".join(f'"{task}" = "{ref}"' for task, (ref, _) in sorted(images.items()))
        config = tmp_path_factory.mktemp("k8s") / "k8s.toml"
        config.write_text(
            f'kubeconfig = "{fake.kubeconfig}"\npoll_interval_s = 0.05\nstart_timeout_s = 60\n'
            f'owner = "{OWNER}"\n\n[images]\n{table}\n'
        )
        yield fake, config


def k8s_spec():
    return load_spec(apply_overrides(read_config("smoke-k8s-local"), REDUCED))


@pytest.mark.usefixtures("cgroups")  # pods: local sandboxes shown their cgroup
def test_smoke_on_kubernetes_pods_verifies_and_leaves_no_pod(
    server: tuple[FakeApiServer, Path],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, config = server
    monkeypatch.setenv("FORGE_KUBERNETES_CONFIG", str(config))
    monkeypatch.delenv("KUBECONFIG", raising=False)  # the config's own kubeconfig is enough
    before = len(fake.cluster.requests)
    spec = k8s_spec()
    assert spec.backends.sandbox == "kubernetes"
    cache = tmp_path_factory.mktemp("forge-cache")
    run_dir = train(spec, run_dir=tmp_path / "smoke", cache_dir=cache)
    # 1. the ledger, as `forge-gates verify` judges it
    assert verify_run(run_dir, "smoke") == []
    assert [r.gate for r in read_ledger(run_dir)][-1] == "PPO_SMOKE_PASSED"
    # 2. every trial ran in pods: the agent's and a fresh one for the verifier, each trial
    #    verified (no infra error)
    trials = [json.loads(p.read_text()) for p in sorted(run_dir.glob("episodes/*/*/*/result.json"))]
    assert trials, "no trials recorded"
    assert all(t["exception_info"] is None for t in trials), [t["exception_info"] for t in trials]
    assert all(t["verifier_result"] is not None for t in trials)
    requests = fake.cluster.requests[before:]
    created = [r for r in requests if r == "POST /api/v1/namespaces/forge-sandbox/pods"]
    assert len(created) == 2 * len(trials)
    assert any("/exec" in r for r in requests), "no command went over the exec websocket"
    # 3. nothing left: no pod (by label) and no NetworkPolicy
    assert fake.live_pods(f"forge.dev/owner={OWNER}") == [] and fake.live_pods() == []
    assert fake.cluster.policies == {}


def test_a_kubernetes_run_without_its_config_is_refused_before_a_run_folder(
    server: tuple[FakeApiServer, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, _ = server
    monkeypatch.delenv("FORGE_KUBERNETES_CONFIG", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig))
    with pytest.raises(GateError) as refused:
        train(k8s_spec(), run_dir=tmp_path / "run", cache_dir=tmp_path / "cache")
    assert [v.rule for v in refused.value.violations] == ["preflight.backend.sandbox.config"]
    assert "FORGE_KUBERNETES_CONFIG" in refused.value.violations[0].fix
    assert not (tmp_path / "run").exists()
