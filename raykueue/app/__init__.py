"""Top floor: settings, CLI, the ASGI app and the wiring of the floors below. Holds no rule."""
