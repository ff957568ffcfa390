"""Small helpers shared by modernrl's backends."""
