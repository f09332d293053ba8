"""Read: detection and recognition with rapidocr's models, and the second reads of what the recogniser loses."""
