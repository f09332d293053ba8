"""Find panels and balloons: the page's frames, gutters and enclosed paper around its lines."""
