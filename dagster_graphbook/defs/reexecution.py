"""Re-execution from failure runs every mapped step (a shard) that never ran.

Dagster chooses a from-failure run's steps from the parent run's events (dagster issue 30248):
a mapped step with no event at all (a shard that had not started when the run was terminated or
its run worker died) is left out when its siblings ran, and the collecting step (the commit)
then receives only the shards that finished. The commit refuses a partial result, so every
later re-execution from failure would fail the same way, from the UI, the daemon's run retries
and the terminal alike. The executor adds those steps to the run before it starts: any mapped
step whose output a selected step reads, that no run of the chain produced and this run does not
select. Runs with a hand-made step selection are left as chosen (the commit's guard explains).
"""

from __future__ import annotations

from typing import Any, Iterator, List, Set, Tuple

from ..dagster_internals import (
    RESUME_RETRY_TAG,
    PlanOrchestrationContext,
    create_execution_plan,
)


def never_run_mapped_steps(execution_plan: Any) -> List[str]:
    """Keys of the mapped steps a from-failure plan needs but neither selects nor has an output
    of from an earlier run of the chain (empty for any other plan)."""
    known = execution_plan.known_state
    if known is None or known.parent_state is None:
        return []
    produced = _produced_outputs(known.parent_state)
    selected = set(execution_plan.step_keys_to_execute)
    missing: List[str] = []
    for key in execution_plan.step_keys_to_execute:
        for handle in _read_handles(execution_plan.get_step_by_key(key)):
            mapped = "[" in handle.step_key and handle.mapping_key is None
            if mapped and handle.step_key not in selected and handle not in produced:
                selected.add(handle.step_key)
                missing.append(handle.step_key)
    return missing


def _produced_outputs(state: Any) -> Set[Any]:
    """Every output handle produced by a run of the re-execution chain."""
    produced: Set[Any] = set()
    while state is not None:
        produced |= set(state.produced_outputs)
        state = state.get_parent_state()
    return produced


def _read_handles(step: Any) -> Iterator[Any]:
    """The upstream output handles a step reads (through fan-in/collect sources too)."""
    for step_input in step.step_inputs:
        source = step_input.source
        for one in getattr(source, "sources", None) or [source]:
            handle = getattr(one, "step_output_handle", None)
            if handle is not None:
                yield handle


def complete_plan(plan_context: Any, execution_plan: Any) -> Tuple[Any, Any, List[str]]:
    """``(plan_context, execution_plan, added keys)``: a from-failure run's plan with its
    never-run mapped steps added, or the plan unchanged for any other run."""
    if plan_context.dagster_run.tags.get(RESUME_RETRY_TAG) != "true":
        return plan_context, execution_plan, []
    added = never_run_mapped_steps(execution_plan)
    if not added:
        return plan_context, execution_plan, []
    instance = plan_context.instance
    plan = create_execution_plan(
        plan_context.job,
        plan_context.run_config,
        step_keys_to_execute=[*execution_plan.step_keys_to_execute, *added],
        known_state=execution_plan.known_state,
        instance_ref=instance.get_ref() if instance.is_persistent else None,
        tags=plan_context.dagster_run.tags,
        repository_load_data=execution_plan.repository_load_data,
    )
    context = PlanOrchestrationContext(
        plan_data=plan_context.plan_data._replace(execution_plan=plan),
        log_manager=plan_context.log,
        executor=plan_context.executor,
        output_capture=plan_context.output_capture,
        resume_from_failure=plan_context.resume_from_failure,
    )
    return context, plan, added
