"""The ``[scale]`` table of a declaration: the models a framework trains, to measure the target's coalesced
reductions at their real size (:mod:`harness.contracts.scale`), and the budget to judge them against.

Checked here, where every other key is, so that a misspelt preset or a missing config file is one line naming the
file and the key before anything runs. A model's own Megatron arguments (``config = "args.yaml"``, a YAML or JSON
file of ``TransformerConfig`` fields and ``vocab_size``) are read here too, relative to the declaration, and travel
as ``fields`` to the target venv.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from harness.formats.scale_findings import LAYOUT_KEYS, MAIN_GRAD_DTYPES, MODEL_KEYS, PRESETS_FILE

Fail = Callable[[str, str], Exception]
"""How a problem is raised: the declaration's ``fail(key, reason)``."""


def _config_fields(path: Path, key: str, value: object, fail: Fail) -> dict[str, Any]:
    if not isinstance(value, str) or not value:
        raise fail(key, f"must name a YAML or JSON file of TransformerConfig fields, not {value!r}")
    file = (path.parent / value).resolve()
    if not file.is_file():
        raise fail(key, f"{file} is not a file")
    try:
        loaded = json.loads(file.read_text()) if file.suffix == ".json" else yaml.safe_load(file.read_text())
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise fail(key, f"{file} cannot be read: {' '.join(str(err).split())}") from None
    if not isinstance(loaded, dict):
        raise fail(key, f"{file} must hold a mapping of TransformerConfig fields")
    return loaded


def _model(path: Path, index: int, model: object, presets: dict[str, Any], fail: Fail) -> dict[str, Any]:
    key = f"scale.models[{index}]"
    if not isinstance(model, dict):
        raise fail(key, f'must be a table such as {{ preset = "llama-70b", tp = 8, sp = true }}, not {model!r}')
    unknown = sorted(set(model) - {*MODEL_KEYS, *LAYOUT_KEYS})
    if unknown:
        raise fail(f"{key}.{unknown[0]}", f"unknown key (known: {', '.join((*MODEL_KEYS, *LAYOUT_KEYS))})")
    checked = dict(model)
    if ("preset" in model) == ("config" in model):
        raise fail(key, "names either a preset or its own config file, exactly one")
    if "preset" in model and model["preset"] not in presets:
        raise fail(f"{key}.preset", f"no preset {model['preset']!r} (known: {', '.join(presets)})")
    if "config" in model:
        fields = _config_fields(path, f"{key}.config", model["config"], fail)
        checked.pop("config")
        checked["vocab_size"] = model.get("vocab_size", fields.pop("vocab_size", None))
        checked["fields"] = {**fields, **model.get("fields", {})}
        checked.setdefault("name", Path(str(model["config"])).stem)
        if not checked["vocab_size"]:
            raise fail(f"{key}.vocab_size", "is needed: neither the table nor the config file gives one")
    for name in ("tp", "ep", "pp"):
        if name in model and (not isinstance(model[name], int) or isinstance(model[name], bool) or model[name] < 1):
            raise fail(f"{key}.{name}", f"must be a positive whole number, not {model[name]!r}")
    if "sp" in model and not isinstance(model["sp"], bool):
        raise fail(f"{key}.sp", f"must be true or false, not {model['sp']!r}")
    if model.get("main_grad_dtype", "float32") not in MAIN_GRAD_DTYPES:
        raise fail(f"{key}.main_grad_dtype", f"must be one of {', '.join(MAIN_GRAD_DTYPES)}")
    return checked


def scale_table(path: Path, table: dict[str, Any], fail: Fail) -> dict[str, Any]:
    """The checked ``[scale]`` table: ``models`` (each a preset or a config file, with its parallel layout) and an
    optional ``budget`` in bytes; empty where the declaration has none."""
    if not table:
        return {}
    models = table.get("models")
    if not isinstance(models, list) or not models:
        raise fail("scale.models", 'must list at least one model, e.g. [{ preset = "llama-70b", tp = 8, sp = true }]')
    presets = yaml.safe_load(PRESETS_FILE.read_text())
    checked: dict[str, Any] = {"models": [_model(path, i, model, presets, fail) for i, model in enumerate(models)]}
    if "budget" in table:
        budget = table["budget"]
        if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
            raise fail("scale.budget", f"must be a positive whole number of bytes, not {budget!r}")
        checked["budget"] = budget
    return checked
