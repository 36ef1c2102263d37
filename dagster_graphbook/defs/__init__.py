"""Dagster definitions from a compiled plan: assets, resources, jobs, checks, schedules, the component. No run logic."""
