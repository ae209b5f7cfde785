"""fixed_size at the README's DP-SGD run (N = 60,000, B = 256, E = 10, delta = 1e-5).

The numbers are jaxacct's own at 6b38e52 (before the speed work of issue 65 item 6:
the symmetric pair asked once, host PLDs, the merge's shared sweeps), which must
not move: 1e-12 relative covers a platform's libm, not a change of method.

These are regression pins of jaxacct's own values, not an independent source: the
bound itself is checked against brute-force enumeration and numerical integration
in test_fixed_size_pld.py and test_fixed_size_drs.py, and against dp_accounting
live there too.
"""

import numpy as np

from jaxacct import dpsgd

RUN = dict(num_examples=60_000, batch_size=256, num_epochs=10, delta=1e-5,
           sampling="fixed_size", progress=False)
# noise multiplier -> (upper, lower) at 6b38e52
PINNED = {1.0: (10.42659191324686, 9.435875790926763),
          0.8: (23.016248756100516, 21.061947034135464)}


def test_readme_run_values_and_new_sigmas_compile_nothing(compile_counter):
  first = dpsgd.epsilon(noise_multiplier=1.0, **RUN)
  np.testing.assert_allclose((first.epsilon, first.lower), PINNED[1.0], rtol=1e-12)
  with compile_counter as c:          # a new sigma (a calibration's next question)
    second = dpsgd.epsilon(noise_multiplier=0.8, **RUN)
    far = dpsgd.epsilon(noise_multiplier=3.0, **RUN)
  assert c.count == 0, f"{c.count} programs compiled for new noise multipliers"
  np.testing.assert_allclose((second.epsilon, second.lower), PINNED[0.8], rtol=1e-12)
  assert 0.0 < far.lower <= far.epsilon < second.lower


def test_readme_run_calibration():
  # 1.4504031240549178 at 6b38e52; the certified epsilon there is <= 3
  s = dpsgd.calibrate_noise_multiplier(epsilon=3.0, **RUN)
  np.testing.assert_allclose(s, 1.4504031240549178, rtol=1e-12)
  assert dpsgd.epsilon(noise_multiplier=s, **RUN).epsilon <= 3.0
