"""What hardware profiles and model configs share: read-only built-ins, user CRUD, idempotent loading."""
