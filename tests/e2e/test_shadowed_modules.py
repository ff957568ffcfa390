"""What each way of reaching a module gives where its package binds the module's name to something else, read on a
real megatron-core: the facts behind :data:`tests.patch_forms.SHADOWED`, which keeps the generated frameworks from
expecting a patch of the module where Python hands the patch a function."""

from __future__ import annotations

import json
import subprocess

from tests.patch_forms import SHADOWED
from tests.pytest_helpers import target_python

SESSION = "megatron-0.15"
PROBE = """
import importlib, json, sys, types
name = sys.argv[1]
parent, _, leaf = name.rpartition(".")
found = {}
exec(f"import {name} as target", globals())
found["import-as"] = target
found["from"] = getattr(importlib.import_module(parent), leaf)
found["importlib"] = importlib.import_module(name)
found["sys-modules"] = sys.modules[name]
found["sys-modules-get"] = sys.modules.get(name)
print(json.dumps({how: isinstance(value, types.ModuleType) for how, value in found.items()}))
"""


def test_only_the_reaches_drawn_for_a_shadowed_module_give_the_module() -> None:
    python = target_python(SESSION)
    for module, reaches in SHADOWED.items():
        completed = subprocess.run([python, "-c", PROBE, module], capture_output=True, text=True, timeout=300)
        assert completed.returncode == 0, completed.stderr[-3000:]
        is_module = json.loads(completed.stdout.strip().splitlines()[-1])
        assert {how for how, yes in is_module.items() if yes} == set(reaches), is_module
