"""The import-side-effects family: loading a package under a unique name with fake modules, and detecting what it
changed."""
