"""The scenario layer: typed config dataclasses, strict loading, presets' merge, safe YAML."""
