"""A stub upstream for tests and benches: vLLM's answers (ids, log-probs, `/tokenize`,
`/v1/models`) without a model, with fault injection picked by the request's `model` (HTTP
500/400, hangs, slow answers, dropped connections, bad JSON, missing ids or log-probs); and a
scripted policy (`scripted_upstream`: each task's script as the agent's action, a fixed model
time per call) for end-to-end episodes and the rollout bench.

Private module; the public names are `forge_rollout`'s::

    from forge_rollout import StubOptions, create_stub_app, run_app_in_thread
    with run_app_in_thread(create_stub_app(StubOptions(window=512))) as upstream:
        ...

Imports nothing else of forge_rollout.
"""
