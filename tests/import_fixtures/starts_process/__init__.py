"""Runs a child process on import."""

import subprocess
import sys

subprocess.run([sys.executable, "-c", "pass"], check=True)
