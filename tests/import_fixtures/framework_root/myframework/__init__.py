"""A framework whose package import is not side-effect free: it prints, so a test can tell whether it ran."""

print("myframework/__init__.py ran")

FRAMEWORK = "myframework"
