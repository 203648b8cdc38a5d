"""Benchmarks a user can trust: a workload (prompt lengths × concurrency, runs, warm-up) run through the
engine host or against any OpenAI-compatible server, measured per cell (TTFT, time per output token,
end-to-end latency as p50/p95/p99; prefill and decode apart), with the planner's prediction beside each
figure and everything that makes the numbers meaningful (model, weights, engine flags, hardware) in a
JSON report saved in the data folder (`bench/`).

Modules by idea: workload (what to run, presets), stats (percentiles), report (the report model and its
JSON schema), prompts (prompts of a given token length), measure (per-request samples → a cell),
describe (model, weights, engine, predictions), runner (through the EngineHost), endpoint (over HTTP),
store (saved reports), compare (series for charts, runs side by side).

Use (from a background thread; `progress` is called on it):

    workload = preset("chat")                          # or Workload(prompt_lens=[...], ...)
    load = planned_load(path, fmt, workload.target_ctx)  # describe.py: the planner's GPU layers, KV type
    runner = HostRunner(host, load, fmt, workload, calibration=store, progress=cb, cancel=event)
    # or EndpointRunner(url, workload, api_key=..., model=...)
    report = runner.run()                              # BenchCancelled when `event` is set
    BenchStore.for_paths(paths).save(report)
"""
