"""Small helpers shared by legacyrl's backends."""
