"""Length and mass conversions through a table of base-unit factors."""
