"""xdist's ``--dist loadscope`` scheduler, made to survive a crashed worker.

pytest-xdist 3.8.0 deadlocks when a worker dies under loadscope: the dead
worker's finished modules go back on the queue as empty work units that never
complete (pytest-dev/pytest-xdist#1378, #1327), and it cannot reschedule the
test that crashed, so pytest-rerunfailures reports it failed. XLA:CPU has
crashed a worker now and then (a segfault inside JAX's compilation-cache write);
this scheduler turns that into one rerun of the crashed test instead of a hung
run. ``tests/conftest.py`` installs it for ``--dist loadscope``.

It also hands out the modules that hold one long serial stretch first (the
docs build is a single fixture), so that neither worker is left alone with
one at the end.
"""

from xdist.scheduler import LoadScopeScheduling

# The modules with the longest serial work on two CPU cores (pytest
# --durations=0, summed per module), longest first; every other module follows
# in xdist's own order (most tests first).
LONGEST_FIRST = (
    "tests/project/test_docs.py",
    "tests/project/test_accelerator_layout.py",
    "tests/allocation/test_allocation_pld_host.py",
    "tests/allocation/test_allocation_pld_compose.py",
    "tests/shuffle/test_shuffle_host.py",
    "tests/shuffle/test_shuffle_rdp.py",
    "tests/allocation/test_allocation_pld_sweep.py",
    "tests/allocation/test_allocation_pld_mechanism.py",
)


class CrashSafeLoadScope(LoadScopeScheduling):
  """loadscope, with a dead worker's unfinished tests (only) requeued and
  ``mark_test_pending`` (the rerun of a crashed test) supported."""

  def remove_node(self, node):
    workload = self.assigned_work.pop(node)
    if not self._pending_of(workload):
      return None
    crashitem = next(nodeid for unit in workload.values()
                     for nodeid, done in unit.items() if not done)
    # The crashed test is not run again with its module: the rerun plugin asks
    # for it through mark_test_pending, or it stays reported as failed.
    for unit in workload.values():
      if crashitem in unit:
        unit[crashitem] = True
    for scope, unit in workload.items():
      if not all(unit.values()):
        self.workqueue[scope] = unit
    for other in list(self.assigned_work):
      self._reschedule(other)
    return crashitem

  def mark_test_pending(self, item):
    self.workqueue.setdefault(self._split_scope(item), {})[item] = False
    for node in list(self.assigned_work):
      self._reschedule(node)

  def _assign_work_unit(self, node):
    scope = next((s for s in LONGEST_FIRST if s in self.workqueue), None)
    if scope is None:
      scope, unit = self.workqueue.popitem(last=False)
    else:
      unit = self.workqueue.pop(scope)
    mine = self.assigned_work.setdefault(node, {})
    if scope in mine and mine[scope] is not unit:   # a rerun of a test of a module it holds
      mine[scope].update(unit)
    else:
      mine[scope] = unit
    collection = self.registered_collections[node]
    node.send_runtest_some([collection.index(nodeid)
                            for nodeid, done in unit.items() if not done])

  def _reschedule(self, node):
    if node.shutting_down:
      return
    while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
      self._assign_work_unit(node)
    # A node that took the last unit is told so now: it runs its last test only
    # once it knows no next one is coming, and no completion may follow to say it.
    if not self.workqueue:
      node.shutdown()
