"""No Django models: the tables are alembic's. The module exists because Django
sends `post_migrate` (which brings them to head) only to apps that have one."""
