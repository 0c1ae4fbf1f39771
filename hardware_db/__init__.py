"""The built-in catalogue: reviewed YAML files, one per device and one per model, validated on load."""

from hardware_db._loader import CatalogueError, load_hardware, load_models, load_yaml

__all__ = ["CatalogueError", "load_hardware", "load_models", "load_yaml"]
