"""CrossGuard policies: importable rule modules; the pack itself is built only in policies/__main__.py."""
