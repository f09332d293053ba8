"""Order the blocks: text lines grouped into blocks, and the blocks in manga reading order."""
