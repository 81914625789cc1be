"""Datasets, one module per task family (see pdelab.spec.data for the registry that names them);
this __init__ is empty so that a data job imports only its own task."""
