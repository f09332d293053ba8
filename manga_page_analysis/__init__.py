"""Page-analysis job service: a durable Postgres job queue and a vision-model worker."""
