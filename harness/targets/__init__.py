"""Targets: the matrix schema, finding a target's interpreter, its venv's install arguments, what got installed, a
candidate turned into a one-target matrix, the provider contract read from an installed Megatron, and a Megatron
mutant imported in place of the installed files (for the sensitivity runs' warm sessions).

Imports only ``harness.formats``: the noxfile loads this package in nox's own interpreter, without torch or Megatron
(nothing here imports either at module level).
"""
