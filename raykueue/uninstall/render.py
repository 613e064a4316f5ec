"""The uninstall's plan in words, as `raykueue uninstall` prints it."""

from __future__ import annotations

from raykueue.core import contract as c
from raykueue.uninstall.plan import Plan, Unit


def _unit_line(u: Unit) -> str:
    parts = [str(u.ref)]
    if u.pods:
        parts.append(f"{u.pods} pods ({u.gated} gated)")
    if u.deleting:
        parts.append("being deleted: only waited for")
    elif u.suspended:
        parts.append("suspended already" + (" by raykueue uninstall" if u.suspended_by_uninstall else ""))
    if u.autoscaling:
        parts.append("autoscaled")
    return "   " + "; ".join(parts)


def render(plan: Plan, *, act: bool) -> list[str]:
    """The plan in words; `act`: --yes was given."""
    if plan.blockers:
        head = "blocked: nothing is changed" if act else "the plan (a dry run: nothing is changed)"
    else:
        head = "acting on this plan" if act else "the plan (a dry run: nothing is changed; --yes acts on it)"
    lines = [f"raykueue uninstall: {head}"]
    if plan.blockers:
        lines.append("Blocked: nothing is done while any of these remains:")
        lines += [f"   {u.ref}: {u.blocker}" for u in plan.blockers]
    if plan.nothing_to_do:
        lines.append("Nothing of raykueue is left: no opted-in Ray object, raykueue pod, Workload "
                     "or webhook.")
        return lines
    step = 0

    def heading(text: str) -> None:
        nonlocal step
        step += 1
        lines.append(f"{step}. {text}")

    todo = [u for u in plan.units if not u.blocker]
    if todo:
        heading(f"Suspend {len(todo)} opted-in Ray object(s); KubeRay deletes their pods, gated or running, "
                "and each pod's Workload goes with it, so their quota is free:")
        lines += [_unit_line(u) for u in todo]
        heading("Wait until none of their pods is left.")
    if plan.webhooks:
        heading("Delete raykueue's webhook configurations (from here no object waits for raykueue): "
                + ", ".join(name for _, name in plan.webhooks))
    heading("Look again: suspend what was opted in meanwhile, delete raykueue's pods that no Ray object "
            "owns (nothing would recreate them)"
            + (": " + ", ".join(f"{p.namespace}/{p.name}" for p in plan.bare_pods) if plan.bare_pods else "")
            + f", and every raykueue Workload left ({plan.workloads} now; most go with their pods).")
    if todo:
        if plan.handback:
            heading("Hand back to Kueue (each stays suspended until Kueue admits it whole and resumes it):")
        else:
            heading("Leave them suspended and opted in (no --handback): nothing of them runs, nothing holds "
                    "quota. `raykueue uninstall --yes --handback` hands them to Kueue later; resuming one "
                    f"without a {c.QUEUE_LABEL} label runs it outside any quota.")
        for u in todo:
            if u.handback is not None:
                lines.append(f"   {u.ref} -> LocalQueue {u.handback.queue} (from {u.handback.source})")
                lines += [f"      {note}" for note in u.handback.notes]
            elif plan.handback:
                lines.append(f"   {u.ref}: not handed back: {u.handback_refusal}")
    if plan.kueues:
        lines.append("Left alone (opted in, but Kueue's already: they carry its queue label): "
                     + ", ".join(str(r) for r in plan.kueues))
    lines.append("Then remove raykueue itself: kubectl delete -k manifests/ --ignore-not-found "
                 "(or: helm uninstall raykueue -n raykueue-system).")
    return lines
