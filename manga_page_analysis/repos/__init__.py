"""Repositories: the SQL over the mangas, chapters, pages and `page_analysis` tables.
None of them commits (the caller's transaction decides), and none imports the page
analysis (docs/architecture.md)."""
