"""`forge-gates`: validate and show run specs, verify run ledgers against phase contracts."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from forge_gates._checks import Violation
from forge_gates._help import quiet_broken_pipe, use_help_formatter
from forge_gates.ledger._ledger import format_marker, read_ledger
from forge_gates.ledger._phases import phase_contract, verify_run
from forge_gates.machine._preflight import hint_spec
from forge_gates.spec._config import load_spec, shipped_configs, spec_sha256, validate_config

EPILOG = """examples:
  forge-gates list
  forge-gates validate smoke-local my-run.toml
  forge-gates show formal-5gpu
  forge-gates verify runs/ppo_smoke/20261129T180000Z --phase smoke
exit codes: 0 ok, 1 rules violated / run incomplete, 2 usage error"""


def _print_violations(violations: Sequence[Violation]) -> None:
    for v in violations:
        print(f"  - [{v.rule}]", file=sys.stderr)
        print(f"      expected: {v.expected}", file=sys.stderr)
        print(f"      found:    {v.found}", file=sys.stderr)
        print(f"      fix:      {v.fix}", file=sys.stderr)


def _validate(args: argparse.Namespace) -> int:
    status = 0
    for config in args.configs:
        spec, violations = validate_config(config)
        if spec is None:
            status = 1
            print(f"INVALID {config}: {len(violations)} violation(s)", file=sys.stderr)
            _print_violations(violations)
            continue
        print(f"VALID {config} phase={spec.phase} sha256={spec_sha256(spec)}")
        for hint in hint_spec(spec):
            print(f"  hint: {hint}", file=sys.stderr)
    return status


def _show(args: argparse.Namespace) -> int:
    spec, violations = validate_config(args.config)
    if spec is None:
        print(f"INVALID {args.config}: {len(violations)} violation(s)", file=sys.stderr)
        _print_violations(violations)
        return 1
    payload = {"sha256": spec_sha256(spec), "spec": spec.summary()}
    print(json.dumps(payload, indent=2, sort_keys=True))
    return 0


def _verify(args: argparse.Namespace) -> int:
    violations = verify_run(args.run_dir, args.phase)
    if violations:
        print(
            f"INCOMPLETE {args.run_dir} phase={args.phase}: {len(violations)} problem(s)",
            file=sys.stderr,
        )
        _print_violations(violations)
        return 1
    gates = [r.gate for r in phase_contract(args.phase)]
    print(f"COMPLETE {args.run_dir} phase={args.phase} gates={len(gates)}")
    return 0


def _ledger(args: argparse.Namespace) -> int:
    for record in read_ledger(args.run_dir):
        print(f"{record.at}  {format_marker(record.gate, record.fields)}")
    return 0


def _list(_: argparse.Namespace) -> int:
    for name in shipped_configs():
        spec = load_spec(name)
        print(f"{name:14s} phase={spec.phase:6s} window={spec.model.max_model_len}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forge-gates",
        description="Typed run specs and fail-closed gates for Forge pipelines.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="check configs; list every violated rule")
    p.add_argument("configs", nargs="+", help="config file paths or shipped config names")
    p.set_defaults(func=_validate)
    p = sub.add_parser("show", help="print the resolved spec and its SHA-256 as JSON")
    p.add_argument("config", help="config file path or shipped config name")
    p.set_defaults(func=_show)
    p = sub.add_parser("verify", help="check a run folder's gate ledger against its phase")
    p.add_argument("run_dir", help="run folder holding gates.jsonl")
    p.add_argument(
        "--phase",
        required=True,
        choices=["smoke", "soak", "formal", "p0"],
        help="the phase contract the ledger is held to",
    )
    p.set_defaults(func=_verify)
    p = sub.add_parser("ledger", help="print a run's recorded gates")
    p.add_argument("run_dir", help="run folder holding gates.jsonl")
    p.set_defaults(func=_ledger)
    p = sub.add_parser("list", help="list the shipped configs")
    p.set_defaults(func=_list)
    return use_help_formatter(parser)


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except Exception as exc:  # a clear one-line error, never a bare traceback for users
        from forge_gates._checks import GateError

        if isinstance(exc, GateError):
            print(str(exc), file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())
