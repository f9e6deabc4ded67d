"""The scale policy: how big should a training job be right now?

Split as Kubernetes' HPA splits its controller, one responsibility per module. Every resize
stops and relaunches the job, so the policy sizes to measured demand and resizes only when
the change pays for that restart. Pure: no Airflow, no I/O. Import from the modules: this
package re-exports nothing, so :mod:`elasticgrid_provider.core.formatting` can read the
parameters without a cycle. The rules and their maths: docs/policy.md.
"""
