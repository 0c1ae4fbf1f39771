"""The worker agent: runs JAX and Triton kernels, times them and uploads the results (issue 7).

It imports `schemas` and `httpx`, never `service` (enforced by import-linter).
"""
