"""The sibling that relative imports must find in the package's own directory."""

GREETING = "hello from relative_pkg.helpers"


def greeting(name: str) -> str:
    return f"{GREETING}, {name}"
