# Convenience targets; the README's two commands work without make.
.PHONY: setup test bench preview
setup:
	scripts/setup test
test:
	scripts/test
# Each benchmark prints its target and PASS or FAIL (docs/benchmarks.md); all run, then make
# fails if any target failed.
BENCHES = bench/bench_sizing.py bench/bench_simulate.py bench/bench_preview.py bench/bench_accuracy.py \
          bench/bench_agreement.py
bench: setup
	@status=0; for b in $(BENCHES); do echo "== $$b"; .venv/bin/python $$b || status=1; done; exit $$status
preview: setup
	.venv/bin/llmserve preview --stack prod
