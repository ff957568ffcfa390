"""The ways real frameworks patch Megatron beyond an assignment of a function onto a module or class, each judged from
source against megatron-core 0.15.3 (:mod:`tests.source_seeds`): a method swapped on built objects whose constructor
kept it by value, a class of the framework bound in place of Megatron's (also through a class attribute), a
``__class__`` swap, a back-fill through ``sys.modules``, a return count a flag decides that the patching function sets
on the object, a swap its own helpers decide from Megatron's signature, a property set on an object's class (skipped
where the object has the attribute, red in place of one its constructor sets), and a module whose own import of
Megatron fails on the target. Each form has a seeded break, red
naming Megatron's line (absent for the failing import), and a correct variant that fits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.source.call_sites import MegatronSource
from tests.source_seeds import (
    BACKFILL_SEED,
    FORWARD,
    NODE_KEEPS,
    POST_PROCESS,
    seeded_framework,
    seeded_release,
    verdicts,
)

ROUTER = "megatron.core.transformer.moe.router:TopKRouter"
GATING_CALL = "megatron/core/transformer/moe/router.py:552"
"""Where 0.15.3's ``TopKRouter.forward`` calls ``self.gating(input)``."""
FLASH = "megatron.core.models.common.embeddings.rope_utils:apply_rotary_emb_flash"
FLASH_CALL = "megatron/core/models/common/embeddings/rope_utils.py:342"
"""Where ``rope_utils`` calls ``apply_rotary_emb_flash``, ``None`` there where ``flash_attn`` does not import."""
EMBEDDINGS = "megatron.core.transformer.multi_token_prediction:MultiTokenPredictionLayer._get_embeddings"
EMBEDDINGS_UNPACKED = "megatron/core/transformer/multi_token_prediction.py:695"
"""Where 0.15.3's ``MultiTokenPredictionLayer.forward`` unpacks four values of ``self._get_embeddings(...)``."""
BLOCK = "megatron.core.models.gpt.gpt_model:TransformerBlock"
BLOCK_BUILT = "megatron/core/models/gpt/gpt_model.py:202"
"""Where ``GPTModel.__init__`` builds its decoder through the module's ``TransformerBlock`` name."""

BLOCK_SEED = """
from megatron.core.models.gpt import gpt_model
from megatron.core.transformer.transformer_block import TransformerBlock

class Block(TransformerBlock):
{methods}

class Loader:
    block = Block

    def build(self):
        gpt_model.TransformerBlock = self.block
"""
SWAP_SEED = """
from megatron.core.transformer.moe.router import TopKRouter

class NoisyRouter(TopKRouter):
{methods}

def retrofit(router):
    if isinstance(router, TopKRouter):
        router.__class__ = NoisyRouter
"""
FLAG_SEED = """
from inspect import signature
from megatron.core.transformer.multi_token_prediction import MultiTokenPredictionLayer

def _get_embeddings(self, input_ids, position_ids, embedding, hidden_states, padding_mask=None):
    if getattr(self, "_takes_padding_mask", False):
        return input_ids, position_ids, padding_mask, embedding, hidden_states
    return input_ids, position_ids, embedding, hidden_states

def patch(layer):
    if isinstance(layer, MultiTokenPredictionLayer):
        layer._takes_padding_mask = "{parameter}" in signature(layer._get_embeddings).parameters
        layer._get_embeddings = _get_embeddings.__get__(layer, MultiTokenPredictionLayer)
"""
IMPORT_SEED = """
{imports}

def apply():
    original = MultiLatentAttention.forward

    def forward(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    MultiLatentAttention.forward = forward
"""
SELF_SEED = """
import types
from megatron.core.transformer.moe.router import TopKRouter

{helper}

def routing(self, logits):
    self.{method} = types.MethodType(helper, self)
    return logits, logits

def apply():
    TopKRouter.routing = routing
"""
MODE_SEED = """
import inspect
from megatron.core.models.gpt.gpt_model import GPTModel

_HOOK = "hook"

def _supports_hook(model):
    parameters = inspect.signature(model.forward).parameters
    return {{"{parameter}"}}.issubset(parameters)

def _resolve(model):
    return _HOOK if _supports_hook(model) else "legacy"

def forward(self, *args, **kwargs):
    return args, kwargs

def patch(model):
    if not isinstance(model, GPTModel):
        return
    mode = getattr(model, "_seeded_mode", None)
    if mode is None:
        mode = _resolve(model)
        setattr(model, "_seeded_mode", mode)
    if mode == _HOOK:
        return
    model.forward = forward.__get__(model, GPTModel)
"""
PROPERTY_SEED = """
def retrofit(layer):
    if not hasattr(layer, "{tested}"):

        def _value(self):
            return self.mtp_model_layer

        setattr(layer.__class__, "transformer_layer", property(_value))
"""
MTP_LAYER = "megatron.core.transformer.multi_token_prediction:MultiTokenPredictionLayer"
LAYER_SET = "megatron/core/transformer/multi_token_prediction.py:475"
"""Where 0.15.3's ``MultiTokenPredictionLayer.__init__`` sets ``self.transformer_layer``."""
HYBRID = "from megatron.core.models.hybrid.hybrid_block import HybridStack"
SEEDS = {
    "node_method_swapped_after_build": """
from megatron.core.models.gpt.fine_grained_callables import PostProcessNode

def forward_impl(self, hidden_states):
    return hidden_states

def apply(node):
    if isinstance(node, PostProcessNode):
        node.forward_impl = forward_impl.__get__(node, PostProcessNode)
""",
    "router_method_swapped_after_build": """
from megatron.core.transformer.moe.router import TopKRouter

def routing(self, logits):
    return logits, logits

def apply(router):
    if isinstance(router, TopKRouter):
        router.routing = routing.__get__(router, TopKRouter)
""",
    "block_class_missing_a_keyword": BLOCK_SEED.format(
        methods="    def __init__(self, config, spec, pre_process=True, post_process=True, vp_stage=None):\n"
        "        super().__init__(config=config, spec=spec, pre_process=pre_process, post_process=post_process)"
    ),
    "block_class_inheriting_its_constructor": BLOCK_SEED.format(
        methods="    def _checkpointed_forward(self, *args, **kwargs):\n"
        "        return super()._checkpointed_forward(*args, **kwargs)"
    ),
    "router_class_swapped_for_one_missing_logits": SWAP_SEED.format(
        methods="    def routing(self):\n        return None"
    ),
    "router_class_swapped_for_one_taking_logits": SWAP_SEED.format(
        methods="    def routing(self, logits):\n        probs, routing_map = super().routing(logits)\n"
        "        return probs * 0.5, routing_map"
    ),
    "flash_rotary_back_filled_with_two_parameters": BACKFILL_SEED.format(
        parameters="x, cos", name="apply_rotary_emb_flash"
    ),
    "flash_rotary_back_filled_with_its_four": BACKFILL_SEED.format(
        parameters="x, cos, sin, interleaved=False", name="apply_rotary_emb_flash"
    ),
    "embeddings_counted_by_a_flag_megatron_lacks": FLAG_SEED.format(parameter="padding_mask"),
    "embeddings_counted_by_a_flag_megatron_has": FLAG_SEED.format(parameter="hidden_states"),
    "a_method_bound_as_routing_adds_one_on_self": SELF_SEED.format(
        helper="def helper(self):\n    return True", method="is_aux_loss_on"
    ),
    "a_method_bound_as_routing_swaps_gating_on_self_without_its_input": SELF_SEED.format(
        helper="def helper(self):\n    return None", method="gating"
    ),
    "a_method_bound_as_routing_swaps_gating_on_self_taking_its_input": SELF_SEED.format(
        helper="def helper(self, input):\n    return input", method="gating"
    ),
    "property_on_the_class_unless_its_objects_have_the_attribute": PROPERTY_SEED.format(tested="transformer_layer"),
    "property_on_the_class_in_place_of_an_attribute_its_constructor_sets": PROPERTY_SEED.format(
        tested="mtp_model_layer"
    ),
    "forward_swapped_unless_its_helpers_find_a_parameter_megatron_has": MODE_SEED.format(parameter="packed_seq_params"),
    "forward_swapped_unless_its_helpers_find_a_parameter_megatron_lacks": MODE_SEED.format(
        parameter="output_processor"
    ),
    "forwards_everything_beside_an_import_of_what_a_module_re_exports_with_a_star": IMPORT_SEED.format(
        imports="from megatron.core.transformer.custom_layers.transformer_engine import TENorm"
    ),
    "forwards_everything_beside_a_guarded_import_of_what_the_target_lacks": IMPORT_SEED.format(
        imports=f"try:\n    {HYBRID}\nexcept ImportError:\n    HybridStack = None"
    ),
}


def write_framework(root: Path, seed: str) -> Path:
    return seeded_framework(root, seed, SEEDS[seed])


@pytest.fixture(scope="module")
def megatron() -> MegatronSource:
    return seeded_release()


def test_a_method_swapped_on_objects_whose_constructor_kept_it_by_value_is_red(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "node_method_swapped_after_build"), megatron)
    verdict = found[f"{POST_PROCESS}@seeded/patch.py:13"]
    assert verdict.verdict == "red", verdict.line()
    kept = f"{NODE_KEEPS} (PostProcessNode.__init__) keeps self.forward_impl by value"
    assert any(f.startswith(kept) for f in verdict.findings), verdict.findings


def test_a_method_swapped_on_objects_whose_constructor_does_not_keep_it_fits(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "router_method_swapped_after_build"), megatron)
    verdict = found[f"{ROUTER}.routing@seeded/patch.py:13"]
    assert verdict.verdict == "fits", verdict.line()
    assert "megatron/core/transformer/moe/router.py:" in " ".join(verdict.calls), verdict.calls


def test_a_class_held_in_an_attribute_whose_constructor_misses_a_keyword_megatron_passes_is_red(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    verdict = verdicts(write_framework(tmp_path, "block_class_missing_a_keyword"), megatron)[BLOCK]
    assert verdict.verdict == "red", verdict.line()
    assert any(BLOCK_BUILT in f and "'pg_collection'" in f for f in verdict.findings), verdict.findings
    assert verdict.replacement == "seeded/patch.py:9", verdict.replacement


def test_a_class_held_in_an_attribute_that_inherits_megatrons_constructor_fits(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    verdict = verdicts(write_framework(tmp_path, "block_class_inheriting_its_constructor"), megatron)[BLOCK]
    assert verdict.verdict == "fits", verdict.line()
    assert verdict.calls == [BLOCK_BUILT], verdict.calls


def test_a_class_swapped_onto_built_objects_whose_method_cannot_bind_megatrons_call_is_red(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "router_class_swapped_for_one_missing_logits"), megatron)
    verdict = found[f"{ROUTER}.routing@seeded/patch.py:14"]
    assert verdict.verdict == "red", verdict.line()
    assert any("megatron/core/transformer/moe/router.py:" in f and "does not bind" in f for f in verdict.findings)


def test_a_class_swapped_onto_built_objects_whose_method_takes_what_megatron_passes_fits(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "router_class_swapped_for_one_taking_logits"), megatron)
    verdict = found[f"{ROUTER}.routing@seeded/patch.py:15"]
    assert verdict.verdict == "fits", verdict.line()


def test_a_stand_in_back_filled_through_sys_modules_that_cannot_bind_megatrons_call_is_red(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    """The back-fill names no module: it reaches the one whose failed optional import left the name ``None``."""
    found = verdicts(write_framework(tmp_path, "flash_rotary_back_filled_with_two_parameters"), megatron)
    verdict = found[FLASH]
    assert verdict.verdict == "red", verdict.line()
    assert any(FLASH_CALL in f and "does not bind" in f for f in verdict.findings), verdict.findings
    assert verdict.patched_at == ["seeded/patch.py:15"], verdict.patched_at


def test_a_stand_in_back_filled_through_sys_modules_that_takes_what_megatron_passes_fits(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    verdict = verdicts(write_framework(tmp_path, "flash_rotary_back_filled_with_its_four"), megatron)[FLASH]
    assert verdict.verdict == "fits", verdict.line()
    assert verdict.calls == [FLASH_CALL], verdict.calls


def test_a_return_count_decided_by_a_flag_the_patch_sets_from_the_originals_signature_fits(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    """verl's form: the replacement returns four or five values by a flag the patching function sets on the layer
    from the original's parameters; 0.15.3's original takes no ``padding_mask``, so four, as Megatron unpacks."""
    found = verdicts(write_framework(tmp_path, "embeddings_counted_by_a_flag_megatron_lacks"), megatron)
    verdict = found[f"{EMBEDDINGS}@seeded/patch.py:17"]
    assert verdict.verdict == "fits", verdict.line()
    assert EMBEDDINGS_UNPACKED in verdict.calls, verdict.calls


def test_a_return_count_a_flag_turns_to_what_megatron_does_not_unpack_is_red(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "embeddings_counted_by_a_flag_megatron_has"), megatron)
    verdict = found[f"{EMBEDDINGS}@seeded/patch.py:17"]
    assert verdict.verdict == "red", verdict.line()
    assert any(f"{EMBEDDINGS_UNPACKED} unpacks 4 values" in f and "returns 5" in f for f in verdict.findings)


def test_a_method_set_on_self_inside_a_replacement_is_a_method_of_the_class_the_replacement_is_bound_to(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    """``self`` in a function bound as ``TopKRouter.routing`` is a ``TopKRouter``: a method it sets on ``self`` that
    0.15.3's ``TopKRouter`` lacks adds a name (verl's ``is_aux_loss_enabled`` on 0.13)."""
    found = verdicts(write_framework(tmp_path, "a_method_bound_as_routing_adds_one_on_self"), megatron)
    added = found[f"{ROUTER}.is_aux_loss_on@seeded/patch.py:13"]
    assert added.verdict == "absent", added.line()


@pytest.mark.parametrize(
    ("seed", "expected"),
    [
        ("a_method_bound_as_routing_swaps_gating_on_self_without_its_input", "red"),
        ("a_method_bound_as_routing_swaps_gating_on_self_taking_its_input", "fits"),
    ],
)
def test_a_method_swapped_on_self_inside_a_replacement_is_judged_against_megatrons_calls(
    seed: str, expected: str, tmp_path: Path, megatron: MegatronSource
) -> None:
    verdict = verdicts(write_framework(tmp_path, seed), megatron)[f"{ROUTER}.gating@seeded/patch.py:13"]
    assert verdict.verdict == expected, verdict.line()
    assert GATING_CALL in (verdict.calls if expected == "fits" else " ".join(verdict.findings)), verdict.line()


def test_a_patch_beside_an_import_of_what_a_module_re_exports_with_a_star_is_judged(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    """``custom_layers/transformer_engine.py`` on 0.15.3 is ``from megatron.core.extensions.transformer_engine import
    *``: its names are not written in it, and the import goes through."""
    seed = "forwards_everything_beside_an_import_of_what_a_module_re_exports_with_a_star"
    verdict = verdicts(write_framework(tmp_path, seed), megatron)[FORWARD]
    assert verdict.verdict == "fits", verdict.line()


def test_a_patch_beside_a_guarded_import_of_what_the_target_lacks_is_judged(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    seed = "forwards_everything_beside_a_guarded_import_of_what_the_target_lacks"
    verdict = verdicts(write_framework(tmp_path, seed), megatron)[FORWARD]
    assert verdict.verdict == "fits", verdict.line()


@pytest.mark.parametrize(
    ("seed", "expected"),
    [
        ("forward_swapped_unless_its_helpers_find_a_parameter_megatron_has", "skipped"),
        ("forward_swapped_unless_its_helpers_find_a_parameter_megatron_lacks", "fits"),
    ],
)
def test_a_swap_the_framework_decides_through_its_own_helpers_and_a_kept_decision_is_read_against_the_target(
    seed: str, expected: str, tmp_path: Path, megatron: MegatronSource
) -> None:
    """verl's fused ``forward``: the patching function keeps its decision on the model and, where none is kept yet,
    asks two helpers of its module whether Megatron's ``forward`` takes a parameter; where it does, the swap is left
    out. Read against 0.15.3's ``GPTModel.forward``: skipped where the parameter is there, made (and judged) where
    not."""
    found = verdicts(write_framework(tmp_path, seed), megatron)
    verdict = found["megatron.core.models.gpt.gpt_model:GPTModel.forward@seeded/patch.py:30"]
    assert verdict.verdict == expected, verdict.line()
    if expected == "skipped":
        assert verdict.findings == ["not applied here by seeded/patch.py:28"], verdict.findings


def test_a_property_set_on_an_objects_class_unless_the_object_has_the_attribute_is_skipped_where_it_has(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    """mcore-bridge's form: ``setattr(layer.__class__, "transformer_layer", property(...))`` under ``if not
    hasattr(layer, "transformer_layer")``. No Megatron class defines such a method; the class whose constructor sets
    ``self.transformer_layer`` is the object's, and its built objects have it on 0.15.3: the patch is not made."""
    seed = "property_on_the_class_unless_its_objects_have_the_attribute"
    verdict = verdicts(write_framework(tmp_path, seed), megatron)[f"{MTP_LAYER}.transformer_layer@seeded/patch.py:12"]
    assert verdict.verdict == "skipped", verdict.line()
    assert verdict.findings == ["not applied here by seeded/patch.py:7"], verdict.findings


def test_a_property_set_on_a_class_in_place_of_an_attribute_its_constructor_sets_is_red(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    """Made where the object lacks another attribute, the property replaces what the constructor assigns: a
    property without a setter makes that assignment raise for every object built afterwards."""
    seed = "property_on_the_class_in_place_of_an_attribute_its_constructor_sets"
    verdict = verdicts(write_framework(tmp_path, seed), megatron)[f"{MTP_LAYER}.transformer_layer@seeded/patch.py:12"]
    assert verdict.verdict == "red", verdict.line()
    assert verdict.findings[0].startswith(f"{LAYER_SET} sets self.transformer_layer on every object it builds")
