"""Megatron's own calls of a replaced symbol, read from a small Megatron tree, and how a replacement fits them."""

from __future__ import annotations

import linecache
import textwrap
from pathlib import Path

import pytest

from harness.source import call_sites
from harness.source.call_sites import MegatronCall, MegatronSource
from harness.source.copies import body_diff, definition, diff_summary, shown
from harness.source.replacement_fit import (
    binding_problem,
    dropped_keywords,
    returned_count,
    unread_var_keyword,
)

TREE = {
    "megatron/__init__.py": "",
    "megatron/core/__init__.py": "",
    "megatron/core/attention.py": """
        class Attention:
            def forward(self, x):
                q, k = self.qkv(x, cache=None)
                return q

            def qkv(self, x, cache=None):
                return x, x


        class SelfAttention(Attention):
            def helper(self, x):
                a, b, c = self.qkv(x)
                return a


        class OwnQKV(Attention):
            def qkv(self, x):
                return x, x

            def use(self, x):
                return self.qkv(x)


        class Child(SelfAttention):
            def qkv(self, x, cache=None):
                return super().qkv(x, cache=cache)
        """,
    "megatron/core/grads.py": """
        def reduce(model, config, group=None):
            return None


        _captured = reduce


        def finalize(model, config):
            reduce(model, config, None)
            _captured(model, config)
        """,
    "megatron/core/lazy.py": """
        def later(model):
            from megatron.core.grads import reduce

            reduce(model, None)
        """,
    "megatron/core/user.py": """
        from megatron.core.grads import reduce
        from megatron.core import grads as g


        def step(model):
            reduce(model, None)
            g.reduce(model, None, group=1)
        """,
}


@pytest.fixture
def source(tmp_path: Path) -> MegatronSource:
    for name, text in TREE.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return MegatronSource(tmp_path)


def places(calls: list) -> list[tuple[str, str, int | None]]:
    return [(call.caller.split(":")[1], call.name, call.unpacks) for call in calls]


def test_a_method_is_called_where_instances_inherit_it_and_from_subclasses_through_super(
    source: MegatronSource,
) -> None:
    calls = source.calls_of("megatron.core.attention:Attention.qkv")
    assert sorted(places(calls)) == [
        ("Attention.forward", "self.qkv", 2),
        ("Child.qkv", "super().qkv", None),
        ("SelfAttention.helper", "self.qkv", 3),
    ]


def test_a_call_inside_another_replaced_symbol_is_left_out(source: MegatronSource) -> None:
    calls = source.calls_of("megatron.core.attention:Attention.qkv", ["megatron.core.attention:Attention.forward"])
    assert ("Attention.forward", "self.qkv", 2) not in places(calls) and calls


def test_a_function_is_called_by_name_by_import_and_through_its_module(source: MegatronSource) -> None:
    calls = source.calls_of("megatron.core.grads:reduce")
    found = {(call.caller, call.name, call.bound_at) for call in calls}
    assert found == {
        ("megatron.core.grads:finalize", "reduce", None),
        ("megatron.core.grads:finalize", "_captured", "megatron/core/grads.py:6"),
        ("megatron.core.user:step", "reduce", "megatron/core/user.py:2"),
        ("megatron.core.user:step", "g.reduce", None),
        ("megatron.core.lazy:later", "reduce", None),
    }
    bindings = {(b.module, b.alias, b.called) for b in source.bindings_of("megatron.core.grads:reduce")}
    assert bindings == {("megatron.core.grads", "_captured", True), ("megatron.core.user", "reduce", True)}


def test_an_import_inside_a_function_binds_when_it_runs_and_the_rule_before_took_it_for_a_copy(
    source: MegatronSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded break: taking every ``from ... import`` for a binding made at import time (the rule before) says the
    patch does not reach ``lazy.later``'s call, which imports the function when it runs, after the patch."""
    monkeypatch.setattr(call_sites, "imports_at_call", lambda tree: set())
    calls = source.calls_of("megatron.core.grads:reduce")
    assert ("megatron.core.lazy:later", "reduce", "megatron/core/lazy.py:3") in {
        (call.caller, call.name, call.bound_at) for call in calls
    }


def test_a_replacement_binds_counts_its_values_and_drops_unread_keywords() -> None:
    def two(self, x, cache=None):
        return x, x

    def either(self, x):
        if x:
            return x, x
        return x

    def swallows(self, x, **kwargs):
        return x, x

    def forwards(self, *args, **kwargs):
        return two(self, *args, **kwargs)

    call = MegatronCall("megatron/core/attention.py", 4, "m:A.forward", 1, ("cache",), False, False, 2)
    assert binding_problem(two, call, "method") is None
    assert "cache" in str(binding_problem(either, call, "method"))
    assert returned_count(two) == 2 and returned_count(either) is None and returned_count(forwards) is None
    assert unread_var_keyword(swallows) == "kwargs" and unread_var_keyword(forwards) is None
    assert list(dropped_keywords(swallows, [call])) == ["cache"] and dropped_keywords(forwards, [call]) == {}


def test_a_copy_is_diffed_against_the_definition_instances_find(source: MegatronSource, tmp_path: Path) -> None:
    """The body compared is the one Megatron's instances reach: ``SelfAttention.qkv`` is ``Attention``'s."""
    found = definition(source, "megatron.core.attention:SelfAttention.qkv")
    assert found is not None and found.place == "megatron/core/attention.py:7"
    assert found.text.startswith("def qkv(self, x, cache=None):\n")
    assert definition(source, "megatron.core.attention:SelfAttention.missing") is None
    assert definition(source, "megatron.core.grads:reduce").text.startswith("def reduce(model, config, group=None)")
    changed = found.text.replace("return x, x", "return x, x, None")
    diff = body_diff(found.text, changed, "0.13.1: a.py:6", "0.19.0: a.py:9")
    assert diff.startswith("--- 0.13.1: a.py:6\n+++ 0.19.0: a.py:9\n") and "+    return x, x, None\n" in diff
    assert diff_summary(diff) == "1 line added, 1 removed" and body_diff(found.text, found.text, "a", "b") == ""
    long = "".join(f"+{n}\n" for n in range(100))
    assert shown(long, "copies/x.diff").endswith("... 40 more lines in copies/x.diff")


KINDS = """
    class Experts:
        @staticmethod
        def bias(x, b):
            return x

        @classmethod
        def build(cls, n):
            return cls()

        @property
        def size(self):
            return 1

        def forward(self, x):
            y = self.bias(x, 1)
            n = self.size
            return Experts.bias(y, n), Experts.build(2)
    """


def test_static_and_class_methods_bind_as_the_patch_binds_them_and_a_property_is_read(tmp_path: Path) -> None:
    """A static method called on ``self`` gets no instance unless the patch binds a plain function there; a call
    on the class passes what it names; a property is read, and a read binds only to a property."""
    (tmp_path / "megatron" / "core").mkdir(parents=True)
    (tmp_path / "megatron" / "core" / "kinds.py").write_text(textwrap.dedent(KINDS))
    source = MegatronSource(tmp_path)
    bias = source.calls_of("megatron.core.kinds:Experts.bias")
    assert [(call.name, call.positional, call.through_class) for call in bias] == [
        ("self.bias", 2, False),
        ("Experts.bias", 2, True),
    ]

    def new_bias(x, b):
        return x

    assert [binding_problem(new_bias, call, "staticmethod") for call in bias] == [None, None]
    assert binding_problem(staticmethod(new_bias), bias[0], "staticmethod") is None
    on_self, on_class = (binding_problem(new_bias, call, "method") for call in bias)
    assert "too many positional arguments" in str(on_self) and on_class is None

    (build,) = source.calls_of("megatron.core.kinds:Experts.build")
    assert binding_problem(lambda cls, n: cls, build, "classmethod") is None
    assert "too many positional" in str(binding_problem(lambda n: n, build, "classmethod"))

    (read,) = source.reads_of("megatron.core.kinds:Experts.size")
    assert read.read and read.describe() == "megatron/core/kinds.py:17 (Experts.forward: reads self.size)"
    assert binding_problem(property(lambda self: 2), read, "property") is None
    assert "the read gets a bound method, not a value" in str(binding_problem(lambda self: 2, read, "method"))
    assert "the call calls the property's value" in str(binding_problem(property(lambda self: 2), bias[0], "property"))


def test_a_mutants_edited_text_is_read_where_the_venv_is_reached_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import system keys a Megatron mutant's edited lines in ``linecache`` by the path it found (through a
    symbolic link, say, to the venv); the source is read at the resolved root: it must still read the edited text,
    or a mutant that removes a binding would be judged by the installed file that still has it."""
    real = tmp_path / "real"
    for name, text in TREE.items():
        path = real / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (tmp_path / "link").symlink_to(real)
    installed = (real / "megatron/core/user.py").read_text()
    edited = installed.replace("g.reduce(model, None, group=1)", "pass")
    seen_by_import = str(tmp_path / "link" / "megatron/core/user.py")
    monkeypatch.setitem(linecache.cache, seen_by_import, (len(edited), None, edited.splitlines(True), seen_by_import))
    source = MegatronSource(real.resolve())
    assert source.texts["megatron.core.user"][1] == edited
    assert "group=1" not in source.texts["megatron.core.user"][1] and "group=1" in installed
