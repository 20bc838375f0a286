"""Token-in-token-out episodes: merging on recorded episodes (issue 18.1).

1. Merging, on recorded episodes of the scripted oracle policy: the real chain (mini-swe-agent,
   bubblewrap sandboxes, the gateway with the tiny model's ChatML tokenizer, the verifier) on
   the demo train tasks. The policy looks around, applies the task's oracle script, checks and
   submits (4 calls); its "sampled" ids are a non-canonical split of its text (one token per
   character), so the text re-tokenises to other ids in every call, as a real model's does
   (FACTS.md: 36 of 81 calls). Measured from the rows: the share of calls whose history was
   kept that merged into their episode's row, and training tokens / unique tokens per episode
   (worst episode). For contrast, the same episodes with a format error each (mini-swe-agent
   drops that reply: a real break, counted by cause) and through a gateway that forwards chat
   as it is (`--no-tito`: the upstream re-tokenises the text) are reported without a target.
The gateway with 32K-token prompts against rllm-model-gateway: `bench_gateway_32k.py`.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

SCHEMA = "forge/bench-tito@1"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


# -- 1. merging on recorded oracle episodes ---------------------------------------------------


def _oracle_upstream(tokenizer: Any, solutions: dict[str, str], format_error: bool):
    """/v1/completions on token ids (and /v1/chat/completions for --no-tito) answering like a
    policy that follows the oracle; one token per character (a non-canonical split)."""
    from aiohttp import web

    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    steps = ["ls /workspace", None, "cd /workspace && git status --short", SUBMIT]

    def reply(text: str) -> tuple[str, list[int]]:
        step = text.count("<|im_start|>user") - 1  # observations and format errors alike
        script = next(s for key, s in solutions.items() if key in text)
        plan = [steps[0], "__oracle__", steps[2], steps[3]]
        if format_error:
            plan.insert(1, "__prose__")
        command = plan[min(step, len(plan) - 1)]
        if command == "__prose__":
            content = "THOUGHT: I will now fix the bug in the code."
        else:
            body = script if command == "__oracle__" else command
            content = f"THOUGHT: step {step}\n```mswea_bash_command\n{body}\n```"
        ids = [t for ch in content for t in tokenizer.encode(ch, add_special_tokens=False)]
        return content, [*ids, end]

    def answer(prompt_len: int, content: str, ids: list[int], chat: bool) -> dict[str, Any]:
        usage = {"prompt_tokens": prompt_len, "completion_tokens": len(ids)}
        if chat:
            entries = [{"token": "t", "logprob": -0.5, "bytes": [], "top_logprobs": []}] * len(ids)
            choice = {"index": 0, "message": {"role": "assistant", "content": content},
                      "token_ids": ids, "logprobs": {"content": entries},
                      "finish_reason": "stop", "stop_reason": None}  # fmt: skip
            return {"id": "c", "object": "chat.completion", "created": 0, "model": "oracle",
                    "choices": [choice], "usage": usage}  # fmt: skip
        logprobs = {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": [-0.5] * len(ids)}
        choice = {"index": 0, "text": content, "logprobs": logprobs, "finish_reason": "stop",
                  "stop_reason": None}  # fmt: skip
        return {"id": "c", "object": "text_completion", "created": 0, "model": "oracle",
                "choices": [choice], "usage": usage}  # fmt: skip

    async def completions(request: web.Request) -> web.Response:
        prompt = (await request.json())["prompt"]
        content, ids = reply(tokenizer.decode(prompt, skip_special_tokens=False))
        return web.json_response(answer(len(prompt), content, ids, chat=False))

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        text = tokenizer.apply_chat_template(
            body["messages"], add_generation_prompt=True, tokenize=False
        )
        prompt = tokenizer.encode(text, add_special_tokens=False)
        content, ids = reply(text)
        out = answer(len(prompt), content, ids, chat=True)
        out["prompt_token_ids"] = prompt
        return web.json_response(out)

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        text = tokenizer.apply_chat_template(
            body["messages"], add_generation_prompt=True, tokenize=False
        )
        count = len(tokenizer.encode(text, add_special_tokens=False))
        return web.json_response({"count": count, "max_model_len": 65536})

    async def models(request: web.Request) -> web.Response:
        card = {"id": "oracle", "object": "model", "max_model_len": 65536}
        return web.json_response({"object": "list", "data": [card]})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


def _episodes(tmp: Path, tokenizer_dir: Path, format_error: bool, tito: bool) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from forge_rollout._aio import run_app_in_thread
    from forge_rollout.episodes._agent import AgentConfig
    from forge_rollout.episodes._runner import resolve_tasks, run_rollouts
    from forge_rollout.gateway._app import GatewayConfig, create_gateway_app
    from forge_rollout.traces._job_rows import rows_from_job, rows_from_trial

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tasks = resolve_tasks("demo:train")
    solutions = {
        t.instruction().strip(): (t.path / "solution" / "solve.sh").read_text() for t in tasks
    }
    name = f"{'errors' if format_error else 'oracle'}-{'tito' if tito else 'chat'}"
    traces, job = tmp / f"traces-{name}", tmp / f"job-{name}"
    config = GatewayConfig(
        upstream="", traces_dir=traces, window=65536, reserve=0, tokenizer_dir=tokenizer_dir,
        tito=tito,
    )  # fmt: skip
    with run_app_in_thread(_oracle_upstream(tokenizer, solutions, format_error)) as upstream:
        config = config.model_copy(update={"upstream": upstream})
        with run_app_in_thread(create_gateway_app(config), handler_cancellation=True) as gateway:
            summary = asyncio.run(
                run_rollouts(
                    tasks,
                    job,
                    endpoint=gateway,
                    model="oracle",
                    config=AgentConfig(step_limit=8),
                    traces_dir=traces,
                    concurrency=2,
                )
            )
    _rows, stats = rows_from_job(job)
    ratios = []
    for trial in sorted(p.parent for p in job.glob("*/result.json")):
        _, episode = rows_from_trial(trial)
        if episode.unique_tokens:
            ratios.append(episode.training_tokens / episode.unique_tokens)
    kept = stats.kept_history_calls
    return {
        "episodes": len(ratios),
        "solved": sum(1 for r in summary.rewards.values() if r == 1.0),
        "conversion": stats.model_dump(),
        "merged_share_of_kept": round(stats.merged_calls / kept, 4) if kept else None,
        "training_over_unique_worst": round(max(ratios), 4) if ratios else None,
        "training_over_unique_mean": round(statistics.fmean(ratios), 4) if ratios else None,
    }


def run() -> dict[str, Any]:
    from forge_rollout.models._tiny import train_tokenizer

    result: dict[str, Any] = {"schema": SCHEMA}
    with tempfile.TemporaryDirectory(prefix="forge-bench-tito-") as name:
        tmp = Path(name)
        tokenizer_dir = tmp / "tokenizer"
        train_tokenizer().save_pretrained(tokenizer_dir)
        result["oracle"] = _episodes(tmp, tokenizer_dir, format_error=False, tito=True)
        result["oracle_no_tito"] = _episodes(tmp, tokenizer_dir, format_error=False, tito=False)
        result["format_errors"] = _episodes(tmp, tokenizer_dir, format_error=True, tito=True)
    oracle = result["oracle"]
    result["targets"] = [
        {"name": "tito_merged_share_of_kept_history_calls", "op": ">=", "threshold": 0.95,
         "unit": "", "measured": oracle["merged_share_of_kept"],
         "note": "scripted oracle policy, demo train tasks, tiny ChatML tokenizer"},
        {"name": "tito_training_over_unique_tokens_worst_episode", "op": "<=",
         "threshold": 1.1, "unit": "x", "measured": oracle["training_over_unique_worst"]},
    ]  # fmt: skip
    return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
