from manga_page_analysis.cli import run

run()
