"""Hearth's OpenAI-compatible HTTP server."""

__version__ = "0.1.0"
