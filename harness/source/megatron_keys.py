"""How a dotted path a framework names is keyed among Megatron's symbols (``module:qualname``), on one release's
source: shared by the readers of what a framework patches and of which class its objects are.
"""

from __future__ import annotations

import ast

from harness.source.call_sites import MegatronSource
from harness.source.framework_scan import symbol_key
from harness.source.syntax import absolute_module


def megatron_key(path: str, source: MegatronSource) -> str:
    """``module:qualname`` of a dotted path in Megatron, an owner class re-exported followed to its defining module
    (``megatron.core.tensor_parallel.VocabParallelEmbedding.forward`` is ``megatron.core.tensor_parallel.layers:...``);
    a module-level name itself stays where the patch re-binds it."""
    key = symbol_key(path, [source.root]) or unresolved_key(path)
    parts = key.partition(":")[2].split(".")
    if len(parts) > 1 and parts[0][:1].islower():
        # A lower-case first part is a module this target lacks, not a class: name it as the path says.
        key = unresolved_key(path)
    for _ in range(5):
        module, _, qualname = key.partition(":")
        head, _, rest = qualname.partition(".")
        if not rest:
            return key
        tree = source.tree(module) if module in source.texts else None
        found = next(
            (
                (absolute_module(node, module, source.is_package(module)), alias.name)
                for node in (tree.body if tree else [])
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
                if (alias.asname or alias.name) == head
            ),
            None,
        )
        if found is None or found[0] not in source.texts:
            return key
        origin, name = found
        key = f"{origin}:{name}{'.' + rest if rest else ''}"
    return key


def unresolved_key(path: str) -> str:
    """``module:qualname`` for a path whose module this target lacks: the lower-case parts are the module."""
    parts = path.split(".")
    cut = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts) - 1)
    return f"{'.'.join(parts[:cut])}:{'.'.join(parts[cut:])}"
