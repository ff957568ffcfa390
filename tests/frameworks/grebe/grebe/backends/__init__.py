"""Training backends for grebe.

Backends are imported explicitly by the training entry point; this package
does not import any of them.
"""
