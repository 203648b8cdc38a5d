"""The Benchmark page: run a workload on a model or an endpoint, plot it against the prediction, compare runs."""
