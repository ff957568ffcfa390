"""Imports its own submodule, a fake and a stdlib module it has not seen, then fails."""

import colorsys

import deep_ep

from . import helper

raise RuntimeError(f"adapter failed to load after {helper.NAME}, {deep_ep.__name__}, {colorsys.__name__}")
