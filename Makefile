# Convenience targets; the README's two commands work without make.
.PHONY: setup test bench preview
setup:
	scripts/setup test
test:
	scripts/test
bench: setup
	.venv/bin/python bench/bench_sizing.py
	@for b in bench/bench_preview.py bench/bench_simulate.py bench/bench_accuracy.py bench/bench_agreement.py; do [ -f $$b ] && .venv/bin/python $$b || true; done
preview: setup
	.venv/bin/llmserve preview --stack prod
