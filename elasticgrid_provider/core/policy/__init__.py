"""The scale policy: how big should a training job be right now?

Split as Kubernetes' HPA splits its controller, one responsibility per module:

* :mod:`.parameters`: :class:`ScalePolicy`, the parameters (bounds, cooldowns, thresholds,
  restart price, margins), the one place each is written;
* :mod:`.rules`: the vocabularies (:class:`DecisionRule`, :class:`HoldRule`, :class:`ScaleAction`);
* :mod:`.load`: demand, capacity and backlog measured from a window of samples;
* :mod:`.memory`: per-node throughput measured at each size, and the scaling loss;
* :mod:`.calculator`: the sizing rules, measured load -> a recommended size;
* :mod:`.holds`: what holds a change back;
* :mod:`.controller`: :func:`decide`: bounds, stabilisation, cooldowns, and the decision
  with its conditions, computed once;
* :mod:`.decision` and :mod:`.conditions`: the decision record and its HPA-style conditions.

Every resize stops and relaunches the job (``startup_s`` of no progress on paid nodes), so
the policy sizes to measured demand and resizes only when the change pays for that restart.
The rules and their maths are in ``docs/policy.md``. Pure: no Airflow, no I/O. Import from the modules (this package re-exports nothing, so
:mod:`elasticgrid_provider.core.formatting` can read the parameters without a cycle).
"""
