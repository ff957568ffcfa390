"""Targets: the matrix schema, finding a target's interpreter, its venv's install arguments, what got installed, a
candidate turned into a one-target matrix, and the provider contract read from an installed Megatron.

Imports only ``harness.formats``: the noxfile loads this package in nox's own interpreter, without torch or Megatron.
"""
