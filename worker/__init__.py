"""ingestd workers: the tenant-fair job queue runtime and the job handlers."""
