"""What every analyzer offers and is given: the `Analyzer` protocol, the answer it returns,
and the prepared image it reads."""
