"""`forge-rollout gateway`: context guard + exact token traces in front of vLLM or `serve`.

Per `/sessions/{session_id}/v1/(chat/)completions` request: 1. read at most `max_body_bytes`
and parse (400 of its own for bad JSON), 2. guard max_tokens <= 0, 3. count the prompt exactly
and guard the window, 4. forward with ids + log-probs injected, 5. pass errors/timeouts through
and record nothing, 6. record one trace per valid choice (only while the client is still
connected; a failed trace write withholds the answer: JSON 507/500, logged once, reported by
`/health` and `/stats`), 7. answer with the injected fields stripped. `/health`, `/stats`,
`/v1/models`, `/tokenize`, `/detokenize` too.
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
from forge_rollout._capture import choice_records, inject, params_of, strip
from forge_rollout._count import CountError, PromptTooLong, TokenizerCounter, UpstreamCounter
from forge_rollout._disk import DiskThread
from forge_rollout._gateway_config import GatewayConfig, check_guard_gate
from forge_rollout._gateway_tito import bad_upstream, json_response, tito_completion
from forge_rollout._guard import (
    check_context,
    check_max_tokens,
    openai_error,
    refuse_body_size,
    refuse_prompt_bytes,
    requested_max_tokens,
)
from forge_rollout._stats import GatewayStats
from forge_rollout._tito import ChatRenderer
from forge_rollout._traces import TRACE_SCHEMA, TraceWriter, check_session_id, read_traces

ENDPOINTS = {"chat/completions": "chat.completions", "completions": "completions"}
UPSTREAM_COUNT_MAX_BODY = 256 * 1024 * 1024  # counting with /tokenize: no byte bound known
JSON_ESCAPE_GROWTH = 6  # one byte of text can take 6 bytes of JSON (\u0001)
READ_CHUNK = 256 * 1024
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)

log = logging.getLogger("forge_rollout.gateway")


def _passed_through(status: int, payload: bytes, content_type: str | None) -> web.Response:
    headers = {"Content-Type": content_type} if content_type else None
    return web.Response(status=status, body=payload, headers=headers)


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
        problem = check_session_id(session_id)
        if problem:
            return json_response(400, openai_error(problem, param=None, code="invalid_session_id"))
        raw = await self._read_body(request)
        if raw is None:
            self.stats.guard_refused += 1
            too_big = refuse_body_size(
                request.content_length, self.max_body_bytes, self.config.window
            )
            return json_response(400, too_big)
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
        # 2. max_tokens
        max_tokens, problem = requested_max_tokens(body)
        if problem:
            return json_response(
                400, openai_error(problem, param="max_tokens", code="invalid_type")
            )
        refusal = check_max_tokens(max_tokens, self.config.window)
        if refusal is None and endpoint == "chat.completions" and self.renderer is not None:
            return await tito_completion(self, request, body, max_tokens, started, clock)
        # 3. exact prompt length against window - reserve
        count_ms = 0.0
        if refusal is None:
            assert self.counter is not None, "Gateway.start runs before any handler"
            try:
                prompt_tokens = await self.counter.count(endpoint, body)
            except CountError as error:
                return _passed_through(error.status, error.body, error.content_type)
            except PromptTooLong as error:
                self.stats.guard_refused += 1
                too_long = refuse_prompt_bytes(
                    error.prompt_bytes, error.max_token_bytes, self.config.window
                )
                return json_response(400, too_long)
            except (TimeoutError, aiohttp.ClientError) as error:
                return self._upstream_failure(error, "POST /tokenize")
            count_ms = (time.perf_counter() - clock) * 1000
            self.stats.count_ms.append(count_ms)
            refusal = check_context(
                prompt_tokens, max_tokens, self.config.window, self.config.reserve
            )
        if refusal is not None:
            self.stats.guard_refused += 1
            return json_response(400, refusal)
        # 4. forward with ids + log-probs injected
        forward, asked = inject(endpoint, body)
        headers = {"Content-Type": "application/json"}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        upstream_clock = time.perf_counter()
        try:
            async with self.client.post(
                f"{self.upstream}/v1/{request.match_info['endpoint']}",
                data=json_fast.dumps(forward),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.config.upstream_timeout),
            ) as answer:
                payload = await answer.read()
                status, content_type = answer.status, answer.headers.get("Content-Type")
        except (TimeoutError, aiohttp.ClientError) as error:
            return self._upstream_failure(error, f"POST /v1/{request.match_info['endpoint']}")
        upstream_ms = (time.perf_counter() - upstream_clock) * 1000
        self.stats.upstream_ms.append(upstream_ms)
        # 5. errors pass through unchanged, nothing recorded
        if not 200 <= status < 300:
            self.stats.upstream_errors += 1
            return _passed_through(status, payload, content_type)
        try:
            answer_json = json_fast.loads(payload)
            if not isinstance(answer_json, dict):
                raise ValueError(f"a JSON {type(answer_json).__name__}, not an object")
        except (ValueError, UnicodeDecodeError) as error:
            self.stats.upstream_errors += 1
            message = f"expected a JSON object from the upstream; found {error}"
            return bad_upstream(message)
        records, problems = choice_records(endpoint, answer_json)
        strip(endpoint, answer_json, asked)
        out = json_fast.dumps(answer_json)
        # 6. record, only for a client that is still there to receive the answer
        if request.transport is None or request.transport.is_closing():
            self.stats.client_disconnects += 1
            return _passed_through(status, out, "application/json")
        if problems:
            self.stats.untraced_choices += len(problems)
            self.stats.last_untraced = problems[-1]
        model = str(body.get("model") or answer_json.get("model") or "")
        try:
            await self.record(
                session_id, endpoint, body, model, records, started, count_ms, upstream_ms, clock
            )
        except OSError as error:
            return self._trace_failure(error)
        self.stats.overhead_ms.append((time.perf_counter() - clock) * 1000 - upstream_ms)
        # 7. answer
        return _passed_through(status, out, "application/json")

    async def record(
        self,
        session_id: str,
        endpoint: str,
        body: dict[str, Any],
        model: str,
        records: list[dict[str, Any]],
        started: float,
        count_ms: float,
        upstream_ms: float,
        clock: float,
    ) -> list[int]:
        """Write the call's traces in the disk thread (never on the event loop); their seqs.

        Raises OSError when a write failed (the caller withholds the answer)."""
        write = partial(
            self._record, session_id, endpoint, body, model, records, started, count_ms,
            upstream_ms, clock,
        )  # fmt: skip
        clock_write = time.perf_counter()
        seqs = await self.disk.run(write)
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

    def _record(
        self,
        session_id: str,
        endpoint: str,
        body: dict[str, Any],
        model: str,
        records: list[dict[str, Any]],
        started: float,
        count_ms: float,
        upstream_ms: float,
        clock: float,
    ) -> list[int]:
        request_id = uuid.uuid4().hex
        seqs: list[int] = []
        params = params_of(body)
        finished = time.time()
        for record in records:
            total_ms = (time.perf_counter() - clock) * 1000
            timing = {
                "started_at": started,
                "finished_at": finished,
                "count_ms": round(count_ms, 3),
                "upstream_ms": round(upstream_ms, 3),
                "total_ms": round(total_ms, 3),
            }

            def build(seq: int, record: dict[str, Any] = record, timing: Any = timing) -> dict:
                return {
                    "schema_version": TRACE_SCHEMA,
                    "session_id": session_id,
                    "seq": seq,
                    "request_id": request_id,
                    "endpoint": endpoint,
                    "model": model,
                    "params": params,
                    **record,
                    "timing": timing,
                }

            seqs.append(self.writer.append(session_id, build))
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

    def _upstream_failure(self, error: BaseException, what: str) -> web.Response:
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
                return _passed_through(answer.status, payload, answer.headers.get("Content-Type"))
        except (TimeoutError, aiohttp.ClientError) as error:
            return self._upstream_failure(error, f"{request.method} {path}")

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
        return json_response(200, self.stats.summary())

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
