"""Check dove.megatron.config_rules against the installed megatron-core (CPU).

Run: PYTHONPATH=/work/blind/dove <python> checks/check_config_rules.py
"""

import dataclasses
import inspect
import logging
import os
import sys

env_before = dict(os.environ)
loggers_before = set(logging.Logger.manager.loggerDict)
import dove.megatron as dm  # noqa: E402

assert "megatron" not in sys.modules, "importing dove.megatron imported megatron"
assert set(logging.Logger.manager.loggerDict) == loggers_before, "import touched logging"
assert dict(os.environ) == env_before
assert not dm.config_rules_applied()

from megatron.core import package_info  # noqa: E402
from megatron.core.transformer.transformer_config import (  # noqa: E402
    MLATransformerConfig,
    TransformerConfig,
)

TC = TransformerConfig
NAMES = tuple(dm.DOVE_FIELD_DEFAULTS)


@dataclasses.dataclass
class PreSub(TC):  # inherits hidden_dropout/attention_dropout unchanged
    extra: int = 1


@dataclasses.dataclass
class PreOwn(TC):  # redefines hidden_dropout: dove must not touch it
    hidden_dropout: float = 0.3


def snapshot():
    snap = {"post_init": TC.__dict__["__post_init__"]}
    for c in (TC, MLATransformerConfig, PreSub, PreOwn):
        init = c.__dict__["__init__"]
        snap[c.__name__, "init"] = (init, init.__defaults__, init.__kwdefaults__)
        snap[c.__name__, "sig"] = str(inspect.signature(c))
        for n in NAMES:
            f = c.__dataclass_fields__[n]
            snap[c.__name__, n] = (f, f.default, getattr(c, n))
    return snap


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, tuple):
            assert len(x) == len(y) and all(p is q for p, q in zip(x, y)), k
        elif isinstance(x, str):
            assert x == y, k
        else:
            assert x is y, k


small = dict(num_layers=2, hidden_size=64, num_attention_heads=4)
before = snapshot()
assert TC(**small).hidden_dropout == 0.1

dm.apply_config_rules()
dm.apply_config_rules()  # idempotent
assert dm.config_rules_applied()
wrapper = TC.__dict__["__post_init__"]
assert wrapper is not before["post_init"] and wrapper.__wrapped__ is before["post_init"]

cfg = TC(
    **small,
    masked_softmax_fusion=True,
    bias_activation_fusion=True,
    gradient_accumulation_fusion=True,
    bf16=True,
    attention_softmax_in_fp32=False,
)
for n in dm.DOVE_UNSUPPORTED_FUSIONS:
    assert getattr(cfg, n) is False, n
assert cfg.attention_softmax_in_fp32 is True
assert cfg.hidden_dropout == 0.0 and cfg.attention_dropout == 0.0
assert cfg.ffn_hidden_size == 256  # Megatron's own post-init still ran
assert TC(**small, hidden_dropout=0.2).hidden_dropout == 0.2
assert TC(**small).attention_softmax_in_fp32 is True  # fp32 model: left as is (default)
assert TC(**small, attention_softmax_in_fp32=False).attention_softmax_in_fp32 is False
assert dataclasses.replace(cfg, masked_softmax_fusion=True).masked_softmax_fusion is False
assert {f.name: f.default for f in dataclasses.fields(TC)}["hidden_dropout"] == 0.0
assert TC.hidden_dropout == 0.0
assert inspect.signature(TC).parameters["attention_dropout"].default == 0.0

mla = MLATransformerConfig(**small, masked_softmax_fusion=True)
assert mla.masked_softmax_fusion is False and mla.hidden_dropout == 0.0
assert PreSub(**small).hidden_dropout == 0.0 and PreSub(**small).attention_dropout == 0.0
assert PreOwn(**small).hidden_dropout == 0.3 and PreOwn(**small).attention_dropout == 0.0

try:
    rope = TC(**small, apply_rope_fusion=True)
    assert rope.apply_rope_fusion is False
    rope_note = "apply_rope_fusion=True accepted by Megatron, turned off by dove"
except ValueError as exc:
    rope_note = f"apply_rope_fusion=True rejected by Megatron's own post-init: {exc}"


@dataclasses.dataclass
class LateSub(TC):  # created while patched
    late: int = 0


assert LateSub(**small).hidden_dropout == 0.0

# Someone layering on top blocks the undo without changing anything.
foreign = lambda self: wrapper(self)  # noqa: E731
TC.__post_init__ = foreign
try:
    dm.remove_config_rules()
    raise AssertionError("remove should have refused")
except dm.DoveConfigRulesError:
    pass
assert dm.config_rules_applied() and TC.hidden_dropout == 0.0
TC.__post_init__ = wrapper

dm.remove_config_rules()
dm.remove_config_rules()  # no-op
assert not dm.config_rules_applied()
same(before, snapshot())
cfg2 = TC(**small, masked_softmax_fusion=True)
assert cfg2.masked_softmax_fusion is True and cfg2.hidden_dropout == 0.1
assert LateSub(**small).hidden_dropout == 0.1 and LateSub(**small).attention_dropout == 0.1
assert MLATransformerConfig(**small).hidden_dropout == 0.1

# Re-apply after undo works and undoes again.
dm.apply_config_rules()
assert TC(**small).hidden_dropout == 0.0
dm.remove_config_rules()
same(before, snapshot())

print(f"megatron-core {package_info.__version__}: OK ({rope_note})")
