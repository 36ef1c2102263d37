"""Who owns a run and what it holds: runs whose process died are judged dead and failed
(``dead_runs``), GPU leases handed from run to run (``leases``), the run-time refusals of run
config and partition keys (``guard``) and the latch for termination signals (``interrupts``)."""
