"""Importing petrel must not patch Megatron, read env vars, configure logging or import Megatron."""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402,F401  (imported before the snapshot: torch's own setup is not ours)
import importlib  # noqa: E402

fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")  # the module, not the function

reads = []


class _SpyEnviron(type(os.environ)):
    def __getitem__(self, key):
        reads.append(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        reads.append(key)
        return super().__contains__(key)


env = os.environ
os.environ = _SpyEnviron(env._data, env.encodekey, env.decodekey, env.encodevalue, env.decodevalue)

fmg_before = dict(fmg.__dict__)
mods_before = set(sys.modules)
root = logging.getLogger()
log_before = (root.level, list(root.handlers), dict(logging.Logger.manager.loggerDict))

import petrel  # noqa: E402
import petrel.mcore  # noqa: E402
import petrel.mcore.grad_allreduce  # noqa: E402
import petrel.mcore.provider  # noqa: E402

os.environ = env
new_mods = set(sys.modules) - mods_before
assert all(m == "petrel" or m.startswith("petrel.") for m in new_mods), new_mods
assert reads == [], f"environment read on import: {reads}"
assert fmg.__dict__.keys() == fmg_before.keys()
assert all(fmg.__dict__[k] is v for k, v in fmg_before.items()), "finalize_model_grads changed"
assert (root.level, list(root.handlers), dict(logging.Logger.manager.loggerDict)) == log_before
assert not petrel.mcore.is_installed()
print("check_import_clean: OK", sorted(new_mods))
