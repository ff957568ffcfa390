"""The subject: the downstream adapter code the gate checks, named once per session and loaded where needed.

- :mod:`.loading`: the subject named (option, environment, reference) and resolved into a picklable
  :class:`~harness.subjects.loading.SubjectRef`, loaded in the session and in rank processes.
- :mod:`.declaration`: reading and checking a declaration file, one line per mistake.
- :mod:`.declared`: the subject protocol built from a declaration, driving the framework's own code as it is.
- :mod:`.promises`: what a loaded subject says about itself (freeze-rule names, call shapes, provider promises,
  budget variable).

May import ``harness.formats`` and ``harness.targets``.
"""
