"""`forge-rollout gateway`: context guard + exact token traces in front of vLLM or `serve`.

Per `/sessions/{session_id}/v1/(chat/)completions` request: 1. read at most `max_body_bytes`
and parse (400 of its own for bad JSON), 2. guard max_tokens <= 0, then one of two paths,
`_plain` (the upstream renders the prompt) or `_tito` (chat with a tokenizer: the gateway
renders it, token in, token out): 3. count the prompt exactly and guard the window, 4. forward
(ids + log-probs asked for), 5. pass errors/timeouts through and record nothing, 6. record one
trace per valid choice (only while the client is still connected; a failed trace write
withholds the answer: JSON 507/500, logged once, reported by `/health` and `/stats`), 7. answer
with what the client asked for. Steps 1, 2 and what both paths share (4-6: `forward`,
`upstream_object`, `client_gone`, `keep`) are `Gateway`'s. `/health`, `/stats`, `/v1/models`,
`/tokenize`, `/detokenize` too.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
import uuid
from functools import partial
from typing import Any

import aiohttp
from aiohttp import web

from forge_rollout import _json_fast as json_fast
from forge_rollout._aio import loop_name
from forge_rollout.gateway._calls import (
    Call,
    Forwarded,
    bad_upstream,
    json_response,
    passed_through,
)
from forge_rollout.gateway._capture import params_of
from forge_rollout.gateway._config import GatewayConfig, check_guard_gate
from forge_rollout.gateway._count import TokenizerCounter, UpstreamCounter
from forge_rollout.gateway._disk import DiskThread
from forge_rollout.gateway._guard import (
    check_max_tokens,
    openai_error,
    refuse_body_size,
    requested_max_tokens,
)
from forge_rollout.gateway._plain import plain_completion
from forge_rollout.gateway._renderer import ChatRenderer
from forge_rollout.gateway._stats import GatewayStats
from forge_rollout.gateway._tito import tito_completion
from forge_rollout.traces._format import TRACE_SCHEMA, TraceWriter, check_session_id, read_traces

ENDPOINTS = {"chat/completions": "chat.completions", "completions": "completions"}
UPSTREAM_COUNT_MAX_BODY = 256 * 1024 * 1024  # counting with /tokenize: no byte bound known
JSON_ESCAPE_GROWTH = 6  # one byte of text can take 6 bytes of JSON (\u0001)
READ_CHUNK = 256 * 1024
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)

log = logging.getLogger("forge_rollout.gateway")


class Gateway:
    """State shared by the handlers: upstream client, counter, trace writer, stats."""

    def __init__(self, config: GatewayConfig):
        self.config = config
        self.upstream = config.upstream.rstrip("/").removesuffix("/v1")
        self.stats = GatewayStats()
        self.writer = TraceWriter(config.traces_dir, fsync=config.fsync)
        self.disk = DiskThread("forge-traces")
        self.renderer: ChatRenderer | None = None  # token-in-token-out (tokenizer_dir + tito)
        self.session: aiohttp.ClientSession | None = None
        self.counter: TokenizerCounter | UpstreamCounter | None = None
        self.max_body_bytes = config.max_body_bytes or UPSTREAM_COUNT_MAX_BODY
        self.trace_error: str | None = None  # the last trace write failed (cleared on success)

    @property
    def client(self) -> aiohttp.ClientSession:
        """The upstream session; `start` (the app's startup hook) opens it."""
        assert self.session is not None, "Gateway.start runs before any handler"
        return self.session

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=self.config.max_connections, ttl_dns_cache=300)
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=True,
        )
        if self.config.tokenizer_dir is not None:
            self.counter = TokenizerCounter(
                self.config.tokenizer_dir,
                window=self.config.window,
                workers=self.config.count_workers,
            )
            if self.config.max_body_bytes is None:
                bound = self.counter.max_prompt_bytes
                self.max_body_bytes = JSON_ESCAPE_GROWTH * bound + 1024 * 1024
            if self.config.tito:
                self.renderer = ChatRenderer(self.counter.tokenizer, self.counter.max_prompt_bytes)
        else:
            self.counter = UpstreamCounter(self.session, self.upstream, self.config.count_timeout)
        if self.config.check_upstream:
            try:
                await self.check_guard()
            except BaseException:
                await self.stop(app)  # cleanup does not run when startup fails
                raise

    async def stop(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()
        if isinstance(self.counter, TokenizerCounter):
            self.counter.pool.shutdown(wait=False)
        self.disk.shutdown()  # every accepted trace reaches the file
        self.writer.close()

    async def check_guard(self) -> None:
        """The `PPO_CONTEXT_GUARD_PASSED window=N reserve=R` gate (raises GateError)."""
        await check_guard_gate(self.client, self.upstream, self.config)

    # -- model calls ------------------------------------------------------------------------

    async def completion(self, request: web.Request) -> web.Response:
        try:
            return await self._completion(request)
        except asyncio.CancelledError:  # the client went away (handler cancellation)
            self.stats.client_disconnects += 1
            raise

    async def _completion(self, request: web.Request) -> web.Response:
        started, clock = time.time(), time.perf_counter()
        endpoint = ENDPOINTS[request.match_info["endpoint"]]
        session_id = request.match_info["session_id"]
        self.stats.requests += 1
        # 1. parse
        body = await self._parse(request, session_id)
        if isinstance(body, web.Response):
            return body
        call = Call(request, session_id, endpoint, body, started, clock)
        # 2. max_tokens
        max_tokens, problem = requested_max_tokens(body)
        if problem:
            return json_response(
                400, openai_error(problem, param="max_tokens", code="invalid_type")
            )
        refusal = check_max_tokens(max_tokens, self.config.window)
        # 3.-7. the gateway renders chat itself (token in, token out), or the upstream does
        if refusal is None and endpoint == "chat.completions" and self.renderer is not None:
            return await tito_completion(self, call, max_tokens)
        return await plain_completion(self, call, max_tokens, refusal)

    async def _parse(self, request: web.Request, session_id: str) -> dict[str, Any] | web.Response:
        """1. The request's JSON object body, or the 400 answer saying what is wrong with it."""
        problem = check_session_id(session_id)
        if problem:
            return json_response(400, openai_error(problem, param=None, code="invalid_session_id"))
        raw = await self._read_body(request)
        if raw is None:
            too_big = refuse_body_size(
                request.content_length, self.max_body_bytes, self.config.window
            )
            return self.refuse(too_big)
        try:
            body = json_fast.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            message = f"expected a JSON object body; found invalid JSON ({error}); fix: send JSON"
            return json_response(400, openai_error(message, param=None, code="invalid_json"))
        except RecursionError:
            message = (
                "expected a JSON object body; found JSON nested too deeply to parse; "
                "fix: send messages without deep nesting"
            )
            return json_response(400, openai_error(message, param=None, code="invalid_json"))
        finally:
            del raw
        if not isinstance(body, dict):
            message = f"expected a JSON object body; found {type(body).__name__}"
            return json_response(400, openai_error(message, param=None, code="invalid_json"))
        if body.get("stream"):
            message = "expected stream=false (traces need whole answers); found true; fix: drop it"
            return json_response(400, openai_error(message, param="stream", code="unsupported"))
        return body

    # -- the steps both paths share ---------------------------------------------------------

    def refuse(self, refusal: dict[str, Any]) -> web.Response:
        """The guard's 400 (body too big, prompt too long for window - reserve), counted."""
        self.stats.guard_refused += 1
        return json_response(400, refusal)

    async def forward(self, call: Call, path: str, data: bytes) -> Forwarded | web.Response:
        """4. POST `data` to the upstream's `/v1/{path}` (the client's Authorization passed on);
        a timeout or a failed connection is answered here (504 / 502)."""
        headers = {"Content-Type": "application/json"}
        if "Authorization" in call.request.headers:
            headers["Authorization"] = call.request.headers["Authorization"]
        upstream_clock = time.perf_counter()
        try:
            async with self.client.post(
                f"{self.upstream}/v1/{path}",
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.config.upstream_timeout),
            ) as answer:
                payload = await answer.read()
                status, content_type = answer.status, answer.headers.get("Content-Type")
        except (TimeoutError, aiohttp.ClientError) as error:
            return self.upstream_failure(error, f"POST /v1/{path}")
        call.upstream_ms = (time.perf_counter() - upstream_clock) * 1000
        self.stats.upstream_ms.append(call.upstream_ms)
        return Forwarded(status, payload, content_type)

    def upstream_object(self, forwarded: Forwarded) -> dict[str, Any] | web.Response:
        """5. The upstream's answer as a JSON object; its errors pass through unchanged and
        an answer that is not a JSON object is a 502 (nothing recorded either way)."""
        if not 200 <= forwarded.status < 300:
            self.stats.upstream_errors += 1
            return passed_through(forwarded.status, forwarded.payload, forwarded.content_type)
        try:
            answer_json = json_fast.loads(forwarded.payload)
            if not isinstance(answer_json, dict):
                raise ValueError(f"a JSON {type(answer_json).__name__}, not an object")
        except (ValueError, UnicodeDecodeError) as error:
            self.stats.upstream_errors += 1
            return bad_upstream(f"expected a JSON object from the upstream; found {error}")
        return answer_json

    def client_gone(self, call: Call) -> bool:
        """6. Whether the client went away (then nothing is recorded: it never got the answer)."""
        if call.request.transport is None or call.request.transport.is_closing():
            self.stats.client_disconnects += 1
            return True
        return False

    async def keep(
        self,
        call: Call,
        answer_json: dict[str, Any],
        records: list[dict[str, Any]],
        problems: list[str],
    ) -> list[int] | web.Response:
        """6. Record one trace per valid choice (the others counted as untraced); their seqs, or
        the 507/500 that withholds the answer when a trace could not be written."""
        if problems:
            self.stats.untraced_choices += len(problems)
            self.stats.last_untraced = problems[-1]
        model = str(call.body.get("model") or answer_json.get("model") or "")
        try:
            return await self.record(call, model, records)
        except OSError as error:
            return self._trace_failure(error)

    def answered(self, call: Call) -> None:
        """7. The call's gateway overhead: the whole handler less the model call."""
        self.stats.overhead_ms.append((time.perf_counter() - call.clock) * 1000 - call.upstream_ms)

    async def record(self, call: Call, model: str, records: list[dict[str, Any]]) -> list[int]:
        """Write the call's traces; their seqs. An append without fsync runs on the loop when
        the disk thread is idle and no append stalled lately (`DiskThread.run_small`); with
        fsync, or behind queued work, in the disk thread.

        Raises OSError when a write failed (the caller withholds the answer)."""
        write = partial(self._record, call, model, records)
        clock_write = time.perf_counter()
        if self.config.fsync:
            seqs = await self.disk.run(write)
        else:
            seqs = await self.disk.run_small(write)
        self.stats.trace_ms.append((time.perf_counter() - clock_write) * 1000)
        if self.trace_error is not None:
            log.warning("trace writes succeed again (after: %s)", self.trace_error)
            self.trace_error = None
        return seqs

    def load_session(self, session_id: str) -> list[Any]:
        """The session's traces so far (a restarted gateway resumes splicing from them)."""
        if not self.writer.path(session_id).is_file():
            return []
        return list(read_traces(self.config.traces_dir, session_id))

    def _record(self, call: Call, model: str, records: list[dict[str, Any]]) -> list[int]:
        request_id = uuid.uuid4().hex
        seqs: list[int] = []
        params = params_of(call.body)
        finished = time.time()
        for record in records:
            total_ms = (time.perf_counter() - call.clock) * 1000
            timing = {
                "started_at": call.started,
                "finished_at": finished,
                "count_ms": round(call.count_ms, 3),
                "upstream_ms": round(call.upstream_ms, 3),
                "total_ms": round(total_ms, 3),
            }

            def build(seq: int, record: dict[str, Any] = record, timing: Any = timing) -> dict:
                return {
                    "schema_version": TRACE_SCHEMA,
                    "session_id": call.session_id,
                    "seq": seq,
                    "request_id": request_id,
                    "endpoint": call.endpoint,
                    "model": model,
                    "params": params,
                    **record,
                    "timing": timing,
                }

            seqs.append(self.writer.append(call.session_id, build))
            self.stats.traces_written += 1
        return seqs

    async def _read_body(self, request: web.Request) -> bytes | None:
        """The body, or None when it is over `max_body_bytes` (read no further than that)."""
        limit = self.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return None  # aiohttp drains the unread rest after the answer (lingering close)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_chunked(READ_CHUNK):
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def _trace_failure(self, error: OSError) -> web.Response:
        """A trace could not be written: withhold the answer (JSON), log the first failure."""
        self.stats.trace_write_failures += 1
        name = errno.errorcode.get(error.errno or 0, "OSError")
        reason = f"{name}: {error.strerror or error} (traces_dir {self.config.traces_dir})"
        self.stats.last_trace_error = reason
        if self.trace_error is None:  # once per outage, not one traceback per request
            log.error("cannot write traces; answers are withheld until one succeeds: %s", reason)
        self.trace_error = reason
        status = 507 if error.errno in FULL_DISK else 500
        message = (
            f"expected to record this call's trace; found {reason}; the answer is withheld (an "
            "untraced call cannot be trained on); fix: free space on the traces disk or point "
            "--traces at a writable folder"
        )
        return json_response(
            status, {"error": {"message": message, "type": "trace_write_failed", "code": status}}
        )

    def upstream_failure(self, error: BaseException, what: str) -> web.Response:
        """A failed upstream call (`what`): 504 when it timed out, else 502; counted."""
        if isinstance(error, TimeoutError):
            self.stats.upstream_timeouts += 1
            message = f"the upstream did not answer {what} in time ({error!r})"
            return json_response(
                504, {"error": {"message": message, "type": "timeout", "code": 504}}
            )
        self.stats.upstream_errors += 1
        message = f"the upstream failed on {what}: {error!r}"
        return bad_upstream(message)

    # -- everything else ---------------------------------------------------------------------

    async def passthrough(self, request: web.Request) -> web.Response:
        path = request.path
        target = self.upstream + ("/v1/models" if path.endswith("/v1/models") else path)
        headers = {
            k: v for k, v in request.headers.items() if k in ("Content-Type", "Authorization")
        }
        try:
            async with self.client.request(
                request.method,
                target,
                data=await request.read(),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.config.count_timeout),
            ) as answer:
                payload = await answer.read()
                return passed_through(answer.status, payload, answer.headers.get("Content-Type"))
        except (TimeoutError, aiohttp.ClientError) as error:
            return self.upstream_failure(error, f"{request.method} {path}")

    async def health(self, request: web.Request) -> web.Response:
        upstream: dict[str, Any] = {"url": self.upstream, "status": None, "error": None}
        clock = time.perf_counter()
        try:
            async with self.client.get(
                self.upstream + "/health", timeout=aiohttp.ClientTimeout(total=5)
            ) as answer:
                upstream["status"] = answer.status
        except (TimeoutError, aiohttp.ClientError) as error:
            upstream["error"] = repr(error)
        upstream["latency_ms"] = round((time.perf_counter() - clock) * 1000, 3)
        healthy = upstream["status"] == 200 and self.trace_error is None
        if self.trace_error is not None:
            status = "traces_unwritable"
        else:
            status = "ok" if healthy else "upstream_unhealthy"
        body = {
            "status": status,
            "gateway": {
                "window": self.config.window,
                "reserve": self.config.reserve,
                "traces_dir": str(self.config.traces_dir),
                "count": self.counter.name if self.counter else None,
                "max_body_bytes": self.max_body_bytes,
                "token_in_token_out": self.renderer is not None,
                "event_loop": loop_name(),
            },
            "traces": {
                "ok": self.trace_error is None,
                "error": self.trace_error,
                "write_failures": self.stats.trace_write_failures,
            },
            "upstream": upstream,
        }
        return json_response(200 if healthy else 503, body)

    async def stats_view(self, request: web.Request) -> web.Response:
        return json_response(200, {**self.stats.summary(), "disk_calls": dict(self.disk.counts)})

    async def not_a_session(self, request: web.Request) -> web.Response:
        message = (
            f"expected /sessions/{{session_id}}{request.path} (traces are kept per session); "
            f"found {request.path}; fix: use base_url <gateway>/sessions/<id>/v1"
        )
        return json_response(400, openai_error(message, param=None, code="session_required"))


GATEWAY = web.AppKey("gateway", Gateway)


def create_gateway_app(config: GatewayConfig) -> web.Application:
    """The gateway as an aiohttp app (serve with `handler_cancellation=True`)."""
    gateway = Gateway(config)
    app = web.Application(client_max_size=256 * 1024 * 1024)
    app[GATEWAY] = gateway
    app.on_startup.append(gateway.start)
    app.on_cleanup.append(gateway.stop)
    route = "/sessions/{session_id}/v1/{endpoint:chat/completions|completions}"
    app.router.add_post(route, gateway.completion)
    app.router.add_get("/sessions/{session_id}/v1/models", gateway.passthrough)
    app.router.add_get("/v1/models", gateway.passthrough)
    app.router.add_post("/tokenize", gateway.passthrough)
    app.router.add_post("/detokenize", gateway.passthrough)
    app.router.add_post("/v1/chat/completions", gateway.not_a_session)
    app.router.add_post("/v1/completions", gateway.not_a_session)
    app.router.add_get("/health", gateway.health)
    app.router.add_get("/stats", gateway.stats_view)
    return app
