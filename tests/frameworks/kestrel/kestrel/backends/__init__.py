"""Training backends for kestrel. Import a specific backend explicitly."""
