"""Proofs against a running inference server (local or vLLM), each one gate.

`push_adapter` (PPO_ADAPTER_PUSH_PASSED): the adapter is fingerprinted (SHA-256 of its files),
copied to a folder named by step and fingerprint, and loaded in place from there; the server must
then report that folder as the adapter it serves (`/v1/models` card `root`), the folder must
still hash to the fingerprint, and the adapter must answer a probe. The proof comes from the
adapter itself, so it holds at any learning rate and dtype: one bf16 update at lr 1e-6 moves
log-probs less than bf16 rounding, so "the log-probs changed" can neither prove nor disprove a
push. The probe's log-prob change is still measured against the noise floor of two identical
requests before the load and reported (`probe_max_delta`, `noise_floor`). A new folder per push
also keeps vLLM from reusing prefix-cache blocks of the previous weights (it warns when an
adapter is reloaded in place from the same path).

`near_window_probe` (P0_NEAR_WINDOW_PROBE_PASSED): a real request of `window - margin` prompt
tokens must come back with exactly that prompt-token count.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from forge_gates import Gate, Violation, gate

POLICY_NAME = "policy"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
PROBE_PROMPT = [1 + (i * 37) % 199 for i in range(24)]  # ids valid in any vocab >= 200
NEAR_WINDOW_MARGIN = 1024


def post_json(url: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    """POST JSON; the answer as JSON (plain text as {"text": ...}); non-200 raises RuntimeError."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            raw = answer.read()
        try:
            return json.loads(raw or b"{}")
        except json.JSONDecodeError:  # vLLM answers adapter loads with plain text
            return {"text": raw.decode("utf-8", "replace")}
    except urllib.error.HTTPError as error:
        raise RuntimeError(
            f"expected HTTP 200 from {url}; found {error.code}: {error.read()[:300]!r}"
        ) from error


def get_json(url: str, timeout: float = 30.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.loads(answer.read())


def adapter_fingerprint(folder: Path) -> str:
    """SHA-256 over the adapter's files (config and weights, in that order)."""
    digest = hashlib.sha256()
    for name in ADAPTER_FILES:
        digest.update(name.encode() + b"\0")
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def stage_adapter(source: Path, root: Path, step: int) -> tuple[Path, str]:
    """Copy the adapter to `root/step_<step>-<sha12>/` (written to a temp name, then renamed):
    a folder whose name is its content's version. Returns (folder, fingerprint)."""
    fingerprint = adapter_fingerprint(source)
    target = root / f"step_{step:04d}-{fingerprint[:12]}"
    if not target.is_dir():
        staging = root / f".{target.name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in ADAPTER_FILES:
            shutil.copy2(source / name, staging / name)
        staging.rename(target)
    return target, fingerprint


def probe(server_url: str, model: str) -> tuple[list[int], list[float]]:
    """Greedy completion of a fixed token-id prompt: (token ids, their log-probs)."""
    answer = post_json(
        f"{server_url}/v1/completions",
        {
            "model": model,
            "prompt": PROBE_PROMPT,
            "max_tokens": 4,
            "temperature": 0.0,
            "logprobs": 0,
            "return_token_ids": True,
        },
    )
    choice = answer["choices"][0]
    return list(choice["token_ids"]), [float(x) for x in choice["logprobs"]["token_logprobs"]]


def served_root(server_url: str, name: str) -> str | None:
    """The path the server reports for model `name` (`/v1/models` card `root`), None if absent."""
    cards = get_json(f"{server_url}/v1/models").get("data", [])
    card = next((c for c in cards if c.get("id") == name), None)
    return None if card is None else card.get("root")


def _compare(
    a: tuple[list[int], list[float]], b: tuple[list[int], list[float]]
) -> tuple[bool, float]:
    """Whether the greedy tokens differ, and the largest log-prob change over the positions
    before the first different token (the log-probs of different tokens do not compare)."""
    same = 0
    while same < min(len(a[0]), len(b[0])) and a[0][same] == b[0][same]:
        same += 1
    delta = max((abs(x - y) for x, y in zip(a[1][:same], b[1][:same], strict=True)), default=0.0)
    return a[0] != b[0], delta


class AdapterPusher:
    """Pushes adapters to one server as `policy` and proves each push (see the module doc)."""

    def __init__(self, server_url: str, run_dir: Path) -> None:
        self.server_url, self.run_dir = server_url, run_dir
        self.root = run_dir / "served-adapters"
        self.served: Path | None = None  # the folder of the last proven push
        self.served_step: int | None = None
        self.fingerprint: str | None = None

    def load(self, name: str, folder: Path) -> None:
        post_json(
            f"{self.server_url}/v1/load_lora_adapter",
            {"lora_name": name, "lora_path": str(folder), "load_inplace": True},
        )

    def push(self, adapter_dir: Path, step: int) -> dict[str, Any]:
        """Load `adapter_dir` as `policy` and prove the server serves exactly it; a failure is a
        failed PPO_ADAPTER_PUSH gate (GateError), never a silent stale policy."""
        fields: dict[str, Any] = {"step": step, "adapter": POLICY_NAME}
        previous, previous_fp = self.served, self.fingerprint
        try:
            folder, fingerprint = stage_adapter(adapter_dir, self.root, step)
            fields |= {"sha256": fingerprint, "served_path": str(folder.relative_to(self.run_dir))}
            fields["adapter_changed"] = fingerprint != previous_fp
            before = noise = None
            if previous is not None:
                before = probe(self.server_url, POLICY_NAME)
                noise = _compare(before, probe(self.server_url, POLICY_NAME))
            self.load(POLICY_NAME, folder)
            root = served_root(self.server_url, POLICY_NAME)
            after = probe(self.server_url, POLICY_NAME)
            reread = adapter_fingerprint(folder)
        except (RuntimeError, OSError, KeyError, TypeError, ValueError) as error:
            problem = Violation(
                rule="adapter.push",
                expected="the inference server to load the adapter and answer the probe",
                found=f"{type(error).__name__}: {error}"[:400],
                fix="the inference server is down or failing; see its log, then rerun",
            )
            gate(self.run_dir, Gate.PPO_ADAPTER_PUSH_PASSED, [problem], fields)
            raise  # gate() raised already; this line is for type checkers
        if before is not None and noise is not None:
            # finite figures (the ledger is JSON): a different greedy token is a flag of its own,
            # a change no noise floor explains unless two identical requests differed too
            tokens_changed, delta = _compare(before, after)
            noise_tokens_changed, floor = noise
            fields["probe_max_delta"] = round(delta, 8)
            fields["noise_floor"] = round(floor, 8)
            fields["probe_tokens_changed"] = tokens_changed
            fields["noise_tokens_changed"] = noise_tokens_changed
            fields["probe_changed"] = (tokens_changed and not noise_tokens_changed) or delta > floor
        problems = []
        if root != str(folder):
            problems.append(
                Violation(
                    rule="adapter.push.served",
                    expected=f"the server to serve {POLICY_NAME!r} from {folder} (the pushed "
                    f"adapter, sha256 {fingerprint[:12]})",
                    found=f"/v1/models reports root {root!r}",
                    fix="the server did not take the new adapter (load_lora_adapter with "
                    "load_inplace, and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 for vLLM)",
                )
            )
        if reread != fingerprint:
            problems.append(
                Violation(
                    rule="adapter.push.checksum",
                    expected=f"the served folder to hash to {fingerprint}",
                    found=reread,
                    fix="something rewrote the served adapter folder; rerun",
                )
            )
        if not after[0]:
            problems.append(
                Violation(
                    rule="adapter.push.probe",
                    expected=f"{POLICY_NAME!r} to answer the probe with >= 1 token",
                    found="no tokens",
                    fix="see the server's log",
                )
            )
        gate(self.run_dir, Gate.PPO_ADAPTER_PUSH_PASSED, problems, fields)
        self.served, self.served_step, self.fingerprint = folder, step, fingerprint
        if previous is not None and previous != folder:
            shutil.rmtree(previous, ignore_errors=True)  # the server now reads the new one
        return fields


def near_window_margin(window: int) -> int:
    """How far below the window the probe stays: 1,024 tokens (room for one completion at
    production windows), a quarter of the window for windows under 4,096 tokens."""
    return min(NEAR_WINDOW_MARGIN, window // 4)


def near_window_probe(
    server_url: str, model: str, window: int, run_dir: Path, margin: int | None = None
) -> dict[str, Any]:
    """A real request of `window - margin` prompt tokens (at least 1) + 1 completion token, sent
    to the server directly: it passes only if the server answers and reports as prompt tokens
    exactly the tokens sent (a server that fell back to a smaller window refuses or truncates).
    Fields: what was measured."""
    margin = near_window_margin(window) if margin is None else margin
    length = max(window - margin, 1)
    prompt = [1 + (i % 199) for i in range(length)]
    fields: dict[str, Any] = {"window": window, "margin": margin, "sent_prompt_tokens": length}
    try:  # what the server says it serves (a server without /v1/models says nothing)
        reported = get_json(f"{server_url}/v1/models").get("data", [])
        card: dict[str, Any] = next((c for c in reported if c.get("id") == model), {})
        fields["served_max_model_len"] = card.get("max_model_len")
    except (OSError, ValueError):
        fields["served_max_model_len"] = None
    try:
        answer = post_json(
            f"{server_url}/v1/completions",
            {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0},
            timeout=600.0,
        )
        usage = answer["usage"]
        fields["prompt_tokens"] = usage["prompt_tokens"]
        fields["completion_tokens"] = usage["completion_tokens"]
    except (RuntimeError, OSError, KeyError, TypeError, ValueError) as error:
        problem = Violation(
            rule="near_window.answer",
            expected=f"the server to answer a {length}-token prompt (window {window}) with its "
            "usage",
            found=f"{type(error).__name__}: {error}"[:400],
            fix="serve the configured window (model.max_model_len); see the server's log",
        )
        gate(run_dir, Gate.P0_NEAR_WINDOW_PROBE_PASSED, [problem], fields)
        raise
    problems = []
    if fields["prompt_tokens"] != length:
        problems.append(
            Violation(
                rule="near_window.prompt_tokens",
                expected=f"the server to count the {length} prompt tokens sent "
                f"(window {window} - margin {margin})",
                found=f"usage.prompt_tokens = {fields['prompt_tokens']} (sent {length})",
                fix="the server fell back to a smaller window or truncated the prompt: start "
                f"it with max_model_len = {window}",
            )
        )
    served = fields["served_max_model_len"]
    if served is not None and served < window:
        problems.append(
            Violation(
                rule="near_window.served_window",
                expected=f"the server to report max_model_len >= {window}",
                found=f"max_model_len = {served}",
                fix=f"start the server with max_model_len = {window}",
            )
        )
    gate(run_dir, Gate.P0_NEAR_WINDOW_PROBE_PASSED, problems, fields)
    return fields
