"""Creates a file in the working directory on import."""

from pathlib import Path

Path("adapter.lock").write_text("locked\n")
