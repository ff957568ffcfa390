"""Training-engine backends for plover. Each backend is imported explicitly."""
