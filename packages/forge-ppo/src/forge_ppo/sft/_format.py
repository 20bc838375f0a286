"""Synthetic action-format pairs: instruction -> one ```mswea_bash_command block (SFT rows).

A real small model (SmolLM2-135M-Instruct) never writes mini-swe-agent's action block on its
own (FACTS.md: 0 valid blocks in ~450 samples). These pairs teach only the FORMAT, on made-up
repositories: each is the first user turn Forge sends (the agent's system and instance
templates, rendered as mini-swe-agent's `DefaultAgent.run` does), or that turn plus earlier
turns and their observations, and one reply

    THOUGHT: <one line>
    ```mswea_bash_command
    <one command>
    ```

Kinds: short instructions (create a file, replace text, show lines, find a definition, list
files, run the tests) and issue-style reports about invented packages (`forge-synth/<name>`)
answered by an exploring first command, a read after a grep, a test run after an edit, and a
submit after passing tests. No pair names a demo task's repository, files or fix
(`tests/test_sft_format.py` checks that against the demo tasks themselves).

`format_pairs(count, seed)` is deterministic per seed; `pair_rows` renders them with the model's
chat template into `SampleRow`s whose response is the reply + `<|im_end|>` (loss on it only).
"""

from __future__ import annotations

import random
import re
from typing import Any

import torch
from jinja2 import StrictUndefined, Template
from pydantic import BaseModel, ConfigDict, Field

from forge_rollout import AgentConfig, RowHeader, SampleRow

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
FENCE = "mswea_bash_command"
END_TOKEN = "<|im_end|>"  # ChatML end of turn: the sampled completion's last id

# invented names only; none is a demo task's package, module or function
PACKAGES = (
    "colorkit", "geomlib", "unitconv", "mathlet", "queuekit", "tokenkit", "pathkit",
    "vectorkit", "bitkit", "romankit", "hexkit", "gridkit", "csvtool", "mailfmt", "tempconv",
    "wordstat",
)  # fmt: skip
MODULES = ("core", "convert", "helpers", "ops", "shapes", "metrics", "numbers", "strings")
FUNCTIONS = (
    ("to_hex", "255", "'0xff'", "'ff'"),
    ("clamp", "12, 0, 10", "12", "10"),
    ("lerp", "0, 10, 0.5", "0", "5.0"),
    ("area", "3, 4", "7", "12"),
    ("to_kelvin", "0", "0", "273.15"),
    ("word_count", "'a b  c'", "4", "3"),
    ("is_prime", "9", "True", "False"),
    ("gcd", "12, 18", "12", "6"),
    ("dot", "[1, 2], [3, 4]", "10", "11"),
    ("roman", "4", "'IIII'", "'IV'"),
    ("pad_left", "'7', 3", "'7'", "'007'"),
    ("count_vowels", "'queue'", "3", "4"),
    ("flatten", "[[1], [2, [3]]]", "[1, 2, [3]]", "[1, 2, 3]"),
    ("dedupe", "[1, 1, 2]", "[1, 1, 2]", "[1, 2]"),
    ("hamming", "'abc', 'abd'", "0", "1"),
    ("initials", "'Ada Lovelace'", "'A'", "'AL'"),
)
FILES = ("notes.txt", "VERSION", "settings.env", "todo.md", "data/input.csv", "greeting.txt")
LINES = ("hello world", "version = 2", "DEBUG=false", "name: sample", "42", "alpha beta gamma")
WORDS = ("alpha", "beta", "gamma", "delta", "red", "blue", "green", "fast", "slow", "north")
CLOSINGS = (
    "Fix it in the library code; keep the public API. The tests run with "
    "`python3 -m unittest discover -s tests`.",
    "Please correct the implementation. Run the tests with `python3 -m unittest discover -s "
    "tests`; they must stay green.",
    "Repair the function without renaming anything.",
)
CREATE_TASKS = (
    "Create the file {path} containing the line `{line}`.",
    "Write `{line}` into a new file {path}.",
)
LIST_TASKS = (
    "List the Python files of the repository.",
    "Which Python files does /workspace hold?",
)
TEST_COMMAND = "cd /workspace && python3 -m unittest discover -s tests"
KINDS = (
    "create", "replace", "show", "find", "list", "tests",
    "issue_first", "issue_read", "issue_test", "issue_submit",
)  # fmt: skip


class FormatPair(BaseModel):
    """One supervised pair: the chat messages before the reply, and the reply."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(description="Which template made it (one of KINDS).")
    messages: tuple[dict[str, str], ...] = Field(description="Chat turns before the reply.")
    reply: str = Field(description="The assistant reply: THOUGHT line + one bash block.")
    command: str = Field(description="The command inside the block.")


def reply_text(thought: str, command: str) -> str:
    """The reply format of mini-swe-agent's text-based agent: one THOUGHT line, one block."""
    return f"THOUGHT: {thought}\n```{FENCE}\n{command}\n```"


def first_turn(config: AgentConfig, task: str) -> list[dict[str, str]]:
    """The [system, user] messages `DefaultAgent.run(task)` sends first (its Jinja, strict:
    a template needing variables other than `task` / the sandbox's `cwd` fails here)."""
    variables = {"task": task, "cwd": "/workspace", "system": "Linux", "machine": "x86_64"}
    return [
        {"role": "system", "content": _render(config.system_template, variables)},
        {"role": "user", "content": _render(config.instance_template, variables)},
    ]


def observation(config: AgentConfig, returncode: int, output: str) -> dict[str, str]:
    """A user turn showing a command's result with the agent's observation template."""
    out = {"returncode": returncode, "output": output, "exception_info": ""}
    return {"role": "user", "content": _render(config.observation_template, {"output": out})}


def _render(template: str, variables: dict[str, Any]) -> str:
    return Template(template, undefined=StrictUndefined).render(**variables)


def _issue(rng: random.Random) -> tuple[str, str, str]:
    """(issue text, package, function) of an invented bug report."""
    package, (func, args, wrong, right) = rng.choice(PACKAGES), rng.choice(FUNCTIONS)
    text = (
        f"# {func}() returns {wrong} for {args}\n\nRepository: `forge-synth/{package}` (checked "
        f"out in `/workspace`).\n\n`{package}.{func}` gives a wrong result:\n\n```python\n"
        f">>> from {package} import {func}\n>>> {func}({args})\n{wrong}\n```\n\nExpected: "
        f"`{right}`.\n\n{rng.choice(CLOSINGS)}\n"
    )
    return text, package, func


def _pair(rng: random.Random, kind: str, config: AgentConfig) -> FormatPair:
    """One pair of `kind`: (user task, earlier turns) -> THOUGHT + command."""
    history: list[dict[str, str]] = []
    path = rng.choice(FILES)
    module = f"{rng.choice(PACKAGES)}/{rng.choice(MODULES)}.py"
    if kind == "create":
        line = rng.choice(LINES)
        phrasing = rng.choice(CREATE_TASKS)
        task = phrasing.format(path=path, line=line)
        folder = path.rpartition("/")[0]
        command = (f"mkdir -p {folder} && " if folder else "") + f"echo '{line}' > {path}"
        thought = f"I create {path} with the requested line."
    elif kind == "replace":
        old, new = rng.sample(WORDS, 2)
        task = f"In {module}, replace the word `{old}` with `{new}` everywhere."
        command, thought = f"sed -i 's/{old}/{new}/g' {module}", f"I replace {old} in place."
    elif kind == "show":
        start = rng.randint(1, 40)
        end = start + rng.randint(5, 30)
        task = f"Show lines {start} to {end} of {module}."
        command = f"sed -n '{start},{end}p' {module}"
        thought = "I print just that range of lines."
    elif kind == "find":
        func = rng.choice(FUNCTIONS)[0]
        task = f"Where is the function `{func}` defined in this repository?"
        command, thought = f'grep -rn "def {func}" /workspace', f"I search for def {func}."
    elif kind == "list":
        task = rng.choice(LIST_TASKS)
        command = "find /workspace -name '*.py' | sort"
        thought = "I list the Python files first."
    elif kind == "tests":
        task = rng.choice(("Run the test suite.", "Run the repository's tests and show me."))
        command, thought = TEST_COMMAND, "I run the tests."
    else:
        task, package, func = _issue(rng)
        found = f"{package}/{rng.choice(MODULES)}.py"
        lineno = rng.randint(3, 60)
        first = reply_text(f"I find where {func} is defined.", f'grep -rn "def {func}" {package}')
        grep_out = f"{found}:{lineno}:def {func}(*args):\n"
        if kind == "issue_first":
            command, thought = (
                f'grep -rn "def {func}" {package}',
                f"I find where {func} is defined.",
            )
        elif kind == "issue_read":
            history = [{"role": "assistant", "content": first}, observation(config, 0, grep_out)]
            command = f"sed -n '{max(1, lineno - 5)},{lineno + 20}p' {found}"
            thought = f"I read the code of {func}."
        else:
            old, new = rng.sample(WORDS, 2)
            edit = reply_text("I apply the fix.", f"sed -i 's/{old}/{new}/' {found}")
            history = [
                {"role": "assistant", "content": first},
                observation(config, 0, grep_out),
                {"role": "assistant", "content": edit},
                observation(config, 0, ""),
            ]
            if kind == "issue_test":
                command, thought = TEST_COMMAND, "I check that the tests pass now."
            else:
                tests = reply_text("I check that the tests pass now.", TEST_COMMAND)
                runs = rng.randint(4, 30)
                passed = f"{'.' * runs}\n{'-' * 70}\nRan {runs} tests in 0.01s\n\nOK\n"
                history += [{"role": "assistant", "content": tests}, observation(config, 0, passed)]
                command, thought = SUBMIT, "The tests pass, so I submit."
    messages = (*first_turn(config, task), *history)
    return FormatPair(
        kind=kind, messages=messages, reply=reply_text(thought, command), command=command
    )


def format_pairs(
    count: int, seed: int, config: AgentConfig | None = None, kinds: tuple[str, ...] = KINDS
) -> list[FormatPair]:
    """`count` pairs, kinds in turn (each kind about equally often), names drawn from `seed`;
    the same (count, seed, config) gives the same pairs."""
    unknown = sorted(set(kinds) - set(KINDS))
    if count < 1 or unknown:
        raise ValueError(
            f"expected count >= 1 and kinds from {KINDS}; found count {count}, unknown kinds "
            f"{unknown}; fix: pass a positive count and known kinds"
        )
    rng, config = random.Random(seed), config or AgentConfig()
    return [_pair(rng, kinds[i % len(kinds)], config) for i in range(count)]


def one_action(text: str, config: AgentConfig | None = None) -> str | None:
    """The command of `text` when it holds exactly one action block as the agent parses it
    (its `action_regex`, re.DOTALL, stripped, as mini-swe-agent's `parse_regex_actions`);
    None for zero or several blocks (a format error for the agent)."""
    actions = re.findall((config or AgentConfig()).action_regex, text, re.DOTALL)
    return actions[0].strip() if len(actions) == 1 else None


def pair_rows(pairs: list[FormatPair], tokenizer: Any) -> list[SampleRow]:
    """SFT rows: prompt = the chat template over the messages with the generation prompt
    (tokenized as the gateway and the server do: rendered text, no extra special tokens);
    response = the reply's ids + `<|im_end|>`, every one an action token (mask 1)."""
    end = tokenizer.convert_tokens_to_ids(END_TOKEN)
    if not isinstance(end, int) or end == tokenizer.unk_token_id:
        raise ValueError(
            f"expected a ChatML tokenizer with {END_TOKEN}; found id {end!r}; fix: use the "
            "SmolLM2 folder (`forge-rollout make-model smollm2`) or another ChatML model"
        )
    rows = []
    for index, pair in enumerate(pairs):
        text = tokenizer.apply_chat_template(
            list(pair.messages), add_generation_prompt=True, tokenize=False
        )
        prompt = tokenizer.encode(text, add_special_tokens=False)
        response = [*tokenizer.encode(pair.reply, add_special_tokens=False), end]
        width = len(response)
        header = RowHeader(
            task_id=f"format-{pair.kind}", episode_id=f"format-{index}", attempt=0,
            row_index=0, n_calls=1, reward=0.0,
        )  # fmt: skip
        rows.append(
            SampleRow(
                header=header,
                prompt_ids=torch.tensor(prompt, dtype=torch.long),
                response_ids=torch.tensor(response, dtype=torch.long),
                response_mask=torch.ones(width, dtype=torch.long),
                rollout_log_probs=torch.zeros(width, dtype=torch.float32),
                token_level_rewards=torch.zeros(width, dtype=torch.float32),
            )
        )
    return rows
