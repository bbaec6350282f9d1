# Convenience targets; the README's two commands work without make.
.PHONY: setup test bench bench-gpu preview up cloud-preview loadtest-local
STACK ?= prod
# The guard policies' levels follow the stack's environment (policies/config/<environment>.json),
# as in the offline preview: a stack named `mine` with `environment: prod` is judged as prod.
# One rule, shared with the CI cloud preview: scripts/policy-config (fails with one line when it cannot tell).
POLICY_CONFIG = $(or $(shell scripts/policy-config $(STACK)),$(error no policy config for stack $(STACK): see the line above))
setup:
	scripts/setup test
test:
	scripts/test
# Each benchmark prints its target and PASS or FAIL (docs/benchmarks.md); all run, then make
# fails if any target failed.
BENCHES = bench/bench_sizing.py bench/bench_simulate.py bench/bench_preview.py bench/bench_accuracy.py \
          bench/bench_agreement.py bench/bench_emulate.py bench/bench_loadtest_report.py bench/bench_autoscale.py
bench: setup
	@status=0; for b in $(BENCHES); do echo "== $$b"; .venv/bin/python $$b || status=1; done; exit $$status
# The GPU microbenchmarks (docs/benchmarks.md): where a GPU and PyTorch are (torch is not a project
# dependency; GPU_PYTHON names an interpreter that has it). Both run; JSON to GPU_BENCH_OUT
# (bench/results/, ignored); GPU_BENCH_ARGS passes flags to both (--dry-run: tiny shapes on the CPU).
GPU_PYTHON ?= python3
GPU_BENCH_OUT ?= bench/results
GPU_BENCHES = bench/gpu_moe_layer_bench.py bench/gpu_mla_decode_bench.py
bench-gpu:
	@status=0; for b in $(GPU_BENCHES); do echo "== $$b"; $(GPU_PYTHON) $$b --out $(GPU_BENCH_OUT) $(GPU_BENCH_ARGS) || status=1; done; exit $$status
preview: setup
	.venv/bin/llmserve preview --stack prod
# Opt-in, not CI: GuideLLM 0.8.1 (about 6 GB, its own .venv-guidellm) against `llmserve emulate`, healthy
# and slowed 30%, each judged by loadtest-report (docs/proving.md). LOADTEST_ARGS: --step-seconds N, --stack S.
loadtest-local: setup
	.venv/bin/python scripts/loadtest_local.py $(LOADTEST_ARGS)
# `pulumi up` and `pulumi preview` with the guard policies: the only flags added are the pack and its
# config; PULUMI_ARGS passes others through (`PULUMI_ARGS=--yes` where nobody answers the prompt).
up:
	pulumi up --stack $(STACK) --policy-pack policies --policy-pack-config $(POLICY_CONFIG) $(PULUMI_ARGS)
cloud-preview:
	pulumi preview --stack $(STACK) --policy-pack policies --policy-pack-config $(POLICY_CONFIG) $(PULUMI_ARGS)
