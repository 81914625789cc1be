"""Run records reach MLflow: per-run Parquet files for the workflow, MLflow for people browsing
runs.

The workflow reads only the records (metrics.parquet, result.parquet, run.json). A run
profile's ``tracking`` says how runs reach MLflow:

* ``live``: the training job logs as it goes (:class:`pdelab.tracking.log.Tracker`). Best
  effort: any failure is reported once as a warning and logging stops, but the run goes on
  and writes its records.
* ``batch``: the training job never imports mlflow nor opens the store (a cost every one of
  the smoke workflow's training jobs would pay) and writes only its records;
  ``python -m pdelab.tracking sync`` (:mod:`pdelab.tracking.sync`) logs the finished runs
  afterwards, one job per experiment, and ``check`` says whether MLflow holds them all.

The modules:

* :mod:`pdelab.tracking.log`: what MLflow holds for a run (its opening, epochs, closing),
  the experiments' and runs' names and links, and the live :class:`~pdelab.tracking.log.Tracker`;
* :mod:`pdelab.tracking.sync`: the batch sync, its check, and the store rebuilt from the
  records;
* :mod:`pdelab.tracking.parents`: a parent run per setting (task, variant, spec without the
  seed), its seeds as children, their mean, interval and n;
* :mod:`pdelab.tracking.store`: the project's store (SQLite by default,
  ``MLFLOW_TRACKING_URI`` overrides), relocatable and safe to create from many processes;
* ``python -m pdelab.tracking`` (:mod:`pdelab.tracking.__main__`): the command line.

This package's face imports nothing: a training job imports only what it logs with.
"""
