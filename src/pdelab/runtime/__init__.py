"""How jobs run: warm start, GPU slots, GPU jobs, what a cluster is asked for,
DVC stages."""
