"""The scripted oracle policy and its episodes, recorded through the real chain.

The policy answers like an agent that knows the task's oracle fix:

    call 1: THOUGHT line + one bash block applying the fix (`sed -i -e 'Nc\\LINE' ... FILE`)
    call 2: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` (submit)

The fix is derived from the task itself: its `solution/solve.sh` rewrites one file with a
heredoc; the lines that differ from the workspace's copy become `sed` line changes (the whole
file would not fit an agent reply of the demo configs' `max_tokens`). Every derived action is
proven by the verifier: recording fails unless each oracle episode gets reward 1.

The decoy plan (`premature_submit_replies`) is the failure the demo policy is also shown: submit
at once, without the fix (the premature submit real SWE agents are known for); recording proves
the verifier gives each such episode reward 0.

Episodes go through the real chain: mini-swe-agent, bubblewrap sandboxes, the token-in-token-out
gateway with the model's own chat template, the verifier, and `rows_from_job`. The scripted
upstream answers `/v1/completions` on token ids with the *canonical* token ids of its text
(`tokenizer.encode`), so the rows are what the model must learn to sample.
"""

from __future__ import annotations

import asyncio
import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from forge_gates import RunSpec
from forge_rollout import (
    AgentConfig,
    GatewayConfig,
    create_gateway_app,
    rows_from_job,
    run_app_in_thread,
    run_rollouts,
)
from forge_rollout.rows import ConversionStats, SampleRow
from forge_sandbox import HarborTask

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
HEREDOC = re.compile(r"cat > (\S+) <<'(\w+)'\n(.*?)\n\2\n", re.S)


class OracleError(ValueError):
    """A task whose oracle cannot be turned into a compact scripted action."""


def oracle_fix(task: HarborTask) -> str:
    """The bash command applying the task's oracle fix as `sed` line changes.

    Expects `solution/solve.sh` to rewrite exactly one workspace file with a quoted heredoc
    whose lines replace the original's one for one; raises OracleError otherwise."""
    script = (task.path / "solution" / "solve.sh").read_text()
    found = HEREDOC.findall(script)
    if len(found) != 1:
        raise OracleError(
            f"{task.name}: expected solve.sh to rewrite exactly one file with a quoted heredoc "
            f"(cat > FILE <<'EOF'); found {len(found)}; fix: give the task such an oracle"
        )
    rel, _, new_text = found[0]
    old_path = task.path / "environment" / "workspace" / rel
    if not old_path.is_file():
        raise OracleError(
            f"{task.name}: expected the workspace file {rel} that solve.sh rewrites; found no "
            f"file at {old_path}; fix: the oracle must edit a file of the workspace"
        )
    old, new = old_path.read_text().splitlines(), new_text.splitlines()
    edits: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        if op != "replace" or i2 - i1 != j2 - j1:
            raise OracleError(
                f"{task.name}: expected the oracle to replace lines one for one; found a "
                f"{op} of old lines {i1 + 1}-{i2} by new lines {j1 + 1}-{j2} in {rel}; fix: "
                "use a line-for-line oracle change"
            )
        for offset, line in enumerate(new[j1:j2]):
            if "'" in line or "\\" in line:
                raise OracleError(
                    f"{task.name}: expected no quote or backslash in a changed line (sed c\\); "
                    f"found {line!r}; fix: rewrite the oracle line"
                )
            edits.append(f"-e '{i1 + offset + 1}c\\{line}'")
    if not edits:
        raise OracleError(
            f"{task.name}: expected solve.sh to change {rel}; found it identical; fix the oracle"
        )
    return f"sed -i {' '.join(edits)} {rel}"


SUBMIT_REPLY = f"THOUGHT: submit.\n```mswea_bash_command\n{SUBMIT}\n```"


def oracle_replies(task: HarborTask) -> list[str]:
    """The scripted policy's replies in call order: the fix, then the submit."""
    fix = oracle_fix(task)
    return [f"THOUGHT: apply the fix.\n```mswea_bash_command\n{fix}\n```", SUBMIT_REPLY]


def premature_submit_replies(task: HarborTask) -> list[str]:
    """The decoy plan: submit on the first call, without the fix (a one-call episode)."""
    return [SUBMIT_REPLY]


def scripted_upstream(tokenizer: Any, replies: dict[str, list[str]], window: int):
    """An OpenAI-compatible upstream (`/v1/completions` on token ids) that answers as the
    scripted oracle policy: the task is found by its instruction in the prompt, the call index
    by the number of user turns; token ids are the canonical encoding of the reply + eos."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def reply(text: str) -> str:
        keys = [key for key in replies if key in text]
        if len(keys) != 1:
            raise web.HTTPBadRequest(text=f"expected one known task in the prompt; found {keys}")
        plan = replies[keys[0]]
        return plan[min(text.count("<|im_start|>user") - 1, len(plan) - 1)]

    async def completions(request: web.Request) -> web.Response:
        prompt = (await request.json())["prompt"]
        content = reply(tokenizer.decode(prompt, skip_special_tokens=False))
        ids = [*tokenizer.encode(content, add_special_tokens=False), end]
        logprobs = {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": [0.0] * len(ids)}
        choice = {"index": 0, "text": content, "logprobs": logprobs, "finish_reason": "stop",
                  "stop_reason": None}  # fmt: skip
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids)}
        body = {"id": "oracle", "object": "text_completion", "created": 0, "model": "oracle"}
        return web.json_response(body | {"choices": [choice], "usage": usage})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "oracle", "object": "model",
                                                           "max_model_len": window}]})  # fmt: skip

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


def record_scripted_episodes(
    spec: RunSpec,
    tasks: list[HarborTask],
    model_dir: Path,
    out: Path,
    config: AgentConfig,
    plan: Callable[[HarborTask], list[str]],
    reward: float,
) -> tuple[list[SampleRow], ConversionStats]:
    """One episode per task of the scripted policy answering with `plan(task)` (its replies in
    call order: `oracle_replies` with reward 1, `premature_submit_replies` with reward 0)
    through gateway, sandbox and verifier into `out/job`; the rows and their conversion counts.
    Raises OracleError unless every episode got `reward` and became exactly one row."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    plans = {task.instruction().strip(): plan(task) for task in tasks}
    traces = out / "traces"
    gateway = GatewayConfig(
        upstream="", traces_dir=traces, window=spec.context.window,
        reserve=spec.context.reserve, tokenizer_dir=model_dir, tito=True,
    )  # fmt: skip
    with run_app_in_thread(scripted_upstream(tokenizer, plans, spec.context.window)) as upstream:
        gateway = gateway.model_copy(update={"upstream": upstream})
        with run_app_in_thread(create_gateway_app(gateway), handler_cancellation=True) as url:
            summary = asyncio.run(
                run_rollouts(
                    tasks, out / "job", endpoint=url, model="oracle", config=config,
                    traces_dir=traces, concurrency=spec.resources.concurrency,
                    verifier_timeout_s=spec.agent.verifier_timeout_s,
                )
            )  # fmt: skip
    wrong = sorted(name for name, r in summary.rewards.items() if r != reward)
    rows, stats = rows_from_job(out / "job")
    if wrong or len(summary.rewards) != len(tasks) or len(rows) != len(tasks):
        raise OracleError(
            f"expected every scripted episode verified with reward {reward} and one row each "
            f"({len(tasks)} tasks); found rewards {summary.rewards}, {len(rows)} rows "
            f"({stats.model_dump()}); fix: see {out / 'job'} (trial result.json files)"
        )
    return rows, stats
