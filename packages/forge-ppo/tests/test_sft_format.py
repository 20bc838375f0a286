"""Synthetic action-format pairs (forge_ppo.sft._format): never a demo task, always one valid
action as mini-swe-agent parses it, the same pairs for the same seed, rows with the reply only
as action tokens."""

from __future__ import annotations

import re

import pytest
from minisweagent.exceptions import FormatError
from minisweagent.models.utils.actions_text import parse_regex_actions

from forge_ppo.sft._format import (
    END_TOKEN,
    KINDS,
    first_turn,
    format_pairs,
    one_action,
    pair_rows,
)
from forge_ppo.sft._format_train import length_batches
from forge_rollout import AgentConfig, resolve_tasks, train_tokenizer

PAIRS = format_pairs(300, seed=5)
CONFIG = AgentConfig()


def _pair_text(pair) -> str:
    return "\n".join([*(m["content"] for m in pair.messages), pair.reply])


def _demo_names() -> dict[str, set[str]]:
    """What would leak a demo task: its repository, its files' names, the functions its issue
    names, and the lines its oracle fix writes (read from the tasks themselves)."""
    names: dict[str, set[str]] = {"repository": set(), "file": set(), "function": set()}
    fix_lines: set[str] = set()
    for task in resolve_tasks("demo"):
        text = task.instruction()
        names["repository"] |= set(re.findall(r"forge-demo/(\w+)", text))
        names["function"] |= set(re.findall(r"(\w+)\(\)", text))
        for imported in re.findall(r"from \w+ import ([\w, ]+)", text):
            names["function"] |= {n.strip() for n in imported.split(",")}
        workspace = task.path / "environment" / "workspace"
        originals: set[str] = set()
        for path in workspace.rglob("*"):
            if path.is_file():
                if path.stem not in {"__init__", "README"}:
                    names["file"].add(path.stem)
                originals |= {line.strip() for line in path.read_text().splitlines()}
        solve = (task.path / "solution" / "solve.sh").read_text().splitlines()
        fix_lines |= {s for s in map(str.strip, solve) if len(s) >= 8 and s not in originals}
    names["fix line"] = fix_lines
    return names


def test_pairs_never_mention_a_demo_task():
    names = _demo_names()
    assert all(names.values()), f"expected names of every kind from the demo tasks: {names}"
    found = []
    for pair in PAIRS:
        text = _pair_text(pair)
        for what, values in names.items():
            for value in values:
                hit = value in text if what == "fix line" else re.search(rf"\b{value}\b", text)
                if hit:
                    found.append(f"{pair.kind}: {what} {value!r}")
    assert not found, f"expected no demo task in the pairs; found {sorted(set(found))}"


def test_every_reply_holds_one_action_as_mini_swe_agent_parses_it():
    for pair in PAIRS:
        actions = parse_regex_actions(
            pair.reply, action_regex=CONFIG.action_regex, format_error_template="{{error}}"
        )
        assert actions == [{"command": pair.command}], (pair.kind, pair.reply)
        assert one_action(pair.reply) == pair.command
        assert pair.reply.startswith("THOUGHT: ") and "COMMAND" not in pair.command
    assert {p.kind for p in PAIRS} == set(KINDS)


def test_one_action_matches_the_agent_on_bad_replies():
    bad = ["no block", "```bash\nls\n```", "```mswea_bash_command\nls\n```\n" * 2]
    for text in bad:
        assert one_action(text) is None
        with pytest.raises(FormatError):
            parse_regex_actions(text, action_regex=CONFIG.action_regex, format_error_template="x")


def test_generation_is_deterministic_per_seed():
    assert format_pairs(40, seed=7) == format_pairs(40, seed=7)
    assert format_pairs(40, seed=7) != format_pairs(40, seed=8)
    with pytest.raises(ValueError, match="unknown kinds"):
        format_pairs(3, seed=0, kinds=("nope",))


def test_first_turn_is_what_the_agent_sends():
    system, user = first_turn(CONFIG, "do X")
    assert system == {"role": "system", "content": CONFIG.system_template}
    assert user == {"role": "user", "content": "Issue:\ndo X"}


def test_rows_train_on_the_reply_and_its_end_token_only():
    tokenizer = train_tokenizer()
    pairs = format_pairs(len(KINDS), seed=3)
    rows = pair_rows(pairs, tokenizer)
    end = tokenizer.convert_tokens_to_ids(END_TOKEN)
    for pair, row in zip(pairs, rows, strict=True):
        prompt = tokenizer.decode(row.prompt_ids.tolist(), skip_special_tokens=False)
        assert prompt.endswith("<|im_start|>assistant\n")
        assert prompt.count("<|im_start|>user") == sum(m["role"] == "user" for m in pair.messages)
        assert row.response_ids[-1] == end and bool(row.response_mask.all())
        reply = tokenizer.decode(row.response_ids[:-1].tolist(), skip_special_tokens=False)
        assert reply == pair.reply


def test_length_batches_cover_every_row_once_with_similar_lengths():
    lengths = [5, 50, 7, 49, 6, 51, 8]
    batches = length_batches(lengths, 2)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches == [[0, 4], [2, 6], [3, 1], [5]]


def test_pairs_never_name_an_easy_task_file_or_content():
    """The format policy is measured and trained with PPO on the easy tier: no pair may name
    one of its files or the text its instruction asks for (every `...` of its instructions)."""
    quoted = set()
    for task in resolve_tasks("easy"):
        quoted |= set(re.findall(r"`([^`]+)`", task.instruction()))
    assert len(quoted) >= 16, f"expected the easy instructions to quote names; found {quoted}"
    found = [
        f"{pair.kind}: {value!r}"
        for pair in PAIRS
        for value in quoted
        if re.search(rf"(?<![\w./-]){re.escape(value)}(?![\w/-])", _pair_text(pair))
    ]
    assert not found, f"expected no easy task in the pairs; found {sorted(set(found))}"
