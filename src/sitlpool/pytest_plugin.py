"""pytest plugin (entry point ``pytest11``): fixtures that lease SITL instances."""
