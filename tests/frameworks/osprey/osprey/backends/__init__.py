"""Training-backend adapters for osprey. Import a backend subpackage explicitly."""
