"""dove's house rules for Megatron-Core's ``TransformerConfig``.

``apply_config_rules()`` patches
``megatron.core.transformer.transformer_config.TransformerConfig`` in place:

* ``TransformerConfig.__post_init__`` is replaced by a wrapper (a closure made in
  :func:`_make_post_init`) that runs Megatron's own ``__post_init__`` first and then
  :func:`enforce_config_rules` on the instance.
* the dataclass defaults listed in :data:`DOVE_FIELD_DEFAULTS` are changed: the
  ``dataclasses.Field`` objects (mutated in place, so every dataclass that shares
  them sees the change), the class attributes, and the defaults of the generated
  ``__init__`` of ``TransformerConfig`` and of every dataclass subclass that
  inherits the field unchanged (e.g. ``MLATransformerConfig``).

``remove_config_rules()`` puts every original object back (same identities).
Importing this module does not import Megatron and changes nothing.
"""

import functools
import threading
import types
import weakref
from dataclasses import MISSING, fields, is_dataclass

__all__ = [
    "DOVE_FIELD_DEFAULTS",
    "DOVE_UNSUPPORTED_FUSIONS",
    "DoveConfigRulesError",
    "apply_config_rules",
    "config_rules_applied",
    "enforce_config_rules",
    "remove_config_rules",
]

#: Fusion flags dove does not support on CPU; switched off after Megatron's post-init.
DOVE_UNSUPPORTED_FUSIONS = (
    "apply_rope_fusion",
    "bias_activation_fusion",
    "masked_softmax_fusion",
    "gradient_accumulation_fusion",
)

#: Dataclass defaults dove changes while the rules are applied (upstream: 0.1 each).
DOVE_FIELD_DEFAULTS = types.MappingProxyType({"hidden_dropout": 0.0, "attention_dropout": 0.0})

# The derived field dove sets: softmax in fp32 whenever the model runs in fp16/bf16.
_DERIVED_FIELD = "attention_softmax_in_fp32"
# Megatron only allows this together with gradient_accumulation_fusion.
_DEPENDENT_ON_GA_FUSION = "defer_embedding_wgrad_compute"

_TARGET = "megatron.core.transformer.transformer_config.TransformerConfig"
_MARK = "_dove_config_rules"


class DoveConfigRulesError(RuntimeError):
    """The config rules cannot be applied to / removed from this Megatron install."""


class _PatchState:
    """Everything needed to restore ``TransformerConfig`` exactly."""

    def __init__(self, cls, original_post_init, wrapper):
        self.cls = cls
        self.original_post_init = original_post_init
        self.wrapper = wrapper
        # field name -> (Field object, original default object, dove default object)
        self.fields = {}
        # field name -> original value in cls.__dict__
        self.class_attrs = {}
        # dataclass -> (its __init__ function, original __defaults__, original __kwdefaults__)
        self.inits = weakref.WeakKeyDictionary()


_lock = threading.RLock()
_state = None


def _logger():
    import logging

    return logging.getLogger(__name__)


def _megatron_version():
    try:
        from megatron.core import package_info

        return package_info.__version__
    except Exception:  # pragma: no cover - only used in messages
        return "unknown"


# ---------------------------------------------------------------------------
# The rules themselves
# ---------------------------------------------------------------------------


def enforce_config_rules(config):
    """Apply dove's house rules to one ``TransformerConfig`` in place.

    Returns the names of the fields that were changed. This is what the patched
    ``__post_init__`` runs after Megatron's own post-init; it can also be called
    directly on a config built before :func:`apply_config_rules`.
    """
    changed = []
    for name in DOVE_UNSUPPORTED_FUSIONS:
        if getattr(config, name, False):
            setattr(config, name, False)
            changed.append(name)
    # Megatron rejects defer_embedding_wgrad_compute without gradient_accumulation_fusion.
    if "gradient_accumulation_fusion" in changed and getattr(config, _DEPENDENT_ON_GA_FUSION, False):
        setattr(config, _DEPENDENT_ON_GA_FUSION, False)
        changed.append(_DEPENDENT_ON_GA_FUSION)
    # Derived field: half-precision runs always do the softmax in fp32.
    if (getattr(config, "fp16", False) or getattr(config, "bf16", False)) and not getattr(
        config, _DERIVED_FIELD
    ):
        setattr(config, _DERIVED_FIELD, True)
        changed.append(_DERIVED_FIELD)
    if changed:
        _logger().debug("dove: %s: config rules changed %s", type(config).__name__, changed)
    return changed


def _make_post_init(original):
    """Build the replacement ``TransformerConfig.__post_init__`` around ``original``."""

    @functools.wraps(original)
    def __post_init__(self):
        original(self)
        enforce_config_rules(self)

    setattr(__post_init__, _MARK, True)
    return __post_init__


# ---------------------------------------------------------------------------
# Dataclass plumbing
# ---------------------------------------------------------------------------


def _init_slot(init, name):
    """Where the default of parameter ``name`` lives in a generated ``__init__``.

    Returns ``("pos", index into __defaults__)``, ``("kw", name)`` or ``None``.
    """
    code = getattr(init, "__code__", None)
    if code is None:
        return None
    positional = code.co_varnames[: code.co_argcount]
    defaults = getattr(init, "__defaults__", None) or ()
    if name in positional:
        idx = positional.index(name) - (len(positional) - len(defaults))
        return ("pos", idx) if idx >= 0 else None
    kwdefaults = getattr(init, "__kwdefaults__", None) or {}
    if name in kwdefaults:
        return ("kw", name)
    return None


def _init_default(init, slot):
    kind, key = slot
    return init.__defaults__[key] if kind == "pos" else init.__kwdefaults__[key]


def _replaced_defaults(init, replacements):
    """New ``(__defaults__, __kwdefaults__)`` for ``init`` with ``{slot: value}`` applied."""
    defaults = init.__defaults__
    kwdefaults = init.__kwdefaults__
    pos = {key: value for (kind, key), value in replacements.items() if kind == "pos"}
    kw = {key: value for (kind, key), value in replacements.items() if kind == "kw"}
    if pos:
        defaults = tuple(pos.get(i, d) for i, d in enumerate(defaults))
    if kw:
        kwdefaults = dict(kwdefaults)
        kwdefaults.update(kw)
    return defaults, kwdefaults


def _family(cls):
    """``cls`` and all its (transitive) subclasses currently alive."""
    seen, stack, out = set(), [cls], []
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        out.append(c)
        stack.extend(type.__subclasses__(c))
    return out


def _inherited_slots(c, field_objs, value_of):
    """``{slot: field name}`` for fields ``c``'s own ``__init__`` inherits unchanged.

    ``field_objs`` maps name -> shared Field; ``value_of(name)`` is the default object
    the slot must currently hold for ``c`` to count.
    """
    own_fields = c.__dict__.get("__dataclass_fields__")
    init = c.__dict__.get("__init__")
    if own_fields is None or not isinstance(init, types.FunctionType):
        return {}
    slots = {}
    for name, fobj in field_objs.items():
        if own_fields.get(name) is not fobj:
            continue  # the subclass redefines the field: leave its own default alone
        slot = _init_slot(init, name)
        if slot is not None and _init_default(init, slot) is value_of(name):
            slots[slot] = name
    return slots


def _check_supported(cls):
    version = _megatron_version()

    def fail(why):
        raise DoveConfigRulesError(
            f"dove cannot apply its config rules to {_TARGET} (megatron-core {version}): {why}"
        )

    if not is_dataclass(cls):
        fail("it is not a dataclass")
    post_init = cls.__dict__.get("__post_init__")
    if not isinstance(post_init, types.FunctionType):
        fail("it does not define its own __post_init__")
    if getattr(post_init, _MARK, False):
        fail("its __post_init__ is already dove's wrapper (module reloaded?)")
    names = {f.name for f in fields(cls)}
    missing = [n for n in (*DOVE_UNSUPPORTED_FUSIONS, _DERIVED_FIELD) if n not in names]
    if missing:
        fail(f"fields {missing} do not exist")
    own_fields = cls.__dict__["__dataclass_fields__"]
    init = cls.__dict__.get("__init__")
    if not isinstance(init, types.FunctionType):
        fail("it has no dataclass-generated __init__")
    for name in DOVE_FIELD_DEFAULTS:
        f = own_fields.get(name)
        if f is None or f.default is MISSING:
            fail(f"field {name!r} is missing or has no plain default")
        if cls.__dict__.get(name, MISSING) is not f.default:
            fail(f"class attribute {name!r} does not hold the field default")
        slot = _init_slot(init, name)
        if slot is None or _init_default(init, slot) is not f.default:
            fail(f"cannot locate the __init__ default of {name!r}")


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def config_rules_applied():
    """Whether :func:`apply_config_rules` is currently in effect."""
    return _state is not None


def apply_config_rules():
    """Patch ``TransformerConfig`` with dove's house rules (idempotent).

    Raises :class:`DoveConfigRulesError` if the installed Megatron-Core does not have
    the expected ``TransformerConfig`` layout; nothing is changed in that case.
    """
    global _state
    with _lock:
        if _state is not None:
            return
        try:
            from megatron.core.transformer.transformer_config import TransformerConfig as cls
        except ImportError as exc:
            raise DoveConfigRulesError(f"cannot import {_TARGET}: {exc}") from exc
        _check_supported(cls)

        original = cls.__dict__["__post_init__"]
        state = _PatchState(cls, original, _make_post_init(original))
        own_fields = cls.__dict__["__dataclass_fields__"]
        field_objs = {}
        for name, value in DOVE_FIELD_DEFAULTS.items():
            fobj = own_fields[name]
            field_objs[name] = fobj
            state.fields[name] = (fobj, fobj.default, value)
            state.class_attrs[name] = cls.__dict__[name]

        # Work out every __init__ to change before changing anything.
        new_inits = []
        for c in _family(cls):
            slots = _inherited_slots(c, field_objs, lambda n: state.fields[n][1])
            if not slots:
                continue
            init = c.__dict__["__init__"]
            state.inits[c] = (init, init.__defaults__, init.__kwdefaults__)
            replacements = {slot: DOVE_FIELD_DEFAULTS[name] for slot, name in slots.items()}
            new_inits.append((init, _replaced_defaults(init, replacements)))

        for init, (defaults, kwdefaults) in new_inits:
            init.__defaults__ = defaults
            init.__kwdefaults__ = kwdefaults
        for name, (fobj, _orig, value) in state.fields.items():
            fobj.default = value
            setattr(cls, name, value)
        cls.__post_init__ = state.wrapper
        _state = state
        _logger().debug("dove: config rules applied to %s", _TARGET)


def remove_config_rules():
    """Undo :func:`apply_config_rules`, restoring the original objects (no-op if not applied).

    Raises :class:`DoveConfigRulesError`, changing nothing, if someone else has since
    replaced one of the patched attributes.
    """
    global _state
    with _lock:
        state = _state
        if state is None:
            return
        cls = state.cls
        if cls.__dict__.get("__post_init__") is not state.wrapper:
            raise DoveConfigRulesError(
                f"{_TARGET}.__post_init__ was replaced after dove patched it; "
                "undo that patch first"
            )
        for name, (fobj, _orig, value) in state.fields.items():
            if fobj.default is not value or cls.__dict__.get(name, MISSING) is not value:
                raise DoveConfigRulesError(
                    f"the default of {_TARGET}.{name} was changed after dove patched it"
                )

        # Dataclass subclasses created while the rules were applied inherited dove's
        # defaults into their generated __init__; give them the upstream defaults too.
        field_objs = {name: entry[0] for name, entry in state.fields.items()}
        late = []
        for c in _family(cls):
            if c in state.inits:
                continue
            slots = _inherited_slots(c, field_objs, lambda n: state.fields[n][2])
            if slots:
                init = c.__dict__["__init__"]
                replacements = {slot: state.fields[name][1] for slot, name in slots.items()}
                late.append((init, _replaced_defaults(init, replacements)))

        cls.__post_init__ = state.original_post_init
        for name, (fobj, orig, _value) in state.fields.items():
            fobj.default = orig
            setattr(cls, name, state.class_attrs[name])
        for _c, (init, defaults, kwdefaults) in list(state.inits.items()):
            init.__defaults__ = defaults
            init.__kwdefaults__ = kwdefaults
        for init, (defaults, kwdefaults) in late:
            init.__defaults__ = defaults
            init.__kwdefaults__ = kwdefaults
        _state = None
        _logger().debug("dove: config rules removed from %s", _TARGET)
