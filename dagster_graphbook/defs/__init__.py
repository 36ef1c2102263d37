"""Dagster definitions from a compiled plan: assets, resources, jobs, checks, schedules and the
component. No run logic."""
