"""Guard policies (Pulumi CrossGuard) for llm-serving.

The rules live in importable modules (`failure_domains`, `security`, `cost`) and are listed in
`registry`; `offline.evaluate` runs them on a recorded resource graph. Only `__main__.py`
constructs the `PolicyPack`, because constructing it starts the analyzer server and blocks.
"""
