"""The ``megatron-conformance`` command: the gate installed as a package (a wheel, ``pip install git+...``, ``uvx``)
runs its own nox sessions from a framework's checkout, with the venvs, the reports and the declaration there.

Its entry point is imported under the installed name (``megatron_conformance.harness.launch.command``), so it imports
the rest of the harness only after putting the gate's root on ``sys.path``.
"""
