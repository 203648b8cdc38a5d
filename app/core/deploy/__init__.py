"""Deployment plans for models that outgrow this machine: which GPUs, how many, which quantization the
hardware has kernels for, which serving engine, its exact launch command, and the decode speed to expect.

Qt-free and offline: the model's shape comes from the same ModelSpec the fit view uses (a Hub config read
through HubClient, a local GGUF, or a folder holding a config.json), the hardware from
`resources/deploy_targets.json`.
"""
