"""`raykueue uninstall`: the way out (plan.py decides from a snapshot, run.py acts)."""
