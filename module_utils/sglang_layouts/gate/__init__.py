"""The readiness gate: preflight, /health probes, the engine's log and process, failure classes."""
