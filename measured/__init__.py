"""Measured timings published by others, read into Ridgeline's terms.

`measured.datasets` parses the tables in the repository's `validation/` folder into groups of ops with their measured
times (the accuracy report in `bench/` evaluates them); `measured.importer` parses files in the same formats into
benchmark uploads and posts them to a server over HTTP (`ridgeline benchmarks import`). It imports `schemas`, numpy,
httpx and the standard library: never the service, the worker, the database or the web stack.
"""
