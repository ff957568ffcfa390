"""Reading a framework's and Megatron's source without running either: a product of its own, used by the
api-fingerprint family's from-source verdicts, ``scan`` and ``bisect``. May import ``formats``, ``targets`` (where a
release's source lives) and ``subjects`` (what a declaration's roles are called).

- Files and names: :mod:`.package_layout` (a framework's modules in every layout Python imports),
  :mod:`.megatron_namespace` (which dotted names are Megatron's), :mod:`.parsing`, :mod:`.syntax`, :mod:`.scopes`,
  :mod:`.scoped_names` (which Megatron object a name means where it is used), :mod:`.megatron_keys`.
- What a framework does to Megatron: :mod:`.framework_patches` (its re-bindings), :mod:`.object_classes` and
  :mod:`.object_flags` (methods bound on built objects), :mod:`.class_swaps`, :mod:`.module_backfills`,
  :mod:`.framework_guards` (whether its own checks let a patch be made), :mod:`.framework_failures` (where its code
  fails before patching), :mod:`.source_scan` and :mod:`.framework_scan` (what it touches).
- What Megatron does with it: :mod:`.call_sites`, :mod:`.module_calls`, :mod:`.replacement_fit`, :mod:`.copies`.
- Products: :mod:`.source_verdicts` with :mod:`.verdict_cache` and :mod:`.from_source` (a verdict per replaced
  symbol), :mod:`.symbol_table` (a subject's ``MEGATRON_SYMBOLS``), :mod:`.scan_subject`, :mod:`.scan_patches` and
  :mod:`.starter` (``scan``'s starter declaration).
- The reader's own failures and cache keys: :mod:`.reader_error`, :mod:`.reader_digest`.
"""
