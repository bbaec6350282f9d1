"""Monitoring as data: the metric contract, the recording and alert rules, and the dashboard.

Pure Python (no Pulumi): `components/monitoring.py` deploys what these modules build, and
`offline.monitoring_files` (behind `llmserve render`) writes the same rules and dashboard to files.
"""
