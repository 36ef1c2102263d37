"""What a workflow compiles to, once: names, specs, settings and segments, frozen."""
