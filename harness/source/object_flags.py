"""Flags a patching function sets on the object beside the method it swaps there (verl 0.9.1:
``layer._get_embeddings_has_padding_mask = "padding_mask" in signature(layer._get_embeddings).parameters``), which the
replacement reads back to return what the original returns on that release (``if getattr(self,
"_get_embeddings_has_padding_mask", False): return`` five values, else four). Read against the target, as the
framework's own checks are, they decide which ``return`` runs, and so how many values Megatron's call sites get.
"""

from __future__ import annotations

import ast

from harness.source.framework_guards import UNKNOWN, Versions, reached, value_of
from harness.source.framework_patches import FrameworkSource, SourcePatch
from harness.source.replacement_fit import tuple_length
from harness.source.source_scan import own_returns


def flags_set(patch: SourcePatch, framework: FrameworkSource, versions: Versions) -> dict[str, object]:
    """The attributes the patching function sets on the patched object (``patch.objects``' expression), with the
    values they get on this target; those it cannot decide left out."""
    functions = [n for n in patch.scope[:-1] if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not functions or not patch.objects:
        return {}
    target = next(iter(patch.objects))
    module_body = framework.trees[patch.module][1].body
    found: dict[str, object] = {}
    for node in ast.walk(functions[-1]):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        written = node.targets[0]
        if isinstance(written, ast.Attribute) and ast.unparse(written.value) == target:
            value = value_of(node.value, (*patch.scope[:-1], node), module_body, patch.names, versions, patch.objects)
            if value is not UNKNOWN:
                found[written.attr] = value
    return found


def returned_under_flags(patch: SourcePatch, framework: FrameworkSource, versions: Versions) -> int | None:
    """How many values the replacement returns on this target where its ``return``s give different counts and the
    flags the patching function set decide which of them run; None where they do not."""
    if patch.definition is None:
        return None
    flags = flags_set(patch, framework, versions)
    if not flags:
        return None
    function = patch.definition.node
    counts = set()
    for node in own_returns(function):
        runs = reached(function, node, patch.names, versions, flags)
        if runs is None:
            return None
        if runs:
            counts.add(tuple_length(node))
    return counts.pop() if len(counts) == 1 and None not in counts else None
