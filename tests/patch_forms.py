"""Frameworks written to disk by hypothesis, each patching one real megatron-core symbol in one form, with what it
replaces known by construction: the catalogue of ``../shared/patch-forms.md`` drawn as data, for the reader to be
proven on every form rather than on the frameworks at hand.

A drawn framework is a layout (a regular package, an implicit namespace package, a ``src/`` layout, a single module,
or the framework's own package inside the ``megatron.`` namespace, which also patches a class of its own), a way the
Megatron module is reached, a way the name is assigned, when the assignment runs and the guard around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st


@dataclass(frozen=True)
class Target:
    """A megatron-core symbol of every matrix release: its module, the class holding it (empty for a module-level
    name) and its name."""

    module: str
    owner: str
    name: str
    config: str = ""
    """For a method: the arguments that build one of its objects (``TopKRouter(config=None)``), as written."""

    @property
    def key(self) -> str:
        return f"{self.module}:{f'{self.owner}.' if self.owner else ''}{self.name}"


TARGETS = (
    Target("megatron.core.distributed.finalize_model_grads", "", "_allreduce_non_tensor_model_parallel_grads"),
    Target("megatron.core.tensor_parallel.random", "", "get_cuda_rng_tracker"),
    Target("megatron.core.parallel_state", "", "_TENSOR_MODEL_PARALLEL_GROUP"),
    Target("megatron.core.transformer.moe.router", "TopKRouter", "routing", "config=None"),
    Target("megatron.core.models.gpt.gpt_model", "GPTModel", "forward", "config=None, transformer_layer_spec=None"),
    Target("megatron.core.transformer.transformer_layer", "TransformerLayer", "forward", "config=None"),
    Target("megatron.core.optimizer.optimizer", "ChainedOptimizer", "step", "[]"),
)
LAYOUTS = ("regular", "namespace", "src", "single", "megatron-namespace")
REACH = (
    "import-top",
    "import-as-inside",
    "from-inside",
    "try-import",
    "importlib",
    "sys-modules",
    "sys-modules-get",
    "dotted-path",
)
ASSIGN = (
    "attribute",
    "setattr-literal",
    "setattr-variable",
    "setattr-dict-loop",
    "setattr-tuple-loop",
    "setattr-written-dict-loop",
    "literal",
    "registry",
    "helper",
    "list-loop",
    "getattr-loop",
)
INSTANCE = ("closure", "method-type", "get")
"""How a method is bound on one built object instead of its class."""
OBJECT = ("constructed", "isinstance-loop", "annotated", "get-owner", "parameter")
"""How the source says which Megatron class that object is of; ``parameter``: it does not (an unannotated
parameter), and the right answer is a row saying the class cannot be read (``?``), never a guessed class."""
SHARED_METHODS = ("forward", "step")
"""Methods many Megatron classes define (every module's ``forward``, every optimizer's ``step``): an object of a class
the source does not say could be of any of them, so only these are drawn ``parameter``. A method one class alone
defines places such an object by itself."""
WHEN = ("import", "apply", "context")
GUARD = ("none", "version", "hasattr", "device")


@dataclass(frozen=True)
class PatchForm:
    """One drawn framework: its parts, and the patch it makes (``file``'s ``line`` re-binds ``target``)."""

    layout: str
    reach: str
    assign: str
    when: str
    guard: str
    target: Target
    marker: bool = False
    """The framework also leaves a marker of its own on the Megatron module or class (``_fw_patched = True``), a
    name no release defines: never a replaced symbol."""
    instance: str = ""
    """For a method: bound on one built object, in one of :data:`INSTANCE`'s ways (empty: on the class)."""
    known_by: str = ""
    """For a method bound on an object: how the source says its class (:data:`OBJECT`)."""
    undo: bool = False
    """The framework captures the original first and puts it back after (a context manager's exit, or later in
    its apply): a second line writing the name, listed beside the patch."""

    @property
    def expected(self) -> str:
        """The symbol ``scan`` must list at the patch's line: the target's, or ``?`` where no class can be read."""
        return "?" if self.known_by == "parameter" else self.target.key

    def describe(self) -> str:
        on = f"/{self.instance} on {self.known_by} object" if self.instance else ""
        parts = (
            f"{self.layout}/{self.reach}/{self.assign}{on}/{self.when}/{self.guard}{'/marker' if self.marker else ''}"
        )
        return f"{parts}{'/undo' if self.undo else ''} -> {self.target.key}"


SHADOWED = {"megatron.core.distributed.finalize_model_grads": ("importlib", "sys-modules", "sys-modules-get")}
"""Modules whose package binds their own name over them (``megatron/core/distributed/__init__.py`` imports the
function ``finalize_model_grads`` from its module): an import ``as``, a ``from`` import or a dotted path reaches the
function, and only the import system (``importlib``, ``sys.modules``) the module. A patch reached the other ways sets
an attribute on the function, which Megatron never reads; the reader does not tell them apart yet, so such a module
is drawn only with the reaches that give it."""


@st.composite
def patch_forms(draw: st.DrawFn) -> PatchForm:
    """A form of the catalogue; a class's method is reached through its module, a module's name directly."""
    target = draw(st.sampled_from(TARGETS))
    instance = draw(st.sampled_from(("", *INSTANCE))) if target.config else ""
    assign = "attribute" if instance else draw(st.sampled_from(ASSIGN))
    return PatchForm(
        draw(st.sampled_from(LAYOUTS)),
        draw(st.sampled_from(SHADOWED.get(target.module, REACH))),
        assign,
        draw(st.sampled_from(WHEN)),
        draw(st.sampled_from(GUARD)),
        target,
        draw(st.booleans()),
        instance,
        draw(st.sampled_from([o for o in OBJECT if o != "parameter" or target.name in SHARED_METHODS]))
        if instance
        else "",
        draw(st.booleans()) if assign in UNDONE and not instance else False,
    )


UNDONE = ("attribute", "setattr-literal")
"""The assignments drawn with an undo: a name bound on its owner, which a captured original can be put back on."""


@dataclass(frozen=True)
class Written:
    """A framework on disk: the folder to scan, the file making the patch and the line of its assignment."""

    root: Path
    patch_file: Path
    line: int
    undo_line: int | None = None

    @property
    def place(self) -> str:
        return f"{self.patch_file.name}:{self.line}"

    def rows(self, symbol: str) -> set[tuple[str, str]]:
        """What ``scan`` must list: the patch's line, and the undo's where the framework puts the original back."""
        lines = [self.line] + ([self.undo_line] if self.undo_line else [])
        return {(f"{self.patch_file.name}:{line}", symbol) for line in lines}


def write_framework(form: PatchForm, root: Path) -> Written:
    """Write ``form`` as a framework under ``root``; the patch module is ``<package>/patching.py`` (or the single
    module itself)."""
    lines = _patch_module(form)
    line = next(i for i, text in enumerate(lines, 1) if "# the patch" in text)
    undo = next((i for i, text in enumerate(lines, 1) if "# the undo" in text), None)
    text = "\n".join(lines) + "\n"
    if form.layout == "single":
        path = root / "fwsingle.py"
    else:
        package = {
            "regular": root / "fwreg",
            "namespace": root / "fwns" / "inner",
            "src": root / "src" / "fwsrc",
            "megatron-namespace": root / "megatron" / "fwbridge",
        }[form.layout]
        package.mkdir(parents=True)
        if form.layout in ("regular", "src", "megatron-namespace"):
            (package / "__init__.py").write_text("")
        if form.layout == "megatron-namespace":
            (package / "models.py").write_text(OWN_CLASS)
        path = package / "patching.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return Written(root, path, line, undo)


REGISTRY = [
    "PATCHES = []",
    "",
    "",
    "def register(path, value):",
    "    PATCHES.append((path, value))",
    "",
    "",
    "def apply_registered():",
    "    for path, value in PATCHES:",
    '        module, _, name = path.rpartition(".")',
    "        setattr(importlib.import_module(module), name, value)",
    "",
]
"""A registry keyed by dotted strings, applied later by a generic loop (F17)."""
HELPER = [
    "def swap_attribute(owner, attribute, new, note=None):",
    "    setattr(owner, attribute, new)",
    "",
]
"""A function of the framework's own that patches what its parameters name (``patch_method_source``)."""

OWN_CLASS = """\
class BridgeModel:
    def forward(self, x):
        return x
"""
"""A class of the framework's own, inside the ``megatron.`` namespace: its patches are not Megatron's."""


def _patch_module(form: PatchForm) -> list[str]:
    target = form.target
    module = target.module
    head = ["import contextlib", "import importlib", "import sys", "import types", "", "import torch", ""]
    handle, reach = _reach(form.reach, module)
    owner = f"{handle}.{target.owner}" if target.owner else handle
    body = [*reach, *_guard(form.guard, owner, target.name)]
    if form.instance:
        body += _on_object(form, handle)
    elif form.assign == "registry":
        head += REGISTRY
        body += [f'register("{target.module}.{target.key.partition(":")[2]}", replacement)  # the patch']
    else:
        head += HELPER if form.assign == "helper" else []
        original = [f"original = {owner}.{target.name}"] if form.undo else []
        body += original + _assign(form.assign, owner, target.name, handle, target.owner)
    if form.marker:
        body += [f"{owner}._fw_patched = True"]
    if form.layout == "megatron-namespace":
        head += ["from megatron.fwbridge.models import BridgeModel", ""]
        body += ["BridgeModel.forward = replacement"]
    replacement = [
        "def replacement(*args, **kwargs):",
        "    return None",
        "",
        "",
        "def model_chunks():",
        "    return []",
        "",
    ]
    if form.assign == "setattr-written-dict-loop":
        replacement += ["", f'PATCHED = {{"{target.name}": replacement}}', ""]
    undo = [f"{owner}.{target.name} = original  # the undo"] if form.undo else []
    if form.reach == "import-top":
        head += [f"import {module} as target_module", ""]
        body = body[len(reach) :]
    if form.known_by == "annotated":
        head += [f"from {module} import {target.owner}", ""]
        body = body[len(reach) :] if form.reach != "import-top" else body
        reach_lines = reach if form.reach != "import-top" else []
        body = [*reach_lines, *body]
        parameters = f"built: {target.owner} = None"
    else:
        parameters = "built=None" if form.known_by == "parameter" else ""
    if form.when == "import" and not parameters:
        return [*head, *replacement, *body, *undo]
    indent = ["    " + text if text else text for text in body]
    if form.when in ("apply", "import"):
        return [*head, *replacement, "", f"def apply({parameters}):", *indent, *(f"    {text}" for text in undo)]
    return [
        *head,
        *replacement,
        "",
        "@contextlib.contextmanager",
        f"def patched({parameters}):",
        *indent,
        "    yield",
        *(f"    {text}" for text in undo),
    ]


def _reach(reach: str, module: str) -> tuple[str, list[str]]:
    """The name the Megatron module is bound to, and the lines binding it where the patch runs."""
    parent, _, leaf = module.rpartition(".")
    return {
        "import-top": ("target_module", []),
        "import-as-inside": ("target_module", [f"import {module} as target_module"]),
        "from-inside": (leaf, [f"from {parent} import {leaf}"]),
        "try-import": (
            "target_module",
            ["try:", f"    import {module} as target_module", "except ImportError:", "    target_module = None"],
        ),
        "importlib": ("target_module", [f'target_module = importlib.import_module("{module}")']),
        "sys-modules": ("target_module", [f"import {module}", f'target_module = sys.modules["{module}"]']),
        "sys-modules-get": ("target_module", [f"import {module}", f'target_module = sys.modules.get("{module}")']),
        "dotted-path": (module, [f"import {module}"]),
    }[reach]


def _guard(guard: str, owner: str, name: str) -> list[str]:
    """A check before the patch that lets it through on every release (the patch is made): a guard the reader must
    read past, not a skip."""
    return {
        "none": [],
        "version": [
            "import megatron.core",
            'if not megatron.core.__version__.startswith("0."):',
            "    raise SystemExit",
        ],
        "hasattr": [f'if not hasattr({owner}, "{name}"):', "    raise AttributeError"],
        "device": ["if torch.cuda.is_available() and False:", "    raise SystemExit"],
    }[guard]


def _on_object(form: PatchForm, handle: str) -> list[str]:
    """The lines binding the replacement on one object of the target's class, the object's class known from the
    source as ``form.known_by`` says."""
    target = form.target
    cls = target.owner if form.known_by == "annotated" else f"{handle}.{target.owner}"
    bound = {
        "closure": "replacement",
        "method-type": "types.MethodType(replacement, built)",
        "get": "replacement.__get__(built, type(built))",
    }[form.instance]
    patch = f"built.{target.name} = {bound}  # the patch"
    if form.known_by == "get-owner":
        bound = f"replacement.__get__(built, {cls})"
        return ["for built in model_chunks():", f"    built.{target.name} = {bound}  # the patch"]
    if form.known_by == "constructed":
        return [f"built = {cls}({target.config})", patch]
    if form.known_by == "isinstance-loop":
        return ["for built in model_chunks():", f"    if isinstance(built, {cls}):", f"        {patch}"]
    return [patch]


def _assign(assign: str, owner: str, name: str, handle: str, owner_name: str) -> list[str]:
    marker = "  # the patch"
    if assign == "getattr-loop" and owner_name:
        return [
            f'for owner_name in ("{owner_name}",):',
            f"    found = getattr({handle}, owner_name, None)",
            f"    found.{name} = replacement{marker}",
        ]
    return {
        "helper": [f'swap_attribute({owner}, "{name}", replacement){marker}'],
        "list-loop": [f"for patched in [{owner}]:", f"    patched.{name} = replacement{marker}"],
        "getattr-loop": [f"for patched in ({owner},):", f"    patched.{name} = replacement{marker}"],
        "literal": [f"{owner}.{name} = None{marker}"],
        "attribute": [f"{owner}.{name} = replacement{marker}"],
        "setattr-literal": [f'setattr({owner}, "{name}", replacement){marker}'],
        "setattr-variable": [f'patched_name = "{name}"', f"setattr({owner}, patched_name, replacement){marker}"],
        "setattr-dict-loop": [
            f'for patched_name, value in {{"{name}": replacement}}.items():',
            f"    setattr({owner}, patched_name, value){marker}",
        ],
        "setattr-written-dict-loop": [
            "for patched_name, value in PATCHED.items():",
            f"    setattr({owner}, patched_name, value){marker}",
        ],
        "setattr-tuple-loop": [
            f'for patched_name, value in (("{name}", replacement),):',
            f"    setattr({owner}, patched_name, value){marker}",
        ],
    }[assign]
