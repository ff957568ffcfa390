"""Seeded break: ``TopKRouter.gating`` (inherited from ``Router``) is replaced on the class, and undo binds
``Router.gating`` there instead of deleting the attribute: lookups find the same function, but ``TopKRouter`` now
holds a class attribute of its own, which shadows any later change to ``Router.gating``."""

from harness.reference import *  # noqa: F403
from harness.reference import MEGATRON_SYMBOLS as _REFERENCE_SYMBOLS

_ROUTER = "megatron.core.transformer.moe.router"


def gating(self, input):
    from megatron.core.transformer.moe.router import Router

    return Router.gating(self, input)


def apply_replacements():
    from megatron.core.transformer.moe.router import TopKRouter

    TopKRouter.gating = gating


def undo_replacements():
    from megatron.core.transformer.moe.router import Router, TopKRouter

    TopKRouter.gating = Router.gating


MEGATRON_SYMBOLS = {
    **_REFERENCE_SYMBOLS,
    f"{_ROUTER}:TopKRouter.gating": "replaces with gating",
    f"{_ROUTER}:TopKRouter": "reads",
    f"{_ROUTER}:Router.gating": "reads",
}
