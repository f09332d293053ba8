"""What a runner tells the world, after the fact was committed: live job events
(`events`), the observer's calls for metrics (`observer`), the job's fields on every log
line (`logcontext`) and one log line per database outage (`outage`). Imports nothing else
of the package."""
