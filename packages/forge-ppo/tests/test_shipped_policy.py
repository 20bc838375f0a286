"""The shipped demo policy: used on its exact key once every file verifies, refused (and the demo
policy built) when the key, a file's SHA-256 or the installed checkpoint differs."""

from __future__ import annotations

import json
import shutil

import pytest
from transformers import AutoModelForCausalLM

from forge_gates import file_sha256, load_spec, read_provenance
from forge_ppo import ValueModel, check_warm_start_checkpoint, warm_start
from forge_ppo.checkpoint._summary import model_fingerprint
from forge_ppo.recipes import _demo_policy, _shipped_policy
from forge_ppo.recipes._demo_policy import key_payload, payload_key, resolve_demo_policy
from forge_ppo.recipes._shipped_policy import (
    ARTIFACT_NAME,
    CHECKPOINT,
    PROVENANCE_NAME,
    SHIPPED_DIR,
    pack_shipped,
)
from forge_ppo.sft._sft import SFTSpec
from forge_rollout import TinyModelSpec, make_tiny_model

WEIGHTS = f"{CHECKPOINT}/critic/model.safetensors"
ADAPTER = f"{CHECKPOINT}/lora_adapter/adapter_model.safetensors"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """The tiny model `model.path = "tiny"` serves, built as the cache builds it."""
    return make_tiny_model(tmp_path_factory.mktemp("m") / "tiny-model-seed0", TinyModelSpec(seed=0))


@pytest.fixture
def built(monkeypatch):
    """`build_demo_policy` stubbed (minutes otherwise): records its calls, writes a report."""
    calls: list[str] = []

    def build(spec, model_dir, out, sft):
        calls.append(str(out))
        (out / CHECKPOINT).mkdir(parents=True)
        report = {"train_success_t1": {"successes": 0, "attempts": 1}, "seconds": {"total": 1}}
        (out / "demo-policy.json").write_text(json.dumps(report))
        return report

    monkeypatch.setattr(_demo_policy, "build_demo_policy", build)
    return calls


def _artifact_copy(tmp_path, monkeypatch, spec, model, **edit_manifest):
    """A copy of the shipped artifact the installer reads, its manifest keyed to this machine's
    tiny model (so the file checks, not the key, decide) and edited by `edit_manifest`."""
    artifact = tmp_path / "artifact"
    shutil.copytree(SHIPPED_DIR, artifact)
    manifest = json.loads((artifact / ARTIFACT_NAME).read_text())
    payload = key_payload(spec, model, SFTSpec())
    manifest |= {"key": payload_key(payload), "key_payload": payload, **edit_manifest}
    (artifact / ARTIFACT_NAME).write_text(json.dumps(manifest))
    monkeypatch.setattr(_shipped_policy, "SHIPPED_DIR", artifact)
    return artifact


def test_the_shipped_artifact_is_used_on_its_key_and_loads_as_a_warm_start(
    tiny_model, tmp_path, built, capsys
):
    spec = load_spec("smoke-local")
    manifest = json.loads((SHIPPED_DIR / ARTIFACT_NAME).read_text())
    if manifest["key_payload"]["base_model"] != model_fingerprint(tiny_model):
        pytest.skip("this machine's torch kernels build another tiny model (the key differs, so "
                    "the artifact is refused here by design)")  # fmt: skip
    assert manifest["key"] == payload_key(key_payload(spec, tiny_model, SFTSpec())), (
        "the demo policy's key changed, so the shipped artifact is refused; fix: "
        "FORGE_DEMO_POLICY=build forge-ppo sft --config smoke-local --cache-dir DIR, then "
        "python -m forge_ppo.recipes._demo_policy ship --cache-dir DIR"
    )
    checkpoint = resolve_demo_policy(spec, tiny_model, tmp_path / "cache")
    out, err = capsys.readouterr()
    assert not built, "the shipped artifact matched; nothing is built"
    assert f"DEMO_POLICY_SHIPPED success=8/24 key={manifest['key'][:16]}" in out
    assert "using the shipped demo policy" in err and "SHA-256 verified" in err
    provenance = json.loads((checkpoint.parents[1] / PROVENANCE_NAME).read_text())
    assert provenance["key"] == manifest["key"] and provenance["files_verified"] == 7
    # the install's own run provenance; the shipped ledger stays as it was built
    installed = read_provenance(checkpoint.parents[1])
    assert (installed.kind, installed.status) == ("demo-policy-shipped", "completed")
    ledger = (checkpoint.parents[1] / "gates.jsonl").read_bytes()
    assert ledger == (SHIPPED_DIR / "gates.jsonl").read_bytes()
    # the run's own checks and the strict load: every tensor present, equal to the file
    base = str(tiny_model)
    _, problems = check_warm_start_checkpoint(
        checkpoint, base_model=base, lora_spec=spec.lora, critic_base_model=base
    )
    assert problems == []
    assert spec.lora is not None
    actor_base = AutoModelForCausalLM.from_pretrained(base, local_files_only=True)
    loaded = warm_start(checkpoint, base_model=base, actor_base=actor_base,
                        critic=ValueModel.from_pretrained(base), lora_spec=spec.lora,
                        run_dir=tmp_path / "run")  # fmt: skip
    assert loaded.summary.base_model == base and loaded.summary.critic_base_model == base
    # a second resolve finds the cache: neither installed nor built again
    assert resolve_demo_policy(spec, tiny_model, tmp_path / "cache") == checkpoint
    assert "DEMO_POLICY_" not in capsys.readouterr().out


def test_packing_an_installed_copy_gives_back_the_shipped_files(tiny_model, tmp_path, built):
    """install then pack is the identity: the shipped files are what `pack_shipped` writes."""
    spec = load_spec("smoke-local")
    payload = key_payload(spec, tiny_model, SFTSpec())
    if (
        payload["base_model"]
        != json.loads((SHIPPED_DIR / ARTIFACT_NAME).read_text())["key_payload"]["base_model"]
    ):
        pytest.skip("this machine builds another tiny model (the artifact is refused here)")
    build = resolve_demo_policy(spec, tiny_model, tmp_path / "cache").parents[1]
    (build / PROVENANCE_NAME).unlink()  # as a build here would be
    packed = pack_shipped(build, tmp_path / "packed", key=payload_key(payload), payload=payload)
    shipped = json.loads((SHIPPED_DIR / ARTIFACT_NAME).read_text())
    assert json.loads((packed / ARTIFACT_NAME).read_text())["files"] == shipped["files"]


def test_a_file_whose_sha256_differs_is_refused_and_never_reaches_the_cache(
    tiny_model, tmp_path, monkeypatch, built, capsys
):
    spec = load_spec("smoke-local")
    artifact = _artifact_copy(tmp_path, monkeypatch, spec, tiny_model)
    data = bytearray((artifact / WEIGHTS).read_bytes())
    data[-1] ^= 0xFF  # same size, one bit pattern changed
    (artifact / WEIGHTS).write_bytes(bytes(data))
    checkpoint = resolve_demo_policy(spec, tiny_model, tmp_path / "cache")
    out, err = capsys.readouterr()
    assert len(built) == 1 and "DEMO_POLICY_BUILT" in out and "SHIPPED" not in out
    assert f"shipped demo policy not used: its files differ from artifact.json: {WEIGHTS}" in err
    assert not (checkpoint / "critic").exists(), "the build's output only, no shipped file"
    assert not (checkpoint.parents[1] / PROVENANCE_NAME).exists()
    assert not list((tmp_path / "cache").glob(".demo-policy-*")), "no partial copy left"


def test_a_missing_or_unlisted_file_is_refused(tiny_model, tmp_path, monkeypatch, built, capsys):
    spec = load_spec("smoke-local")
    artifact = _artifact_copy(tmp_path, monkeypatch, spec, tiny_model)
    (artifact / "gates.jsonl").unlink()
    (artifact / f"{CHECKPOINT}/optimizer.pt").write_bytes(b"state")
    resolve_demo_policy(spec, tiny_model, tmp_path / "cache")
    err = capsys.readouterr().err
    assert len(built) == 1
    assert "gates.jsonl: missing" in err and f"{CHECKPOINT}/optimizer.pt: not listed" in err


def test_another_key_is_refused_naming_what_differs(tiny_model, tiny, tmp_path, built, capsys):
    spec = load_spec("smoke-local")
    assert spec.lora is not None
    other = spec.model_copy(update={"lora": spec.lora.model_copy(update={"rank": 4})})
    resolve_demo_policy(other, tiny_model, tmp_path / "cache")
    err = capsys.readouterr().err
    assert len(built) == 1
    assert "shipped demo policy not used: its key" in err and "differs in: lora" in err
    # another base model (here the tests' tiny Qwen2): named, with the kernels it was built on
    resolve_demo_policy(spec, tiny.base, tmp_path / "other")
    err = capsys.readouterr().err
    assert len(built) == 2 and "differs in: base_model, critic_base" in err
    assert "the base model's files differ from those it was trained on" in err


def test_a_checkpoint_that_disagrees_with_its_summary_is_refused_after_the_file_checks(
    tiny_model, tmp_path, monkeypatch, built, capsys
):
    """Defence in depth: adapter weights changed and re-listed in artifact.json (the file
    checks pass) still fail the warm-start checks against the checkpoint's own summary."""
    spec = load_spec("smoke-local")
    artifact = _artifact_copy(tmp_path, monkeypatch, spec, tiny_model)
    data = bytearray((artifact / ADAPTER).read_bytes())
    data[-1] ^= 0xFF
    (artifact / ADAPTER).write_bytes(bytes(data))
    manifest = json.loads((artifact / ARTIFACT_NAME).read_text())
    manifest["files"][ADAPTER]["sha256"] = file_sha256(artifact / ADAPTER)
    (artifact / ARTIFACT_NAME).write_text(json.dumps(manifest))
    resolve_demo_policy(spec, tiny_model, tmp_path / "cache")
    err = capsys.readouterr().err
    assert len(built) == 1
    assert "fails the warm-start checks" in err and "checkpoint.sha256" in err


def test_forge_demo_policy_build_refuses_the_artifact_and_other_values_fail(
    tiny_model, tmp_path, monkeypatch, built, capsys
):
    spec = load_spec("smoke-local")
    monkeypatch.setenv("FORGE_DEMO_POLICY", "build")
    resolve_demo_policy(spec, tiny_model, tmp_path / "cache")
    assert len(built) == 1 and "FORGE_DEMO_POLICY=build" in capsys.readouterr().err
    monkeypatch.setenv("FORGE_DEMO_POLICY", "yes")
    with pytest.raises(ValueError, match="expected 'build'"):
        resolve_demo_policy(spec, tiny_model, tmp_path / "other")
