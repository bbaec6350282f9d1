"""The offline harness: the Pulumi program recorded under mocks, and what is read from it.

- `engine`: runs `__main__.py` under Pulumi's mocks and records every resource (`run_program`).
- `values`: the one walk over recorded values (secrets redacted or unwrapped, manifest values).
- `stack`: stack name or `--config` file -> raw config, settings, plan, recording (`StackError`).
- `preview`, `render` (with `manifests`, `monitoring_files`): what `llmserve preview/render` show.
- `policy_run`: the CrossGuard pack's policies run on a recording, as the analyzer would.
- `collector`: the garbage collector paused for a bounded batch (a build, a command).

It sits above settings, sizing, components, observability and policies, and below the CLI
(`llmserve/`), which it never imports. Importing it loads nothing heavy: each module imports
Pulumi when it runs.
"""
