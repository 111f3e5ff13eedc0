"""What a checkpoint holds and what it costs: per-rank memory and the speed model."""
