"""The page reader: the in-process `ocr` analyzer and its stages (docs/ocr.md)."""
