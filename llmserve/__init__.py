"""The llmserve command line."""
