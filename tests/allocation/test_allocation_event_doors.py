"""The allocation PLD's event doors (``event_epsilon``, ``event_delta``): the
accountant's door for one ``RandomAllocationDpEvent``. They skip the checks the
event's constructor made, so they must give the settings doors' answers to the
last bit (source: ``allocation_pld_epsilon`` / ``allocation_pld_delta`` on the
event's fields, ``==``) and still refuse what the event leaves open."""

import numpy as np
import pytest

from jaxacct import pld as jpld
from jaxacct.accounting import events as ev
from jaxacct.allocation import pld as apld


def _same(a, b):
  for f in ("lower",):
    np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
  assert a.by_direction.keys() == b.by_direction.keys()
  for d in a.by_direction:
    np.testing.assert_array_equal(a.by_direction[d], b.by_direction[d])


@pytest.mark.parametrize("kw, door_kw", [
    (dict(noise_multiplier=0.9, steps_per_epoch=50, num_epochs=2),
     dict(sigma=0.9, steps_per_epoch=50, num_epochs=2)),
    (dict(noise_multiplier=1.4, steps_per_epoch=40, num_selected=3),
     dict(sigma=1.4, steps_per_epoch=40, num_selected=3)),
    (dict(mechanism="laplace", scale=2.0, steps_per_epoch=30),
     dict(mechanism="laplace", sigma=2.0, steps_per_epoch=30)),
])
def test_event_doors_are_the_settings_doors(kw, door_kw):
  e = ev.RandomAllocationDpEvent(**kw)
  up = apld.event_epsilon(e, delta=np.array([1e-5, 1e-7]))
  ref = apld.allocation_pld_epsilon(delta=np.array([1e-5, 1e-7]), **door_kw)
  np.testing.assert_array_equal(up.epsilon, ref.epsilon)
  _same(up, ref)
  d = apld.event_delta(e, epsilon=1.0, with_lower=False)
  dref = apld.allocation_pld_delta(epsilon=1.0, with_lower=False, **door_kw)
  assert d.delta == dref.delta and np.isnan(d.lower)


def test_event_door_of_a_pld_mechanism():
  rr = jpld.randomized_response(1.0)
  e = ev.RandomAllocationDpEvent(mechanism=rr, steps_per_epoch=100)
  r = apld.event_epsilon(e, delta=1e-6)
  ref = apld.allocation_pld_epsilon(mechanism=rr, steps_per_epoch=100, delta=1e-6)
  assert r.epsilon == ref.epsilon and r.lower == ref.lower


def test_event_doors_refuse_what_the_event_leaves_open():
  """The event takes an infinite noise and any count; the door does not."""
  with pytest.raises(ValueError, match="^noise_multiplier must be finite"):
    apld.event_epsilon(ev.RandomAllocationDpEvent(noise_multiplier=np.inf, steps_per_epoch=10),
                       delta=1e-5)
  with pytest.raises(ValueError, match="^steps_per_epoch must be"):
    apld.event_epsilon(ev.RandomAllocationDpEvent(noise_multiplier=1.0, steps_per_epoch=2**31),
                       delta=1e-5)
  with pytest.raises(ValueError, match="^event must be a jaxacct.accounting.events.Random"):
    apld.event_delta(ev.GaussianDpEvent(1.0), epsilon=1.0)
  with pytest.raises(ValueError, match="^delta must be"):
    apld.event_epsilon(ev.RandomAllocationDpEvent(noise_multiplier=1.0, steps_per_epoch=10),
                       delta=0.0)
