"""truncated_poisson (max_batch_size = 300) at the README's DP-SGD run (N = 60,000,
B = 256, E = 10, delta = 1e-5).

The numbers are jaxacct's own on the CPU layout, which must not move: 1e-12 relative
covers a platform's libm, not a change of method. They were pinned at 6b38e52 (before
the speed work of issue 65 item 6) and moved once, by 2.9e-12 relative, when the CPU
layout's atoms went onto the grid in NumPy (correctly rounded division and expm1)
rather than in XLA's kernel.

These are regression pins of jaxacct's own values, not an independent source: the
upper is checked against dp_accounting 0.6.0 live (test_truncated_compat.py) and the
lower's count weights against brute force (test_truncated_lower.py).
"""

import numpy as np

from jaxacct import dpsgd

RUN = dict(num_examples=60_000, batch_size=256, num_epochs=10, delta=1e-5,
           sampling="truncated_poisson", max_batch_size=300, progress=False)


def test_readme_run_bracket_and_calibration():
  r = dpsgd.epsilon(noise_multiplier=1.0, **RUN)
  # (upper, lower: the exact instance of jaxacct.accounting.truncated_lower)
  np.testing.assert_allclose((r.epsilon, r.lower), (3.0529351644354517, 1.101621080376536),
                             rtol=1e-12)
  s = dpsgd.calibrate_noise_multiplier(epsilon=3.0, **RUN)
  np.testing.assert_allclose(s, 1.005229149173461, rtol=1e-12)
  assert dpsgd.epsilon(noise_multiplier=s, **RUN).epsilon <= 3.0
