"""Correct variants of the reference subject: each changes one thing a correct adapter may do its own way, and the
gate must stay green on every one of them (the catalogue's must-stay-green subjects)."""
