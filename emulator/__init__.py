"""`llmserve emulate`: an OpenAI-compatible server on 127.0.0.1 answering in real time from the
plan's step model, one simulator engine per planned replica behind the plan's router.

- `fleet`: the simulator's Replica and Router driven by the event loop's clock (no second model
  of the engine), and the zone or node loss of `simulate`;
- `openai`: request bodies read and checked as vLLM checks them; response and chunk shapes;
- `wire`: the little HTTP/1.1 it needs, bounded; `server`: the routes and the clean stop;
- `metrics`: what each engine counts, served as vLLM's /metrics (the twin's families);
- `client`: a plain Poisson streaming client (the standard library), for the tests and the bench.
"""
