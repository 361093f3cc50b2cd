"""URL slugs for article titles, unique within a site."""
