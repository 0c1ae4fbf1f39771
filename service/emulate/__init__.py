"""`ridgeline emulate`: an OpenAI-compatible endpoint that serves as a planned deployment would (docs/emulate.md)."""
