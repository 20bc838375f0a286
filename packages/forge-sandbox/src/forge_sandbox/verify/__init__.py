"""The verifier's room: what decides a trial's reward, where the agent's code cannot reach it.

    _transfer.py   the agent's change (a manifest diff of its working tree, sources only)
                   carried from its sandbox into a fresh one made from the task's environment
    _harness.py    the test harness's files that change leaves out (conftest.py, pytest config,
                   entry points, site-packages): pytest would load a plugin from them
    _testside.py   a SWE-bench-shaped task's test side (test folders and files, the runner,
                   less the gold patch's paths), left out as well
    _verifier.py   tests/test.sh in that fresh sandbox, the reward read from /logs/verifier
    _evidence.py   evidence that the tests ran (a reward without it is no verdict)
    _testlist.py   a task's listed FAIL_TO_PASS / PASS_TO_PASS, read from test.sh's own output
    _audit.py      the hack audit of the change (test files, test config, verifier paths,
                   test-framework tampering), per trial in agent/change-audit.json

The trial (`forge_sandbox._trial`) drives them; who caused a failure is decided there.
"""
