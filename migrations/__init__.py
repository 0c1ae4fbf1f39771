"""Alembic migrations: the only way the schema is made. Reviewed code, date-prefixed files."""
