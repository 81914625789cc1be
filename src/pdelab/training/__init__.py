"""Exactly one training job's code (its code digest): the loop and session, task
kinds' strategies, checkpoints, precision, micro-batches, processes, metrics."""
