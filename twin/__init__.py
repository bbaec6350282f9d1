"""A local twin of the monitoring path, and the plan checked and recalibrated from live metrics.

- `vllm_metrics`: the /metrics exposition of vLLM 0.29.0 (families, labels, buckets).
- `timeline`: a simulator run turned into per-replica metric state over time.
- `exporters`: emulated vLLM replicas, kube-state-metrics and Envoy on 127.0.0.1.
- `servers`: a real Prometheus and Alertmanager on loopback, with the program's rules.
- `health`: whether those servers are still the ones started, and answering (else no verdict).
- `scenario`: `llmserve twin`: which alerts fired and resolved, against what the plan expects.
- `promapi`, `check`, `calibrate`: `llmserve check` and `llmserve calibrate` on any Prometheus.
- `efficiency`: the profile's prefill and decode efficiencies, by name (the one place that knows them).
- `report`: what the three commands print, and their JSON.

Imports conventions, sizing, simulator, observability and settings; never llmserve or offline (the CLI
loads the stack and hands the plan over).
"""
