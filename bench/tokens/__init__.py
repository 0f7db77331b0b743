"""Helpers of bench/bench_tokens.py: a recording MCP stdio client, seeded data, the workflows."""
