"""The modelling core: pure Python + numpy, no web or database imports (enforced by import-linter).

Estimates of ops, inference runs and collectives land here (issues 3-5); schemas convert to and from it.
"""
