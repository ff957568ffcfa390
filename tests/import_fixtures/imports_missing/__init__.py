"""Imports its own submodule, then a module that is not installed anywhere."""

import importlib

from . import helper

VALUE = helper.NAME
importlib.import_module("conformance_module_that_is_not_installed")
