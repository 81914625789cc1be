"""A run's records: run.json and its files, written atomically, with their
provenance (the code, params, data and environment that made a number), checked on read."""
