NAME = "imports_missing.helper"
