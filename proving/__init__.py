"""Proving the plan against measurements: the load-test report and its verdict (pure Python, no CLI)."""
