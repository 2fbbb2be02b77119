"""Shared fixtures for the server tests."""
