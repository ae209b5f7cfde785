"""The advice of shuffle's host-side doors (:func:`jaxacct._core.dtype.host_door`):
what to call inside jit/vmap instead."""

from jaxacct._core.dtype import HostDoor

ON_HOST = HostDoor(
    "Inside jit/vmap use the jittable kernels jaxacct.shuffle.clone_epsilon, "
    "jaxacct.shuffle.clone_delta, jaxacct.shuffle.stronger_clone_epsilon, "
    "jaxacct.shuffle.stronger_clone_delta, jaxacct.shuffle.rr2_lower_epsilon, "
    "jaxacct.shuffle.girgis_epsilon or jaxacct.shuffle.clone_epsilon_closed_form "
    "(n, eps0 and delta may be traced; a traced n needs the static max_n); "
    "or call this one outside jit/vmap.")
