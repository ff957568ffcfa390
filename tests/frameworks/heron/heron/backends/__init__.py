"""Training backends of heron. Each backend lives in its own sub-package and is
imported explicitly; nothing is imported or patched here."""
