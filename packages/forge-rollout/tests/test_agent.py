"""mini-swe-agent adapters against a scripted OpenAI-compatible endpoint and a fake sandbox."""

import asyncio
import json
import socket
import ssl
import threading
from dataclasses import dataclass

import pytest
from aiohttp import web

from forge_rollout.episodes._agent import (
    AgentConfig,
    GatewayModel,
    NetworkConnectionError,
    SandboxEnvironment,
    UpstreamError,
    make_agent,
)


def bash(command: str) -> str:
    return f"THOUGHT: go\n```mswea_bash_command\n{command}\n```"


class ScriptedEndpoint:
    """A loopback OpenAI-style server answering from a script: str = content, int = HTTP error,
    float = answer after that many seconds."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _chat(self, request):
        body = await request.json()
        self.requests.append(body)
        item = self.script.pop(0) if self.script else bash("echo idle")
        if isinstance(item, float):
            await asyncio.sleep(item)
            item = bash("echo late")
        if item == 400:
            err = {
                "message": "This model's maximum context length is 64 tokens.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
            return web.json_response({"error": err}, status=400)
        if isinstance(item, int):
            return web.json_response({"error": {"message": "boom", "code": item}}, status=item)
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": item},
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )

    def __enter__(self):
        app = web.Application()
        app.router.add_post("/sessions/{sid}/v1/chat/completions", self._chat)
        self.runner = web.AppRunner(app)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.runner.setup(), self.loop).result()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self.loop).result()
        port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/sessions/ep-1/v1"
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@dataclass
class Result:
    stdout: str
    stderr: str = ""
    exit_code: int = 0
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0


class FakeSandbox:
    def __init__(self, outputs=None):
        self.commands = []
        self.outputs = outputs or {}

    async def exec(self, command, cwd=None, env=None, timeout_s=60.0):
        self.commands.append((command, cwd, timeout_s))
        return self.outputs.get(command, Result(stdout=f"ran {command}\n"))


def run_episode(script, config=None, sandbox=None):
    config = config or AgentConfig(step_limit=3)
    sandbox = sandbox or FakeSandbox()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with ScriptedEndpoint(script) as endpoint:
            model = GatewayModel(base_url=endpoint.base_url, model="policy", config=config)
            env = SandboxEnvironment(sandbox, loop, config)
            agent = make_agent(model, env, config)
            result = agent.run(task="fix the bug")
            return result, agent, model, sandbox, endpoint
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_submit_ends_episode_and_actions_run_in_sandbox():
    submit = bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    sandbox = FakeSandbox(
        {
            "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT": Result(
                "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n"
            )
        }
    )
    result, _agent, model, sandbox, endpoint = run_episode([bash("ls"), submit], sandbox=sandbox)
    assert result["exit_status"] == "Submitted"
    assert [c[0] for c in sandbox.commands] == ["ls", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert sandbox.commands[0][1] == "/workspace"
    assert (model.n_calls, model.n_input_tokens, model.n_output_tokens) == (2, 20, 10)
    # the observation of `ls` reached the model in the second call
    second = endpoint.requests[1]["messages"]
    assert "ran ls" in second[-1]["content"] and second[-1]["role"] == "user"
    assert endpoint.requests[0]["temperature"] == 1.0 and "max_tokens" not in endpoint.requests[0]


def test_step_limit():
    result, *_ = run_episode([bash("ls")] * 5, AgentConfig(step_limit=2))
    assert result["exit_status"] == "LimitsExceeded"


def test_context_exceeded_is_an_agent_outcome():
    result, agent, *_ = run_episode([bash("ls"), 400])
    assert result["exit_status"] == "ContextExhausted"
    assert agent.messages[-1]["role"] == "exit"


def test_repeated_format_errors_end_episode():
    result, *_ = run_episode(
        ["no block here"] * 3, AgentConfig(step_limit=10, format_error_limit=2)
    )
    assert result["exit_status"] == "RepeatedFormatError"


def test_upstream_500_is_infrastructure():
    with pytest.raises(UpstreamError, match="HTTP 500"):
        run_episode([500])


def test_unreachable_endpoint_is_network_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = GatewayModel(base_url=f"http://127.0.0.1:{port}/v1", model="m", config=AgentConfig())
    with pytest.raises(NetworkConnectionError, match="check that the gateway"):
        model.query([{"role": "user", "content": "hi"}])


def test_episodes_share_one_http_client_and_keep_their_own_timeouts(monkeypatch):
    """No TLS context (CA bundle load) per episode; each episode's call timeout still holds."""
    GatewayModel(base_url="http://127.0.0.1:9/v1", model="m", config=AgentConfig())
    loads = []
    for name in ("load_verify_locations", "load_default_certs"):
        original = getattr(ssl.SSLContext, name)

        def counted(self, *args, _original=original, **kwargs):
            loads.append(1)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(ssl.SSLContext, name, counted)
    with ScriptedEndpoint([1.5, bash("echo on time")]) as endpoint:
        quick = GatewayModel(
            base_url=endpoint.base_url, model="m", config=AgentConfig(request_timeout_s=0.5)
        )
        patient = GatewayModel(
            base_url=endpoint.base_url, model="m", config=AgentConfig(request_timeout_s=30)
        )
        with pytest.raises(NetworkConnectionError, match="to answer"):
            quick.query([{"role": "user", "content": "hi"}])
        answer = patient.query([{"role": "user", "content": "hi"}])
    assert "on time" in answer["content"]
    assert loads == []  # the first model built the process's client; none built another


def test_long_output_is_truncated_and_timeouts_reported():
    config = AgentConfig(max_output_chars=100, step_limit=1)
    sandbox = FakeSandbox(
        {"big": Result("x" * 1000), "slow": Result("", exit_code=137, timed_out=True)}
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    env = SandboxEnvironment(sandbox, loop, config)
    out = env.execute({"command": "big"})
    assert len(out["output"]) < 200 and "elided" in out["output"]
    slow = env.execute({"command": "slow"})
    assert slow["returncode"] == 137 and "timed out" in slow["exception_info"]
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def test_sampling_params_and_production_templates():
    config = AgentConfig(temperature=0.0, top_p=1.0, seed=7, max_tokens=32)
    assert config.sampling() == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 32, "seed": 7}
    prod = AgentConfig.production()
    assert prod.step_limit == 200 and "mswea_bash_command" in prod.system_template
    assert "{{task}}" in prod.instance_template
    json.dumps(prod.model_dump())


def test_wall_time_limit_ends_as_time_exceeded():
    class SlowSandbox(FakeSandbox):
        async def exec(self, command, cwd=None, env=None, timeout_s=60.0):
            await asyncio.sleep(1.1)
            return await super().exec(command, cwd, env, timeout_s)

    config = AgentConfig(step_limit=5)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with ScriptedEndpoint([bash("ls")] * 5) as endpoint:
            model = GatewayModel(base_url=endpoint.base_url, model="policy", config=config)
            env = SandboxEnvironment(SlowSandbox(), loop, config)
            result = make_agent(model, env, config, wall_time_limit_s=1).run(task="t")
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    assert result["exit_status"] == "TimeExceeded" and model.n_calls == 1


@pytest.mark.usefixtures("cgroups")
def test_an_oom_killed_agent_command_ends_the_episode_as_the_agents_outcome() -> None:
    """A command killed at the sandbox's memory limit ends the episode as the agent's outcome
    (AgentResourceLimitError: the verifier scores what it left), never as infrastructure that
    training would drop (a policy would learn to dodge reward 0 by filling memory)."""
    from forge_rollout import AgentConfig
    from forge_sandbox import AgentResourceLimitError, LocalSandbox, SandboxSpec

    async def main() -> None:
        async with LocalSandbox(SandboxSpec(memory_mb=64)) as sandbox:
            env = SandboxEnvironment(sandbox, asyncio.get_running_loop(), AgentConfig())
            ok = await asyncio.to_thread(env.execute, {"command": "echo fine"})
            assert ok["returncode"] == 0
            with pytest.raises(AgentResourceLimitError, match="OOM-killed at the sandbox's 64"):
                await asyncio.to_thread(
                    env.execute, {"command": "python3 -c \"x = b'a' * (512 << 20)\""}
                )

    asyncio.run(main())
