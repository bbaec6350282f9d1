"""Resource options the components share.

A component receives what it must wait for as `opts.depends_on`, the one way dependencies are
passed in. The component resource itself records them, but its children do not inherit them
(Pulumi waits on a component's children when something depends ON it, not the other way round:
pulumi/pulumi#8721), so the children whose order matters name them again through `after(opts)`.
"""
from __future__ import annotations

import pulumi


def after(opts: pulumi.ResourceOptions | None) -> list[pulumi.Resource]:
    """The resources the caller passed as `opts.depends_on`, as a list (empty when none)."""
    if opts is None or opts.depends_on is None:
        return []
    deps = opts.depends_on
    return list(deps) if isinstance(deps, (list, tuple)) else [deps]


def own(opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions | None:
    """`opts` without its depends_on, for a component that hands them to every child instead of
    also recording them on itself (the jobs: accuracy gate, load test). A component resource that
    waits on a resource whose input failed outlives a failed in-process offline run and then fails
    the next one; its children carry the same order, so nothing real is lost."""
    if opts is None or opts.depends_on is None:
        return opts
    copy = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(), opts)
    copy.depends_on = None
    return copy
