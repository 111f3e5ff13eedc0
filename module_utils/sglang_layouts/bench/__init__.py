"""The load generator (standard library only: it runs on a bare host python3) and its formulas."""
