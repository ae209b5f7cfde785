"""The array doors over several devices (issue 43): ``devices=`` a list of jax
devices or a ``jax.sharding.Mesh``.

A lanes mesh spreads each door's fixed-size blocks (chunks of the allocation
PLD sweep) over the devices, block ``i`` on device ``i mod D``, each running
the very program one device runs: the values are bitwise the unsharded ones.
Checked in a subprocess with forced host devices
(``--xla_force_host_platform_device_count``) and a small
``JAXACCT_DEVICE_MEMORY`` (small blocks, so a small grid spreads over the
devices) for every array door: allocation PLD sweep, Poisson RDP and PLD, the
allocation RDP curves, a shuffle (n, eps0) grid, the batched calibrator. Here,
in this process: the ``devices`` argument is validated (a ``ValueError``
naming it) and a one-device mesh gives the default device's values.
"""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import jaxacct
from jaxacct import allocation, poisson, shuffle
from jaxacct._core import sharding
from jaxacct.accounting import events as ev
from jaxacct.allocation import pld as apld

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_EVENT = lambda s: ev.SelfComposedDpEvent(ev.GaussianDpEvent(s), 10)   # noqa: E731

DOORS = {
    "poisson.epsilon": lambda d: poisson.epsilon(q=0.01, sigma=1.0, num_steps=10, delta=1e-5,
                                                 devices=d),
    "poisson.delta": lambda d: poisson.delta(q=0.01, sigma=1.0, num_steps=10, epsilon=1.0,
                                             devices=d),
    "allocation_pld_epsilon": lambda d: apld.allocation_pld_epsilon(
        sigma=1.0, delta=1e-6, steps_per_epoch=10, num_epochs=1, devices=d),
    "allocation_pld_delta": lambda d: apld.allocation_pld_delta(
        sigma=1.0, epsilon=1.0, steps_per_epoch=10, num_epochs=1, devices=d),
    "allocation_rdp": lambda d: allocation.allocation_rdp(sigma=1.0, steps_per_epoch=10, devices=d),
    "allocation_remove_rdp": lambda d: allocation.allocation_remove_rdp(
        sigma=1.0, steps_per_epoch=10, devices=d),
    "allocation_add_rdp": lambda d: allocation.allocation_add_rdp(
        [2.0], sigma=1.0, steps_per_epoch=10, devices=d),
    "clone_delta": lambda d: shuffle.clone_delta(1.0, n=100, eps0=1.0, devices=d),
    "clone_epsilon": lambda d: shuffle.clone_epsilon(1e-6, n=100, eps0=1.0, devices=d),
    "stronger_clone_delta": lambda d: shuffle.stronger_clone_delta(1.0, n=100, eps0=1.0,
                                                                   devices=d),
    "stronger_clone_epsilon": lambda d: shuffle.stronger_clone_epsilon(1e-6, n=100, eps0=1.0,
                                                                       devices=d),
    "calibrate": lambda d: jaxacct.calibrate(_EVENT, 1.0, 1e-5, bracket=(0.5, 20.0), devices=d),
}


@pytest.mark.parametrize("bad", ["cpu", [], [0, 1], [None], 3])
@pytest.mark.parametrize("door", sorted(DOORS))
def test_bad_devices_raise_naming_devices(door, bad):
  with pytest.raises(ValueError, match="devices"):
    DOORS[door](bad)


def test_duplicate_devices_rejected():
  with pytest.raises(ValueError, match="devices"):
    sharding.as_mesh([jax.devices()[0]] * 2)


def test_mesh_and_nesting():
  dev = jax.devices()[0]
  mesh = jax.sharding.Mesh(np.array([dev]), ("x",))
  assert sharding.mesh_devices(sharding.as_mesh(mesh)) == [dev]
  assert sharding.current_mesh() is None
  with sharding.use_devices([dev]) as outer:
    with sharding.use_devices(None) as inner:   # None keeps the setting in force
      assert inner is outer and sharding.active()
  assert not sharding.active()


def test_one_device_mesh_equals_default_device():
  sig = np.linspace(0.5, 5.0, 37)
  kw = dict(q=0.01, sigma=sig, num_steps=1000, delta=1e-5, orders=[1.5, 2.0, 3.0, 8.0])
  with jaxacct.set_layout("accelerator"):
    a = poisson.epsilon(**kw)
    b = poisson.epsilon(**kw, devices=jax.devices()[:1])
    c = poisson.epsilon(**kw, devices=jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",)))
  for r in (b, c):
    np.testing.assert_array_equal(np.asarray(a.epsilon), np.asarray(r.epsilon))
    np.testing.assert_array_equal(np.asarray(a.order), np.asarray(r.order))


# One subprocess, two forced host devices: every array door unsharded, then
# sharded; the values must be bitwise equal and the sharded call must have
# compiled its programs for the second device (its blocks ran there).
_SCRIPT = r"""
import json, os, sys
import numpy as np
import jax
import jaxacct
from jaxacct import allocation, poisson, shuffle
from jaxacct.accounting import events as ev
from jaxacct.allocation import pld as apld

compiles = [0]
jax.monitoring.register_event_duration_secs_listener(
    lambda name, d, **kw: compiles.__setitem__(0, compiles[0] + 1)
    if name == "/jax/core/compile/backend_compile_duration" else None)
devs = jax.devices()
sig = np.linspace(0.6, 4.0, 40)
n, e0 = np.meshgrid([500.0, 2000.0], np.linspace(0.5, 3.0, 12), indexing="ij")
event = lambda s: ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.01, ev.GaussianDpEvent(s)),
                                         500)
doors = {
    "allocation_pld_epsilon": lambda d: apld.allocation_pld_epsilon(
        sigma=sig[:20], delta=1e-6, steps_per_epoch=8, num_epochs=1, grid_size=16, devices=d),
    "poisson_rdp": lambda d: poisson.epsilon(q=0.01, sigma=sig, num_steps=1000, delta=1e-5,
                                             orders=[1.5, 2.0, 2.5, 3.0, 4.0, 8.0], devices=d),
    "poisson_pld": lambda d: poisson.epsilon(q=0.1, sigma=np.linspace(2.0, 2.05, 6), num_steps=2,
                                             delta=1e-5, method="pld", devices=d),
    "allocation_add_rdp": lambda d: allocation.allocation_add_rdp(
        [2.0, 4.0], sigma=sig[:16], steps_per_epoch=10, num_outer=64, num_inner=32, devices=d),
    "allocation_remove_rdp": lambda d: allocation.allocation_remove_rdp(
        sigma=sig[:16], steps_per_epoch=10, max_order=300, devices=d),
    "shuffle_clone_delta": lambda d: shuffle.clone_delta(1.0, n=n, eps0=e0, devices=d),
    "shuffle_clone_epsilon": lambda d: shuffle.clone_epsilon(1e-6, n=n, eps0=e0, devices=d),
    "calibrate": lambda d: jaxacct.calibrate(event, np.linspace(0.5, 4.0, 12), 1e-5,
                                             bracket=(0.3, 30.0), accountant="rdp", devices=d),
}
# A 4 MB stand-in device gives every door several blocks. The doors whose
# smallest block needs more (the allocation sweep chunk and the Poisson PLD
# blocks, tens of MB a lane; remove-RDP at 300 orders, 8 MB; calibrate's RDP
# at its default orders, 20 MB) get a device they fit on, or they refuse
# (batching.check_fits), still small enough for several blocks.
memory = {"allocation_pld_epsilon": "256e6", "poisson_pld": "256e6",
          "allocation_remove_rdp": "32e6", "calibrate": "64e6", "shuffle_clone_epsilon": "64e6"}
out = {}
with jaxacct.set_layout("accelerator"):
  for name, door in doors.items():
    os.environ["JAXACCT_DEVICE_MEMORY"] = memory.get(name, "4e6")
    a = jax.tree.leaves(door(None))
    before = compiles[0]
    b = jax.tree.leaves(door(devs))
    same = len(a) == len(b) and all(
        np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True) for x, y in zip(a, b))
    out[name] = dict(same=bool(same), spread=compiles[0] > before)
print(json.dumps(out))
"""


@pytest.mark.slow   # about 2 min: every door compiled for one device, then for two
def test_sharded_equals_unsharded_forced_host_devices():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
             JAXACCT_PROGRESS="0", PYTHONPATH=ROOT)
  r = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                     timeout=400, cwd=ROOT)
  assert r.returncode == 0, r.stderr[-3000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  assert sorted(got) == sorted(["allocation_pld_epsilon", "poisson_rdp", "poisson_pld",
                                "allocation_add_rdp", "allocation_remove_rdp",
                                "shuffle_clone_delta", "shuffle_clone_epsilon", "calibrate"])
  for name, res in got.items():
    assert res["same"], (name, res)
    assert res["spread"], (name, res)
