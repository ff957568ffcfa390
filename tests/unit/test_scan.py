"""``scan`` on small frameworks against small Megatron trees: the symbols it finds and how it names them (a module
imported by name followed, a symbol one tree lacks optional, the Megatron functions that call a replaced one, a name
the framework defines itself never Megatron's), the patch assignments it sees through a loop over names and a
registry's records, and the guesses it writes: ``[patch]`` for a framework replacing the chunked all-reduce,
``[symbols_patch]`` for any other, with each replaced symbol's replacement. What it reads: a folder, a release's
wheel, an installed distribution, Megatron from the newest matrix release where no target is built. Every framework
in ``tests/frameworks/`` is measured against real Megatron in ``tests/e2e/test_scan_declarations.py``, three
published ones in ``tests/e2e/test_scan_published.py``."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

from harness.source import scan_subject as scan_subject_module
from harness.source.framework_scan import scan_framework
from harness.source.scan_subject import matrix_releases
from harness.source.starter import ROLE_REPLACEMENT, main, starter_declaration
from harness.subjects.declaration import read_declaration_file
from harness.targets import release_source as release_module
from harness.targets.release_source import ReleaseSourceError, distribution_source, top_level_packages

FINALIZE = """
from .. import parallel_state


def _allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    return parallel_state.get_tensor_model_parallel_group()


_allreduce_layernorm_grads = _allreduce_non_tensor_model_parallel_grads


def finalize_model_grads(model, config=None):
    _allreduce_non_tensor_model_parallel_grads(model, config)
"""
FRAMEWORK = """
import importlib

FINALIZE = "megatron.core.distributed.finalize_model_grads"
NAMES = ("_allreduce_non_tensor_model_parallel_grads", "_allreduce_layernorm_grads")
_saved = {}


def chunked(model, config, tp_group=None):
    module = importlib.import_module(FINALIZE)
    return module.parallel_state.get_tensor_model_parallel_group()


def apply(chunk_mb=64.0):
    module = importlib.import_module(FINALIZE)
    for name in NAMES:
        _saved[name] = getattr(module, name)
        setattr(module, name, chunked)


def undo():
    module = importlib.import_module(FINALIZE)
    for name, value in _saved.items():
        setattr(module, name, value)
"""
REGISTRY = """
from .records import Edit, register

FINALIZE = "megatron.core.distributed.finalize_model_grads"


@register("chunked_grad_allreduce")
def _factory(args):
    return [Edit(FINALIZE, "_allreduce_non_tensor_model_parallel_grads", _replacement(args.grad_chunk_bytes))]


def apply_patches(args, names=None):
    return names
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def megatron_tree(root: Path, with_group: bool) -> Path:
    state = "def get_tensor_model_parallel_group():\n    return None\n" if with_group else "X = 1\n"
    return write(
        root,
        {
            "megatron/__init__.py": "",
            "megatron/core/__init__.py": "",
            "megatron/core/parallel_state.py": state,
            "megatron/core/distributed/__init__.py": "from .finalize_model_grads import finalize_model_grads\n",
            "megatron/core/distributed/finalize_model_grads.py": FINALIZE,
        },
    )


def test_scan_names_symbols_follows_imported_modules_and_marks_what_a_tree_lacks(tmp_path: Path) -> None:
    trees = [megatron_tree(tmp_path / "new", True), megatron_tree(tmp_path / "old", False)]
    framework = write(
        tmp_path / "fw", {"fw/__init__.py": "", "fw/mcore/__init__.py": "", "fw/mcore/patch.py": FRAMEWORK}
    )
    found = scan_framework(framework, trees)
    symbols = {symbol.key: symbol for symbol in found.symbols}
    finalize = "megatron.core.distributed.finalize_model_grads"
    assert symbols[f"{finalize}:_allreduce_non_tensor_model_parallel_grads"].usage == "replaces"
    assert symbols[f"{finalize}:_allreduce_non_tensor_model_parallel_grads"].replacement == "fw.mcore.patch:chunked"
    assert symbols[f"{finalize}:finalize_model_grads"].usage == "relies"
    group = symbols["megatron.core.parallel_state:get_tensor_model_parallel_group"]
    assert (group.usage, group.optional) == ("calls", True)
    assert {(p.key.rpartition(":")[2], p.scope) for p in found.patches} >= {
        ("_allreduce_non_tensor_model_parallel_grads", "apply"),
        ("_allreduce_non_tensor_model_parallel_grads", "undo"),
    }
    text = starter_declaration(found, framework)
    for guess in (
        '# applied = "call"',
        '# apply = "apply"',
        '# undo = "undo"',
        '# argument = "chunk_mb"',
        '# unit = "MiB"',
    ):
        assert guess in text, text
    declaration = framework / "starter.toml"
    declaration.write_text(text)
    assert read_declaration_file(declaration).adapter_package == "fw.mcore"


def test_a_registrys_records_are_patches_and_its_apply_and_name_the_guess(tmp_path: Path) -> None:
    trees = [megatron_tree(tmp_path / "new", True)]
    files = {
        "fw/__init__.py": "",
        "fw/mcore/__init__.py": "from .patches import apply_patches\n",
        "fw/mcore/patches.py": REGISTRY,
    }
    found = scan_framework(write(tmp_path / "fw", files), trees)
    assert [(p.key.rpartition(":")[2], p.scope) for p in found.patches] == [
        ("_allreduce_non_tensor_model_parallel_grads", "_factory")
    ]
    text = starter_declaration(found, tmp_path / "fw")
    for guess in ('# module = "fw.mcore"', '# apply = "apply_patches"', '# undo = "returned"'):
        assert guess in text, text
    assert '# arguments = { names = ["chunked_grad_allreduce"] }' in text
    assert '# argument = "args.grad_chunk_bytes"' in text


FRAMEWORK_WITHOUT_ALLREDUCE = {
    "fw/__init__.py": """
        from .patcher import apply_patch

        apply_patch()
    """,
    "fw/constant.py": """
        class ModelType:
            qwen = "qwen"
    """,
    "fw/register.py": """
        from megatron.core.enums import ModelType

        KIND = ModelType.encoder_or_decoder
    """,
    "fw/models.py": """
        from .constant import ModelType

        NAME = ModelType.qwen
    """,
    "fw/patcher.py": """
        import inspect

        from megatron.core.models.gpt import gpt_model
        from megatron.core.transformer.moe.router import TopKRouter


        def _plain_routing(self, logits):
            return logits


        def _patch_routing():
            TopKRouter.routing = _plain_routing


        def _patch_forward():
            original = gpt_model.GPTModel.forward

            def forward(self, *args, **kwargs):
                return original(self, *args, **kwargs)

            gpt_model.GPTModel.forward = forward
            gpt_model.GPTModel.forward.__signature__ = inspect.signature(original)


        def apply_patch():
            _patch_routing()
            _patch_forward()
    """,
    "fw/layers.py": """
        from contextlib import contextmanager

        from megatron.core.transformer.moe import router


        @contextmanager
        def patched_gating():
            original = router.Router.gating

            def gating(self, x):
                return original(self, x)

            router.Router.gating = gating
            try:
                yield
            finally:
                router.Router.gating = original
    """,
    "fw/instances.py": """
        import types

        from megatron.core.models.gpt.gpt_model import GPTModel


        def _fused_embed(self, tokens):
            return tokens


        def patch_fused_embed(model):
            if isinstance(model, GPTModel):
                model.embed = types.MethodType(_fused_embed, model)
    """,
    "fw/swap.py": """
        from megatron.core.transformer.moe.router import TopKRouter


        class QuietRouter(TopKRouter):
            def gating(self, x):
                return x


        def quieten(layers):
            for layer in layers:
                if isinstance(layer, TopKRouter):
                    layer.__class__ = QuietRouter
    """,
}
"""A framework in mcore-bridge's shape: patches applied at its import by one function calling the functions that
make them (a method replaced by a module function, a closure with its signature rewritten), a context manager of its
own patching a method, a method bound on built models and a class swapped onto built routers; its own ``ModelType``
beside Megatron's."""


def models_tree(root: Path) -> Path:
    """Megatron with the modules the symbols-only frameworks patch."""
    megatron_tree(root, True)
    return write(
        root,
        {
            "megatron/core/enums.py": "class ModelType:\n    encoder_or_decoder = 1\n",
            "megatron/core/transformer/__init__.py": "",
            "megatron/core/transformer/moe/__init__.py": "",
            "megatron/core/transformer/moe/router.py": """
                class Router:
                    def gating(self, x):
                        return x


                class TopKRouter(Router):
                    def routing(self, logits):
                        return logits
            """,
            "megatron/core/models/__init__.py": "",
            "megatron/core/models/gpt/__init__.py": "",
            "megatron/core/models/gpt/gpt_model.py": """
                class GPTModel:
                    def forward(self, tokens):
                        return self.embed(tokens)

                    def embed(self, tokens):
                        return tokens
            """,
        },
    )


def symbols_table(text: str) -> list[tuple[str, str, str]]:
    """``[megatron_symbols]`` as (key, usage, comment), in order."""
    rows = []
    for line in text.split("[megatron_symbols]\n", 1)[1].splitlines():
        entry, _, comment = line.partition("  # ")
        key, _, usage = entry.partition(" = ")
        rows.append((key.strip('"'), usage.strip('"'), comment))
    return rows


def test_a_framework_that_does_not_replace_the_allreduce_gets_its_symbols_patch_and_no_patch_guess(
    tmp_path: Path,
) -> None:
    framework = write(tmp_path / "fw", FRAMEWORK_WITHOUT_ALLREDUCE)
    text = starter_declaration(scan_framework(framework, [models_tree(tmp_path / "megatron")]), framework)
    assert "# [patch]  # guess" not in text and f"replaces with {ROLE_REPLACEMENT}" not in text
    parsed = tomllib.loads(text)
    assert parsed["subject"]["adapter_package"] == "fw"  # the package whose import applies the patches
    assert parsed["symbols_patch"] == {"module": "fw.patcher", "apply": "apply_patch"}
    rows = symbols_table(text)
    usages = {key: usage for key, usage, _ in rows}
    assert (
        usages["megatron.core.transformer.moe.router:TopKRouter.routing"] == "replaces with fw.patcher:_plain_routing"
    )
    assert usages["megatron.core.models.gpt.gpt_model:GPTModel.forward"] == "replaces"  # a closure the apply binds
    made_elsewhere = {
        "megatron.core.transformer.moe.router:Router.gating": "by fw.layers:patched_gating",
        "megatron.core.models.gpt.gpt_model:GPTModel.embed": "with fw.instances:_fused_embed",
        "megatron.core.transformer.moe.router:TopKRouter.gating": "with fw.swap:QuietRouter.gating",
    }
    comments = {key: comment for key, _, comment in rows}
    for key, said in made_elsewhere.items():
        assert usages[key] == "replaces" and said in comments[key] and "not by [symbols_patch]'s apply" in comments[key]
    assert not [key for key in usages if "__signature__" in key]
    replaced = [usage.startswith("replaces") for _, usage, _ in rows]
    assert replaced == sorted(replaced, reverse=True), "the replaced symbols come first"
    (framework / "starter.toml").write_text(text)
    assert read_declaration_file(framework / "starter.toml").symbols_patch["apply"] == ("apply_patch",)


def test_a_name_the_framework_defines_itself_is_never_filed_under_a_megatron_module(tmp_path: Path) -> None:
    framework = write(tmp_path / "fw", FRAMEWORK_WITHOUT_ALLREDUCE)
    keys = {symbol.key for symbol in scan_framework(framework, [models_tree(tmp_path / "megatron")]).symbols}
    assert "megatron.core.enums:ModelType.encoder_or_decoder" in keys
    assert "megatron.core.enums:ModelType.qwen" not in keys


def test_a_helper_taking_the_megatron_module_as_a_parameter_still_reaches_it(tmp_path: Path) -> None:
    files = {
        "fw/__init__.py": "",
        "fw/grads.py": """
            import importlib


            def _group(fmg):
                return fmg.parallel_state.get_tensor_model_parallel_group()


            def run():
                fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")
                return _group(fmg)
        """,
    }
    found = scan_framework(write(tmp_path / "fw", files), [megatron_tree(tmp_path / "megatron", True)])
    assert "megatron.core.parallel_state:get_tensor_model_parallel_group" in {s.key for s in found.symbols}


def test_apply_lists_each_patching_function_that_no_function_calls_all_of(tmp_path: Path) -> None:
    files = {
        "fw/__init__.py": "",
        "fw/mcore/__init__.py": "from .patch import apply_routing_patch\n\napply_routing_patch()\n",
        "fw/mcore/patch.py": """
            from megatron.core.models.gpt.gpt_model import GPTModel
            from megatron.core.transformer.moe.router import TopKRouter


            def apply_routing_patch():
                def routing(self, logits):
                    return logits

                TopKRouter.routing = routing


            def apply_forward_patch():
                def forward(self, tokens):
                    return tokens

                GPTModel.forward = forward
        """,
        "fw/legacy.py": """
            from megatron.core.transformer.moe.router import Router


            def _gating(self, x):
                return x


            Router.gating = _gating
        """,
    }
    framework = write(tmp_path / "fw", files)
    text = starter_declaration(scan_framework(framework, [models_tree(tmp_path / "megatron")]), framework)
    parsed = tomllib.loads(text)
    assert parsed["symbols_patch"] == {
        "module": "fw.mcore.patch",
        "apply": ["apply_routing_patch", "apply_forward_patch"],
    }
    assert parsed["subject"]["adapter_package"] == "fw.mcore"
    assert parsed["megatron_symbols"]["megatron.core.transformer.moe.router:Router.gating"] == "replaces"
    (framework / "starter.toml").write_text(text)
    assert read_declaration_file(framework / "starter.toml").symbols_patch["apply"] == (
        "apply_routing_patch",
        "apply_forward_patch",
    )


def test_patches_made_by_importing_a_module_are_applied_by_import(tmp_path: Path) -> None:
    files = {
        "fw/__init__.py": "",
        "fw/legacy.py": """
            from megatron.core.transformer.moe.router import Router


            def _gating(self, x):
                return x


            Router.gating = _gating
        """,
    }
    framework = write(tmp_path / "fw", files)
    parsed = tomllib.loads(starter_declaration(scan_framework(framework, [models_tree(tmp_path / "m")]), framework))
    assert parsed["symbols_patch"] == {"module": "fw.legacy", "applied": "import"}
    assert parsed["megatron_symbols"]["megatron.core.transformer.moe.router:Router.gating"] == (
        "replaces with fw.legacy:_gating"
    )


def test_a_framework_replacing_the_allreduce_keeps_its_patch_guess_and_no_symbols_patch(tmp_path: Path) -> None:
    framework = write(
        tmp_path / "fw", {"fw/__init__.py": "", "fw/mcore/__init__.py": "", "fw/mcore/patch.py": FRAMEWORK}
    )
    text = starter_declaration(scan_framework(framework, [megatron_tree(tmp_path / "megatron", True)]), framework)
    assert '# apply = "apply"' in text and "\n[symbols_patch]" not in text
    assert "symbols_patch" not in tomllib.loads(text)


def test_scan_without_a_built_target_names_symbols_against_every_matrix_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    versions = matrix_releases()
    for version in versions:
        megatron_tree(tmp_path / "cache" / f"megatron-core-{version}", True)
    monkeypatch.setenv("MEGATRON_CONFORMANCE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    framework = write(
        tmp_path / "fw", {"fw/__init__.py": "", "fw/mcore/__init__.py": "", "fw/mcore/patch.py": FRAMEWORK}
    )
    assert main([str(framework)], envdir=tmp_path / "no-venvs") == 0
    said = capsys.readouterr()
    assert f"naming symbols against the matrix's releases, megatron-core {', '.join(versions)}" in said.err
    assert said.err.count("\n") == 1 and versions[0] == max(versions, key=Version)
    assert '"megatron.core.parallel_state:get_tensor_model_parallel_group" = "calls"' in said.out


def test_scan_with_no_megatron_source_to_be_had_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(version: str, venvs: Path) -> None:
        raise ReleaseSourceError(f"megatron-core {version}: no wheel of it could be fetched (offline)")

    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.setattr(scan_subject_module, "release_source", unreachable)
    assert main([str(tmp_path)], envdir=tmp_path / "no-venvs") == 2
    error = capsys.readouterr().err
    assert error.startswith("megatron-conformance scan: no Megatron source to name symbols against: megatron-core")
    assert error.count("\n") == 1


def fake_distribution(site: Path, name: str, version: str, files: dict[str, str], listed: bool) -> Path:
    """``files`` installed into ``site`` as the distribution ``name==version``: its packages listed in
    ``top_level.txt`` (``listed``), else only in ``RECORD``."""
    write(site, files)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in files) + f"{info.name}/RECORD,,\n")
    if listed:
        (info / "top_level.txt").write_text("\n".join(sorted({path.split("/")[0] for path in files})) + "\n")
    return site


def test_scan_of_a_published_release_reads_its_unpacked_wheel_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    unpacked = fake_distribution(tmp_path / "wheel", "my-fw", "1.2.0", FRAMEWORK_WITHOUT_ALLREDUCE, listed=True)
    fetched = []
    monkeypatch.setattr(
        scan_subject_module, "distribution_source", lambda name, version: fetched.append((name, version)) or unpacked
    )
    envdir = tmp_path / "venvs"
    models_tree(envdir / "megatron-0-19" / "lib" / "python3.12" / "site-packages")
    assert main(["my-fw==1.2.0"], envdir=envdir) == 0
    text = capsys.readouterr().out
    assert fetched == [("my-fw", "1.2.0")]
    subject = tomllib.loads(text)["subject"]
    assert subject["distribution"] == "my-fw==1.2.0" and "source_root" not in subject
    assert text.startswith("# Starter declaration, written by `megatron-conformance scan my-fw==1.2.0`")
    (tmp_path / "starter.toml").write_text(text)
    assert read_declaration_file(tmp_path / "starter.toml").distribution == "my-fw==1.2.0"


def test_scan_of_an_installed_distribution_reads_only_its_own_packages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    site = fake_distribution(tmp_path / "site", "my-fw", "2.0", FRAMEWORK_WITHOUT_ALLREDUCE, listed=False)
    write(site, {"other/__init__.py": "from megatron.core.parallel_state import get_tensor_model_parallel_group\n"})
    monkeypatch.setattr(sys, "path", [str(site)])
    envdir = tmp_path / "venvs"
    models_tree(envdir / "megatron-0-19" / "lib" / "python3.12" / "site-packages")
    assert main(["my-fw"], envdir=envdir) == 0
    parsed = tomllib.loads(capsys.readouterr().out)
    assert parsed["subject"]["distribution"] == "my-fw==2.0"
    assert "megatron.core.parallel_state:get_tensor_model_parallel_group" not in parsed["megatron_symbols"]
    assert "megatron.core.enums:ModelType.encoder_or_decoder" in parsed["megatron_symbols"]


def test_an_argument_that_is_neither_a_folder_nor_a_distribution_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    for argument in ("no-such-framework", "no/such/folder", "verl>=0.9"):
        assert main([argument], envdir=tmp_path / "no-venvs") == 2
        error = capsys.readouterr().err
        assert error.startswith(f"megatron-conformance scan: {argument}") and error.count("\n") == 1


def test_a_release_unpacked_once_is_read_from_the_cache_with_its_own_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cache" / "distributions" / "my-fw-1.2.0"
    files = {"fw/__init__.py": "", "fw/mcore.py": "", "helpers.py": ""}
    unpacked = fake_distribution(folder, "my-fw", "1.2.0", files, listed=False)
    monkeypatch.setattr(release_module, "find_uv", lambda: pytest.fail("a cached release was fetched again"))
    assert distribution_source("my-fw", "1.2.0", cache=tmp_path / "cache") == unpacked
    distribution = next(importlib.metadata.distributions(name="my-fw", path=[str(unpacked)]))
    assert top_level_packages(distribution) == ["fw", "helpers"]
