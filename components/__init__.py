"""Pulumi ComponentResources: one module per concern. Nothing here creates resources at import."""
