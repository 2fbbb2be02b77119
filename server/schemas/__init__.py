"""OpenAI wire format: one module per endpoint plus the shared types in common.py."""
