"""Clean the text: what a reader reads of the lines, and the characters written as a Japanese page prints them."""
