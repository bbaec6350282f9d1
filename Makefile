# Convenience targets; the README's two commands work without make.
.PHONY: setup test bench preview up cloud-preview
STACK ?= prod
# The guard policies' levels follow the stack's environment (policies/config/<environment>.json),
# as in the offline preview: a stack named `mine` with `environment: prod` is judged as prod.
POLICY_CONFIG = policies/config/$(shell .venv/bin/python -c "import sys; from settings import read_stack_config, stack_file; print(read_stack_config(stack_file(sys.argv[1]))['llm-serving:environment'])" $(STACK)).json
setup:
	scripts/setup test
test:
	scripts/test
bench: setup
	.venv/bin/python bench/bench_sizing.py
	@for b in bench/bench_preview.py bench/bench_simulate.py bench/bench_accuracy.py bench/bench_agreement.py; do [ -f $$b ] && .venv/bin/python $$b || true; done
preview: setup
	.venv/bin/llmserve preview --stack prod
# `pulumi up` and `pulumi preview` with the guard policies: the only flags added are the pack and its
# config; PULUMI_ARGS passes others through (`PULUMI_ARGS=--yes` where nobody answers the prompt).
up:
	pulumi up --stack $(STACK) --policy-pack policies --policy-pack-config $(POLICY_CONFIG) $(PULUMI_ARGS)
cloud-preview:
	pulumi preview --stack $(STACK) --policy-pack policies --policy-pack-config $(POLICY_CONFIG) $(PULUMI_ARGS)
