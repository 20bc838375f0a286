"""pytest: never collect the demo tasks' own unit tests as forge-data tests.

`src/forge_data/bundled/demo_tasks/` holds task repositories and grading tests that run
against a task workspace (see README, "Demo tasks"); `tests/test_demo_tasks.py` runs them the
way a verifier does. A bare `pytest` from the repository root (testpaths = packages) would
otherwise import them out of context.
"""

collect_ignore_glob = [
    "src/forge_data/bundled/demo_tasks/*",
    "tests/fixtures/*",  # a project for forge-data synth, with its own tests
]
